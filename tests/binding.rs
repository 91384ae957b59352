//! The binder against the real kube-apiserver, with the sidecar as a separate process under
//! deploy/ RBAC, in its default scope (this driver's classes and PVs). Static PVs are named
//! after the test's namespace, so the tests run in parallel.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use support::cluster::{World, eventually, merge};
use support::fake_driver::DriverConfig;

const LIMIT: Duration = Duration::from_secs(30);

fn annotations(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> std::collections::BTreeMap<String, String> {
    meta.annotations.clone().unwrap_or_default()
}

/// A static CSI PV of the world's driver and class "std", Available once the binder sees it.
async fn static_pv(world: &World, name: &str, size: &str, extra: Value) -> String {
    let full = format!("{}-{name}", world.namespace);
    let mut pv = json!({
        "metadata": {"name": full},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": format!("{}-std", world.namespace),
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": world.driver_name, "volumeHandle": format!("static-{full}")},
        }
    });
    merge(&mut pv, extra);
    let pv: PersistentVolume = serde_json::from_value(pv).unwrap();
    world.create_volume(&pv).await;
    // As an admin's PVs are: the binder has seen it and marked it Available (or bound it).
    let seen = eventually(LIMIT, || async {
        matches!(pv_phase(world, &full).await.as_deref(), Some("Available" | "Bound")).then_some(())
    })
    .await;
    assert!(seen.is_some(), "PV {full} never became Available\n{}", world.sidecar.log_text());
    full
}

async fn pv_phase(world: &World, name: &str) -> Option<String> {
    world.volumes().get_opt(name).await.ok()??.status?.phase
}

