//! End to end against the real driver, as users run it: hostpathplugin, the sidecar with default
//! flags and `deploy/` RBAC, kube-controller-manager with its four storage controllers, the
//! driver's Node and CSINode registered as kubelet would. Each test has a control plane of its
//! own. Ground truth for what exists is the driver's own ListVolumes and state.

mod support;

use csi_pv_controller::model::VolumeExt;
use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use support::cluster::{INTENT_JOURNAL, World, all_bound, eventually, journal_entries};
use support::control_plane::fresh_plane;
use support::csi_relay::Fault;
use support::hostpath::{Hostpath, TOPOLOGY_KEY};
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use support::relayed::Beside;

const LIMIT: Duration = Duration::from_secs(120);

/// A fresh cluster with kube-controller-manager, hostpathplugin started with `flags`, and the
/// sidecar with `args`.
async fn cluster(name: &str, flags: &[&str], args: &[&str]) -> (World<Hostpath>, Kcm) {
    let plane = fresh_plane();
    let kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
    let world = World::start_hostpath(plane, name, flags, args).await;
    world.register_node().await;
    (world, kcm)
}

fn pv_field<'a>(pv: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(pv, |v, k| &v[*k])
}

async fn delete_claim(world: &World<Hostpath>, name: &str) {
    world.claims().delete(name, &DeleteParams::default()).await.unwrap();
}

/// Filesystem and block claims, Delete and Retain: the PV carries what csi-provisioner writes
/// for the same answer of the same driver, and deletion follows the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn filesystem_and_block_delete_and_retain() {
    let (world, _kcm) = cluster("e2e-modes", &[], &[]).await;
    world.create_class("del", json!({})).await;
    world.create_class("keep", json!({"reclaimPolicy": "Retain"})).await;
    world.create_claim("fs", "del", "1Gi", json!({})).await;
    world.create_claim("block", "keep", "2Gi", json!({"spec": {"volumeMode": "Block"}})).await;
    let (_, fs_pv) = world.bound("fs", LIMIT).await;
    let (block_claim, block_pv) = world.bound("block", LIMIT).await;

    let state = world.driver.state_volumes();
    assert_eq!(state.len(), 2, "{state:?}");
    for (pv, size, mode, policy) in
        [(&fs_pv, "1Gi", "Filesystem", "Delete"), (&block_pv, "2Gi", "Block", "Retain")]
    {
        let name = pv.metadata.name.clone().unwrap();
        let v = serde_json::to_value(pv).unwrap();
        let handle = pv_field(&v, &["spec", "csi", "volumeHandle"]).as_str().unwrap();
        let in_driver = state.iter().find(|s| s.id == handle).unwrap_or_else(|| {
            panic!("{name}: handle {handle} not in the driver's state {state:?}")
        });
        assert_eq!(in_driver.name, name, "CreateVolume's name is the PV's");
        assert_eq!(pv_field(&v, &["spec", "csi", "driver"]), &json!(world.driver_name));
        assert!(
            pv_field(
                &v,
                &[
                    "spec",
                    "csi",
                    "volumeAttributes",
                    "storage.kubernetes.io/csiProvisionerIdentity"
                ]
            )
            .as_str()
            .is_some_and(|id| id.ends_with(&world.driver_name))
        );
        assert_eq!(pv_field(&v, &["spec", "capacity", "storage"]), &json!(size));
        assert_eq!(pv_field(&v, &["spec", "accessModes"]), &json!(["ReadWriteOnce"]));
        assert_eq!(pv_field(&v, &["spec", "volumeMode"]), &json!(mode));
        assert_eq!(pv_field(&v, &["spec", "persistentVolumeReclaimPolicy"]), &json!(policy));
        assert_eq!(
            pv_field(&v, &["spec", "nodeAffinity", "required", "nodeSelectorTerms"]),
            &json!([{"matchExpressions": [{"key": TOPOLOGY_KEY, "operator": "In", "values": ["node-1"]}]}]),
            "nodeAffinity from the driver's accessible topology"
        );
        assert_eq!(
            pv_field(&v, &["metadata", "annotations", "pv.kubernetes.io/provisioned-by"]),
            &json!(world.driver_name)
        );
        let finalizers = pv.metadata.finalizers.clone().unwrap_or_default();
        assert_eq!(
            finalizers.contains(&"external-provisioner.volume.kubernetes.io/finalizer".to_string()),
            policy == "Delete",
            "{name}: {finalizers:?}"
        );
    }
    assert_eq!(block_claim.status.unwrap().capacity.unwrap()["storage"].0, "2Gi");

    delete_claim(&world, "fs").await;
    delete_claim(&world, "block").await;
    assert!(world.volume_gone(fs_pv.metadata.name.as_deref().unwrap(), LIMIT).await);
    let kept = block_pv.metadata.name.clone().unwrap();
    let released = eventually(LIMIT, || async {
        let pv = world.volumes().get(&kept).await.ok()?;
        (pv.status?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
    assert!(released.is_some(), "Retain: the PV stays, Released");
    let ids = world.driver.volume_ids().await;
    let block_handle = block_pv.csi_handle().expect("a CSI PV").to_string();
    assert_eq!(ids, vec![block_handle], "only the retained volume is left in the driver");
}

/// A driver started with --disable-controller-expansion: no ControllerExpandVolume, the PV takes
/// the new size and the node's part is pending, as csi-resizer's trivial resizer does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_only_expansion() {
    let (world, _kcm) = cluster("e2e-nodeonly", &["--disable-controller-expansion"], &[]).await;
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    world.create_claim("data", "grow", "1Gi", json!({})).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let pv_name = pv.metadata.name.clone().unwrap();
    world
        .claims()
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "3Gi"}}}})),
        )
        .await
        .unwrap();
    let pending = eventually(LIMIT, || async {
        let pv = world.volumes().get(&pv_name).await.ok()?;
        let claim = world.claim("data").await?;
        let size = pv.spec?.capacity?.get("storage")?.0.clone();
        let conditions: Vec<String> =
            claim.status?.conditions.into_iter().flatten().map(|c| c.type_).collect();
        (size == "3Gi" && conditions.contains(&"FileSystemResizePending".to_string())).then_some(())
    })
    .await;
    assert!(pending.is_some(), "{}", world.sidecar.log_text());
    // The driver was not asked: its volume keeps the old size until the node grows it.
    let state = world.driver.state_volumes();
    assert_eq!(state[0].size, 1 << 30, "{state:?}");
    let metrics = world.sidecar.metrics().await;
    assert!(metrics.contains("/csi.v1.Controller/CreateVolume"), "the call metric is there");
    assert!(!metrics.contains("ControllerExpandVolume"), "no ControllerExpandVolume call");
}

