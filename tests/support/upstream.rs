//! The Go sidecars we replace, csi-provisioner and csi-resizer (the versions `make peers`
//! builds), on the driver's own socket as csi-driver-host-path runs them; killed when dropped.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Child;

use super::control_plane::{logs_text, spawn};
use super::peers::peer;

/// What csi-provisioner alone (and csi-resizer alone) gets beyond csi-driver-host-path's args.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    pub provisioner_args: Vec<String>,
    pub provisioner_env: Vec<(String, String)>,
    pub resizer_args: Vec<String>,
}

pub struct Upstream {
    children: Vec<Child>,
    logs: Vec<PathBuf>,
}

impl Upstream {
    /// Both sidecars with csi-driver-host-path's own args, `common` added to each; their logs
    /// go to `dir` under `tag` (`<tag>-csi-provisioner.log`).
    pub fn start(
        kubeconfig: &Path,
        socket: &Path,
        dir: &Path,
        tag: &str,
        common: &[&str],
    ) -> Upstream {
        Self::start_with(kubeconfig, socket, dir, tag, common, &Extra::default())
    }

    /// As `start`, with `extra` args and environment for csi-provisioner alone (e.g.
    /// `--enable-capacity`, which csi-resizer refuses, and its NAMESPACE).
    pub fn start_with(
        kubeconfig: &Path,
        socket: &Path,
        dir: &Path,
        tag: &str,
        common: &[&str],
        extra: &Extra,
    ) -> Upstream {
        let mut children = Vec::new();
        let mut logs = Vec::new();
        let provisioner: Vec<&str> = ["--feature-gates=Topology=true", "--extra-create-metadata"]
            .into_iter()
            .chain(extra.provisioner_args.iter().map(String::as_str))
            .collect();
        let resizer: Vec<&str> = ["--handle-volume-inuse-error=false"]
            .into_iter()
            .chain(extra.resizer_args.iter().map(String::as_str))
            .collect();
        for (name, own, env) in [
            ("csi-provisioner", &provisioner[..], &extra.provisioner_env[..]),
            ("csi-resizer", &resizer[..], &[][..]),
        ] {
            let mut command = std::process::Command::new(peer(name));
            command
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .arg(format!("--csi-address={}", socket.display()))
                .arg("--v=5")
                .args(own)
                .args(common)
                .envs(env.iter().map(|(k, v)| (k, v)));
            let log = dir.join(format!("{tag}-{name}.log"));
            children.push(spawn(command, &log).unwrap_or_else(|e| panic!("{e}")));
            logs.push(log);
        }
        Upstream { children, logs }
    }

    /// The last lines of both logs, for a failure's story.
    pub fn log_text(&self) -> String {
        logs_text(&self.logs, Some(60))
    }

    /// How many calls of the CSI `method` (e.g. `CreateVolume`) both sidecars sent the driver,
    /// as their `-v=5` logs record each gRPC call.
    pub fn calls(&self, method: &str) -> usize {
        let path = format!("/csi.v1.Controller/{method}\"");
        self.logs
            .iter()
            .map(|log| std::fs::read_to_string(log).unwrap_or_default())
            .map(|text| {
                text.lines().filter(|l| l.contains("\"GRPC call\"") && l.contains(&path)).count()
            })
            .sum()
    }

    /// Kills both at once, as a deleted pod's containers end.
    pub fn kill(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.kill();
    }
}
