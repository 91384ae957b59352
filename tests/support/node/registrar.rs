//! The plugin registrar, in place of node-driver-registrar (which the Go module proxy does not
//! serve): peers/registrar serves kubelet's registration API on a socket in kubelet's
//! `plugins_registry`, answering GetInfo with the CSI driver's name and endpoint. kubelet then
//! calls the driver's NodeGetInfo itself and writes the CSINode entry and the Node's topology
//! labels. Its verdict is the registrar's output line `registered` or `refused: <reason>`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

// Only the registrar's own test dials it.
#[allow(unused_imports)]
pub use csi_pv_controller::csi::proto::pluginregistration as proto;

use super::super::control_plane::spawn;
use super::super::peers::peer;

/// What kubelet said about the registration, once it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Registered,
    Refused(String),
}

/// A running registrar; stopped, and its socket removed, when dropped.
pub struct Registrar {
    pub socket: PathBuf,
    pub log: PathBuf,
    child: Child,
}

impl Registrar {
    /// Serves on `socket` for `driver`, whose Node service listens on `endpoint` (a unix socket
    /// path), logging to `log`; returns once the socket exists.
    pub fn start(
        socket: &Path,
        driver: &str,
        endpoint: &Path,
        log: &Path,
    ) -> Result<Registrar, String> {
        if let Some(parent) = socket.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let mut command = Command::new(peer("csi-pv-registrar"));
        command
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--driver={driver}"))
            .arg(format!("--endpoint={}", endpoint.display()));
        let mut child = spawn(command, log)?;
        let start = std::time::Instant::now();
        while !socket.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                return Err(format!("the registrar exited with {status}: {text}"));
            }
            if start.elapsed() > std::time::Duration::from_secs(10) {
                return Err(format!("the registrar made no socket at {}", socket.display()));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(Registrar { socket: socket.to_path_buf(), log: log.to_path_buf(), child })
    }

    /// kubelet's last verdict, if it has called back yet.
    pub fn verdict(&self) -> Option<Verdict> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().rev().find_map(|line| {
            if line == "registered" {
                Some(Verdict::Registered)
            } else {
                line.strip_prefix("refused: ").map(|why| Verdict::Refused(why.to_string()))
            }
        })
    }
}

impl Drop for Registrar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}
