//! §3.7 and §3.8: syncVolume and reclaim; the default class, scope, explain, attachments.

use super::*;

// §3.7 syncVolume.

#[test]
fn s3_7_row1_no_claimref_available() {
    assert_eq!(
        vstep(&pv("v", "1Gi", json!({"status": {"phase": "Pending"}})), ClaimLookup::Store(None)),
        VolumeStep::Phase(VolumePhase::Available)
    );
    assert_eq!(vstep(&pv("v", "1Gi", json!({})), ClaimLookup::Store(None)), VolumeStep::None);
}

#[test]
fn s3_7_row2_prebound_by_name_available() {
    let v = pv(
        "v",
        "1Gi",
        json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}, "status": {"phase": "Pending"}}),
    );
    assert_eq!(vstep(&v, ClaimLookup::Store(None)), VolumeStep::Phase(VolumePhase::Available));
}

#[test]
fn s3_7_row3_claim_missing_from_store_is_checked_live() {
    assert_eq!(vstep(&bound_pv(json!({})), ClaimLookup::Store(None)), VolumeStep::CheckClaim);
}

#[test]
fn s3_7_row3_released_volume_is_not_checked_again() {
    let v = bound_pv(json!({"status": {"phase": "Released"}}));
    assert_eq!(vstep(&v, ClaimLookup::Store(None)), VolumeStep::None);
}

#[test]
fn s3_7_row4_other_uid_in_store_is_checked_live() {
    let other = claim(json!({"metadata": {"uid": "new-uid"}}));
    let in_store = ClaimLookup::Store(Some(&other));
    assert_eq!(vstep(&bound_pv(json!({})), in_store), VolumeStep::CheckClaim);
    assert_eq!(vstep(&bound_pv(json!({})), ClaimLookup::Live(Some(&other))), VolumeStep::Release);
}

#[test]
fn s3_7_row5_claim_gone_released_then_reclaimed() {
    assert_eq!(vstep(&bound_pv(json!({})), ClaimLookup::Live(None)), VolumeStep::Release);
    let ours = bound_pv(
        json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}, "persistentVolumeReclaimPolicy": "Delete"},
        "metadata": {"finalizers": [FINALIZER_VOLUME]}, "status": {"phase": "Released"}}),
    );
    assert_eq!(vstep(&ours, ClaimLookup::Store(None)), VolumeStep::Reclaim(Reclaim::Delete));
    // Being deleted with our finalizer still on: our deletion is unfinished, go on.
    let mut deleting = ours.clone();
    deleting.metadata.deletion_timestamp =
        serde_json::from_value(json!("2026-01-01T00:00:00Z")).ok();
    assert_eq!(vstep(&deleting, ClaimLookup::Store(None)), VolumeStep::Reclaim(Reclaim::Delete));
    // Our finalizer gone: only pv-protection holds it; nothing more to do.
    deleting.metadata.finalizers = Some(vec!["kubernetes.io/pv-protection".into()]);
    assert_eq!(vstep(&deleting, ClaimLookup::Store(None)), VolumeStep::None);
}

#[test]
fn s3_7_row6_claim_not_bound_yet_queues_claim() {
    let c = claim(json!({}));
    assert_eq!(vstep(&bound_pv(json!({})), ClaimLookup::Store(Some(&c))), VolumeStep::QueueClaim);
}

#[test]
fn s3_7_row6_volume_mode_mismatch_events() {
    let c = claim(json!({"spec": {"volumeMode": "Block"}}));
    assert_eq!(vstep(&bound_pv(json!({})), ClaimLookup::Store(Some(&c))), VolumeStep::ModeMismatch);
    let (on_pv, on_claim) = crate::binder::volume::mode_mismatch_notices(&bound_pv(json!({})), "c");
    assert_eq!(
        on_pv.message,
        "Cannot bind PersistentVolume to requested PersistentVolumeClaim \"c\" due to incompatible volumeMode."
    );
    assert_eq!(
        on_claim.message,
        "Cannot bind PersistentVolume \"v\" to requested PersistentVolumeClaim due to incompatible volumeMode."
    );
}

#[test]
fn s3_7_row7_claim_bound_here_volume_bound() {
    let c = requesting("v");
    assert_eq!(
        vstep(&bound_pv(json!({"status": {"phase": "Available"}})), ClaimLookup::Store(Some(&c))),
        VolumeStep::Phase(VolumePhase::Bound)
    );
    assert_eq!(vstep(&bound_pv(json!({})), ClaimLookup::Store(Some(&c))), VolumeStep::None);
}

