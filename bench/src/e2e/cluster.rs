//! One cluster for one e2e run, as users deploy the driver: a fresh control plane,
//! kube-controller-manager with the controllers the suite needs, a real node, the snapshot
//! controller, and csi-driver-host-path's plugin StatefulSet started by kubelet, either from its
//! own manifest (upstream's stack) or through deploy/swap/ with our image in the pod, intents on
//! claim finalizers or in deploy/'s journal (tests/support/driver_pod.rs).

use std::path::Path;
use std::process::Child;

use crate::runs::{DriverFile, StackKind};
use crate::support::control_plane::spawn;
use crate::support::driver_pod::{DriverCluster, Extras, OURS, Stack};
use crate::support::peers::peer;

/// The node's name, which is hostpathplugin's node id and its topology value.
pub const NODE: &str = crate::support::node::NODE_NAME;

/// What the suite needs of kube-controller-manager besides the storage, node and pod
/// controllers: generic ephemeral volumes, owner references, namespace deletion and the
/// VolumeAttributesClass finalizer.
const SUITE_CONTROLLERS: &str = "ephemeral-volume-controller,garbage-collector-controller,namespace-controller,volumeattributesclass-protection-controller";

/// A running cluster; everything stops when it is dropped, the node last.
pub struct Cluster {
    _snapshot_controller: Killed,
    pub driver: DriverCluster,
}

/// A child process killed when dropped (std's Child is not).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Cluster {
    /// `file`'s flags go to hostpathplugin after csi-driver-host-path's own, and to the
    /// provisioner of either stack.
    pub async fn start(stack: StackKind, file: DriverFile, dir: &Path) -> Cluster {
        let extras = Extras {
            controllers: SUITE_CONTROLLERS,
            driver_flags: file.driver_flags(),
            provisioner_flags: file.provisioner_flags(),
        };
        let driver = DriverCluster::start_with(stack.pod(), extras, |_| {}).await;
        // The snapshot controller is the cluster's, not the driver's: a process beside the
        // control plane, as kube-controller-manager is.
        let admin = format!("--kubeconfig={}", driver.plane.admin_kubeconfig.display());
        let mut controller = std::process::Command::new(peer("snapshot-controller"));
        controller.arg(&admin).arg("--leader-election=false").arg("--v=3");
        let controller = spawn(controller, &dir.join("snapshot-controller.log"))
            .unwrap_or_else(|e| panic!("{e}"));
        Cluster { _snapshot_controller: Killed(controller), driver }
    }

    /// The provisioner's log (its container's), for a failure's story.
    pub async fn provisioner_log(&self) -> String {
        let container = match self.driver.stack {
            Stack::Upstream => "csi-provisioner",
            Stack::Swap | Stack::SwapJournal => OURS,
        };
        self.driver.logs(container, false).await
    }
}