/// The name of the PV claim `claim` ends bound to.
async fn bound_volume(world: &World, claim: &str) -> String {
    let (_, pv) = world.bound(claim, LIMIT).await;
    pv.metadata.name.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_volumes_bind_by_size_selector_class_access_modes_and_volume_mode() {
    let world = World::start("bind-static", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    world.create_class("silver", json!({})).await;
    let ns = world.namespace.clone();
    let tiny = static_pv(&world, "tiny", "100Mi", json!({})).await;
    let small = static_pv(&world, "small", "2Gi", json!({})).await;
    let big = static_pv(&world, "big", "10Gi", json!({})).await;
    let block = static_pv(&world, "block", "1Gi", json!({"spec": {"volumeMode": "Block"}})).await;
    let rox =
        static_pv(&world, "rox", "1Gi", json!({"spec": {"accessModes": ["ReadOnlyMany"]}})).await;
    let silver = static_pv(
        &world,
        "silver",
        "1Gi",
        json!({"spec": {"storageClassName": format!("{ns}-silver")}}),
    )
    .await;
    let labelled =
        static_pv(&world, "labelled", "5Gi", json!({"metadata": {"labels": {"tier": "gold"}}}))
            .await;

    // Smallest that fits: not tiny (too small), small rather than big or labelled.
    world.create_claim("fs", "std", "1Gi", json!({})).await;
    assert_eq!(bound_volume(&world, "fs").await, small);
    world.create_claim("blk", "std", "1Gi", json!({"spec": {"volumeMode": "Block"}})).await;
    assert_eq!(bound_volume(&world, "blk").await, block);
    world
        .create_claim(
            "sel",
            "std",
            "1Gi",
            json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}}),
        )
        .await;
    assert_eq!(bound_volume(&world, "sel").await, labelled);
    world
        .create_claim("ro", "std", "1Gi", json!({"spec": {"accessModes": ["ReadOnlyMany"]}}))
        .await;
    assert_eq!(bound_volume(&world, "ro").await, rox);
    world.create_claim("sv", "silver", "1Gi", json!({})).await;
    assert_eq!(bound_volume(&world, "sv").await, silver);
    // Nothing fits the last one but big.
    world.create_claim("last", "std", "3Gi", json!({})).await;
    assert_eq!(bound_volume(&world, "last").await, big);
    assert_eq!(pv_phase(&world, &tiny).await.as_deref(), Some("Available"));

    // The binder's annotations and statuses, as upstream writes them.
    let (claim, pv) = world.bound("fs", LIMIT).await;
    let claim_ann = annotations(&claim.metadata);
    assert_eq!(claim_ann.get("pv.kubernetes.io/bind-completed").map(String::as_str), Some("yes"));
    assert_eq!(
        claim_ann.get("pv.kubernetes.io/bound-by-controller").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        annotations(&pv.metadata).get("pv.kubernetes.io/bound-by-controller").map(String::as_str),
        Some("yes")
    );
    let status = claim.status.unwrap();
    assert_eq!(status.capacity.unwrap()["storage"].0, "2Gi");
    assert_eq!(status.access_modes.unwrap(), vec!["ReadWriteOnce".to_string()]);
    let claim_ref = pv.spec.unwrap().claim_ref.unwrap();
    assert_eq!(claim_ref.uid, claim.metadata.uid);
    assert_eq!(pv.status.unwrap().phase.as_deref(), Some("Bound"));
    assert!(world.driver.calls_of("CreateVolume").is_empty(), "nothing is provisioned");

    // explain, from the same decision code, against the live cluster.
    // Larger than the fake driver's 1 TiB maximum: provisioning fails and the claim stays
    // without a PV however fast the sidecar is, so explain sees it unbound.
    world
        .create_claim("huge", "std", "2Ti", json!({"spec": {"accessModes": ["ReadWriteMany"]}}))
        .await;
    let text = support::sidecar::explain(&world.kubeconfig, None, &[&format!("{ns}/huge")]);
    assert!(text.contains("claim bind-static/huge"), "{text}");
    assert!(text.contains(&format!("{tiny}: rejected: access modes [ReadWriteOnce] do not include all of the claim's [ReadWriteMany]")), "{text}");
    assert!(text.contains("access-mode groups searched, in order: none"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prebound_volume_and_prebound_claim() {
    let world = World::start("bind-pre", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    let ns = world.namespace.clone();
    // A PV pre-bound by name to claim "wants" wins over a smaller free one.
    static_pv(&world, "free", "1Gi", json!({})).await;
    let reserved = static_pv(
        &world,
        "reserved",
        "8Gi",
        json!({"spec": {"claimRef": {"name": "wants", "namespace": ns}}}),
    )
    .await;
    world.create_claim("wants", "std", "1Gi", json!({})).await;
    let (claim, pv) = world.bound("wants", LIMIT).await;
    assert_eq!(pv.metadata.name.as_deref(), Some(reserved.as_str()));
    assert!(!annotations(&pv.metadata).contains_key("pv.kubernetes.io/bound-by-controller"));
    assert!(annotations(&claim.metadata).contains_key("pv.kubernetes.io/bound-by-controller"));

    // A claim that names its PV: bind-completed only, and the selector is not checked.
    let named = static_pv(&world, "named", "1Gi", json!({})).await;
    world
        .create_claim(
            "names",
            "std",
            "1Gi",
            json!({"spec": {"volumeName": named, "selector": {"matchLabels": {"x": "y"}}}}),
        )
        .await;
    let (claim, pv) = world.bound("names", LIMIT).await;
    assert_eq!(pv.metadata.name.as_deref(), Some(named.as_str()));
    let ann = annotations(&claim.metadata);
    assert!(ann.contains_key("pv.kubernetes.io/bind-completed"));
    assert!(!ann.contains_key("pv.kubernetes.io/bound-by-controller"));

    // A claim naming a PV that is too small: VolumeMismatch, Pending.
    let small = static_pv(&world, "small", "10Mi", json!({})).await;
    world.create_claim("mismatch", "std", "1Gi", json!({"spec": {"volumeName": small}})).await;
    world.event("mismatch", "VolumeMismatch", "requested PV is too small", LIMIT).await;
    assert_eq!(world.phase("mismatch").await.as_deref(), Some("Pending"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_volume_is_deleted_is_lost() {
    let world = World::start("bind-lost", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    let pv = static_pv(&world, "only", "1Gi", json!({})).await;
    world.create_claim("data", "std", "1Gi", json!({})).await;
    assert_eq!(bound_volume(&world, "data").await, pv);
    world.delete_volume(&pv).await;
    world
        .event(
            "data",
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            LIMIT,
        )
        .await;
    assert_eq!(world.phase("data").await.as_deref(), Some("Lost"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_volumes_retain_stays_delete_goes_through_the_driver() {
    let world = World::start("bind-reclaim", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    let kept = static_pv(&world, "kept", "1Gi", json!({})).await;
    world.create_claim("keep", "std", "1Gi", json!({})).await;
    assert_eq!(bound_volume(&world, "keep").await, kept);
    let doomed = static_pv(
        &world,
        "doomed",
        "5Gi",
        json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    )
    .await;
    world.create_claim("drop", "std", "5Gi", json!({})).await;
    assert_eq!(bound_volume(&world, "drop").await, doomed);
    // Bound with Delete: the deletion finalizer is added, as upstream does for static PVs.
    let has_finalizer = eventually(LIMIT, || async {
        let pv = world.volumes().get(&doomed).await.ok()?;
        pv.metadata
            .finalizers?
            .iter()
            .any(|f| f == "external-provisioner.volume.kubernetes.io/finalizer")
            .then_some(())
    })
    .await;
    assert!(has_finalizer.is_some(), "{}", world.sidecar.log_text());

    world.claims().delete("keep", &DeleteParams::default()).await.unwrap();
    world.claims().delete("drop", &DeleteParams::default()).await.unwrap();
    let deleted = eventually(LIMIT, || async {
        world.volumes().get_opt(&doomed).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(deleted.is_some(), "{}", world.sidecar.log_text());
    let handles = world.driver.deleted_ids();
    assert_eq!(handles, vec![format!("static-{doomed}")]);
    let released = eventually(LIMIT, || async {
        (pv_phase(&world, &kept).await.as_deref() == Some("Released")).then_some(())
    })
    .await;
    assert!(released.is_some(), "{}", world.sidecar.log_text());
    // Retain: after a later pass over it, it is still Released, and nothing was asked of the
    // driver for it.
    world.nudge_volume(&kept, LIMIT).await;
    assert_eq!(pv_phase(&world, &kept).await.as_deref(), Some("Released"));
    assert_eq!(world.driver.deleted_ids(), vec![format!("static-{doomed}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_first_consumer_names_the_pods_waiting_to_be_scheduled() {
    let world = World::start("bind-wffc", DriverConfig::default(), &[]).await;
    world.create_class("late", json!({"volumeBindingMode": "WaitForFirstConsumer"})).await;
    // A free PV fits, but WaitForFirstConsumer leaves unbound PVs to the scheduler.
    static_pv(
        &world,
        "free",
        "1Gi",
        json!({"spec": {"storageClassName": format!("{}-late", world.namespace)}}),
    )
    .await;
    world.create_claim("data", "late", "1Gi", json!({})).await;
    world
        .event(
            "data",
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
            LIMIT,
        )
        .await;
    // No scheduler runs here: the pod stays without a node.
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0"},
        "spec": {
            "containers": [{"name": "app", "image": "busybox"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        }
    }))
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(
        world.client.clone(),
        &world.namespace,
    )
    .create(&PostParams::default(), &pod)
    .await
    .unwrap();
    world
        .event(
            "data",
            "WaitForPodScheduled",
            "waiting for pod web-0 to be scheduled",
            Duration::from_secs(40),
        )
        .await;
    assert_eq!(world.phase("data").await.as_deref(), Some("Pending"));
    assert!(world.driver.calls_of("CreateVolume").is_empty());
}

/// A Delete PV whose claimRef names a claim that never used it (as two binders racing leave it)
/// is released but never deleted: its data is kept, and a Warning says why and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_its_claim_never_used_is_not_deleted() {
    let world = World::start("bind-stray", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    let claim = world.create_claim("data", "std", "1Gi", json!({})).await;
    let used = bound_volume(&world, "data").await;
    let stray = format!("{}-stray", world.namespace);
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": stray, "annotations": {
            "pv.kubernetes.io/provisioned-by": world.driver_name}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": format!("{}-std", world.namespace),
            "persistentVolumeReclaimPolicy": "Delete",
            "csi": {"driver": world.driver_name, "volumeHandle": "stray-handle"},
            "claimRef": {"namespace": world.namespace, "name": "data",
                         "uid": claim.metadata.uid},
        }
    }))
    .unwrap();
    world.create_volume(&pv).await;
    let refused = world.volume_event(&stray, "VolumeDeletionRefused", LIMIT).await;
    let note = refused.unwrap_or_else(|| panic!("no refusal; {}", world.sidecar.log_text()));
    assert!(note.contains("never used it"), "{note}");
    assert_eq!(pv_phase(&world, &stray).await.as_deref(), Some("Released"));
    world.nudge_volume(&stray, LIMIT).await;
    let deleted = world.driver.deleted_ids();
    assert!(deleted.is_empty(), "DeleteVolume sent: {deleted:?}");
    assert!(world.volumes().get_opt(&stray).await.unwrap().is_some());
    assert_eq!(bound_volume(&world, "data").await, used, "the claim keeps its own");
}

/// A claim bound to a PV whose claimRef names another claim (same name, another UID) is Lost
/// with ClaimMisbound, once: no pass after that repeats the decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbound_claim_is_lost_once_without_spinning() {
    let world = World::start("bind-misbound", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    let taken = format!("{}-taken", world.namespace);
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": taken},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": format!("{}-std", world.namespace),
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": world.driver_name, "volumeHandle": "taken-handle"},
            "claimRef": {"namespace": world.namespace, "name": "data",
                         "uid": "00000000-0000-0000-0000-000000000001"},
        }
    }))
    .unwrap();
    world.create_volume(&pv).await;
    world
        .create_claim(
            "data",
            "std",
            "1Gi",
            json!({"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                   "spec": {"volumeName": taken}}),
        )
        .await;
    world
        .event(
            "data",
            "ClaimMisbound",
            "Two claims are bound to the same volume, this one is bound incorrectly",
            LIMIT,
        )
        .await;
    assert_eq!(world.phase("data").await.as_deref(), Some("Lost"));
    // Nothing more happens to it: no write to the claim, the event said once (a repeat would
    // raise its count).
    let version = || async { world.claim("data").await.and_then(|c| c.metadata.resource_version) };
    let misbound = || async {
        let api: Api<Event> = Api::namespaced(world.client.clone(), &world.namespace);
        let events = api.list(&Default::default()).await.unwrap().items;
        let said = events.into_iter().filter(|e| e.reason.as_deref() == Some("ClaimMisbound"));
        said.map(|e| e.series.map_or(1, |s| s.count)).sum::<i32>()
    };
    // A later pass over it, done: our label is still the last write to it.
    let ours = world.nudge_claim("data", LIMIT).await;
    assert_eq!(misbound().await, 1, "ClaimMisbound said once");
    assert_eq!(
        version().await,
        ours,
        "the Lost claim is left alone:\n{}",
        world.sidecar.log_text()
    );
}

/// A settled pair is not walked by the periodic pass, yet a change to one side still reaches the
/// other: when an admin points a Bound PV at another claim, the watch queues the PV and the new
/// claim only, and the claim it was settled with is judged again at the next pass (marked through
/// the PV's old claimRef) and is Lost with ClaimMisbound, long before the full resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_claim_hears_of_its_volume_moving_to_another_claim() {
    let world =
        World::start("bind-moved", DriverConfig::default(), &["--pvclaimbinder-sync-period=2s"])
            .await;
    world.create_class("std", json!({})).await;
    world.create_claim("mine", "std", "1Gi", json!({})).await;
    let (_, pv) = world.bound("mine", LIMIT).await;
    let name = pv.metadata.name.clone().unwrap_or_default();
    // Two periodic passes: the pair is settled and no longer looked at.
    world.sidecar.periodic_passes(2, LIMIT).await;
    let moved = json!({"spec": {
        "persistentVolumeReclaimPolicy": "Retain",
        "claimRef": {"name": "other", "uid": "00000000-0000-0000-0000-000000000002"}
    }});
    world
        .volumes()
        .patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&moved))
        .await
        .unwrap();
    let text = "Two claims are bound to the same volume, this one is bound incorrectly";
    world.event("mine", "ClaimMisbound", text, Duration::from_secs(20)).await;
    assert_eq!(world.phase("mine").await.as_deref(), Some("Lost"));
}

/// A claim bound to a PV of a VolumeAttributesClass reports that class as its current one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_records_the_volume_attributes_class() {
    let world = World::start("bind-vac", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    let gold =
        static_pv(&world, "gold", "1Gi", json!({"spec": {"volumeAttributesClassName": "gold"}}))
            .await;
    world
        .create_claim("data", "std", "1Gi", json!({"spec": {"volumeAttributesClassName": "gold"}}))
        .await;
    assert_eq!(bound_volume(&world, "data").await, gold);
    let claim = world.claim("data").await.unwrap();
    assert_eq!(
        claim.status.and_then(|s| s.current_volume_attributes_class_name).as_deref(),
        Some("gold")
    );
}

/// A claim that stays Pending repeats its event on every pass: one Event object whose count
/// grows, from the very first repeats (two passes right after start used to make two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_one_event_with_a_count() {
    let world =
        World::start("bind-fold", DriverConfig::default(), &["--pvclaimbinder-sync-period=1s"])
            .await;
    world.create_class("late", json!({"volumeBindingMode": "WaitForFirstConsumer"})).await;
    world.create_claim("data", "late", "1Gi", json!({})).await;
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(world.client.clone(), &world.namespace);
    let folded = eventually(LIMIT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        let mine: Vec<_> = list
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some("data")
                    && e.reason.as_deref() == Some("WaitForFirstConsumer")
            })
            .collect();
        (mine.iter().map(|e| e.count.unwrap_or(1)).sum::<i32>() >= 3).then_some(mine)
    })
    .await
    .unwrap_or_else(|| panic!("the event did not repeat\n{}", world.sidecar.log_text()));
    assert_eq!(folded.len(), 1, "one Event object: {folded:?}");
    let event = &folded[0];
    assert!(event.count.unwrap_or(1) >= 3);
    assert_eq!(
        event.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("persistentvolume-controller")
    );
}
