//! csi-driver-host-path deployed as its users deploy it, on a real node: its plugin StatefulSet
//! (hostpathplugin, node-driver-registrar, livenessprobe, csi-attacher, csi-snapshotter and the
//! rest as containers of one pod) applied with kubectl from its own manifest, either unmodified
//! (upstream's stack) or through deploy/swap/ with `kubectl apply -k` (ours: our image, built by
//! `make image`, in place of csi-provisioner and csi-resizer). The images are those
//! peers/driver-images.sh made under the manifest's names, and ours; nothing is pulled.
//!
//! The one change to what users apply: deploy/swap/ names csi-driver-host-path's manifest by
//! its URL, which this machine cannot fetch, so the test's copy of deploy/swap/ names the same
//! file from the release's source archive (peers/driver-images.sh copied it).
//!
//! The pods reach the apiserver with their in-cluster configuration, through the `kubernetes`
//! Service (node::ServiceRelay, the test-only stand-in for kube-proxy).

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, LogParams};

use super::control_plane::{ControlPlane, fresh_plane_for_pods};
use super::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use super::node::{ImageArchive, JOURNAL_DIR, NODE_CONTROLLERS, NODE_NAME, Node};
use super::peers::{bin_dir, peer};
use super::sidecar::repo_root;

/// The driver's name, as csi-driver-host-path's manifest names it.
pub const DRIVER: &str = "hostpath.csi.k8s.io";
/// The namespace csi-driver-host-path's manifest deploys into.
pub const NAMESPACE: &str = "default";
/// The StatefulSet's one pod.
pub const POD: &str = "csi-hostpathplugin-0";
/// Our container's name in deploy/swap/.
pub const OURS: &str = "csi-pv-controller";

/// How long the plugin pod may take to be Ready with every container on a busy 2-core machine:
/// eight containers from local images, node-driver-registrar's 30 s probe delay.
const READY_TIMEOUT: Duration = Duration::from_secs(240);

/// kube-controller-manager's controllers for a driver deployed as a StatefulSet whose pods use
/// their ServiceAccount: the StatefulSet's pod, each namespace's "default" account and the root
/// CA ConfigMap that a projected token volume needs.
const POD_CONTROLLERS: &str =
    "statefulset-controller,serviceaccount-controller,root-ca-certificate-publisher-controller";

/// Which stack the plugin pod runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    /// csi-driver-host-path's manifest as it is: csi-provisioner and csi-resizer.
    Upstream,
    /// deploy/swap/ applied with `kubectl apply -k`: our image in their place, provisioning
    /// intents on claim finalizers.
    Swap,
    /// deploy/swap/ with deploy/'s intent journal: `--intent-journal` in a folder of the node,
    /// as deploy/hostpath/ runs it.
    SwapJournal,
}

impl Stack {
    pub fn ours(self) -> bool {
        self != Stack::Upstream
    }
}

/// A cluster's make-up beyond its stack.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras<'a> {
    /// kube-controller-manager's controllers beyond the storage, node and pod ones.
    pub controllers: &'a str,
    /// hostpathplugin's flags after its manifest's.
    pub driver_flags: &'a [&'a str],
    /// The provisioner's flags after its manifest's list (csi-provisioner's, or ours after
    /// `--args-of=csi-provisioner`); with any, the container also gets `NAMESPACE` (its pod's),
    /// where storage capacity objects go.
    pub provisioner_flags: &'a [&'a str],
}

/// A cluster with the driver's plugin pod running; everything stops when dropped.
pub struct DriverCluster {
    pub plane: &'static ControlPlane,
    pub node: Node,
    pub stack: Stack,
    /// The test's copy of the manifests (deploy/swap/ and deploy/rbac, and the driver's).
    pub manifests: PathBuf,
    _kcm: Kcm,
}

/// `make image`'s OCI archive: `CSI_PV_CONTROLLER_IMAGE`, or target/csi-pv-controller-image.tar.
pub fn our_image() -> ImageArchive {
    let path = std::env::var_os("CSI_PV_CONTROLLER_IMAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/csi-pv-controller-image.tar"));
    assert!(path.is_file(), "our image {} is missing: run `make image` first", path.display());
    ImageArchive { path, name: Some(our_image_name()) }
}

