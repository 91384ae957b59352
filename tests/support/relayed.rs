//! The mode users run, with faults on the driver's socket: kube-controller-manager's storage
//! controllers, hostpathplugin, and the sidecar with default flags and deploy/ RBAC, talking to
//! the driver through a `CsiRelay`.

#![allow(dead_code)]

use super::cluster::World;
use super::control_plane::{ControlPlane, fresh_plane};
use super::csi_relay::CsiRelay;
use super::hostpath::{Hostpath, HostpathConfig};
use super::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};

/// hostpathplugin and the relay in front of it.
pub struct Relayed {
    pub hostpath: Hostpath,
    pub relay: CsiRelay,
}

/// One test's cluster: a control plane of its own, kube-controller-manager, and the world.
pub struct Beside {
    pub world: World<Relayed>,
    pub kcm: Kcm,
}

impl std::ops::Deref for Beside {
    type Target = World<Relayed>;
    fn deref(&self) -> &World<Relayed> {
        &self.world
    }
}

impl std::ops::DerefMut for Beside {
    fn deref_mut(&mut self) -> &mut World<Relayed> {
        &mut self.world
    }
}

impl Beside {
    /// A fresh plane with kube-controller-manager; hostpathplugin started with `flags` behind a
    /// relay; the sidecar with `args` only (so `--binder=external`, the shipped default); the
    /// driver's node registered as kubelet would.
    pub async fn start(name: &str, flags: &[&str], args: &[&str]) -> Beside {
        Beside::start_as(name, &format!("{name}.csi.test"), flags, args).await
    }

    /// As `start`, hostpathplugin registered as `driver_name` (e.g. a CSI migration target).
    pub async fn start_as(name: &str, driver_name: &str, flags: &[&str], args: &[&str]) -> Beside {
        let plane: &'static ControlPlane = fresh_plane();
        let kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
        let world = World::start_relayed_as(plane, name, driver_name, flags, args).await;
        world.register_node().await;
        Beside { world, kcm }
    }
}

impl World<Relayed> {
    /// As `World::start_hostpath`, with the sidecar talking to the driver through a relay.
    pub async fn start_relayed(
        plane: &'static ControlPlane,
        name: &str,
        flags: &[&str],
        extra_args: &[&str],
    ) -> World<Relayed> {
        Self::start_relayed_as(plane, name, &format!("{name}.csi.test"), flags, extra_args).await
    }

    /// As `start_relayed`, hostpathplugin registered as `driver_name`.
    pub async fn start_relayed_as(
        plane: &'static ControlPlane,
        name: &str,
        driver_name: &str,
        flags: &[&str],
        extra_args: &[&str],
    ) -> World<Relayed> {
        let dir = tempfile::tempdir().unwrap();
        let driver_name = driver_name.to_string();
        let hostpath = Hostpath::start(
            dir.path(),
            HostpathConfig {
                flags: flags.iter().map(|f| f.to_string()).collect(),
                // A node of its own, so that worlds sharing a plane each register theirs.
                node_id: format!("node-{name}"),
                ..HostpathConfig::named(&driver_name)
            },
        )
        .await;
        let relay = CsiRelay::start(&dir.path().join("relay.sock"), &hostpath.socket);
        let endpoint = relay.endpoint();
        let driver = Relayed { hostpath, relay };
        World::assemble(plane, name, dir, driver_name, driver, &endpoint, extra_args).await
    }

    /// The driver's Node and CSINode, as kubelet registers them.
    pub async fn register_node(&self) {
        let registered = self.driver.hostpath.register_node(&self.client).await;
        registered.unwrap_or_else(|e| panic!("cannot register the driver's node: {e}"));
    }

    /// A VolumeAttributesClass `<namespace>-<name>` of this world's driver.
    pub async fn create_attributes_class(&self, name: &str, parameters: serde_json::Value) {
        use k8s_openapi::api::storage::v1::VolumeAttributesClass;
        let class: VolumeAttributesClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{}-{name}", self.namespace)},
            "driverName": self.driver_name, "parameters": parameters
        }))
        .unwrap();
        let classes = kube::Api::<VolumeAttributesClass>::all(self.client.clone());
        classes.create(&kube::api::PostParams::default(), &class).await.unwrap();
    }

    pub fn relay(&self) -> &CsiRelay {
        &self.driver.relay
    }

    pub fn hostpath(&self) -> &Hostpath {
        &self.driver.hostpath
    }

    /// Waits until the driver holds exactly `count` volumes (its state file is the truth);
    /// `what` names the moment in the failure.
    pub async fn driver_holds(&self, count: usize, what: &str, limit: std::time::Duration) {
        let held = super::cluster::eventually(limit, || async {
            (self.hostpath().state_volumes().len() == count).then_some(())
        })
        .await;
        assert!(
            held.is_some(),
            "{what}: the driver holds {:?}, not {count} volumes\nsidecar log:\n{}",
            self.hostpath().state_volumes(),
            self.sidecar.log_text()
        );
    }
}
