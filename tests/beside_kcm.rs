//! csi-pv-controller as users run it: beside hostpathplugin, in a cluster whose
//! kube-controller-manager runs its PV binder, expander and both protection controllers (every
//! managed cluster does). kube-controller-manager binds; we provision what it hands to the
//! driver, grow what it bound and delete what it released. Each test has a control plane of its
//! own, so that only one kube-controller-manager acts on it.
//!
//! Watched throughout: no PV is ever Bound to a claim that names another PV (a double bind), no
//! volume is made for a claim a static PV could serve, no volume is deleted that its claim never
//! used, and no Warning event comes from the two controllers' writes meeting.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use csi_pv_controller::model::VolumeExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use support::cluster::{INTENT_JOURNAL, World, eventually, journal_entries};
use support::control_plane::fresh_plane;
use support::hostpath::Hostpath;
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use support::watchdog::DoubleBindWatch;

const LIMIT: Duration = Duration::from_secs(120);

/// A static PV of `world`'s driver and class `class`, already pointing at `handle`. With
/// `provisioned`, it carries `pv.kubernetes.io/provisioned-by` as if the driver had made it.
fn static_pv(
    world: &World<Hostpath>,
    name: &str,
    class: &str,
    handle: &str,
    policy: &str,
) -> Value {
    let mut pv = json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": policy,
            "csi": {"driver": world.driver_name, "volumeHandle": handle},
        }
    });
    if policy == "Delete" {
        pv["metadata"]["annotations"] =
            json!({"pv.kubernetes.io/provisioned-by": world.driver_name});
    }
    pv
}

use serde_json::Value;

/// Warning events in the world's namespace and on PVs: (object, reason, note).
async fn warnings(world: &World<Hostpath>) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    // PV events live in "default", beside the apiserver's own (its Service IP repair loop may
    // warn about the "kubernetes" Service at any time): from there, only those about PVs count.
    for (api, only_volumes) in [
        (Api::<Event>::namespaced(world.client.clone(), &world.namespace), false),
        (Api::<Event>::namespaced(world.client.clone(), "default"), true),
    ] {
        for e in api.list(&ListParams::default()).await.unwrap().items {
            let about_volume =
                e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("PersistentVolume");
            if e.type_.as_deref() == Some("Warning") && (about_volume || !only_volumes) {
                found.push((
                    e.regarding.and_then(|r| r.name).unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                ));
            }
        }
    }
    found
}

/// The reporting controllers of the namespace's events, by reason.
async fn event_sources(world: &World<Hostpath>) -> BTreeMap<String, BTreeSet<String>> {
    let mut sources: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let api = Api::<Event>::namespaced(world.client.clone(), &world.namespace);
    for e in api.list(&ListParams::default()).await.unwrap().items {
        sources
            .entry(e.reason.unwrap_or_default())
            .or_default()
            .insert(e.reporting_controller.unwrap_or_default());
    }
    sources
}

/// Writes to claims and PVs, by writer: ours (the sidecar's account), kube-controller-manager's
/// (by its User-Agent); the test's own creates and deletes are neither.
struct Writes {
    ours: usize,
    kcm: usize,
    conflicts_ours: usize,
    conflicts_kcm: usize,
    our_agents: BTreeSet<String>,
}

fn writes(world: &World<Hostpath>) -> Writes {
    let mut w = Writes {
        ours: 0,
        kcm: 0,
        conflicts_ours: 0,
        conflicts_kcm: 0,
        our_agents: BTreeSet::new(),
    };
    for write in world.plane.audited_writes() {
        let state =
            write.resource == "persistentvolumeclaims" || write.resource == "persistentvolumes";
        if write.user == world.user {
            w.our_agents.insert(write.user_agent.clone());
            if state {
                w.ours += 1;
                w.conflicts_ours += usize::from(write.code == 409);
            }
        } else if write.user_agent.starts_with("kube-controller-manager/") && state {
            w.kcm += 1;
            w.conflicts_kcm += usize::from(write.code == 409);
        }
    }
    w
}

/// kube-controller-manager's writes, by verb, resource and answer code: "update
/// persistentvolumeclaims 200" and so on.
fn binder_requests(world: &World<Hostpath>) -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    for write in world.plane.audited_writes() {
        if write.user_agent.starts_with("kube-controller-manager/") {
            let resource = if write.subresource.is_empty() {
                write.resource
            } else {
                format!("{}/{}", write.resource, write.subresource)
            };
            *by.entry(format!("{} {resource} {}", write.verb, write.code)).or_default() += 1;
        }
    }
    by
}

