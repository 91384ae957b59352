//! The snapshot stack of a real cluster: the VolumeSnapshot CRDs, snapshot-controller and the
//! csi-snapshotter sidecar beside the driver, all of external-snapshotter's release pinned in
//! peers/snapshotter (built by `make peers`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};

use super::cluster::eventually;
use super::control_plane::{ControlPlane, spawn};
use super::peers::{bin_dir, peer};

/// snapshot-controller and csi-snapshotter; killed when dropped.
pub struct Snapshotter {
    children: Vec<Child>,
    pub logs: Vec<PathBuf>,
}

impl Snapshotter {
    /// Installs the CRDs (once per plane) and starts both controllers against `plane` as admin,
    /// csi-snapshotter on the driver socket `socket`. Start it from the test's own thread.
    pub async fn start(plane: &ControlPlane, socket: &Path, dir: &Path) -> Snapshotter {
        install_crds(&plane.client().await).await;
        let kubeconfig = format!("--kubeconfig={}", plane.admin_kubeconfig.display());
        let controller_log = dir.join("snapshot-controller.log");
        let mut controller = Command::new(peer("snapshot-controller"));
        controller.arg(&kubeconfig).arg("--leader-election=false").arg("--v=3");
        let sidecar_log = dir.join("csi-snapshotter.log");
        let mut sidecar = Command::new(peer("csi-snapshotter"));
        sidecar
            .arg(&kubeconfig)
            .arg(format!("--csi-address={}", socket.display()))
            .arg("--leader-election=false")
            .arg("--v=3");
        let children = vec![
            spawn(controller, &controller_log).unwrap_or_else(|e| panic!("{e}")),
            spawn(sidecar, &sidecar_log).unwrap_or_else(|e| panic!("{e}")),
        ];
        Snapshotter { children, logs: vec![controller_log, sidecar_log] }
    }

    pub fn log_text(&self) -> String {
        super::control_plane::logs_text(&self.logs, None)
    }
}

impl Drop for Snapshotter {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The CRDs of the pinned release, created if absent and waited for until Established.
pub async fn install_crds(client: &kube::Client) {
    let dir = bin_dir().join("snapshot-crds");
    assert!(dir.is_dir(), "snapshot CRDs not found at {}: run `make peers` first", dir.display());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in [
        "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
        "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
        "snapshot.storage.k8s.io_volumesnapshots.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("CRD file");
        let value = serde_yaml_ng::Value::deserialize(serde_yaml_ng::Deserializer::from_str(&text))
            .expect("CRD YAML");
        let crd: CustomResourceDefinition =
            serde_json::from_value(serde_json::to_value(value).unwrap()).expect("a CRD");
        let name = crd.metadata.name.clone().unwrap();
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("cannot create CRD {name}: {e}"),
        }
        let established = eventually(Duration::from_secs(30), || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let crd = crds.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
        assert!(established.is_some(), "CRD {name} not Established");
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "snapshot.storage.k8s.io".into(),
        version: "v1".into(),
        api_version: "snapshot.storage.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn snapshots(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &resource("VolumeSnapshot", "volumesnapshots"))
}

pub fn contents(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource("VolumeSnapshotContent", "volumesnapshotcontents"))
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a snapshot object")
}

/// A VolumeSnapshotClass of `driver`.
pub async fn create_class(client: &kube::Client, name: &str, driver: &str) {
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("VolumeSnapshotClass", "volumesnapshotclasses"));
    let class = object(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
        "metadata": {"name": name}, "driver": driver, "deletionPolicy": "Delete"
    }));
    api.create(&PostParams::default(), &class).await.expect("create the VolumeSnapshotClass");
}

/// A VolumeSnapshot of claim `claim`, waited for until it is ready to use; returns it.
pub async fn take(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    class: &str,
    claim: &str,
    limit: Duration,
) -> Option<Value> {
    let api = snapshots(client, namespace);
    let snapshot = object(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"volumeSnapshotClassName": class,
                 "source": {"persistentVolumeClaimName": claim}}
    }));
    api.create(&PostParams::default(), &snapshot).await.expect("create the VolumeSnapshot");
    eventually(limit, || {
        let api = api.clone();
        async move {
            let s = serde_json::to_value(api.get(name).await.ok()?).ok()?;
            (s["status"]["readyToUse"] == json!(true)).then_some(s)
        }
    })
    .await
}