#[test]
fn s3_7_row8_provisioned_delete_volume_of_claim_bound_elsewhere_released() {
    let c = requesting("other");
    let v = bound_pv(
        json!({"metadata": {"annotations": {ANN_PROVISIONED_BY: DRIVER}}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    );
    assert_eq!(vstep(&v, ClaimLookup::Store(Some(&c))), VolumeStep::Release);
}

#[test]
fn s3_7_row9_controller_bound_volume_of_claim_bound_elsewhere_unbound() {
    let c = requesting("other");
    let v = bound_pv(json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}}));
    assert_eq!(vstep(&v, ClaimLookup::Store(Some(&c))), VolumeStep::Unbind);
    assert_eq!(bind::unbind(&v).unwrap()["spec"]["claimRef"], Value::Null);
}

#[test]
fn s3_7_row10_user_prebound_volume_of_claim_bound_elsewhere_unbound_by_uid() {
    let c = requesting("other");
    let v = bound_pv(json!({}));
    assert_eq!(vstep(&v, ClaimLookup::Store(Some(&c))), VolumeStep::Unbind);
    assert_eq!(bind::unbind(&v).unwrap()["spec"]["claimRef"], json!({"uid": null}));
}

#[test]
fn finalizer_upkeep_on_our_volumes() {
    let ours = json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}, "persistentVolumeReclaimPolicy": "Delete"}});
    let c = requesting("v");
    assert_eq!(
        vstep(&bound_pv(ours.clone()), ClaimLookup::Store(Some(&c))),
        VolumeStep::AddFinalizer
    );
    let mut retain = ours.clone();
    merge(
        &mut retain,
        json!({"metadata": {"finalizers": [FINALIZER_VOLUME]}, "spec": {"persistentVolumeReclaimPolicy": "Retain"}}),
    );
    assert_eq!(vstep(&bound_pv(retain), ClaimLookup::Store(Some(&c))), VolumeStep::RemoveFinalizer);
    // Not our driver: no finalizer upkeep.
    let theirs = json!({"spec": {"csi": {"driver": "other", "volumeHandle": "h"}, "persistentVolumeReclaimPolicy": "Delete"}});
    assert_eq!(vstep(&bound_pv(theirs), ClaimLookup::Store(Some(&c))), VolumeStep::None);
}

#[test]
fn beside_the_cluster_binder_finalizers_release_and_deletion_stay_ours() {
    use crate::binder::volume::beside_cluster_binder;
    let ours = json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}, "persistentVolumeReclaimPolicy": "Delete"}});
    let c = requesting("v");
    let mut released = ours.clone();
    merge(
        &mut released,
        json!({"metadata": {"finalizers": [FINALIZER_VOLUME], "annotations": {ANN_PROVISIONED_BY: DRIVER}}, "status": {"phase": "Released"}}),
    );
    let released = bound_pv(released);
    let mut recreated = requesting("v");
    recreated.metadata.uid = Some("another".into());
    let mut released_by_other = released.clone();
    released_by_other
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(ANN_PROVISIONED_BY.into(), "other.csi".into());
    let mut static_released = released.clone();
    static_released.metadata.annotations = None;
    let fail = VolumeStep::Reclaim(Reclaim::Fail(crate::binder::claim::Notice {
        warning: true,
        reason: crate::model::reason::Reason::VolumeFailedRecycle,
        message: String::new(),
    }));
    let table = [
        (
            "no claimRef: the binder makes it Available",
            pv("v", "1Gi", json!({"status": {"phase": "Pending"}})),
            ClaimLookup::Store(None),
            None,
            VolumeStep::None,
        ),
        (
            "claim gone by the live API, not Released yet: released by whoever is first",
            bound_pv(ours.clone()),
            ClaimLookup::Live(None),
            None,
            VolumeStep::Release,
        ),
        (
            "claim missing from the store, PV not Released: read it live first",
            bound_pv(ours.clone()),
            ClaimLookup::Store(None),
            None,
            VolumeStep::CheckClaim,
        ),
        (
            "claim recreated (another UID in the store): read it live first",
            bound_pv(ours.clone()),
            ClaimLookup::Store(Some(&recreated)),
            None,
            VolumeStep::CheckClaim,
        ),
        (
            "the claim's side not written yet: the binder's",
            bound_pv(ours.clone()),
            ClaimLookup::Store(Some(&requesting(""))),
            None,
            VolumeStep::None,
        ),
        (
            "Released with Delete, provisioned by another: not ours to delete",
            released_by_other.clone(),
            ClaimLookup::Store(None),
            Some(VolumeStep::Reclaim(Reclaim::Delete)),
            VolumeStep::None,
        ),
        (
            "Released by the binder, provisioned by the driver: delete",
            released.clone(),
            ClaimLookup::Store(None),
            None,
            VolumeStep::Reclaim(Reclaim::Delete),
        ),
        (
            "Released, not provisioned by the driver: not ours to delete",
            static_released,
            ClaimLookup::Store(None),
            None,
            VolumeStep::None,
        ),
        (
            "our finalizer on a bound Delete PV",
            bound_pv(ours.clone()),
            ClaimLookup::Store(Some(&c)),
            None,
            VolumeStep::AddFinalizer,
        ),
        (
            "claim bound elsewhere: the binder unbinds",
            bound_pv(json!({})),
            ClaimLookup::Store(Some(&requesting("other"))),
            None,
            VolumeStep::None,
        ),
        (
            "Recycle: the binder fails it",
            released,
            ClaimLookup::Store(None),
            Some(fail),
            VolumeStep::None,
        ),
    ];
    for (case, volume, lookup, step, want) in table {
        let step = step.unwrap_or_else(|| vstep(&volume, lookup));
        assert_eq!(beside_cluster_binder(&volume, DRIVER, step), want, "{case}");
    }
}