/// WaitForFirstConsumer: nothing until the scheduler's choice, then the volume on that node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wait_for_first_consumer_follows_the_selected_node() {
    let (world, _kcm) = cluster("e2e-wffc", &[], &[]).await;
    world.create_class("late", json!({"volumeBindingMode": "WaitForFirstConsumer"})).await;
    world.create_claim("data", "late", "1Gi", json!({})).await;
    world.event("data", "WaitForFirstConsumer", "waiting for first consumer", LIMIT).await;
    assert!(world.driver.volume_ids().await.is_empty());
    // What the scheduler writes once it placed the pod.
    world
        .claims()
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-1"}}}),
            ),
        )
        .await
        .unwrap();
    let (_, pv) = world.bound("data", LIMIT).await;
    let v = serde_json::to_value(&pv).unwrap();
    let terms =
        &v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!(terms["key"], json!(TOPOLOGY_KEY));
    assert_eq!(terms["values"], json!(["node-1"]));
    assert_eq!(world.driver.state_volumes()[0].name, pv.metadata.name.unwrap());
}

/// A clone of a bound claim: the driver makes the new volume from the source's data.
/// Immediate binding with no allowedTopologies, as csi-provisioner does it by default
/// (`--immediate-topology`): CreateVolume asks for the segments of the nodes the driver is on,
/// so while it is registered on none there is nothing to ask for and the claim waits with
/// "no available topology found"; once the node plugin registers, the volume is made there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn immediate_binding_waits_for_a_registered_node() {
    let plane = fresh_plane();
    let _kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
    let world = World::start_hostpath(plane, "e2e-immediate", &[], &[]).await;
    world.create_class("now", json!({})).await;
    world.create_claim("data", "now", "1Gi", json!({})).await;
    world.event("data", "ProvisioningFailed", "no available topology found", LIMIT).await;
    assert!(world.driver.volume_ids().await.is_empty());
    world.register_node().await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let v = serde_json::to_value(&pv).unwrap();
    assert_eq!(
        v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
        json!(["node-1"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clone_from_a_claim() {
    let (world, _kcm) = cluster("e2e-clone", &[], &[]).await;
    world.create_class("std", json!({})).await;
    world.create_claim("source", "std", "1Gi", json!({})).await;
    let (_, source_pv) = world.bound("source", LIMIT).await;
    let source_name = source_pv.metadata.name.unwrap();
    let state = world.driver.state_volumes();
    let source = state.iter().find(|v| v.name == source_name).unwrap();
    // Data in the source volume, as a pod would have written it.
    std::fs::write(std::path::Path::new(&source.path).join("marker"), "cloned").unwrap();
    world.create_clone("copy", "std", "1Gi", "source").await;
    let (_, copy_pv) = world.bound("copy", LIMIT).await;
    let copy_name = copy_pv.metadata.name.unwrap();
    let state = world.driver.state_volumes();
    let copy = state
        .iter()
        .find(|v| v.name == copy_name)
        .unwrap_or_else(|| panic!("{copy_name} not in {state:?}"));
    assert_ne!(copy.id, source.id);
    let data = std::fs::read_to_string(std::path::Path::new(&copy.path).join("marker"));
    assert_eq!(data.ok().as_deref(), Some("cloned"), "the clone has the source's data");
}

/// Limits a real driver enforces: a claim above --max-volume-size (OutOfRange) and one beyond
/// the --capacity of its kind (ResourceExhausted) each get a ProvisioningFailed event a user can
/// act on, and nothing is left in the driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn size_and_capacity_limits_come_back_as_events() {
    let max = format!("--max-volume-size={}", 5u64 << 30);
    let (world, _kcm) = cluster("e2e-limits", &[&max, "--capacity=slow=3Gi"], &[]).await;
    world.create_class("std", json!({})).await;
    world.create_class("slow", json!({"parameters": {"kind": "slow"}})).await;
    world.create_claim("huge", "std", "10Gi", json!({})).await;
    world.create_claim("fits", "slow", "2Gi", json!({})).await;
    world.bound("fits", LIMIT).await;
    world.create_claim("full", "slow", "2Gi", json!({})).await;
    let huge = world.event("huge", "ProvisioningFailed", "OutOfRange", LIMIT).await;
    println!("huge: {huge}");
    assert!(huge.contains("exceeds maximum"), "{huge}");
    let full = world.event("full", "ProvisioningFailed", "ResourceExhausted", LIMIT).await;
    println!("full: {full}");
    assert_eq!(world.phase("huge").await.as_deref(), Some("Pending"));
    assert_eq!(world.phase("full").await.as_deref(), Some("Pending"));
    assert_eq!(world.driver.volume_ids().await.len(), 1, "only the claim that fits");
}

/// A burst of 200 claims with kill -9 of the sidecar at four instants and of the driver once,
/// then their deletion with three more kills: the driver's ListVolumes matches the PVs and the
/// claims at every settled point, and ends empty; no finalizer is left behind. The driver sits
/// behind the fault relay, which holds each DeleteVolume's answer back 300 ms (the driver has
/// acted; we do not know yet), so that the deletion's kills land inside calls: at least one
/// CreateVolume and one DeleteVolume must have been cut short, or the kills proved nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_nine_during_a_burst_and_its_deletion() {
    const N: usize = 200;
    // The intent journal, as deploy/ runs it: only it knows of a volume whose claim was deleted
    // while the sidecar was down.
    let mut world = Beside::start("e2e-kill", &[], &[INTENT_JOURNAL]).await;
    world.create_class("std", json!({})).await;
    world.create_claims("c", "std", N).await;
    let mut kills = 0;
    for pause in [300, 700, 1200] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        world.kill_and_restart();
        kills += 1;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    world.driver.hostpath.kill().await;
    world.driver.hostpath.restart().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    world.kill_and_restart();
    kills += 1;
    let bound = all_bound(&world.claims(), N, Duration::from_secs(300))
        .await
        .unwrap_or_else(|| panic!("not all Bound; sidecar:\n{}", world.sidecar.log_text()));
    let (orphans, duplicates, lost) = audit(&world, world.hostpath(), &bound).await;
    let cut = world.interrupted_calls("CreateVolume");
    println!(
        "after the burst: {N} claims, {kills} sidecar kills ({cut} CreateVolume calls cut short), 1 driver kill: {orphans} orphaned, {duplicates} duplicated, {lost} lost"
    );
    assert_eq!((orphans, duplicates, lost), (0, 0, 0));
    assert!(cut > 0, "no kill landed inside a CreateVolume");

    world.relay().always("DeleteVolume", Fault::AnswerLate(Duration::from_millis(300)));
    world
        .claims()
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    // Each kill once the deletion is under way: kube-controller-manager releases the PVs at its
    // own pace, and the first DeleteVolume comes only then.
    let under_way =
        eventually(LIMIT, || async { (world.relay().calls("DeleteVolume") > 0).then_some(()) })
            .await;
    assert!(under_way.is_some(), "no DeleteVolume:\n{}", world.sidecar.log_text());
    for pause in [200, 1500, 1500] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        world.kill_and_restart();
        kills += 1;
    }
    let empty = eventually(Duration::from_secs(300), || async {
        let claims = world.claims().list(&ListParams::default()).await.ok()?;
        let pvs = world.driver_volumes_in_api().await;
        let ids = world.hostpath().volume_ids().await;
        let settled = journal_entries(world.dir.path()).is_empty();
        (claims.items.is_empty() && pvs.is_empty() && ids.is_empty() && settled).then_some(())
    })
    .await;
    assert!(
        empty.is_some(),
        "left: claims {:?}, PVs {}, driver volumes {}, intents {:?}",
        world.claims_left().await,
        world.driver_volumes_in_api().await.len(),
        world.hostpath().volume_ids().await.len(),
        journal_entries(world.dir.path())
    );
    let cut = world.interrupted_calls("DeleteVolume");
    println!(
        "after the deletion: {kills} sidecar kills in all ({cut} DeleteVolume calls cut short); 0 claims, 0 PVs, 0 driver volumes"
    );
    assert!(cut > 0, "no kill landed inside a DeleteVolume");
}

