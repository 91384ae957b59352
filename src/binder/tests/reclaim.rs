//! §3.8: reclaim, and the re-check on the live objects before a volume is deleted.

use super::*;
use crate::binder::volume::{Recheck, recheck_reclaim};

#[test]
fn s3_8_reclaim_by_policy() {
    let released = |policy: &str, csi: bool| {
        let mut extra = json!({"spec": {"persistentVolumeReclaimPolicy": policy}, "status": {"phase": "Released"}});
        if csi {
            merge(&mut extra, json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}}}));
        }
        bound_pv(extra)
    };
    assert_eq!(crate::binder::volume::reclaim(&released("Retain", true), DRIVER), Reclaim::Keep);
    assert_eq!(crate::binder::volume::reclaim(&released("Delete", true), DRIVER), Reclaim::Delete);
    // Another driver's or an in-tree PV: its provisioner deletes it, if it names one; else
    // nothing can, and it fails as upstream's does.
    let mut theirs = released("Delete", false);
    theirs.metadata.annotations =
        Some([(ANN_PROVISIONED_BY.to_string(), "other.csi".to_string())].into_iter().collect());
    assert_eq!(crate::binder::volume::reclaim(&theirs, DRIVER), Reclaim::External);
    // Another driver's CSI PV without the annotation: left Released, as kube-controller-
    // manager leaves every CSI PV to an external deleter (its differential test shows it).
    let mut other_csi = released("Delete", false);
    merge_pv(
        &mut other_csi,
        json!({"spec": {"csi": {"driver": "other.csi", "volumeHandle": "h"}}}),
    );
    assert_eq!(crate::binder::volume::reclaim(&other_csi, DRIVER), Reclaim::External);
    // (policy, a CSI PV of ours, reason, message)
    let failures = [
        (
            "Delete",
            false,
            "VolumeFailedDelete",
            "error getting deleter volume plugin for volume \"v\": no deletable volume plugin matched",
        ),
        ("Recycle", true, "VolumeFailedRecycle", "No recycler plugin found for the volume!"),
        (
            "Sometimes",
            false,
            "VolumeUnknownReclaimPolicy",
            "Volume has unrecognized PersistentVolumeReclaimPolicy",
        ),
    ];
    for (policy, csi, reason, message) in failures {
        match crate::binder::volume::reclaim(&released(policy, csi), DRIVER) {
            Reclaim::Fail(n) => assert_notice(&n, reason, message),
            other => panic!("{policy}: {other:?}"),
        }
    }
    // A released PV with an unknown policy is failed once; Failed stays Failed.
    let v = released("Sometimes", false);
    assert!(matches!(vstep(&v, ClaimLookup::Live(None)), VolumeStep::Reclaim(Reclaim::Fail(_))));
    let failed = bound_pv(
        json!({"spec": {"persistentVolumeReclaimPolicy": "Sometimes"}, "status": {"phase": "Failed"}}),
    );
    assert_eq!(vstep(&failed, ClaimLookup::Live(None)), VolumeStep::None);
    // Retain: nothing, ever.
    assert_eq!(vstep(&released("Retain", true), ClaimLookup::Live(None)), VolumeStep::None);
}

