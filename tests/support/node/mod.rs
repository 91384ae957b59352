//! A real node on the test host, for the tests where pods matter: containerd (its runc shim and
//! Debian's runc), kubelet and kube-scheduler against a test's control plane, with the test's
//! hostpathplugin registered as the node's CSI driver through our registrar. Pods run the
//! images `make peers` built (peers/images.sh), imported into containerd at start; nothing is
//! pulled.
//!
//! Everything stays on loopback: kubelet listens on 127.0.0.1 under a node name that resolves
//! there (`NODE_NAME`), containerd's streaming server is on 127.0.0.1, and pods sit on a bridge with no
//! address on the host side, no gateway, no route and no masquerade, so they can reach nothing.
//!
//! kubelet's root is `/var/lib/kubelet` (Kubernetes' e2e suite expects it there), so one node
//! runs on the machine at a time: a lock file serialises them across test binaries. Dropping
//! the node, and starting one after a run that was killed, leaves nothing behind: no process,
//! mount, network device, cgroup or kernel setting of the node's (see `cleanup`).

#![allow(dead_code)]

mod cleanup;
mod config;
pub mod registrar;
mod service_relay;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as NodeObject;
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::Api;

use super::control_plane::{ControlPlane, spawn, tail};
use super::hostpath::Hostpath;
use super::peers::peer;
use registrar::{Registrar, Verdict};
use service_relay::ServiceRelay;

// Only the tests of the driver's pod read it.
#[allow(unused_imports)]
pub use cleanup::{HOSTPATH_DATA, JOURNAL_DIR};

/// kubelet's root folder, as upstream's default and the e2e suite's paths assume.
pub const KUBELET_ROOT: &str = "/var/lib/kubelet";

/// How long a node may take to be Ready with its driver registered on a busy 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// The images every pod on the node can use, by their archive in the images folder.
const IMAGES: &[&str] = &["pause.tar", "busybox.tar"];
/// The images the e2e suite also asks for, imported when `peers/build.sh e2e` built them.
const E2E_IMAGES: &[&str] = &["agnhost.tar", "nginx.tar", "glibc-dns-testing.tar"];

/// kube-controller-manager's controllers a node needs besides the storage ones: the node's
/// lifecycle (it takes the not-ready taint off a Ready node, or nothing schedules there) and
/// attach/detach (kubelet waits on it for a driver whose CSIDriver asks for attaching).
pub const NODE_CONTROLLERS: &str =
    "node-lifecycle-controller,persistentvolume-attach-detach-controller";

/// The node's name. The apiserver reaches kubelet by it (`--kubelet-preferred-address-types=
/// Hostname`), so it must resolve to loopback: kubelet refuses a loopback `--node-ip`.
pub const NODE_NAME: &str = "localhost";

/// The default test image, under the name the e2e suite of the peers' Kubernetes asks for it
/// (peers/images.sh writes it beside the archive, since each minor moves the tag).
pub fn busybox() -> String {
    // Read once: the bench builds a pod object per claim.
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| image_ref("busybox.ref")).clone()
}

/// The pod sandbox image, named as the peers' Kubernetes names it.
fn pause() -> String {
    image_ref("pause.ref")
}

fn image_ref(file: &str) -> String {
    let path = super::peers::bin_dir().join("images").join(file);
    match fs::read_to_string(&path) {
        Ok(name) if !name.trim().is_empty() => name.trim().to_string(),
        _ => panic!("{} names no image: run `make peers` first", path.display()),
    }
}

/// An image to import into the node's containerd.
#[derive(Debug, Clone)]
pub struct ImageArchive {
    pub path: PathBuf,
    /// The image's full name, for an OCI archive; a docker archive names its images itself.
    pub name: Option<String>,
}

impl ImageArchive {
    pub fn docker(path: PathBuf) -> ImageArchive {
        ImageArchive { path, name: None }
    }
}

/// A running node; stopped, and every trace of it removed, when dropped.
pub struct Node {
    pub name: String,
    /// The run's folder: containerd's root and state, the configs and the logs.
    pub dir: PathBuf,
    pub containerd_socket: PathBuf,
    pub kubelet_log: PathBuf,
    pub containerd_log: PathBuf,
    pub scheduler_log: PathBuf,
    /// Stopped in reverse order: the scheduler, kubelet, containerd.
    children: Vec<Child>,
    registrar: Option<Registrar>,
    relay: Option<ServiceRelay>,
    saved: cleanup::Saved,
    _lock: fs::File,
}

impl Node {
    /// Starts a node named after `driver`'s node id (so that the driver's NodeGetInfo names
    /// it; `NODE_NAME`, which resolves to loopback), registers `driver` with its kubelet and waits until the Node is Ready and its
    /// CSINode lists the driver. Start it from the test's own thread, as `Kcm`.
    pub async fn start(plane: &ControlPlane, driver: &Hostpath) -> Node {
        Self::start_via(plane, driver, &driver.socket).await
    }