/// (orphaned, duplicated, lost): driver volumes no PV records, PVs recording the same volume
/// or claims with more than one volume made for them, and bound claims whose volume the driver
/// does not have.
async fn audit<D>(
    world: &World<D>,
    driver: &Hostpath,
    claims: &[PersistentVolumeClaim],
) -> (usize, usize, usize) {
    let pvs: Vec<PersistentVolume> = world.driver_volumes_in_api().await;
    let handles: Vec<String> =
        pvs.iter().filter_map(|pv| pv.csi_handle().map(str::to_string)).collect();
    let unique: BTreeSet<&String> = handles.iter().collect();
    let ids: BTreeSet<String> = driver.volume_ids().await.into_iter().collect();
    let orphans = ids.iter().filter(|id| !unique.contains(id)).count();
    // One volume per name in the driver: a second volume for a claim would carry the same name.
    let names: Vec<String> = driver.state_volumes().into_iter().map(|v| v.name).collect();
    let distinct_names: BTreeSet<&String> = names.iter().collect();
    let duplicates = (handles.len() - unique.len()) + (names.len() - distinct_names.len());
    let lost = claims
        .iter()
        .filter_map(|c| c.spec.as_ref()?.volume_name.clone())
        .filter(|v| {
            !pvs.iter().any(|pv| {
                pv.metadata.name.as_deref() == Some(v.as_str())
                    && pv
                        .spec
                        .as_ref()
                        .and_then(|s| s.csi.as_ref())
                        .is_some_and(|c| ids.contains(&c.volume_handle))
            })
        })
        .count();
    (orphans, duplicates, lost)
}