#[test]
fn s3_8_migrated_volume_is_left_to_the_external_provisioner() {
    let v = bound_pv(
        json!({"metadata": {"annotations": {"pv.kubernetes.io/migrated-to": "x"}}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    );
    assert_eq!(crate::binder::volume::reclaim(&v, DRIVER), Reclaim::External);
}

/// In-tree PVs of the plugin the driver serves through CSI migration (docs/compatibility.md):
/// who deletes them, and whether the driver keeps their deletion finalizer.
#[test]
fn s3_8_in_tree_volumes_migrated_to_the_driver_are_its_to_delete() {
    const CINDER: &str = "cinder.csi.openstack.org";
    let released = |annotations: Value, source: Value| {
        bound_pv(json!({
            "metadata": {"annotations": annotations},
            "spec": merge_into(json!({"persistentVolumeReclaimPolicy": "Delete"}), source),
            "status": {"phase": "Released"},
        }))
    };
    let cinder = json!({"cinder": {"volumeID": "v-1"}});
    // (case, annotations, source, reclaim as cinder's driver, the driver's PV)
    let rows = [
        ("made by the in-tree plugin, handed over by kube-controller-manager",
            json!({"pv.kubernetes.io/provisioned-by": "kubernetes.io/cinder", "pv.kubernetes.io/migrated-to": CINDER}),
            cinder.clone(), Reclaim::Delete, true),
        ("made by the in-tree plugin, no hand-over yet (our binder modes)",
            json!({"pv.kubernetes.io/provisioned-by": "kubernetes.io/cinder"}), cinder.clone(), Reclaim::Delete, true),
        ("static, handed over", json!({"pv.kubernetes.io/migrated-to": CINDER}), cinder.clone(), Reclaim::Delete, true),
        // A static in-tree PV nobody handed over has no deleter: upstream's binder fails it.
        ("static, not handed over", json!({}), cinder.clone(), Reclaim::Fail(crate::binder::claim::Notice {
            warning: true, reason: crate::model::reason::Reason::VolumeFailedDelete,
            message: "error getting deleter volume plugin for volume \"v\": no deletable volume plugin matched".into(),
        }), false),
        ("migrated to another driver", json!({"pv.kubernetes.io/provisioned-by": "kubernetes.io/cinder", "pv.kubernetes.io/migrated-to": "other.csi"}),
            cinder.clone(), Reclaim::External, false),
        ("another plugin's", json!({"pv.kubernetes.io/provisioned-by": "kubernetes.io/aws-ebs", "pv.kubernetes.io/migrated-to": "ebs.csi.aws.com"}),
            json!({"awsElasticBlockStore": {"volumeID": "vol-1"}}), Reclaim::External, false),
    ];
    for (case, annotations, source, want, ours) in rows {
        let v = released(annotations, source);
        assert_eq!(crate::binder::volume::reclaim(&v, CINDER), want, "{case}");
        assert_eq!(crate::binder::volume::is_drivers(&v, CINDER), ours, "{case}");
        // Beside kube-controller-manager's binder, a deletion of ours stays ours; failing the
        // PV is that binder's.
        let step = VolumeStep::Reclaim(want.clone());
        let beside = crate::binder::volume::beside_cluster_binder(&v, CINDER, step.clone());
        let kept = if matches!(want, Reclaim::Fail(_)) { VolumeStep::None } else { step };
        assert_eq!(beside, kept, "{case}");
    }
}

fn merge_into(mut base: Value, extra: Value) -> Value {
    merge(&mut base, extra);
    base
}

/// (case, live PV, live claim once read, what the re-check shows)
type RecheckCase<'a> =
    (&'a str, Option<&'a PersistentVolume>, Option<Option<&'a PersistentVolumeClaim>>, Recheck);

#[test]
fn the_reclaim_recheck_deletes_only_what_the_live_objects_still_release() {
    let released = |extra: Value| {
        let mut base = json!({
            "metadata": {"finalizers": [FINALIZER_VOLUME]},
            "spec": {"persistentVolumeReclaimPolicy": "Delete", "csi": {"driver": DRIVER, "volumeHandle": "h"}},
            "status": {"phase": "Released"}
        });
        merge(&mut base, extra);
        bound_pv(base)
    };
    let holder = claim(json!({"metadata": {"uid": UID}}));
    let bound_elsewhere = claim(json!({"metadata": {"uid": UID}, "spec": {"volumeName": "other"}}));
    let other_uid = claim(json!({"metadata": {"uid": "uid-2"}}));
    let plain = released(json!({}));
    let failed = released(json!({"status": {"phase": "Failed"}}));
    let bound = released(json!({"status": {"phase": "Bound"}}));
    let retain = released(json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}}));
    let done = released(
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["kubernetes.io/pv-protection"]}}),
    );
    let table: Vec<RecheckCase<'_>> = vec![
        ("the PV is gone", None, None, Recheck::Gone),
        ("our deletion is over", Some(&done), None, Recheck::Finished),
        ("bound again", Some(&bound), None, Recheck::Changed),
        ("the policy became Retain", Some(&retain), None, Recheck::Changed),
        ("the claim is read before deciding", Some(&plain), None, Recheck::ReadClaim),
        ("Failed counts as released", Some(&failed), None, Recheck::ReadClaim),
        ("the claim is gone", Some(&plain), Some(None), Recheck::Delete),
        ("the claim still holds it", Some(&plain), Some(Some(&holder)), Recheck::Held),
        ("the claim took another PV", Some(&plain), Some(Some(&bound_elsewhere)), Recheck::Delete),
        ("a new claim of the same name", Some(&plain), Some(Some(&other_uid)), Recheck::Delete),
    ];
    for (case, pv, claim, want) in table {
        assert_eq!(recheck_reclaim(pv, claim, DRIVER), want, "{case}");
    }
}