    /// As `start`, with kubelet sent to `endpoint` for the driver's calls (a relay in front of
    /// it, which times every call).
    pub async fn start_via(plane: &ControlPlane, driver: &Hostpath, endpoint: &Path) -> Node {
        let mut node = Node::prepare(driver.config.node_id.clone(), plane, false);
        node.import_images(&[]);
        node.start_kubelet(plane);
        node.start_scheduler(plane);
        let socket = Path::new(KUBELET_ROOT)
            .join("plugins_registry")
            .join(format!("{}-reg.sock", driver.config.driver_name));
        let log = node.dir.join("registrar.log");
        let registrar = Registrar::start(&socket, &driver.config.driver_name, endpoint, &log)
            .unwrap_or_else(|e| {
                panic!("the plugin registrar cannot serve {}: {e}", socket.display())
            });
        node.registrar = Some(registrar);
        node.wait_ready(plane, Some(&driver.config.driver_name)).await;
        node
    }

    /// A node named `NODE_NAME` for a driver that runs in pods, as its users deploy it: no
    /// driver on the host; `images` (docker or OCI archives) imported besides the base ones; the
    /// pods' bridge is their way to the `kubernetes` Service (`ServiceRelay`), so that they
    /// reach the apiserver with their in-cluster configuration. Ready when the Node is; the
    /// driver registers itself from its pod. `plane` must mount ServiceAccount tokens
    /// (`fresh_plane_for_pods`).
    pub async fn start_for_pods(plane: &ControlPlane, images: &[ImageArchive]) -> Node {
        let mut node = Node::prepare(NODE_NAME.to_string(), plane, true);
        node.import_images(images);
        node.start_kubelet(plane);
        node.start_scheduler(plane);
        node.wait_ready(plane, None).await;
        node
    }

    /// Until kubelet lists `driver` in the node's CSINode (a driver registering from its pod).
    pub async fn wait_registered(&mut self, plane: &ControlPlane, driver: &str) {
        self.wait_ready(plane, Some(driver)).await;
    }

