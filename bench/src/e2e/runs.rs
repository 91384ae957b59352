//! The runs: for one stack and one driver definition, a cluster, then ginkgo over the storage
//! e2e binary once per kubernetes-csi run (parallel, the snapshot features, serial), each with
//! kubernetes-csi's focus and skip regexes plus the committed skip list.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cluster::{Cluster, NODE};
use crate::support::peers::{bin_dir, peer};
use crate::support::sidecar::repo_root;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StackKind {
    /// csi-driver-host-path's manifest: csi-provisioner and csi-resizer in the driver's pod,
    /// beside kube-controller-manager's binder and expander.
    Upstream,
    /// deploy/swap/: our image in their place, intents on claim finalizers.
    Ours,
    /// deploy/swap/ with deploy/'s intent journal (`--intent-journal` on a hostPath folder of the node).
    OursJournal,
}

impl StackKind {
    pub const ALL: [StackKind; 3] = [StackKind::Upstream, StackKind::Ours, StackKind::OursJournal];

    pub fn label(self) -> &'static str {
        match self {
            StackKind::Upstream => "upstream",
            StackKind::Ours => "ours",
            StackKind::OursJournal => "ours-journal",
        }
    }

    /// What the driver's pod runs.
    pub fn pod(self) -> crate::support::driver_pod::Stack {
        use crate::support::driver_pod::Stack;
        match self {
            StackKind::Upstream => Stack::Upstream,
            StackKind::Ours => Stack::Swap,
            StackKind::OursJournal => Stack::SwapJournal,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverFile {
    /// csi-driver-host-path's own test-driver.yaml, read from its source archive.
    Upstream,
    /// tests/e2e/driver-ours.yaml: every capability hostpathplugin and we have.
    Ours,
}

impl DriverFile {
    /// hostpathplugin's flags beyond csi-driver-host-path's: ours declares modifying volumes,
    /// with the parameter names of tests/e2e/vac-ours.yaml, and a volume limit per node.
    pub fn driver_flags(self) -> &'static [&'static str] {
        match self {
            DriverFile::Upstream => &[],
            DriverFile::Ours => &[
                "--enable-controller-modify-volume",
                "--accepted-mutable-parameter-names=iops",
                // Room for the parallel run's specs at once; the volumeLimits specs fill it.
                "--maxvolumespernode=20",
            ],
        }
    }

    /// The provisioner's flags beyond deploy/swap/'s (ours) and csi-driver-host-path's
    /// (upstream's), the same in both stacks: ours declares capacity, published for the suite's
    /// classes, which bind at once, with no owner (the driver's manifest gives its containers
    /// no POD_NAME to find the owner by).
    pub fn provisioner_flags(self) -> &'static [&'static str] {
        match self {
            DriverFile::Upstream => &[],
            DriverFile::Ours => &[
                "--enable-capacity",
                "--capacity-for-immediate-binding",
                "--capacity-ownerref-level=-1",
            ],
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            DriverFile::Upstream => "upstream-driver-file",
            DriverFile::Ours => "our-driver-file",
        }
    }
}

/// kubernetes-csi's three runs of the suite for a sidecar release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Run {
    Parallel,
    Features,
    Serial,
}

impl Run {
    pub fn label(self) -> &'static str {
        match self {
            Run::Parallel => "parallel",
            Run::Features => "features",
            Run::Serial => "serial",
        }
    }

    /// (tags, skip) as kubernetes-csi's prow.sh selects them for a non-alpha job: the focus is
    /// `External.Storage`, followed by one of the tags when there are any.
    fn regexes(self, file: DriverFile) -> (Option<&'static str>, &'static str) {
        match self {
            Run::Parallel => (None, r"\[Serial\]|\[Disruptive\]|\[Feature:|\[Feature:SELinux\]"),
            // With our definition also the VolumeAttributesClass specs, as external-resizer's
            // jobs run them.
            Run::Features if file == DriverFile::Ours => (
                Some(r"\[Feature:VolumeSnapshotDataSource\]|\[Feature:VolumeAttributesClass\]"),
                r"\[Serial\]|\[Disruptive\]",
            ),
            Run::Features => {
                (Some(r"\[Feature:VolumeSnapshotDataSource\]"), r"\[Serial\]|\[Disruptive\]")
            }
            Run::Serial => (
                Some(r"\[Serial\]|\[Disruptive\]"),
                r"\[Feature:|\[Disruptive\]|\[Feature:SELinux\]",
            ),
        }
    }

    /// The run's focus, with `extra` (a user's narrowing) holding as well, before or after the
    /// run's tags: ginkgo ORs its --focus flags, and a spec's text puts its name between the
    /// suite's prefix and its tags.
    fn focus(self, file: DriverFile, extra: Option<&str>) -> String {
        const PREFIX: &str = "External.Storage";
        match (self.regexes(file).0, extra) {
            (None, None) => PREFIX.to_string(),
            (None, Some(extra)) => format!("{PREFIX}.*({extra})"),
            (Some(tags), None) => format!("{PREFIX}.*({tags})"),
            (Some(tags), Some(extra)) => {
                format!("{PREFIX}.*(({extra}).*({tags})|({tags}).*({extra}))")
            }
        }
    }
}