/// The name deploy/swap/ gives our image, as kubelet completes it (a name with no registry is
/// Docker Hub's, and one with no path its `library`).
pub fn our_image_name() -> String {
    let path = repo_root().join("deploy/swap/containers.yaml");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let image = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image:"))
        .map(str::trim)
        .next()
        .unwrap_or_else(|| panic!("{} names no image", path.display()));
    match image.split_once('/') {
        Some((host, _)) if host.contains('.') || host.contains(':') => image.to_string(),
        Some(_) => format!("docker.io/{image}"),
        None => format!("docker.io/library/{image}"),
    }
}

/// csi-driver-host-path's deployment folder (deploy/kubernetes-1.34 and deploy/util of its
/// release, and the sidecars' RBAC), as peers/driver-images.sh left it.
pub fn hostpath_deploy() -> PathBuf {
    let dir = bin_dir().join("hostpath-deploy");
    assert!(dir.join("kubernetes-1.34").is_dir(), "{} is missing: run `make peers`", dir.display());
    dir
}

fn driver_images() -> Vec<ImageArchive> {
    let dir = bin_dir().join("driver-images");
    let mut images: Vec<ImageArchive> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}: run `make peers`", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tar"))
        .map(ImageArchive::docker)
        .collect();
    images.sort_by(|a, b| a.path.cmp(&b.path));
    assert!(images.len() >= 8, "{} holds {} images, not 8", dir.display(), images.len());
    images
}

impl DriverCluster {
    /// A fresh plane, kube-controller-manager, a node, and the driver's plugin pod of `stack`
    /// Ready with the driver registered. `edit` may change the test's copy of deploy/ (the
    /// folder holding swap/ and rbac/) before it is applied: a wrong manifest's test.
    pub async fn start(stack: Stack, edit: impl FnOnce(&Path)) -> DriverCluster {
        Self::start_with(stack, Extras::default(), edit).await
    }

    /// As `start`, with `extras`.
    pub async fn start_with(
        stack: Stack,
        extras: Extras<'_>,
        edit: impl FnOnce(&Path),
    ) -> DriverCluster {
        let cluster = Self::start_unready_with(stack, extras, edit).await;
        cluster.wait_ready().await;
        cluster
    }

    /// As `start`, without waiting for the pod: for manifests that must not become Ready.
    pub async fn start_unready(stack: Stack, edit: impl FnOnce(&Path)) -> DriverCluster {
        Self::start_unready_with(stack, Extras::default(), edit).await
    }

    async fn start_unready_with(
        stack: Stack,
        extras: Extras<'_>,
        edit: impl FnOnce(&Path),
    ) -> DriverCluster {
        let plane = fresh_plane_for_pods();
        let mut controllers =
            format!("{KCM_STORAGE_CONTROLLERS},{NODE_CONTROLLERS},{POD_CONTROLLERS}");
        if !extras.controllers.is_empty() {
            controllers = format!("{controllers},{}", extras.controllers);
        }
        let root_ca = format!("--root-ca-file={}", plane.ca_file.display());
        let kcm = Kcm::start_with(plane, &controllers, &[&root_ca]);
        let mut images = driver_images();
        if stack.ours() {
            images.push(our_image());
        }
        let node = Node::start_for_pods(plane, &images).await;
        let manifests = plane.dir.join("manifests");
        let cluster = DriverCluster { plane, node, stack, manifests, _kcm: kcm };
        cluster.stage_manifests();
        cluster.add_extras(&extras);
        edit(&cluster.manifests.join("deploy"));
        cluster.apply().await;
        cluster
    }

    /// The test's copies: deploy/swap/ and deploy/rbac/ as they are in the checkout, but for the
    /// driver manifest's URL, and the driver's deployment folder.
    fn stage_manifests(&self) {
        let deploy = repo_root().join("deploy");
        let ours = self.manifests.join("deploy");
        copy_dir(&deploy.join("rbac"), &ours.join("rbac"));
        copy_dir(&deploy.join("swap"), &ours.join("swap"));
        offline_swap(&ours.join("swap"));
    }

