//! CSI migration in the mode deploy/ ships: hostpathplugin registered under the name of an
//! in-tree plugin's CSI driver, kube-controller-manager's binder and expander (which hand an
//! in-tree class's claims and an in-tree PV's growth to that driver), and the sidecar with its
//! default flags. The claims, PVs and classes are what a cluster with in-tree StorageClasses has.
//!
//! hostpathplugin stands in for OpenStack Cinder (`cinder.csi.openstack.org`), whose translation
//! takes any volume ID as it is and has no region to work out from the node's topology; and for
//! AWS EBS (`ebs.csi.aws.com`) where a test wants the translation to refuse what it is given.

mod support;

use std::time::Duration;

use csi_pv_controller::csi::v1 as csi;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use support::cluster::{World, eventually};
use support::relayed::{Beside, Relayed};

const LIMIT: Duration = Duration::from_secs(90);
const CINDER: &str = "cinder.csi.openstack.org";

/// A class of the in-tree plugin `provisioner`, named as the world's classes are.
async fn in_tree_class(
    world: &World<Relayed>,
    name: &str,
    provisioner: &str,
    extra: serde_json::Value,
) {
    let mut fields = json!({"provisioner": provisioner, "allowVolumeExpansion": true});
    support::cluster::merge(&mut fields, extra);
    world.create_class(name, fields).await;
}

async fn driver_holds(world: &World<Relayed>, count: usize, what: &str) {
    world.driver_holds(count, what, LIMIT).await;
}

/// Claim `claim` asks for 2Gi; waits until its PV `volume` records it.
async fn grow_to_2gi(world: &World<Relayed>, claim: &str, volume: &str) {
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    world.claims().patch(claim, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let grown = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt(volume).await.ok()??;
        (pv.spec?.capacity?.get("storage")?.0 == "2Gi").then_some(())
    })
    .await;
    assert!(grown.is_some(), "{volume} not grown; sidecar log:\n{}", world.sidecar.log_text());
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A claim of a `kubernetes.io/cinder` class: kube-controller-manager hands it to the CSI
/// driver, we create the volume with the class translated and write the PV as the in-tree
/// plugin's; kube-controller-manager binds it, hands its growth to the driver, and releases it;
/// we grow it and delete it through its handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_in_tree_class_is_provisioned_grown_and_deleted_through_its_csi_driver() {
    let world = Beside::start_as("mig", CINDER, &[], &[]).await;
    in_tree_class(
        &world,
        "standard",
        "kubernetes.io/cinder",
        json!({"parameters": {"fsType": "ext4", "availability": "nova"}}),
    )
    .await;
    world.create_claim("data", "standard", "1Gi", json!({})).await;
    let (claim, pv) = world.bound("data", LIMIT).await;
    let name = pv.metadata.name.clone().unwrap();

    // The hand-over was kube-controller-manager's, with the CSI name.
    assert_eq!(
        annotation(&claim.metadata, "volume.kubernetes.io/storage-provisioner"),
        Some(CINDER)
    );
    // The request: the class translated (fsType to the capability, the rest as parameters).
    let creates = world.relay().requests::<csi::CreateVolumeRequest>("CreateVolume");
    assert_eq!(creates.len(), 1, "one CreateVolume");
    let create = &creates[0];
    assert_eq!(create.name, name);
    assert_eq!(create.parameters.len(), 1, "{:?}", create.parameters);
    assert_eq!(create.parameters["availability"], "nova");
    let fs = match create.volume_capabilities[0].access_type.as_ref() {
        Some(csi::volume_capability::AccessType::Mount(m)) => m.fs_type.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(fs, "ext4");
    // The PV: the in-tree plugin's, as csi-provisioner writes it.
    assert_eq!(
        annotation(&pv.metadata, "pv.kubernetes.io/provisioned-by"),
        Some("kubernetes.io/cinder")
    );
    let spec = pv.spec.as_ref().unwrap();
    assert!(spec.csi.is_none(), "no CSI source on an in-tree PV");
    let cinder = spec.cinder.as_ref().expect("a cinder source");
    let volumes = world.hostpath().state_volumes();
    assert_eq!(volumes.len(), 1);
    assert_eq!(cinder.volume_id, volumes[0].id);
    assert_eq!(cinder.fs_type.as_deref(), Some("ext4"));
    assert!(
        pv.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "external-provisioner.volume.kubernetes.io/finalizer")
    );
    // kube-controller-manager's binder records the migration on the PV.
    let migrated = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt(&name).await.ok()??;
        (annotation(&pv.metadata, "pv.kubernetes.io/migrated-to") == Some(CINDER)).then_some(())
    })
    .await;
    assert!(migrated.is_some(), "kube-controller-manager did not mark the PV migrated");

    // Grown: kube-controller-manager's expander names the driver; we call it with the handle.
    grow_to_2gi(&world, "data", &name).await;
    let claim = world.claim("data").await.unwrap();
    assert_eq!(annotation(&claim.metadata, "volume.kubernetes.io/storage-resizer"), Some(CINDER));
    let expands =
        world.relay().requests::<csi::ControllerExpandVolumeRequest>("ControllerExpandVolume");
    assert_eq!(expands.len(), 1);
    assert_eq!(expands[0].volume_id, cinder.volume_id);
    assert_eq!(expands[0].capacity_range.as_ref().unwrap().required_bytes, 2 << 30);
    assert_eq!(world.hostpath().state_volumes()[0].size, 2 << 30);

    // Deleted: released by kube-controller-manager, the volume deleted by its handle, once.
    world.claims().delete("data", &Default::default()).await.unwrap();
    driver_holds(&world, 0, "after the claim's deletion").await;
    assert!(world.volume_gone(&name, LIMIT).await, "PV {name} still there");
    let deletes = world.relay().requests::<csi::DeleteVolumeRequest>("DeleteVolume");
    let ids: Vec<&str> = deletes.iter().map(|d| d.volume_id.as_str()).collect();
    assert_eq!(ids, [cinder.volume_id.as_str()]);
    assert!(world.warnings("data").await.is_empty(), "{:?}", world.warnings("data").await);
    // The calls' metrics say they were about a migrated volume, as csi-lib-utils labels them.
    let metrics = world.sidecar.metrics().await;
    for method in ["CreateVolume", "ControllerExpandVolume", "DeleteVolume"] {
        let series = format!(
            "csi_sidecar_operations_seconds_count{{driver_name=\"{CINDER}\",method_name=\"/csi.v1.Controller/{method}\",grpc_status_code=\"OK\",migrated=\"true\"}} 1"
        );
        assert!(metrics.contains(&series), "{series} not in:\n{metrics}");
    }
    assert!(metrics.contains(
        "method_name=\"/csi.v1.Identity/Probe\",grpc_status_code=\"OK\",migrated=\"false\""
    ));
}

