//! §3.4 to §3.6: the status writers, the bind sequence and unbindVolume.

use super::*;
use crate::model::ClaimPhase;

// §3.4 and §3.5: status writers and the bind sequence.

#[test]
fn s3_5_bind_unbound_volume_sets_claimref_and_bound_by_controller() {
    let p = bind::volume_spec(&pv("v", "1Gi", json!({})), &claim(json!({}))).unwrap();
    assert_eq!(p["spec"]["claimRef"]["uid"], UID);
    assert_eq!(p["spec"]["claimRef"]["kind"], "PersistentVolumeClaim");
    assert_eq!(p["metadata"]["annotations"][ANN_BOUND_BY_CONTROLLER], "yes");
    assert_eq!(p["metadata"]["resourceVersion"], "10");
}

#[test]
fn s3_5_bind_prebound_volume_adds_uid_without_bound_by_controller() {
    let p = bind::volume_spec(&pv("v", "1Gi", claimed_by("c", "")), &claim(json!({}))).unwrap();
    assert_eq!(p["spec"]["claimRef"]["uid"], UID);
    assert!(p["metadata"].get("annotations").is_none());
    assert!(bind::volume_spec(&pv("v", "1Gi", claimed_by("c", UID)), &claim(json!({}))).is_none());
}

#[test]
fn s3_5_bind_volume_phase_skipped_when_bound() {
    assert!(
        bind::volume_phase(
            &pv("v", "1Gi", json!({"status": {"phase": "Bound"}})),
            VolumePhase::Bound,
            None
        )
        .is_none()
    );
    assert_eq!(
        bind::volume_phase(&pv("v", "1Gi", json!({})), VolumePhase::Bound, None).unwrap()["status"]
            ["phase"],
        "Bound"
    );
}

#[test]
fn s3_5_bind_claim_picked_by_controller_gets_both_annotations() {
    let p = bind::claim_spec(&claim(json!({})), &pv("v", "1Gi", json!({}))).unwrap();
    assert_eq!(p["spec"]["volumeName"], "v");
    assert_eq!(p["metadata"]["annotations"][ANN_BOUND_BY_CONTROLLER], "yes");
    assert_eq!(p["metadata"]["annotations"][ANN_BIND_COMPLETED], "yes");
}

#[test]
fn s3_5_bind_claim_prebound_by_user_gets_only_bind_completed() {
    let p = bind::claim_spec(&requesting("v"), &pv("v", "1Gi", json!({}))).unwrap();
    assert!(p.get("spec").is_none());
    assert!(p["metadata"]["annotations"].get(ANN_BOUND_BY_CONTROLLER).is_none());
    assert_eq!(p["metadata"]["annotations"][ANN_BIND_COMPLETED], "yes");
    let done = claim(
        json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "v"}}),
    );
    assert!(bind::claim_spec(&done, &pv("v", "1Gi", json!({}))).is_none());
}

#[test]
fn s3_5_bind_claim_drops_our_provisioning_intent() {
    let c = claim(
        json!({"metadata": {"finalizers": [FINALIZER_PROVISIONING, "kubernetes.io/pvc-protection"],
        "annotations": {ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "v"}}),
    );
    let p = bind::claim_spec(&c, &pv("v", "1Gi", json!({}))).unwrap();
    assert_eq!(p["metadata"]["finalizers"], json!(["kubernetes.io/pvc-protection"]));
}

#[test]
fn s3_4_claim_status_on_binding_copies_modes_and_capacity() {
    let p = bind::claim_status_bound(&claim(json!({})), &pv("v", "2Gi", json!({}))).unwrap();
    assert_eq!(p["status"]["phase"], "Bound");
    assert_eq!(p["status"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(p["status"]["capacity"]["storage"], "2Gi");
}

#[test]
fn s3_4_claim_status_on_binding_takes_the_volumes_attributes_class() {
    let with_vac = pv("v", "2Gi", json!({"spec": {"volumeAttributesClassName": "gold"}}));
    let table = [
        ("PV with a class", claim(json!({})), &with_vac, json!("gold")),
        ("PV without a class", claim(json!({})), &pv("v", "2Gi", json!({})), Value::Null),
    ];
    for (case, c, v, want) in table {
        let p = bind::claim_status_bound(&c, v).unwrap();
        assert_eq!(p["status"]["currentVolumeAttributesClassName"], want, "{case}");
    }
    // Pending again: the current class goes with the volume.
    let bound =
        claim(json!({"status": {"phase": "Pending", "currentVolumeAttributesClassName": "gold"}}));
    let p = bind::claim_status_unbound(&bound, ClaimPhase::Pending).unwrap();
    assert_eq!(p["status"]["currentVolumeAttributesClassName"], Value::Null);
    assert!(p["status"].as_object().unwrap().contains_key("currentVolumeAttributesClassName"));
}

#[test]
fn s3_4_claim_status_uses_pre_resize_capacity() {
    let v = pv(
        "v",
        "4Gi",
        json!({"metadata": {"annotations": {"volume.alpha.kubernetes.io/pre-resize-capacity": "2Gi"}}}),
    );
    let p = bind::claim_status_bound(&claim(json!({})), &v).unwrap();
    assert_eq!(p["status"]["capacity"]["storage"], "2Gi");
}

#[test]
fn s3_4_claim_status_capacity_kept_when_phase_does_not_change() {
    let c = claim(
        json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}}),
    );
    assert!(bind::claim_status_bound(&c, &pv("v", "2Gi", json!({}))).is_none());
}

#[test]
fn s3_4_claim_status_pending_clears_modes_and_capacity() {
    assert!(bind::claim_status_unbound(&claim(json!({})), ClaimPhase::Pending).is_none());
    let c = claim(json!({"status": {"phase": "Pending", "capacity": {"storage": "1Gi"}}}));
    let p = bind::claim_status_unbound(&c, ClaimPhase::Pending).unwrap();
    assert_eq!(p["status"]["capacity"], Value::Null);
}

// §3.6 unbindVolume.

#[test]
fn s3_6_unbind_controller_bound_volume_drops_claimref_and_annotation() {
    let v = pv(
        "v",
        "1Gi",
        json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}, "spec": {"claimRef": {"name": "c", "namespace": "ns", "uid": UID}}}),
    );
    let p = bind::unbind(&v).unwrap();
    assert_eq!(p["spec"]["claimRef"], Value::Null);
    assert_eq!(p["metadata"]["annotations"][ANN_BOUND_BY_CONTROLLER], Value::Null);
}

#[test]
fn s3_6_unbind_user_prebound_volume_keeps_the_name() {
    let p = bind::unbind(&pv("v", "1Gi", claimed_by("c", UID))).unwrap();
    assert_eq!(p["spec"]["claimRef"], json!({"uid": null}));
    assert!(bind::unbind(&pv("v", "1Gi", claimed_by("c", ""))).is_none());
}

#[test]
fn the_hand_over_names_the_provisioner_once() {
    let c = claim(json!({}));
    let p = bind::hand_over(&c, "d.csi").unwrap();
    assert_eq!(p["metadata"]["annotations"][ANN_STORAGE_PROVISIONER], "d.csi");
    assert_eq!(p["metadata"]["annotations"][ANN_BETA_STORAGE_PROVISIONER], "d.csi");
    let handed = claim(json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: "d.csi"}}}));
    assert_eq!(bind::hand_over(&handed, "d.csi"), None);
    assert!(bind::hand_over(&handed, "other.csi").is_some(), "a new provisioner is written");
}
