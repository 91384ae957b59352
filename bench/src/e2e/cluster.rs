//! One cluster for one e2e run: a fresh control plane, kube-controller-manager with the
//! controllers the suite needs, hostpathplugin as csi-driver-host-path deploys it, a real node
//! with the driver registered, csi-attacher, the snapshot stack, and either the upstream sidecars
//! or ours as deploy/ runs it.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::runs::{DriverFile, StackKind};
use crate::support::control_plane::{ControlPlane, fresh_plane, spawn};
use crate::support::hostpath::{Hostpath, HostpathConfig};
use crate::support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use crate::support::node::{NODE_CONTROLLERS, Node};
use crate::support::peers::peer;
use crate::support::sidecar::{Sidecar, apply_deploy_rbac};
use crate::support::snapshots::Snapshotter;
use crate::support::upstream::{Extra, Upstream};

/// The driver's name, as csi-driver-host-path and both driver definitions name it.
pub const DRIVER: &str = "hostpath.csi.k8s.io";
/// The node's name, which is hostpathplugin's node id and its topology value.
pub const NODE: &str = crate::support::node::NODE_NAME;
/// Where deploy/ runs us in this cluster: its RBAC's namespace and Lease.
const OUR_NAMESPACE: &str = "csi-pv-controller";
/// Where csi-provisioner writes its CSIStorageCapacity objects (its NAMESPACE).
const UPSTREAM_NAMESPACE: &str = "default";

/// What the suite needs of kube-controller-manager besides the storage and node controllers:
/// a `default` ServiceAccount and the root CA ConfigMap in every test namespace, generic
/// ephemeral volumes, owner references and namespace deletion.
const SUITE_CONTROLLERS: &str = "serviceaccount-controller,root-ca-certificate-publisher-controller,ephemeral-volume-controller,garbage-collector-controller,namespace-controller,volumeattributesclass-protection-controller";

enum Provisioner {
    Upstream(Upstream),
    Ours(Sidecar),
}

/// A running cluster; everything stops when it is dropped, the node last.
pub struct Cluster {
    pub plane: &'static ControlPlane,
    provisioner: Provisioner,
    _attacher: Killed,
    _snapshots: Snapshotter,
    _kcm: Kcm,
    pub node: Node,
    _driver: Hostpath,
}

/// A child process killed when dropped (std's Child is not).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Cluster {
    /// `file`'s flags go to hostpathplugin after csi-driver-host-path's own, and to the
    /// provisioner of either stack.
    pub async fn start(stack: StackKind, file: DriverFile, sidecar: &Path, dir: &Path) -> Cluster {
        let plane = fresh_plane();
        let controllers =
            format!("{KCM_STORAGE_CONTROLLERS},{NODE_CONTROLLERS},{SUITE_CONTROLLERS}");
        let root_ca = format!("--root-ca-file={}", plane.ca_file.display());
        let kcm = Kcm::start_with(plane, &controllers, &[&root_ca]);
        let config = HostpathConfig {
            driver_name: DRIVER.to_string(),
            node_id: NODE.to_string(),
            flags: ["--v=5"].iter().chain(file.driver_flags()).map(|f| f.to_string()).collect(),
        };
        let driver = Hostpath::start(dir, config).await;
        let node = Node::start(plane, &driver).await;
        csi_driver(plane).await;
        let admin = format!("--kubeconfig={}", plane.admin_kubeconfig.display());
        let mut attacher = std::process::Command::new(peer("csi-attacher"));
        attacher.arg(&admin).arg(format!("--csi-address={}", driver.socket.display())).arg("--v=5");
        let attacher =
            spawn(attacher, &dir.join("csi-attacher.log")).unwrap_or_else(|e| panic!("{e}"));
        let snapshots = Snapshotter::start(plane, &driver.socket, dir).await;
        let provisioner = match stack {
            StackKind::Upstream => {
                let extra = Extra {
                    provisioner_args: file
                        .provisioner_flags()
                        .iter()
                        .map(|f| f.to_string())
                        .collect(),
                    provisioner_env: vec![("NAMESPACE".into(), UPSTREAM_NAMESPACE.into())],
                };
                let kubeconfig = &plane.admin_kubeconfig;
                Provisioner::Upstream(Upstream::start_with(
                    kubeconfig,
                    &driver.socket,
                    dir,
                    "upstream",
                    &[],
                    &extra,
                ))
            }
            StackKind::Ours => {
                let flags = file.provisioner_flags();
                Provisioner::Ours(ours(plane, sidecar, &driver, flags, dir).await)
            }
        };
        Cluster {
            plane,
            provisioner,
            _attacher: Killed(attacher),
            _snapshots: snapshots,
            _kcm: kcm,
            node,
            _driver: driver,
        }
    }

    /// The provisioner's log, for a failure's story.
    pub fn provisioner_log(&self) -> String {
        match &self.provisioner {
            Provisioner::Upstream(u) => u.log_text(),
            Provisioner::Ours(s) => s.log_text(),
        }
    }
}

/// csi-driver-host-path's CSIDriver object: persistent and inline ephemeral volumes, pod info
/// on mount, fsGroup applied by kubelet, attaching required (the default).
async fn csi_driver(plane: &ControlPlane) {
    let object: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": DRIVER},
        "spec": {
            "volumeLifecycleModes": ["Persistent", "Ephemeral"],
            "podInfoOnMount": true,
            "fsGroupPolicy": "File",
        },
    }))
    .unwrap_or_else(|e| panic!("CSIDriver: {e}"));
    Api::<CSIDriver>::all(plane.client().await)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("cannot create the CSIDriver: {e}"));
}

/// Our sidecar as deploy/ runs it: deploy/'s RBAC and ServiceAccount, its args (leader
/// election, the intent journal, -v=2), nothing else.
async fn ours(
    plane: &ControlPlane,
    binary: &Path,
    driver: &Hostpath,
    flags: &[&str],
    dir: &Path,
) -> Sidecar {
    let account = apply_deploy_rbac(plane, OUR_NAMESPACE, "e2e").await;
    let token = plane.service_account_token(OUR_NAMESPACE, &account).await;
    let kubeconfig = plane.token_kubeconfig("csi-pv-controller", &token);
    let args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--csi-address={}", driver.socket.display()),
        "--leader-election".to_string(),
        format!("--leader-election-namespace={OUR_NAMESPACE}"),
        format!("--intent-journal={}", dir.join("intents").display()),
        "--v=2".to_string(),
    ];
    let args: Vec<String> = args.into_iter().chain(flags.iter().map(|f| f.to_string())).collect();
    // SAFETY of the variable: the support reads the binary from SIDECAR_BIN outside tests; set
    // before any thread of ours reads the environment concurrently.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("SIDECAR_BIN", binary)
    };
    let mut sidecar = Sidecar::start_as_deployed(dir, &args, &[("NAMESPACE", OUR_NAMESPACE)]);
    assert!(
        sidecar.wait_ready(Duration::from_secs(60)).await,
        "csi-pv-controller not ready:\n{}",
        sidecar.log_text()
    );
    sidecar
}