/// An in-tree PV as the in-tree plugin wrote it years ago (no CSI fields, `provisioned-by:
/// kubernetes.io/cinder`), reclaim Delete: released when its claim goes, deleted by us once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_old_in_tree_volume_released_with_delete_is_deleted_once() {
    let world = Beside::start_as("old", CINDER, &[], &[]).await;
    an_old_in_tree_volume_is_deleted_once(&world).await;
}

/// What the translation refuses, with hostpathplugin as EBS's driver: a class naming both zones
/// and allowed topologies gets ProvisioningFailed with the reason and reaches no driver; an
/// in-tree PV whose volume ID is not an EBS one gets a Warning and is never deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_the_translation_refuses_is_reported_and_nothing_is_guessed() {
    const EBS: &str = "ebs.csi.aws.com";
    let world = Beside::start_as("refused", EBS, &[], &[]).await;
    let allowed = json!([{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["us-east-1a"]}]}]);
    in_tree_class(
        &world,
        "zoned",
        "kubernetes.io/aws-ebs",
        json!({"parameters": {"zone": "us-east-1a"}, "allowedTopologies": allowed}),
    )
    .await;
    world.create_claim("zoned", "zoned", "1Gi", json!({})).await;
    let note = world
        .event(
            "zoned",
            "ProvisioningFailed",
            "cannot simultaneously set allowed topologies and zone/zones parameters",
            LIMIT,
        )
        .await;
    assert!(note.contains("failed to translate storage class"), "{note}");
    assert_eq!(world.relay().calls("CreateVolume"), 0);

    in_tree_class(&world, "gp2", "kubernetes.io/aws-ebs", json!({})).await;
    let claim = world
        .create_claim("bad-id", "gp2", "1Gi", json!({"spec": {"volumeName": "pvc-bad-id"}}))
        .await;
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pvc-bad-id", "annotations": {"pv.kubernetes.io/provisioned-by": "kubernetes.io/aws-ebs"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": format!("{}-gp2", world.namespace),
            "persistentVolumeReclaimPolicy": "Delete",
            "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/not-a-volume"},
            "claimRef": {"namespace": world.namespace, "name": "bad-id", "uid": claim.metadata.uid},
        }
    }))
    .unwrap();
    world.create_volume(&pv).await;
    world.bound("bad-id", LIMIT).await;
    world.claims().delete("bad-id", &Default::default()).await.unwrap();
    let warned = world.volume_event("pvc-bad-id", "VolumeFailedDelete", LIMIT).await;
    let warned = warned.unwrap_or_else(|| {
        panic!("no VolumeFailedDelete; sidecar log:\n{}", world.sidecar.log_text())
    });
    assert!(warned.contains("invalid kubernetes.io/aws-ebs volume ID"), "{warned}");
    assert_eq!(world.relay().calls("DeleteVolume"), 0, "deleted by a guessed handle");
    let pv = world.volumes().get_opt("pvc-bad-id").await.unwrap().expect("the PV is kept");
    assert_eq!(pv.status.and_then(|s| s.phase).as_deref(), Some("Released"));
}

