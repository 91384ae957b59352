//! The CSI driver both stacks talk to: csi-driver-host-path's hostpathplugin (the default, a
//! real driver with a disk behind it), or the project's fake (in memory, answers at once).

use std::path::Path;

use crate::support::fake_driver::{DriverConfig, FakeDriver};
use crate::support::hostpath::{Hostpath, HostpathConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverKind {
    Hostpath,
    Fake,
}

pub enum BenchDriver {
    Hostpath(Box<Hostpath>),
    Fake(FakeDriver),
}

impl BenchDriver {
    /// Starts the driver named `name` with its socket under `dir`. hostpathplugin runs with
    /// `--disable-node-expansion`, so that an expansion ends in the controller for both stacks
    /// (no kubelet runs here to do the node's part).
    pub async fn start(kind: DriverKind, name: &str, dir: &Path) -> Result<BenchDriver, String> {
        Ok(match kind {
            DriverKind::Hostpath => BenchDriver::Hostpath(Box::new(
                Hostpath::start(
                    dir,
                    HostpathConfig {
                        flags: vec!["--disable-node-expansion".into()],
                        ..HostpathConfig::named(name)
                    },
                )
                .await,
            )),
            DriverKind::Fake => {
                let config = DriverConfig {
                    name: name.into(),
                    node_expansion_required: false,
                    ..DriverConfig::default()
                };
                BenchDriver::Fake(
                    FakeDriver::start(&dir.join("csi.sock"), config)
                        .await
                        .map_err(|e| format!("driver: {e}"))?,
                )
            }
        })
    }

    pub fn socket(&self) -> &Path {
        match self {
            BenchDriver::Hostpath(h) => &h.socket,
            BenchDriver::Fake(f) => f.socket(),
        }
    }

    /// The driver's own process; None for the fake, which runs inside the benchmark.
    pub fn pid(&self) -> Option<u32> {
        match self {
            BenchDriver::Hostpath(h) => h.pid(),
            BenchDriver::Fake(_) => None,
        }
    }

    /// How many volumes the driver holds, by its own account.
    pub async fn volume_count(&self) -> Result<usize, String> {
        match self {
            BenchDriver::Hostpath(h) => h
                .client()
                .list_volumes()
                .await
                .map(|v| v.len())
                .map_err(|e| format!("ListVolumes: {e}")),
            BenchDriver::Fake(f) => Ok(f.volume_count()),
        }
    }

    /// The Node and CSINode a real node's kubelet registers for a topology-aware driver:
    /// csi-provisioner needs them to provision an Immediate claim of such a driver.
    pub async fn register_node(&self, client: &kube::Client) -> Result<(), String> {
        match self {
            BenchDriver::Hostpath(h) => h.register_node(client).await,
            BenchDriver::Fake(_) => Ok(()),
        }
    }
}
