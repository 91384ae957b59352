//! Binder rules that only tables checked before, now through the binary against the real
//! kube-apiserver (`--binder=driver`, the fake driver): the bind's write order, the Recycle and
//! unknown reclaim policies, and the default class given to a claim that names none (docs/binder.md
//! §3.5, §3.8, and `binder::Scope::has_claim`). Its own test binary, so its own control plane: a
//! default class there is given to every claim with no class.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use support::cluster::{World, eventually};
use support::fake_driver::DriverConfig;

const LIMIT: Duration = Duration::from_secs(30);

/// A static PV of the world's driver and class `class` (the world's name for it).
fn static_pv(world: &World, name: &str, class: &str, policy: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": format!("{}-{class}", world.namespace),
            "persistentVolumeReclaimPolicy": policy,
            "csi": {"driver": world.driver_name, "volumeHandle": format!("handle-{name}")},
        }
    }))
    .unwrap()
}

/// Waits until PV `name` is Available: a claim made before that would get a new volume.
async fn available(world: &World, name: &str) {
    let available = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt(name).await.ok()??;
        (pv.status?.phase.as_deref() == Some("Available")).then_some(())
    })
    .await;
    assert!(available.is_some(), "PV {name} not Available:\n{}", world.sidecar.log_text());
}

/// A static bind as the audit log shows our writes: the PV's claimRef, the PV's phase, the
/// claim's volumeName, the claim's phase, in that order, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_writes_the_volume_then_the_claim_each_spec_before_its_status() {
    let world = World::start("rows-order", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    let pv = static_pv(&world, "rows-order-pv", "std", "Retain");
    world.create_volume(&pv).await;
    let ours = || -> Vec<String> {
        world
            .plane
            .audited_writes()
            .into_iter()
            .filter(|w| w.user == world.user && w.code < 300)
            .filter(|w| {
                (w.resource == "persistentvolumes" && w.name == "rows-order-pv")
                    || (w.resource == "persistentvolumeclaims" && w.name == "data")
            })
            .map(|w| format!("{} {}", w.resource, w.subresource))
            .collect()
    };
    // The new PV is made Available first; the bind is what comes after.
    available(&world, "rows-order-pv").await;
    let before = ours().len();
    world.create_claim("data", "std", "1Gi", json!({})).await;
    let (_, bound) = world.bound("data", LIMIT).await;
    assert_eq!(bound.metadata.name.as_deref(), Some("rows-order-pv"), "the static PV, no new one");
    let writes = ours().split_off(before);
    assert_eq!(
        writes,
        [
            "persistentvolumes ",
            "persistentvolumes status",
            "persistentvolumeclaims ",
            "persistentvolumeclaims status",
        ],
        "upstream's order, one write each"
    );
}

/// Recycle: the released PV goes Failed with VolumeFailedRecycle, and nothing is deleted. An
/// unknown policy cannot reach the binder: the API refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recycle_fails_the_released_volume_and_an_unknown_policy_is_refused_by_the_api() {
    let world = World::start("rows-recycle", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({"reclaimPolicy": "Retain"})).await;
    let unknown = static_pv(&world, "rows-shred-pv", "std", "Shred");
    let refused = world.volumes().create(&PostParams::default(), &unknown).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "an unknown reclaim policy is refused: {refused:?}"
    );

    let pv = static_pv(&world, "rows-recycle-pv", "std", "Recycle");
    world.create_volume(&pv).await;
    available(&world, "rows-recycle-pv").await;
    world.create_claim("data", "std", "1Gi", json!({})).await;
    let (_, bound) = world.bound("data", LIMIT).await;
    assert_eq!(
        bound.metadata.name.as_deref(),
        Some("rows-recycle-pv"),
        "the static PV, no new one"
    );
    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    let failed = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt("rows-recycle-pv").await.ok()??;
        (pv.status?.phase.as_deref() == Some("Failed")).then_some(())
    })
    .await;
    assert!(failed.is_some(), "the Recycle PV is not Failed:\n{}", world.sidecar.log_text());
    let note = world.volume_event("rows-recycle-pv", "VolumeFailedRecycle", LIMIT).await;
    assert!(note.is_some_and(|n| n.contains("No recycler plugin found")));
    assert!(world.driver.calls_of("DeleteVolume").is_empty(), "a Recycle volume is not deleted");
}

/// A claim that names no class, created before any default class: nothing. Once a default class
/// of our driver appears, the claim is given it and provisioned; a claim that asks for no class
/// at all ("") is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_with_no_class_is_given_our_default_class_when_it_appears() {
    let world = World::start("rows-default", DriverConfig::default(), &[]).await;
    let claim = |name: &str, class: Option<&str>| -> PersistentVolumeClaim {
        let mut spec = json!({
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        });
        if let Some(class) = class {
            spec["storageClassName"] = json!(class);
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let pp = PostParams::default();
    let unnamed = world.claims().create(&pp, &claim("unnamed", None)).await.unwrap();
    assert_eq!(unnamed.spec.and_then(|s| s.storage_class_name), None, "the API gave a class");
    world.claims().create(&pp, &claim("none", Some(""))).await.unwrap();
    // Every version of the claim, from a watch opened before it exists: the first that names a
    // class must come after the default class does (an early assignment shows however brief).
    let params = WatchParams::default().fields("metadata.name=unnamed");
    let stream = world.claims().watch(&params, "0").await.expect("cannot watch the claim");
    let versions = Arc::new(Mutex::new(Vec::new()));
    let sink = versions.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(WatchEvent::Added(c) | WatchEvent::Modified(c)) = event {
                let version = c.metadata.resource_version.clone().unwrap_or_default();
                let class = c.spec.and_then(|s| s.storage_class_name);
                sink.lock().unwrap().push((version.parse::<u64>().unwrap_or(0), class));
            }
        }
    });

    let default = world
        .create_class(
            "default",
            json!({"metadata": {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}}),
        )
        .await;
    let name = default.metadata.name.clone().unwrap();
    let (claim, pv) = world.bound("unnamed", LIMIT).await;
    let class_version = default.metadata.resource_version.unwrap_or_default().parse::<u64>();
    let class_version = class_version.unwrap_or(u64::MAX);
    let first_named = versions.lock().unwrap().iter().find(|(_, c)| c.is_some()).cloned();
    let (given_at, _) = first_named.expect("the watch saw the class given");
    assert!(given_at > class_version, "a class was given at {given_at}, before the default class");
    assert_eq!(claim.spec.and_then(|s| s.storage_class_name).as_deref(), Some(name.as_str()));
    assert_eq!(pv.spec.and_then(|s| s.csi).map(|c| c.driver), Some(world.driver_name.clone()));
    let none = world.claim("none").await.unwrap();
    assert_eq!(none.spec.and_then(|s| s.storage_class_name).as_deref(), Some(""));
    assert_eq!(world.phase("none").await.as_deref(), Some("Pending"));
}