    /// deploy/'s intent journal (SwapJournal) and `extras`' flags, into the test's copies: the
    /// driver manifest's own markers (`# end hostpath args`, `# end csi-provisioner args`)
    /// and our container's provisioner list say where.
    fn add_extras(&self, extras: &Extras<'_>) {
        let deploy = self.manifests.join("deploy");
        let plugin = deploy.join("swap").join(PLUGIN_MANIFEST);
        let containers = deploy.join("swap/containers.yaml");
        let list = |flags: &[&str]| -> String {
            flags.iter().map(|f| format!("            - \"{f}\"\n")).collect()
        };
        let env = "          env:\n            - name: NAMESPACE\n              valueFrom:\n                fieldRef:\n                  fieldPath: metadata.namespace\n";
        insert_before(&plugin, "            # end hostpath args\n", &list(extras.driver_flags));
        if !extras.provisioner_flags.is_empty() {
            let flags = list(extras.provisioner_flags);
            match self.stack {
                Stack::Upstream => {
                    insert_before(&plugin, "            # end csi-provisioner args\n", &flags);
                    insert_after(&plugin, "            # end csi-provisioner args\n", env);
                }
                Stack::Swap | Stack::SwapJournal => {
                    insert_after(&containers, "            - --http-endpoint=:8080\n", &flags);
                    insert_before(&containers, "          securityContext:\n", env);
                }
            }
        }
        // What deploy/rbac/ says to do with --enable-capacity.
        if self.stack.ours() && extras.provisioner_flags.contains(&"--enable-capacity") {
            let kustomization = deploy.join("rbac/kustomization.yaml");
            let text = fs::read_to_string(&kustomization).expect("rbac/kustomization.yaml");
            assert!(text.contains("# - rbac-capacity.yaml"), "{text}");
            let text = text.replace("# - rbac-capacity.yaml", "- rbac-capacity.yaml");
            fs::write(&kustomization, text).expect("rbac/kustomization.yaml");
        }
        if self.stack == Stack::SwapJournal {
            let journal = "            - --intent-journal=/var/lib/csi-pv-controller/intents\n";
            insert_after(&containers, "            - --http-endpoint=:8080\n", journal);
            let mount = "            - mountPath: /var/lib/csi-pv-controller\n              name: intent-journal\n";
            insert_after(&containers, "              name: socket-dir\n", mount);
            let mut text = fs::read_to_string(&containers).expect("containers.yaml");
            text.truncate(text.trim_end().len());
            text.push_str(&format!(
                "\n      volumes:\n        - name: intent-journal\n          hostPath: {{path: {JOURNAL_DIR}, type: DirectoryOrCreate}}\n"
            ));
            fs::write(&containers, text).expect("containers.yaml");
        }
    }

    /// What csi-driver-host-path's deploy script applies (the sidecars' RBAC, the CSIDriver,
    /// the snapshot class and its CRDs), then the plugin: its manifest, or deploy/swap/.
    async fn apply(&self) {
        let hostpath = hostpath_deploy();
        // kubectl reads a symbolic link to a folder as a file.
        let crds = fs::canonicalize(bin_dir().join("snapshot-crds")).expect("snapshot CRDs");
        self.kubectl(&["apply", "-f", &crds.display().to_string()]);
        // The sidecars' own RBAC; with ours, only that of the sidecars that stay, so that our
        // RBAC (deploy/rbac) is all our container has.
        for sidecar in ["csi-attacher", "csi-snapshotter", "csi-provisioner", "csi-resizer"] {
            let replaced = matches!(sidecar, "csi-provisioner" | "csi-resizer");
            if !self.stack.ours() || !replaced {
                let file = hostpath.join("rbac").join(format!("{sidecar}.yaml"));
                self.kubectl(&["apply", "-f", &file.display().to_string()]);
            }
        }
        let driver = hostpath.join("kubernetes-1.34/hostpath");
        for file in ["csi-hostpath-driverinfo.yaml", "csi-hostpath-snapshotclass.yaml"] {
            self.kubectl(&["apply", "-f", &driver.join(file).display().to_string()]);
        }
        match self.stack {
            Stack::Upstream => {
                // The manifest as released, with only `Extras`' flags added.
                let plugin = self.manifests.join("deploy/swap").join(PLUGIN_MANIFEST);
                self.kubectl(&["apply", "-f", &plugin.display().to_string()]);
            }
            Stack::Swap | Stack::SwapJournal => {
                let swap = self.manifests.join("deploy/swap");
                self.kubectl(&["apply", "-k", &swap.display().to_string()]);
            }
        }
    }

    /// Runs kubectl as the cluster's admin: its standard output, or a panic with its error.
    pub fn kubectl(&self, args: &[&str]) -> String {
        kubectl(&self.plane.admin_kubeconfig, args, None)
    }

