//! kube-controller-manager beside a test's control plane, as every real cluster runs it.

#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command};

use super::control_plane::{ControlPlane, spawn};
use super::peers::peer;

/// kube-controller-manager as in every cluster: the PV binder, the expander and both protection
/// controllers, against `plane` as admin. Killed when dropped (and when the test binary exits).
/// Start it from the test's own thread: the process dies with the thread that spawned it.
pub struct Kcm {
    child: Child,
    pub log: PathBuf,
}

/// Its four storage controllers, by their names since v1.36.
pub const KCM_STORAGE_CONTROLLERS: &str = "persistentvolume-binder-controller,persistentvolume-expander-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller";

impl Kcm {
    pub fn start(plane: &ControlPlane, controllers: &str) -> Kcm {
        Self::start_with(plane, controllers, &[])
    }

    /// As `start`, with extra flags (e.g. `--pvclaimbinder-sync-period=1s`).
    pub fn start_with(plane: &ControlPlane, controllers: &str, extra: &[&str]) -> Kcm {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = plane.dir.join(format!("kube-controller-manager-{n}.log"));
        let mut command = Command::new(peer("kube-controller-manager"));
        command
            .arg(format!("--kubeconfig={}", plane.admin_kubeconfig.display()))
            .arg(format!("--controllers={controllers}"))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--use-service-account-credentials=false")
            .arg("--v=2")
            .args(extra);
        let child = spawn(command, &log).unwrap_or_else(|e| panic!("{e}"));
        Kcm { child, log }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// kill -9 (it is started again with `start`).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Kcm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
