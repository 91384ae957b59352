//! Storage capacity tracking against the real driver: hostpathplugin with simulated capacity
//! per storage kind (`--capacity=slow=10Gi --capacity=fast=100Gi`), the sidecar with
//! `--enable-capacity` as csi-driver-host-path's distributed example runs csi-provisioner
//! (owner: the pod), beside kube-controller-manager. CSIStorageCapacity objects appear for the
//! delayed classes in the node's segment, follow a provisioned volume, and go with their class.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use support::cluster::{World, eventually};
use support::control_plane::fresh_plane;
use support::hostpath::{Hostpath, TOPOLOGY_KEY};
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use support::sidecar::Sidecar;

const LIMIT: Duration = Duration::from_secs(60);
const POD: &str = "csi-hostpathplugin-0";

/// class → (capacity, maximumVolumeSize, node topology, owner kind/name) of our objects.
type Published = BTreeMap<String, (String, String, String, String)>;

async fn published(world: &World<Hostpath>) -> Published {
    let api: Api<CSIStorageCapacity> = Api::namespaced(world.client.clone(), &world.namespace);
    let selector = format!(
        "csi.storage.k8s.io/drivername={},csi.storage.k8s.io/managed-by=external-provisioner",
        world.driver_name
    );
    api.list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            let owner = c
                .metadata
                .owner_references
                .unwrap_or_default()
                .first()
                .map(|o| format!("{}/{}", o.kind, o.name))
                .unwrap_or_default();
            (
                c.storage_class_name,
                (
                    c.capacity.map(|q| q.0).unwrap_or_default(),
                    c.maximum_volume_size.map(|q| q.0).unwrap_or_default(),
                    serde_json::to_string(&c.node_topology).unwrap(),
                    owner,
                ),
            )
        })
        .collect()
}

async fn published_until(
    world: &World<Hostpath>,
    what: &str,
    check: impl Fn(&Published) -> bool,
) -> Published {
    let found = eventually(LIMIT, || async {
        let p = published(world).await;
        check(&p).then_some(p)
    })
    .await;
    match found {
        Some(p) => p,
        None => panic!(
            "{what}: never; published {:?}\n{}",
            published(world).await,
            world.sidecar.log_text()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capacity_is_published_per_class_and_segment() {
    let plane = fresh_plane();
    let _kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
    let mut world = World::start_hostpath(
        plane,
        "capacity",
        &["--capacity=slow=10Gi", "--capacity=fast=100Gi"],
        &[],
    )
    .await;
    world.register_node().await;
    let ns = world.namespace.clone();
    let late = |kind: &str| json!({"volumeBindingMode": "WaitForFirstConsumer", "parameters": {"kind": kind}});
    world.create_class("slow", late("slow")).await;
    world.create_class("fast", late("fast")).await;
    world.create_class("now", json!({"parameters": {"kind": "fast"}})).await;
    // The pod the sidecar runs in, as kubelet would have it: the objects' owner (level 0).
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": POD},
        "spec": {"containers": [{"name": "csi-pv-controller", "image": "csi-pv-controller:v0.1.0"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(world.client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();

    // The sidecar again, now publishing capacity.
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    let mut args = world.args.clone();
    args.extend(
        [
            "--enable-capacity",
            "--capacity-ownerref-level=0",
            "--capacity-poll-interval=2s",
            "--capacity-threads=2",
            "--kube-api-capacity-qps=50",
            "--kube-api-capacity-burst=50",
        ]
        .map(String::from),
    );
    world.sidecar = Sidecar::start_with_env(
        world.dir.path(),
        &args,
        &[("NAMESPACE", ns.as_str()), ("POD_NAME", POD)],
    );
    assert!(world.sidecar.wait_ready(LIMIT).await, "{}", world.sidecar.log_text());

    let topology =
        serde_json::to_string(&json!({"matchLabels": {TOPOLOGY_KEY: "node-1"}})).unwrap();
    let first = published_until(&world, "two objects", |p| p.len() == 2).await;
    assert_eq!(
        first,
        BTreeMap::from([
            (
                format!("{ns}-fast"),
                ("100Gi".into(), "100Gi".into(), topology.clone(), format!("Pod/{POD}"))
            ),
            (
                format!("{ns}-slow"),
                ("10Gi".into(), "10Gi".into(), topology.clone(), format!("Pod/{POD}"))
            ),
        ]),
        "the delayed classes only, in the node's segment"
    );

    // A volume of the slow kind: its capacity follows.
    world
        .create_claim(
            "data",
            "slow",
            "1Gi",
            json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-1"}}}),
        )
        .await;
    world.bound("data", LIMIT).await;
    published_until(&world, "slow down to 9Gi", |p| {
        p.get(&format!("{ns}-slow")).is_some_and(|c| c.0 == "9Gi")
    })
    .await;

    // An object nothing wants (a class that never was) and a class that goes: both deleted.
    let stray: CSIStorageCapacity = serde_json::from_value(json!({
        "metadata": {"generateName": "csisc-", "labels": {
            "csi.storage.k8s.io/drivername": world.driver_name,
            "csi.storage.k8s.io/managed-by": "external-provisioner"}},
        "storageClassName": "ghost", "capacity": "1Gi"
    }))
    .unwrap();
    Api::<CSIStorageCapacity>::namespaced(world.client.clone(), &ns)
        .create(&PostParams::default(), &stray)
        .await
        .unwrap();
    Api::<StorageClass>::all(world.client.clone())
        .delete(&format!("{ns}-fast"), &DeleteParams::default())
        .await
        .unwrap();
    let last = published_until(&world, "only slow left", |p| {
        p.len() == 1 && p.contains_key(&format!("{ns}-slow"))
    })
    .await;
    assert_eq!(last[&format!("{ns}-slow")].0, "9Gi");
    // csi-provisioner's gauges, as of the last round: one wanted, present, nothing obsolete.
    let settled = eventually(LIMIT, || async {
        let text = support::control_plane::http_get(world.sidecar.http_port, "/metrics")?;
        [
            "csistoragecapacities_desired_goal 1",
            "csistoragecapacities_desired_current 1",
            "csistoragecapacities_obsolete 0",
        ]
        .iter()
        .all(|line| text.lines().any(|l| l == *line))
        .then_some(())
    })
    .await;
    assert!(
        settled.is_some(),
        "{:?}",
        support::control_plane::http_get(world.sidecar.http_port, "/metrics")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("csistorage"))
            .collect::<Vec<_>>()
    );

    // With --capacity-for-immediate-binding, the Immediate class is published too.
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    args.push("--capacity-for-immediate-binding".to_string());
    world.sidecar = Sidecar::start_with_env(
        world.dir.path(),
        &args,
        &[("NAMESPACE", ns.as_str()), ("POD_NAME", POD)],
    );
    assert!(world.sidecar.wait_ready(LIMIT).await, "{}", world.sidecar.log_text());
    let both = published_until(&world, "the Immediate class too", |p| p.len() == 2).await;
    assert_eq!(
        both.get(&format!("{ns}-now")).map(|c| (c.0.as_str(), c.2.as_str())),
        Some(("100Gi", topology.as_str())),
        "{both:?}"
    );
}