async fn claims_bound(
    world: &World<Hostpath>,
    names: &[String],
) -> BTreeMap<String, PersistentVolumeClaim> {
    let found = eventually(LIMIT, || async {
        let list = world.claims().list(&ListParams::default()).await.ok()?;
        let bound: BTreeMap<String, PersistentVolumeClaim> = list
            .items
            .into_iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
            .collect();
        names.iter().all(|n| bound.contains_key(n)).then_some(bound)
    })
    .await;
    found.unwrap_or_else(|| {
        panic!("not every claim Bound within {LIMIT:?}; sidecar log:\n{}", world.sidecar.log_text())
    })
}

async fn delete_all_claims(world: &World<Hostpath>) {
    world
        .claims()
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let gone = eventually(LIMIT, || async {
        world.claims().list(&ListParams::default()).await.ok().filter(|l| l.items.is_empty())
    })
    .await;
    assert!(gone.is_some(), "claims stuck in deletion: {:?}", world.claims_left().await);
}

/// 50 claims against 50 Available static PVs of the driver's class, half Retain, half Delete:
/// kube-controller-manager binds each claim to one PV, we create no volume, and when the claims
/// go, exactly the Delete PVs' volumes are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn static_pvs_are_bound_once_and_only_their_volumes_deleted() {
    const N: usize = 50;
    let plane = fresh_plane();
    // Sidecar first, then kube-controller-manager.
    let world = World::start_hostpath(plane, "static", &[], &[]).await;
    let kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
    world.register_node().await;
    let class = world.create_class("fast", json!({})).await;
    let class_name = class.metadata.name.clone().unwrap();
    let mut handles = BTreeMap::new();
    for i in 0..N {
        let name = format!("{}-static-{i:02}", world.namespace);
        let handle = world.driver.make_volume(&name).await;
        let policy = if i % 2 == 0 { "Retain" } else { "Delete" };
        let pv: PersistentVolume =
            serde_json::from_value(static_pv(&world, &name, &class_name, &handle, policy)).unwrap();
        world.create_volume(&pv).await;
        handles.insert(name, (handle, policy));
    }
    let available = eventually(LIMIT, || async {
        let pvs = world.driver_volumes_in_api().await;
        (pvs.iter()
            .filter(|pv| pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available"))
            .count()
            == N)
            .then_some(())
    })
    .await;
    assert!(
        available.is_some(),
        "kube-controller-manager did not make the PVs Available:\n{}",
        kcm.log_text()
    );
    let before = world.driver.volume_ids().await;
    assert_eq!(before.len(), N);

    let watch = DoubleBindWatch::start(world.client.clone(), &world.namespace);
    let names = world.create_claims("claim", "fast", N).await;
    let bound = claims_bound(&world, &names).await;
    let used: BTreeSet<String> =
        bound.values().filter_map(|c| c.spec.as_ref()?.volume_name.clone()).collect();
    assert_eq!(used.len(), N, "every claim on a PV of its own");
    assert!(used.iter().all(|v| handles.contains_key(v)), "bound to static PVs only: {used:?}");
    assert_eq!(world.driver.volume_ids().await, before, "no volume created while static PVs match");

    delete_all_claims(&world).await;
    let deleted: BTreeSet<String> = handles
        .iter()
        .filter(|(_, (_, policy))| *policy == "Delete")
        .map(|(_, (handle, _))| handle.clone())
        .collect();
    let settled = eventually(LIMIT, || async {
        let left: BTreeSet<String> = world.driver.volume_ids().await.into_iter().collect();
        let pvs = world.driver_volumes_in_api().await;
        let released = pvs
            .iter()
            .all(|pv| pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released"));
        (left.intersection(&deleted).next().is_none() && pvs.len() == N / 2 && released)
            .then_some((left, pvs))
    })
    .await;
    let (left, pvs) = settled.unwrap_or_else(|| {
        panic!("Delete PVs not reclaimed; sidecar log:\n{}", world.sidecar.log_text())
    });
    let kept: BTreeSet<String> = handles
        .iter()
        .filter(|(_, (_, policy))| *policy == "Retain")
        .map(|(_, (handle, _))| handle.clone())
        .collect();
    assert_eq!(left, kept, "exactly the Delete PVs' volumes are deleted; Retain keeps the rest");
    assert!(
        pvs.iter()
            .all(|pv| pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")),
        "Retain PVs stay Released"
    );

    assert_eq!(watch.stop(), Vec::<String>::new(), "double binds");
    let w = writes(&world);
    println!(
        "static, {N} claims beside kube-controller-manager: writes to claims+PVs ours {} ({} conflicts), kube-controller-manager {} ({} conflicts)",
        w.ours, w.conflicts_ours, w.kcm, w.conflicts_kcm
    );
    // Binding is kube-controller-manager's: ours are the Delete half's deletion finalizer
    // (added once the PV is Bound, as the driver's provisioned PVs carry it), the PV delete,
    // and the finalizer's removal, and Released where we were first (docs/binder.md §5): the
    // one write of ours that can meet a conflict, once per PV at most.
    assert!(w.conflicts_ours <= N, "our conflicts: {}", w.conflicts_ours);
    assert!(w.ours <= N / 2 * 3 + N, "our writes: {}", w.ours);
    assert_eq!(warnings(&world).await, vec![]);
    assert!(
        w.our_agents.iter().all(|a| a.starts_with("csi-pv-controller/v")),
        "User-Agent: {:?}",
        w.our_agents
    );
}

/// Dynamic provisioning, expansion and deletion, kube-controller-manager started first, with 10
/// of the claims created while the sidecar is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamic_lifecycle_with_claims_made_while_down() {
    const UP: usize = 30;
    const DOWN: usize = 10;
    let plane = fresh_plane();
    let kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
    // As deploy/ runs it: intents in the journal, not a claim finalizer.
    let mut world = World::start_hostpath(plane, "dynamic", &[], &[INTENT_JOURNAL]).await;
    world.register_node().await;
    world.create_class("fast", json!({"allowVolumeExpansion": true})).await;
    let watch = DoubleBindWatch::start(world.client.clone(), &world.namespace);
    let mut names = world.create_claims("up", "fast", UP).await;
    claims_bound(&world, &names).await;
    // A driver that never refuses sees no limit: every budget stays at --worker-threads (100).
    let metrics = world.sidecar.metrics().await;
    let limits: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("csi_pv_controller_driver_concurrency_limit{"))
        .collect();
    assert!(!limits.is_empty(), "no driver limit exported");
    assert!(limits.iter().all(|l| l.ends_with(" 100.0") || l.ends_with(" 100")), "{limits:?}");
    assert!(!metrics.contains("csi_pv_controller_driver_refusals_total{"), "refusals counted");
    // Events are sent after the pass that queued them: a kill may drop one still queued.
    for name in &names {
        world.event(name, "ProvisioningSucceeded", "Successfully provisioned volume", LIMIT).await;
    }
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    names.extend(world.create_claims("down", "fast", DOWN).await);
    world.kill_and_restart();
    let bound = claims_bound(&world, &names).await;

    // Every claim on the volume made for it, one volume per claim, and the driver agrees.
    let mut handles = BTreeSet::new();
    for claim in bound.values() {
        let uid = claim.metadata.uid.clone().unwrap();
        let volume = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap();
        assert_eq!(volume, format!("pvc-{uid}"));
        let pv = world.volumes().get(&volume).await.unwrap();
        handles.insert(pv.csi_handle().expect("a CSI PV").to_string());
    }
    let ids: BTreeSet<String> = world.driver.volume_ids().await.into_iter().collect();
    assert_eq!(ids, handles, "the driver's volumes are exactly the PVs' volumes");
    assert_eq!(ids.len(), UP + DOWN);
    for name in &names {
        world.event(name, "ProvisioningSucceeded", "Successfully provisioned volume", LIMIT).await;
    }
    // Events name the component upstream sends them from, so filters on sources keep working.
    let sources = event_sources(&world).await;
    let provisioner = format!("{}_", world.driver_name);
    assert!(
        sources["ProvisioningSucceeded"].iter().all(|s| s.starts_with(&provisioner)),
        "{sources:?}"
    );
    assert_eq!(
        sources["ExternalProvisioning"],
        BTreeSet::from(["persistentvolume-controller".to_string()]),
        "the cluster's binder"
    );
    let w = writes(&world);
    let per_claim = (w.ours + w.kcm) as f64 / (UP + DOWN) as f64;
    println!(
        "dynamic, {} claims beside kube-controller-manager: writes to claims+PVs per claim {per_claim:.2} (ours {}, {} conflicts; kube-controller-manager {}, {} conflicts)",
        UP + DOWN,
        w.ours,
        w.conflicts_ours,
        w.kcm,
        w.conflicts_kcm
    );
    println!("kube-controller-manager's requests by kind: {:?}", binder_requests(&world));
    // We finish the binding of the PV we made (docs/binder.md §5): the binder's own writes are
    // its hand-over, one per claim, and the bind it starts in the same instant as ours, which
    // an idle binder sometimes does (both write the same values; the second meets a conflict).
    // Left to the binder, a claim costs it four writes. From 1.37 its pvc-protection controller
    // also writes each claim's `Unused` condition, once, not the binder's.
    let unused = f64::from(u8::from(support::cluster::kcm_writes_unused(&world.client).await));
    let n = (UP + DOWN) as f64;
    let binder = w.kcm as f64 / n - unused;
    assert!((1.0..=2.0).contains(&binder), "binder writes per claim {binder}");
    // Ours: the PV, its phase, the claim and its status, but where the binder came first.
    assert!(w.ours * 2 >= 7 * (UP + DOWN), "our writes: {}", w.ours);
    assert!(w.conflicts_ours + w.conflicts_kcm <= (UP + DOWN) / 2, "conflicts");
    // Upstream's five (the hand-over annotation, the PV, the binder's three), and the
    // conflicts. The intent that makes a kill -9 between CreateVolume and the PV leak nothing
    // is a line in the journal, no write. From 1.37, pvc-protection's `Unused` besides.
    assert!(per_claim <= 6.0 + unused, "{per_claim} writes per claim");
    assert_eq!(journal_entries(world.dir.path()), Vec::<String>::new());

    // Expansion: ControllerExpandVolume, then the node's part is pending (no kubelet here).
    let grown: Vec<&String> = names.iter().take(10).collect();
    for name in &grown {
        world
            .claims()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
            )
            .await
            .unwrap();
    }
    for name in &grown {
        let pending = eventually(LIMIT, || async {
            let claim = world.claim(name).await?;
            let pv =
                world.volumes().get(claim.spec.as_ref()?.volume_name.as_deref()?).await.ok()?;
            let capacity = pv.spec.as_ref()?.capacity.as_ref()?.get("storage")?.0.clone();
            let conditions: Vec<String> = claim
                .status
                .as_ref()?
                .conditions
                .iter()
                .flatten()
                .map(|c| c.type_.clone())
                .filter(|t| t != "Unused")
                .collect();
            (capacity == "2Gi" && conditions.contains(&"FileSystemResizePending".to_string()))
                .then_some((conditions, pv))
        })
        .await;
        let Some((conditions, pv)) = pending else {
            panic!("claim {name} not expanded; sidecar log:\n{}", world.sidecar.log_text());
        };
        // As csi-resizer v2.3.0 leaves them on the same driver: Resizing kept beside
        // FileSystemResizePending (kube-controller-manager's `Unused` aside), and the size before
        // the resize on the PV until the node's part is done (AnnotateFsResize, on by default).
        assert_eq!(conditions, ["Resizing", "FileSystemResizePending"]);
        let annotations = pv.metadata.annotations.unwrap_or_default();
        let before = annotations.get("volume.alpha.kubernetes.io/pre-resize-capacity");
        assert_eq!(before.map(String::as_str), Some("1Gi"), "{annotations:?}");
    }
    let sources = eventually(LIMIT, || async {
        Some(event_sources(&world).await).filter(|s| s.contains_key("Resizing"))
    })
    .await
    .unwrap_or_default();
    assert_eq!(
        sources.get("Resizing").cloned().unwrap_or_default(),
        BTreeSet::from([format!("external-resizer {}", world.driver_name)])
    );

    delete_all_claims(&world).await;
    let empty = eventually(LIMIT, || async {
        (world.driver_volumes_in_api().await.is_empty()
            && world.driver.volume_ids().await.is_empty())
        .then_some(())
    })
    .await;
    assert!(empty.is_some(), "volumes left: {:?}", world.driver.volume_ids().await);
    assert_eq!(watch.stop(), Vec::<String>::new(), "double binds");
    assert_eq!(warnings(&world).await, vec![]);
    drop(kcm);
}

/// Told to bind (`--binder=driver`) in a cluster whose kube-controller-manager binds too, the
/// sidecar says so in an error line naming the flags to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_binding_sidecar_beside_the_cluster_binder_says_so() {
    let plane = fresh_plane();
    let _kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
    let world = World::start_hostpath(plane, "alarm", &[], &["--binder=driver"]).await;
    // Another driver's PV: only kube-controller-manager's binder writes its phase (for one of
    // ours, this sidecar may set Available first, and the binder then has nothing to write).
    let mut pv = static_pv(&world, "alarm-static", "other", "h", "Retain");
    pv["spec"]["csi"]["driver"] = json!("other.csi.test");
    let pv: PersistentVolume = serde_json::from_value(pv).unwrap();
    world.create_volume(&pv).await;
    let said = eventually(LIMIT, || async {
        let log = world.sidecar.log_text();
        log.lines()
            // klog's header: an error line starts with E.
            .find(|l| l.starts_with('E') && l.contains("kube-controller-manager's PV binder"))
            .map(str::to_string)
    })
    .await;
    let line = said.unwrap_or_else(|| panic!("no alarm:\n{}", world.sidecar.log_text()));
    assert!(line.contains("--binder=external"), "{line}");
}