/// Our binder in place of kube-controller-manager's (`--binder=driver`; its expander and the
/// protection controllers still run): we hand the in-tree class's claim to the CSI driver as that
/// binder would, provision, bind and grow it, and delete the volume when the claim goes, with no
/// `migrated-to` on the PV; an old in-tree PV is released and deleted by us too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn our_binder_serves_in_tree_classes_and_volumes_the_same_way() {
    use support::control_plane::fresh_plane;
    use support::kcm::Kcm;
    let plane = fresh_plane();
    let _kcm = Kcm::start(
        plane,
        "persistentvolume-expander-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller",
    );
    let world = World::start_relayed_as(plane, "ours", CINDER, &[], &["--binder=driver"]).await;
    world.register_node().await;
    in_tree_class(&world, "standard", "kubernetes.io/cinder", json!({})).await;
    world.create_claim("data", "standard", "1Gi", json!({})).await;
    let (claim, pv) = world.bound("data", LIMIT).await;
    let name = pv.metadata.name.clone().unwrap();
    assert_eq!(
        annotation(&claim.metadata, "volume.kubernetes.io/storage-provisioner"),
        Some(CINDER)
    );
    assert_eq!(
        annotation(&pv.metadata, "pv.kubernetes.io/provisioned-by"),
        Some("kubernetes.io/cinder")
    );
    let id = pv.spec.as_ref().and_then(|s| s.cinder.as_ref()).map(|c| c.volume_id.clone());
    let id = id.expect("an in-tree PV");
    // No kube-controller-manager binder here to write it; `provisioned-by` decides deletion.
    assert_eq!(annotation(&pv.metadata, "pv.kubernetes.io/migrated-to"), None);

    grow_to_2gi(&world, "data", &name).await;

    world.claims().delete("data", &Default::default()).await.unwrap();
    driver_holds(&world, 0, "after the claim's deletion").await;
    assert!(world.volume_gone(&name, LIMIT).await, "PV {name} still there");
    let deletes = world.relay().requests::<csi::DeleteVolumeRequest>("DeleteVolume");
    assert_eq!(deletes.iter().map(|d| d.volume_id.clone()).collect::<Vec<_>>(), [id]);
    assert!(world.warnings("data").await.is_empty(), "{:?}", world.warnings("data").await);
    an_old_in_tree_volume_is_deleted_once(&world).await;
}

/// A PV written as the in-tree Cinder plugin wrote it (no CSI fields, `provisioned-by:
/// kubernetes.io/cinder`), reclaim Delete, bound to its claim: kept under our finalizer, and
/// deleted once, by its in-tree ID, when the claim goes.
async fn an_old_in_tree_volume_is_deleted_once(world: &World<Relayed>) {
    in_tree_class(world, "legacy", "kubernetes.io/cinder", json!({})).await;
    let made_id = world.hostpath().make_volume("legacy-disk").await;
    let class = format!("{}-legacy", world.namespace);
    let claim = world
        .create_claim("legacy", "legacy", "1Gi", json!({"spec": {"volumeName": "pvc-legacy"}}))
        .await;
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pvc-legacy", "annotations": {"pv.kubernetes.io/provisioned-by": "kubernetes.io/cinder"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Delete",
            "cinder": {"volumeID": made_id, "fsType": "ext4"},
            "claimRef": {"namespace": world.namespace, "name": "legacy", "uid": claim.metadata.uid},
        }
    }))
    .unwrap();
    world.create_volume(&pv).await;
    world.bound("legacy", LIMIT).await;
    // Ours to delete: our finalizer is kept on it, as csi-provisioner does.
    let guarded = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt("pvc-legacy").await.ok()??;
        pv.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "external-provisioner.volume.kubernetes.io/finalizer")
            .then_some(())
    })
    .await;
    assert!(guarded.is_some(), "no deletion finalizer on the in-tree PV");
    let creates = world.relay().requests::<csi::CreateVolumeRequest>("CreateVolume");
    let claim_uid = claim.metadata.uid.clone().unwrap_or_default();
    let for_it = creates.iter().filter(|c| c.name.contains(&claim_uid)).count();
    assert_eq!(for_it, 0, "nothing provisioned for a bound claim");

    world.claims().delete("legacy", &Default::default()).await.unwrap();
    driver_holds(world, 0, "after the legacy claim's deletion").await;
    assert!(world.volume_gone("pvc-legacy", LIMIT).await, "PV still there");
    let deletes = world.relay().requests::<csi::DeleteVolumeRequest>("DeleteVolume");
    let ids: Vec<&str> = deletes.iter().map(|d| d.volume_id.as_str()).collect();
    assert!(ids.contains(&made_id.as_str()), "not deleted by its in-tree ID: {ids:?}");
    let times = ids.iter().filter(|id| **id == made_id).count();
    assert_eq!(times, 1, "deleted once");
}
