//! One cluster for one run of the pod scenarios: a fresh control plane; hostpathplugin behind a
//! relay that times every CSI call; a real node (containerd, kubelet, kube-scheduler) with the
//! driver registered through the relay; csi-attacher; and one stack: upstream's
//! (kube-controller-manager's binder and expander, csi-provisioner, csi-resizer) or ours beside
//! kube-controller-manager's binder, as deploy/ runs it.
//!
//! The throttle applies to the storage components, the attacher included; kubelet and
//! kube-scheduler keep their own defaults in every run, as the node is the same for both stacks.

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::objects::{IMMEDIATE_CLASS, WFFC_CLASS, class};
use crate::stack::{Placement, Proc, Stack, StackKind, Throttle};
use crate::support::control_plane::{OwnedPlane, PlaneOptions};
use crate::support::csi_relay::CsiRelay;
use crate::support::hostpath::{Hostpath, HostpathConfig};
use crate::support::node::{NODE_NAME, Node};
use crate::support::peers::peer;

pub const DRIVER: &str = "hostpath.csi.k8s.io";
pub const NAMESPACE: &str = "pods";

/// kube-controller-manager's controllers a node's pods need besides the storage ones: the
/// node's lifecycle and attach/detach, StatefulSets, generic ephemeral volumes, owner
/// references (a set's claims go with it) and the namespace's default ServiceAccount.
const NODE_CONTROLLERS: [&str; 6] = [
    "node-lifecycle-controller",
    "persistentvolume-attach-detach-controller",
    "statefulset-controller",
    "ephemeral-volume-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
];

/// A running cluster. Fields drop in order: the stack and attacher, the node (its pods and
/// mounts), the relay, the driver, then the control plane.
pub struct Cluster {
    pub stack: Stack,
    _attacher: Proc,
    pub node: Node,
    pub relay: CsiRelay,
    pub driver: Hostpath,
    pub client: kube::Client,
    _plane: OwnedPlane,
}

impl Cluster {
    /// Starts everything from the calling (main) thread, which the processes die with.
    pub fn start(
        runtime: &tokio::runtime::Runtime,
        kind: StackKind,
        throttle: Throttle,
        sidecar: &Path,
    ) -> Result<Cluster, String> {
        let plane = OwnedPlane::start(PlaneOptions {
            audit: false,
            protection_finalizers: true,
            service_accounts: false,
        })?;
        let dir = plane.plane.dir.join("run");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (client, driver, relay, node) = runtime.block_on(async {
            let client = plane.plane.client().await;
            let namespace: Namespace =
                serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))
                    .map_err(|e| e.to_string())?;
            Api::<Namespace>::all(client.clone())
                .create(&PostParams::default(), &namespace)
                .await
                .map_err(|e| format!("namespace: {e}"))?;
            let classes: Api<StorageClass> = Api::all(client.clone());
            for (name, wait) in [(IMMEDIATE_CLASS, false), (WFFC_CLASS, true)] {
                classes
                    .create(&PostParams::default(), &class(name, DRIVER, wait)?)
                    .await
                    .map_err(|e| format!("class {name}: {e}"))?;
            }
            csi_driver(&client).await?;
            let config = HostpathConfig {
                driver_name: DRIVER.into(),
                node_id: NODE_NAME.into(),
                flags: vec![],
            };
            let driver = Hostpath::start(&dir, config).await;
            let relay = CsiRelay::start(&dir.join("relay.sock"), &driver.socket);
            let node = Node::start_via(&plane.plane, &driver, &relay.socket).await;
            Ok::<_, String>((client, driver, relay, node))
        })?;
        let placement = Placement {
            socket: &relay.socket,
            dir: &dir,
            journal_root: None,
            extra_controllers: &NODE_CONTROLLERS,
            workers: None,
        };
        let stack = Stack::start(kind, throttle, &plane.plane, sidecar, &placement)?;
        let mut args = vec![
            format!("--kubeconfig={}", plane.plane.admin_kubeconfig.display()),
            format!("--csi-address={}", relay.socket.display()),
            "--leader-election=false".into(),
        ];
        args.extend(throttle.flags(1));
        let attacher = Proc::start("csi-attacher", &peer("csi-attacher"), &args, &dir)?;
        Ok(Cluster { stack, _attacher: attacher, node, relay, driver, client, _plane: plane })
    }

    /// The last lines of the stack's and the node's logs, for a failure's story.
    pub fn logs(&self) -> String {
        let stack: Vec<String> = self
            .stack
            .procs
            .iter()
            .map(|p| format!("--- {}:\n{}", p.name, crate::support::control_plane::tail(&p.log)))
            .collect();
        format!("{}\n{}", stack.join("\n"), self.node.logs())
    }

    /// How many volumes the driver holds, by its own account.
    pub async fn driver_volumes(&self) -> Result<usize, String> {
        self.driver
            .client()
            .list_volumes()
            .await
            .map(|v| v.len())
            .map_err(|e| format!("ListVolumes: {e}"))
    }
}

/// csi-driver-host-path's CSIDriver: attaching required (the default), pod info on mount,
/// fsGroup applied by kubelet.
async fn csi_driver(client: &kube::Client) -> Result<(), String> {
    let object: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": DRIVER},
        "spec": {
            "volumeLifecycleModes": ["Persistent"],
            "podInfoOnMount": true,
            "fsGroupPolicy": "File",
        },
    }))
    .map_err(|e| e.to_string())?;
    Api::<CSIDriver>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .map(|_| ())
        .map_err(|e| format!("CSIDriver: {e}"))
}