// Default class and scope.

#[test]
fn default_class_is_newest_then_by_name() {
    let sc = |name: &str, created: &str, default: bool| -> StorageClass {
        serde_json::from_value(json!({"metadata": {"name": name, "creationTimestamp": created,
            "annotations": {"storageclass.kubernetes.io/is-default-class": if default {"true"} else {"false"}}},
            "provisioner": "p"}))
        .unwrap()
    };
    let classes = [
        sc("a", "2026-01-01T00:00:00Z", true),
        sc("b", "2026-02-01T00:00:00Z", true),
        sc("c", "2026-03-01T00:00:00Z", false),
        sc("bb", "2026-02-01T00:00:00Z", true),
    ];
    assert_eq!(default_class(classes.iter()).and_then(|c| c.metadata.name.as_deref()), Some("b"));
    assert!(default_class(classes[2..3].iter()).is_none());
}

#[test]
fn scope_by_default_and_bind_all() {
    let scope =
        crate::binder::Scope { driver: DRIVER.into(), binder: crate::binder::Binder::External };
    let ours = class(Some("Immediate"));
    let theirs: StorageClass =
        serde_json::from_value(json!({"metadata": {"name": "gold"}, "provisioner": "x"})).unwrap();
    let c = claim(json!({}));
    assert!(scope.has_claim(&c, Some(&ours), None, None));
    assert!(!scope.has_claim(&c, Some(&theirs), None, None));
    let our_pv = pv("v", "1Gi", json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}}}));
    assert!(scope.has_claim(&requesting("v"), Some(&theirs), None, Some(&our_pv)));
    assert!(scope.has_volume(&our_pv));
    assert!(!scope.has_volume(&pv("hostpath", "1Gi", json!({}))));
    let all = crate::binder::Scope { driver: DRIVER.into(), binder: crate::binder::Binder::All };
    assert!(all.has_claim(&c, Some(&theirs), None, None));
    assert!(all.has_volume(&pv("hostpath", "1Gi", json!({}))));
}

/// A claim that names no class, by binder mode and by whose the default class is: ours only when
/// we bind and the default is the driver's (nobody else would give it the class then).
#[test]
fn a_class_less_claim_is_ours_when_we_bind_and_the_default_class_is_ours() {
    use crate::binder::Binder::{Driver, External};
    let ours = class(Some("Immediate"));
    let theirs: StorageClass =
        serde_json::from_value(json!({"metadata": {"name": "gold"}, "provisioner": "x"})).unwrap();
    let no_class = claim(json!({"spec": {"storageClassName": null}}));
    let empty_class = claim(json!({"spec": {"storageClassName": ""}}));
    let table = [
        // (binder, claim, default class, ours)
        (Driver, &no_class, Some(&ours), true),
        (Driver, &no_class, Some(&theirs), false),
        (Driver, &no_class, None, false),
        // "" asks for no class at all: never given the default.
        (Driver, &empty_class, Some(&ours), false),
        // kube-controller-manager's binder gives the class, then hands the claim over.
        (External, &no_class, Some(&ours), false),
    ];
    for (binder, claim, default, expected) in table {
        let scope = crate::binder::Scope { driver: DRIVER.into(), binder };
        let got = scope.has_claim(claim, None, default, None);
        assert_eq!(
            got,
            expected,
            "{binder:?} {:?} {:?}",
            claim.spec,
            default.map(|c| &c.provisioner)
        );
    }
}