    /// The machine locked, leftovers of earlier nodes removed, containerd running (and the
    /// Service relay, `for_pods`).
    fn prepare(name: String, plane: &ControlPlane, for_pods: bool) -> Node {
        let lock = cleanup::lock_machine();
        cleanup::remove_leftovers();
        cleanup::make_root();
        let saved = cleanup::Saved::take();
        let dir = plane.dir.join(format!("node-{name}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("node folder");
        let mut node = Node {
            name: name.clone(),
            containerd_socket: dir.join("containerd.sock"),
            kubelet_log: dir.join("kubelet.log"),
            containerd_log: dir.join("containerd.log"),
            scheduler_log: dir.join("kube-scheduler.log"),
            dir,
            children: Vec::new(),
            registrar: None,
            relay: None,
            saved,
            _lock: lock,
        };
        if for_pods {
            let apiserver = plane.server.trim_start_matches("https://");
            let relay = ServiceRelay::start(apiserver)
                .unwrap_or_else(|e| panic!("the kubernetes Service's relay cannot start: {e}"));
            node.relay = Some(relay);
        }
        node.start_containerd(for_pods);
        node
    }

    fn start_containerd(&mut self, to_services: bool) {
        let config = config::containerd(&self.dir, &self.containerd_socket, &pause());
        let path = self.dir.join("containerd.toml");
        fs::write(&path, config).expect("containerd config");
        fs::create_dir_all(self.dir.join("cni")).expect("cni folder");
        fs::write(self.dir.join("cni/10-node.conflist"), config::cni(&self.dir, to_services))
            .expect("cni config");
        let mut command = Command::new(peer("containerd"));
        command.arg(format!("--config={}", path.display())).env("PATH", search_path());
        let mut child = spawn(command, &self.containerd_log).unwrap_or_else(|e| panic!("{e}"));
        let socket = self.containerd_socket.clone();
        wait_until("containerd", &mut child, &self.containerd_log, || socket.exists());
        self.children.push(child);
    }

    /// Imports the images into containerd's Kubernetes namespace, each under the name its
    /// archive carries.
    fn import_images(&self, extra: &[ImageArchive]) {
        let folder = super::peers::bin_dir().join("images");
        let optional = E2E_IMAGES.iter().filter(|f| folder.join(f).is_file());
        let base =
            IMAGES.iter().chain(optional).map(|file| ImageArchive::docker(folder.join(file)));
        for ImageArchive { path: archive, name } in base.chain(extra.iter().cloned()) {
            assert!(
                archive.is_file(),
                "image archive {} not found: run `make peers` (and `make image` for ours) first",
                archive.display()
            );
            let out = Command::new(peer("ctr"))
                .arg(format!("--address={}", self.containerd_socket.display()))
                .args(["--namespace=k8s.io", "images", "import"])
                // An OCI archive (`make image`'s) names its image by annotation only, which
                // ctr does not read: the image list gets the name here.
                .args(name.iter().flat_map(|n| ["--index-name", n.as_str()]))
                .arg(&archive)
                .output()
                .expect("cannot run ctr");
            assert!(
                out.status.success(),
                "ctr cannot import {}: {}{}",
                archive.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    fn start_kubelet(&mut self, plane: &ControlPlane) {
        let port = super::control_plane::free_port();
        let path = self.dir.join("kubelet.yaml");
        fs::write(&path, config::kubelet(&self.containerd_socket, &plane.ca_file, port))
            .expect("kubelet config");
        let mut command = Command::new(peer("kubelet"));
        command
            .arg(format!("--config={}", path.display()))
            .arg(format!("--kubeconfig={}", plane.admin_kubeconfig.display()))
            .arg(format!("--hostname-override={}", self.name))
            .arg(format!("--cert-dir={}", self.dir.join("kubelet-pki").display()))
            .arg("--v=2")
            .env("PATH", search_path());
        let child = spawn(command, &self.kubelet_log).unwrap_or_else(|e| panic!("{e}"));
        self.children.push(child);
    }

    fn start_scheduler(&mut self, plane: &ControlPlane) {
        let mut command = Command::new(peer("kube-scheduler"));
        command
            .arg(format!("--kubeconfig={}", plane.admin_kubeconfig.display()))
            .arg(format!("--authentication-kubeconfig={}", plane.admin_kubeconfig.display()))
            .arg(format!("--authorization-kubeconfig={}", plane.admin_kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", super::control_plane::free_port()))
            .arg("--v=2");
        let child = spawn(command, &self.scheduler_log).unwrap_or_else(|e| panic!("{e}"));
        self.children.push(child);
    }

    /// Until the Node is Ready and kubelet has registered `driver` (if any) in its CSINode.
    async fn wait_ready(&mut self, plane: &ControlPlane, driver: Option<&str>) {
        let client = plane.client().await;
        let nodes: Api<NodeObject> = Api::all(client.clone());
        let csi_nodes: Api<CSINode> = Api::all(client);
        let start = Instant::now();
        loop {
            for (i, child) in self.children.iter_mut().enumerate() {
                if let Ok(Some(status)) = child.try_wait() {
                    let log =
                        [&self.containerd_log, &self.kubelet_log, &self.scheduler_log][i.min(2)];
                    panic!("a node process exited with {status}:\n{}", tail(log));
                }
            }
            if let Some(Verdict::Refused(why)) = self.registrar.as_ref().and_then(|r| r.verdict()) {
                panic!("kubelet refused the driver's registration: {why}");
            }
            let ready = nodes.get_opt(&self.name).await.ok().flatten().is_some_and(|n| {
                n.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            let registered =
                csi_nodes.get_opt(&self.name).await.ok().flatten().is_some_and(|n| {
                    n.spec.drivers.iter().any(|d| Some(d.name.as_str()) == driver)
                }) || driver.is_none();
            if ready && registered {
                return;
            }
            assert!(
                start.elapsed() < READY_TIMEOUT,
                "node {} not Ready with driver {driver:?} registered after {READY_TIMEOUT:?} \
                 (Ready: {ready}, registered: {registered}):\n{}\n{}",
                self.name,
                tail(&self.kubelet_log),
                tail(&self.containerd_log)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The node's logs' last lines, for a failing test's message.
    pub fn logs(&self) -> String {
        super::control_plane::logs_text(
            &[self.kubelet_log.clone(), self.containerd_log.clone(), self.scheduler_log.clone()],
            Some(40),
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.registrar = None;
        self.relay = None;
        // The scheduler and kubelet first, so that nothing starts a container meanwhile; then
        // the pods' processes and their shims; then containerd.
        for child in self.children.iter_mut().skip(1).rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        cleanup::stop_pods();
        if let Some(containerd) = self.children.first_mut() {
            let _ = containerd.kill();
            let _ = containerd.wait();
        }
        cleanup::remove_leftovers();
        self.saved.restore();
    }
}

/// containerd finds its shim, and kubelet and the shim find runc and mount helpers, here.
fn search_path() -> String {
    let system = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    format!("{}:/usr/sbin:/sbin:{system}", super::peers::bin_dir().display())
}

/// Waits (blocking, for the processes started before any client exists) until `ready`,
/// failing with the log if `child` exits or it takes longer than a minute.
fn wait_until(what: &str, child: &mut Child, log: &Path, ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited with {status}:\n{}", tail(log));
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{what} not ready:\n{}", tail(log));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A pod that writes a file into the claim's volume, says so on stdout, and keeps running.
pub fn writer(claim: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "writer"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "writer",
                "image": busybox(),
                "imagePullPolicy": "Never",
                "command": ["sh", "-c",
                    "echo written-by-a-pod > /data/hello && sync && echo wrote /data/hello && exec sleep 100000"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }))
    .expect("a Pod")
}