/// tests/e2e/skips.txt: (regex, reason) pairs.
pub struct Skips(pub Vec<(String, String)>);

impl Skips {
    pub fn read() -> Skips {
        let path = repo_root().join("tests/e2e/skips.txt");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut entries: Vec<(String, String)> = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            match (line.starts_with(' '), entries.last_mut()) {
                (true, Some((_, reason))) => {
                    if !reason.is_empty() {
                        reason.push(' ');
                    }
                    reason.push_str(line.trim());
                }
                (true, None) => panic!("{}: a reason before any regex", path.display()),
                (false, _) => entries.push((line.trim().to_string(), String::new())),
            }
        }
        Skips(entries)
    }

    fn regex(&self) -> String {
        self.0.iter().map(|(r, _)| format!("({r})")).collect::<Vec<_>>().join("|")
    }
}

pub struct Setup {
    pub stack: StackKind,
    pub file: DriverFile,
    pub procs: u32,
    pub focus: Option<String>,
    pub out: PathBuf,
}

impl Setup {
    fn label(&self) -> String {
        format!("{}/{}", self.stack.label(), self.file.label())
    }
}

/// The folder of one stack's runs with one definition.
pub fn folder(out: &Path, stack: StackKind, file: DriverFile) -> PathBuf {
    out.join(format!("{}-{}", stack.label(), file.label()))
}

/// One cluster for `setup`, and each of `runs` in it; each run's reports in its folder.
pub async fn run_all(setup: &Setup, runs: &[Run], skips: &Skips) {
    let dir = folder(&setup.out, setup.stack, setup.file);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let work = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary folder: {e}"));
    println!("e2e {}: starting the cluster and the node", setup.label());
    let started = Instant::now();
    let cluster = Cluster::start(setup.stack, setup.file, work.path()).await;
    println!("e2e {}: cluster up in {:.0?}", setup.label(), started.elapsed());
    let driver_file = write_driver_file(setup.file, work.path());
    for run in runs {
        // A run's earlier results go; the other runs' stay (e.g. a rerun of one run).
        let run_dir = dir.join(run.label());
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir).unwrap_or_else(|e| panic!("{}: {e}", run_dir.display()));
        let procs = if *run == Run::Serial { 1 } else { setup.procs };
        let label = format!("{} {}", setup.label(), run.label());
        ginkgo(
            &cluster,
            &driver_file,
            setup.file,
            *run,
            procs,
            setup.focus.as_deref(),
            skips,
            &run_dir,
            &label,
        )
        .await;
        compress(&run_dir.join("junit.xml"));
        remove_empty_folders(&run_dir);
    }
    // The logs of the run's peers, for explaining any failure (not committed: see .gitignore).
    let logs = dir.join("logs");
    let _ = std::fs::create_dir_all(&logs);
    for log in ["kubelet.log", "containerd.log", "kube-scheduler.log"] {
        let _ = std::fs::copy(cluster.driver.node.dir.join(log), logs.join(log));
    }
    let _ = std::fs::write(logs.join("provisioner.log"), cluster.provisioner_log().await);
    drop(cluster);
}