    /// Until the plugin pod is Ready (every container's probes pass) and kubelet lists the
    /// driver in the node's CSINode.
    pub async fn wait_ready(&self) {
        let client = self.plane.client().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        let nodes: Api<CSINode> = Api::all(client);
        let start = Instant::now();
        loop {
            let pod = pods.get_opt(POD).await.ok().flatten();
            let ready = pod.as_ref().is_some_and(pod_ready);
            let registered = nodes
                .get_opt(NODE_NAME)
                .await
                .ok()
                .flatten()
                .is_some_and(|n| n.spec.drivers.iter().any(|d| d.name == DRIVER));
            if ready && registered {
                return;
            }
            if start.elapsed() > READY_TIMEOUT {
                panic!(
                    "{POD} not Ready with {DRIVER} registered after {READY_TIMEOUT:?} (Ready: \
                     {ready}, registered: {registered}):\n{}\n{}",
                    self.describe().await,
                    self.node.logs()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The plugin pod's containers' states and each one's last log lines, for a failure.
    pub async fn describe(&self) -> String {
        let client = self.plane.client().await;
        let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let Some(pod) = pods.get_opt(POD).await.ok().flatten() else {
            return format!("no pod {POD}");
        };
        let mut text = String::new();
        let statuses = pod.status.and_then(|s| s.container_statuses).unwrap_or_default();
        for status in statuses {
            text.push_str(&format!(
                "container {}: ready {}, restarts {}, state {:?}\n",
                status.name, status.ready, status.restart_count, status.state
            ));
            let params = LogParams {
                container: Some(status.name.clone()),
                tail_lines: Some(15),
                ..Default::default()
            };
            if let Ok(log) = pods.logs(POD, &params).await {
                text.push_str(&log);
            }
        }
        text
    }

    /// A container's log in the plugin pod (the current instance, or the previous one).
    pub async fn logs(&self, container: &str, previous: bool) -> String {
        let client = self.plane.client().await;
        let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
        let params =
            LogParams { container: Some(container.into()), previous, ..Default::default() };
        pods.logs(POD, &params).await.unwrap_or_default()
    }
}

/// The file name a staged deploy/swap/ gives csi-driver-host-path's plugin manifest.
pub const PLUGIN_MANIFEST: &str = "csi-hostpath-plugin.yaml";

/// Makes a copy of deploy/swap/ in `swap` buildable offline: the plugin manifest it names by
/// URL, which this machine cannot fetch, is put beside it from the release's source archive
/// (as `PLUGIN_MANIFEST`) and named instead.
pub fn offline_swap(swap: &Path) {
    let manifest = "deploy/kubernetes-1.34/hostpath/csi-hostpath-plugin.yaml";
    fs::write(swap.join(PLUGIN_MANIFEST), super::hostpath::source_file(manifest))
        .expect("driver manifest");
    let kustomization = swap.join("kustomization.yaml");
    let text = fs::read_to_string(&kustomization).expect("deploy/swap/kustomization.yaml");
    let url = format!(
        "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-host-path/v1.18.0/{manifest}"
    );
    assert!(text.contains(&url), "deploy/swap/ names another manifest:\n{text}");
    fs::write(&kustomization, text.replace(&url, PLUGIN_MANIFEST)).expect("kustomization");
}

/// `kubectl` with `kubeconfig`, `input` on its standard input: its standard output, or a panic
/// with its error.
pub fn kubectl(kubeconfig: &Path, args: &[&str], input: Option<&str>) -> String {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = Command::new(peer("kubectl"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run kubectl");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.unwrap_or_default().as_bytes());
    }
    let out = child.wait_with_output().expect("kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl {} failed: {stderr}", args.join(" "));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether every container of `pod` is ready.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Puts `text` before the first `marker` line of `path`; panics if there is none.
fn insert_before(path: &Path, marker: &str, text: &str) {
    let old = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(old.contains(marker), "{} has no line {marker:?}", path.display());
    fs::write(path, old.replacen(marker, &format!("{text}{marker}"), 1)).expect("manifest");
}

/// Puts `text` after the first `marker` line of `path`; panics if there is none.
fn insert_after(path: &Path, marker: &str, text: &str) {
    let old = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(old.contains(marker), "{} has no line {marker:?}", path.display());
    fs::write(path, old.replacen(marker, &format!("{marker}{text}"), 1)).expect("manifest");
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.expect("directory entry");
        if entry.path().is_file() {
            fs::copy(entry.path(), to.join(entry.file_name())).expect("copy manifest");
        }
    }
}
