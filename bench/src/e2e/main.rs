//! `make e2e`: Kubernetes' storage e2e suite ("External Storage", the suite kubernetes-csi gates
//! csi-provisioner and csi-resizer releases on) against csi-driver-host-path's plugin pod on one
//! real node, as users deploy it: once from its own manifest (csi-provisioner and csi-resizer
//! beside kube-controller-manager's binder and expander), and with deploy/swap/ (our image in
//! their place; intents on claim finalizers, and in deploy/'s journal), each with
//! csi-driver-host-path's own driver definition and with ours (tests/e2e/driver-ours.yaml). The
//! specs in tests/e2e/skips.txt are skipped, by name, for all.
//!
//! Writes each run's JUnit and JSON reports, the commit and our image's digest
//! (`provenance.md`) and a side-by-side table per definition to a dated folder under `--out`,
//! prints progress as specs finish, and ends with `N passed, N failed`. It exits non-zero if a
//! spec failed, a ginkgo run did not succeed, a report is missing or unreadable, or fewer specs
//! passed than `--floor`: `make e2e-gate` is this with the specs that exercise our code.

#[path = "../../../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

mod cluster;
mod provenance;
mod report;
mod runs;

use std::path::PathBuf;

use clap::Parser;

use runs::{DriverFile, StackKind};

#[derive(Parser, Debug)]
#[command(name = "storage-e2e", about = "Kubernetes' storage e2e suite, upstream's stack and ours")]
struct Args {
    /// Our image's OCI archive, as `make image` writes it.
    #[arg(long)]
    image: PathBuf,
    /// Fewer passed specs than this fails the command, whatever else happened.
    #[arg(long, default_value_t = 0)]
    floor: usize,
    /// Where the dated results folder goes.
    #[arg(long)]
    out: PathBuf,
    /// Which stacks, in order: upstream, ours, ours-journal.
    #[arg(long, value_delimiter = ',', default_value = "upstream,ours,ours-journal")]
    stacks: Vec<StackKind>,
    /// Which driver definitions: upstream (csi-driver-host-path's), ours.
    #[arg(long, value_delimiter = ',', default_value = "upstream,ours")]
    driver_files: Vec<DriverFile>,
    /// Which of kubernetes-csi's runs: parallel, features (snapshots), serial.
    #[arg(long, value_delimiter = ',', default_value = "parallel,features,serial")]
    runs: Vec<runs::Run>,
    /// ginkgo's parallel processes for the parallel runs.
    #[arg(long, default_value_t = 3)]
    procs: u32,
    /// An extra ginkgo focus, ANDed with each run's (e.g. `volume-expand`), for a shorter run.
    #[arg(long)]
    focus: Option<String>,
    /// The results folder's name (default: today's date and `-e2e`).
    #[arg(long)]
    name: Option<String>,
    /// Run nothing: write the tables again from the reports in the results folder.
    #[arg(long)]
    report_only: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let name = args.name.clone().unwrap_or_else(|| {
        let today = jiff::Zoned::now().date();
        format!("{today}-e2e")
    });
    let out = args.out.join(name);
    std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let skips = runs::Skips::read();
    if !args.report_only {
        // The node imports the archive named here; what ran is written beside the results.
        #[allow(unsafe_code)]
        // SAFETY: set before any other thread of this process reads the environment.
        unsafe {
            std::env::set_var("CSI_PV_CONTROLLER_IMAGE", &args.image)
        };
        let provenance = provenance::describe(&args.image);
        let path = out.join(report::PROVENANCE);
        std::fs::write(&path, &provenance).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!("{provenance}");
    }
    let files = if args.report_only { &[][..] } else { &args.driver_files[..] };
    for file in files {
        // With our definition ours runs first: its specs are the ones upstream's file lacks, and
        // an interrupted run should have ours.
        let mut stacks = args.stacks.clone();
        if *file == DriverFile::Ours {
            stacks.sort_by_key(|s| *s != StackKind::Ours);
        }
        for stack in &stacks {
            let setup = runs::Setup {
                stack: *stack,
                file: *file,
                procs: args.procs,
                focus: args.focus.clone(),
                out: out.clone(),
            };
            runs::run_all(&setup, &args.runs, &skips).await;
        }
    }
    // The tables cover every run in the folder, this command's and earlier ones' (e.g. one
    // definition at a time).
    let results = report::on_disk(&out);
    let table = report::write(&out, &results, &skips);
    println!("{table}");
    let (passed, failed) = report::totals(&results);
    let problems: Vec<&String> = results.iter().flat_map(|r| &r.problems).collect();
    println!("results in {}", out.display());
    for problem in &problems {
        println!("e2e: {problem}");
    }
    if passed < args.floor {
        println!("e2e: {passed} specs passed, fewer than the floor of {}", args.floor);
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 || !problems.is_empty() || passed < args.floor || results.is_empty() {
        std::process::exit(1);
    }
}