/// The driver definition for `file`, with the node every test pod must use, as kubernetes-csi's
/// deploy script adds it.
fn write_driver_file(file: DriverFile, dir: &Path) -> PathBuf {
    let text = match file {
        DriverFile::Upstream => {
            crate::support::hostpath::source_file("deploy/kubernetes-1.34/test-driver.yaml")
        }
        DriverFile::Ours => {
            let path = repo_root().join("tests/e2e/driver-ours.yaml");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let vac = repo_root().join("tests/e2e/vac-ours.yaml");
            text.replace("{vac}", &vac.display().to_string())
        }
    };
    let path = dir.join("test-driver.yaml");
    std::fs::write(&path, format!("{text}\nClientNodeName: {NODE}\n"))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

/// ginkgo over the e2e binary for one run, its reports in `dir`, progress printed per spec.
#[allow(clippy::too_many_arguments)]
async fn ginkgo(
    cluster: &Cluster,
    driver_file: &Path,
    file: DriverFile,
    run: Run,
    procs: u32,
    focus: Option<&str>,
    skips: &Skips,
    dir: &Path,
    label: &str,
) {
    let (_, run_skip) = run.regexes(file);
    let focus = run.focus(file, focus);
    let mut command = tokio::process::Command::new(peer("ginkgo"));
    command
        .arg(format!("--procs={procs}"))
        .arg("--timeout=3h")
        .arg("-v")
        .arg("--no-color")
        .arg(format!("--focus={focus}"))
        .arg(format!("--skip={run_skip}|{}", skips.regex()))
        .arg(format!("--output-dir={}", dir.display()))
        .arg("--junit-report=junit.xml")
        .arg("--json-report=logs/report.json");
    command
        .arg(peer("e2e.test"))
        .arg("--")
        .arg(format!("--kubeconfig={}", cluster.driver.plane.admin_kubeconfig.display()))
        .arg(format!("--storage.testdriver={}", driver_file.display()))
        .arg(format!("--kubectl-path={}", bin_dir().join("kubectl").display()))
        // Files a definition names (our VolumeAttributesClass) by absolute path.
        .arg("--repo-root=/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start ginkgo: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("ginkgo's stdout"));
    std::fs::create_dir_all(dir.join("logs")).unwrap_or_else(|e| panic!("{e}"));
    let mut log =
        std::fs::File::create(dir.join("logs/ginkgo.log")).unwrap_or_else(|e| panic!("{e}"));
    let mut lines = BufReader::new(stdout).lines();
    let mut progress = crate::report::Progress::default();
    while let Ok(Some(line)) = lines.next_line().await {
        use std::io::Write as _;
        let _ = writeln!(log, "{line}");
        if let Some(said) = progress.see(&line) {
            println!("e2e {label}: {said}");
        }
    }
    let status = child.wait().await;
    println!("e2e {label}: ginkgo ended with {status:?}; {}", progress.summary());
    // Read again with the reports: a run that did not end in success fails the gate.
    let code = match status {
        Ok(s) => s.code().map_or_else(|| format!("{s}"), |c| c.to_string()),
        Err(e) => format!("not waited for: {e}"),
    };
    let _ = std::fs::write(dir.join(crate::report::EXIT_FILE), format!("{code}\n"));
}

/// gzip `path` in place (the JUnit report names every spec with its output: megabytes of text).
fn compress(path: &Path) {
    if path.is_file() {
        let status = std::process::Command::new("gzip").arg("-9f").arg(path).status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("e2e: cannot gzip {}", path.display());
        }
    }
}

/// ginkgo leaves an empty folder per suite beside its reports.
fn remove_empty_folders(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir(entry.path()); // fails, as it should, unless empty
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrowing_focus_holds_before_or_after_the_runs_tags() {
        let re = |run: Run, extra| regex::Regex::new(&run.focus(DriverFile::Ours, extra)).unwrap();
        let serial = "External Storage [Driver: d] [Testpattern: p] volumeLimits should support volume limits [Serial]";
        let stress = "External Storage [Driver: d] [Testpattern: p] volume-modify-stress [FeatureGate:VolumeAttributesClass] [Feature:VolumeAttributesClass] multiple pods";
        assert!(re(Run::Serial, Some("volumeLimits")).is_match(serial));
        assert!(!re(Run::Serial, Some("capacity")).is_match(serial));
        assert!(re(Run::Features, Some("stress")).is_match(stress));
        assert!(re(Run::Features, Some("VolumeAttributesClass")).is_match(stress));
        assert!(re(Run::Parallel, Some("volumeLimits")).is_match(serial));
        assert!(re(Run::Parallel, None).is_match(stress));
    }
}