#[test]
fn explain_names_the_choice_and_every_rejection() {
    let volumes = index(vec![
        pv("chosen", "2Gi", json!({})),
        pv("larger", "5Gi", json!({})),
        pv("small", "100Mi", json!({})),
        pv("silver", "2Gi", json!({"spec": {"storageClassName": "silver"}})),
        pv("taken", "2Gi", claimed_by("other", "u")),
    ]);
    let c = immediate();
    let text = crate::explain::binder::explain(
        &claim(json!({})),
        &ClaimView { class: Some(&c), default_class: None, volumes: &volumes },
    );
    assert!(text.contains("decision: bind to PersistentVolume chosen"), "{text}");
    assert!(text.contains("chosen: chosen"), "{text}");
    assert!(text.contains("larger: fits, but"), "{text}");
    assert!(
        text.contains("small: rejected: too small: 104857600 bytes, the claim asks for 1073741824"),
        "{text}"
    );
    assert!(
        text.contains("silver: rejected: storage class \"silver\", the claim asks for \"gold\""),
        "{text}"
    );
    assert!(text.contains("taken: rejected: already claimed by ns/other"), "{text}");
}

#[test]
fn an_attached_volume_names_its_node() {
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    let attachment = |pv: Option<&str>, node: &str| -> VolumeAttachment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("va-{node}")},
            "spec": {"attacher": "d", "nodeName": node,
                     "source": {"persistentVolumeName": pv}},
        }))
        .unwrap()
    };
    let all = [
        attachment(Some("pv-a"), "node-1"),
        attachment(None, "node-2"),
        attachment(Some("pv-b"), "node-3"),
    ];
    assert_eq!(crate::binder::volume::attached_to("pv-a", &all), Some("node-1"));
    assert_eq!(crate::binder::volume::attached_to("pv-b", &all), Some("node-3"));
    assert_eq!(crate::binder::volume::attached_to("pv-c", &all), None);
    assert_eq!(crate::binder::volume::attached_to("pv-a", []), None);
}

#[test]
fn deletion_gates_hold_an_attached_volume_and_one_not_its_claims() {
    use crate::binder::volume::{DeleteGate, may_delete};
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    let attached: VolumeAttachment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "va-1"},
        "spec": {"attacher": "d", "nodeName": "node-1",
                 "source": {"persistentVolumeName": "v"}},
    }))
    .unwrap();
    let other: VolumeAttachment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "va-2"},
        "spec": {"attacher": "d", "nodeName": "node-2",
                 "source": {"persistentVolumeName": "w"}},
    }))
    .unwrap();
    let volume = pv("v", "1Gi", serde_json::json!({}));
    // (case, attachments, served its claim, gate)
    let table: [(&str, Vec<&VolumeAttachment>, bool, DeleteGate<'_>); 5] = [
        ("free and ours", vec![], true, DeleteGate::Go),
        ("another volume attached", vec![&other], true, DeleteGate::Go),
        ("attached", vec![&attached, &other], true, DeleteGate::Attached("node-1")),
        ("attached wins over ownership", vec![&attached], false, DeleteGate::Attached("node-1")),
        ("not its claim's", vec![], false, DeleteGate::NotItsClaims),
    ];
    for (case, attachments, served, want) in table {
        assert_eq!(may_delete(&volume, attachments, served), want, "{case}");
    }
}

#[test]
fn explain_of_a_claim_that_names_its_volume_lists_no_search() {
    let mine = available("mine", "2Gi").with(claimed_by("c", UID)).phase("Bound").build();
    let volumes = index(vec![mine, pv("spare", "1Gi", json!({}))]);
    let c = immediate();
    let view = ClaimView { class: Some(&c), default_class: None, volumes: &volumes };
    let bound = claim(json!({"spec": {"volumeName": "mine"}, "status": {"phase": "Bound"}}));
    let text = crate::explain::binder::explain(&bound, &view);
    assert!(text.contains("decision: nothing to do: bound to PersistentVolume mine"), "{text}");
    assert!(text.contains("names PersistentVolume mine: no other PV is considered"), "{text}");
    assert!(!text.contains("persistent volumes ("), "{text}");
    assert!(!text.contains("spare"), "{text}");

    // Pre-bound by the user and not Bound yet: the binder binds it, still to that PV only.
    let pre_bound = claim(json!({"spec": {"volumeName": "spare"}}));
    let text = crate::explain::binder::explain(&pre_bound, &view);
    assert!(text.contains("decision: bind to PersistentVolume spare"), "{text}");
    assert!(text.contains("names PersistentVolume spare: no other PV"), "{text}");
    assert!(!text.contains("mine"), "{text}");
}
