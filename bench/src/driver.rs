//! The CSI driver both stacks talk to: csi-driver-host-path's hostpathplugin (the default, a
//! real driver with a disk behind it), or the project's fake (in memory, answers at once).

use std::path::Path;

use crate::support::fake_driver::{DriverConfig, FakeDriver};
use crate::support::hostpath::{Hostpath, HostpathConfig, TOPOLOGY_KEY};

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

    /// What a real node's kubelet registers for a topology-aware driver: a Node with the
    /// driver's topology label and its CSINode. csi-provisioner needs them to provision an
    /// Immediate claim of such a driver.
    pub async fn register_node(&self, client: &kube::Client, name: &str) -> Result<(), String> {
        use k8s_openapi::api::core::v1::Node;
        use k8s_openapi::api::storage::v1::CSINode;
        use kube::api::{Api, PostParams};
        let BenchDriver::Hostpath(h) = self else {
            return Ok(());
        };
        let id = &h.config.node_id;
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": id, "labels": {TOPOLOGY_KEY: id}},
        }))
        .map_err(|e| e.to_string())?;
        let csi_node: CSINode = serde_json::from_value(serde_json::json!({
            "metadata": {"name": id},
            "spec": {"drivers": [{"name": name, "nodeID": id, "topologyKeys": [TOPOLOGY_KEY]}]},
        }))
        .map_err(|e| e.to_string())?;
        let pp = PostParams::default();
        Api::<Node>::all(client.clone())
            .create(&pp, &node)
            .await
            .map_err(|e| format!("node: {e}"))?;
        Api::<CSINode>::all(client.clone())
            .create(&pp, &csi_node)
            .await
            .map_err(|e| format!("CSINode: {e}"))?;
        Ok(())
    }
}
