//! Single cases: the handover grace, the pass beside the cluster's binder, binding halves,
//! clone protection.

use super::*;

#[test]
fn a_claim_no_binder_handed_over_is_noticed_after_the_grace() {
    use std::time::Duration;
    let ours = class(DRIVER, json!({}));
    let theirs = class("other.csi", json!({}));
    let wffc = class(DRIVER, json!({"volumeBindingMode": "WaitForFirstConsumer"}));
    let old = Duration::from_secs(120);
    let young = Duration::from_secs(5);
    let grace = Duration::from_secs(60);
    let handed = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let node = json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}});
    let table = [
        ("unbound, old, ours", json!({}), &ours, old, true),
        ("young", json!({}), &ours, young, false),
        ("handed over", handed, &ours, old, false),
        ("another provisioner's", json!({}), &theirs, old, false),
        ("bound", json!({"spec": {"volumeName": "v"}}), &ours, old, false),
        ("WaitForFirstConsumer, no node yet", json!({}), &wffc, old, false),
        ("WaitForFirstConsumer, node chosen", node, &wffc, old, true),
        ("carrying our intent", json!({"metadata": {"finalizers": [INTENT]}}), &ours, old, false),
    ];
    for (case, patch, class, age, want) in table {
        assert_eq!(awaits_handover(&claim(patch), Some(class), DRIVER, age, grace), want, "{case}");
    }
    assert!(handover_missing_note(DRIVER, old).contains("--binder=driver"));
}

#[test]
fn the_pass_beside_the_cluster_binder() {
    let table = [
        ("no annotation", json!({}), Handover::None),
        (
            "handed over",
            json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}}),
            Handover::Provision,
        ),
        (
            "another driver's",
            json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: "x"}}}),
            Handover::None,
        ),
        ("intent", json!({"metadata": {"finalizers": [INTENT]}}), Handover::Provision),
        (
            "binder half-way: volumeName without bind-completed",
            json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}, "spec": {"volumeName": "v"}}),
            Handover::None,
        ),
        (
            "bound",
            json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "v"}, "status": {"phase": "Bound"}}),
            Handover::Bound,
        ),
    ];
    for (case, patch, want) in table {
        assert_eq!(handover(&claim(patch), DRIVER, false), want, "{case}");
    }
    // A journaled intent is ours to finish, whatever the binder did meanwhile.
    for patch in [json!({}), json!({"spec": {"volumeName": "v"}})] {
        assert_eq!(handover(&claim(patch), DRIVER, true), Handover::Provision);
    }
}

#[test]
fn a_claim_is_bound_only_with_both_halves() {
    assert!(!claim_bound(&claim(json!({}))));
    assert!(!claim_bound(&claim(
        json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}})
    )));
    assert!(claim_bound(&claim(json!({
        "metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}},
        "status": {"phase": "Bound"}
    }))));
}

#[test]
fn a_clone_protects_its_source_after_the_intent_and_before_create_volume() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let source = |finalizers: Value, deleting: bool| -> PersistentVolumeClaim {
        let mut v = json!({
            "metadata": {"name": "src", "namespace": "ns", "uid": "src-uid",
                         "finalizers": finalizers},
            "spec": {"volumeName": "pv-src", "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"}
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    };
    let source_pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-src"},
        "spec": {"csi": {"driver": DRIVER, "volumeHandle": "h-src"},
                 "claimRef": {"uid": "src-uid"}}
    }))
    .unwrap();
    let bare = source(json!([]), false);
    let protected = source(json!([FINALIZER_CLONING_PROTECTION]), false);
    let bare_deleting = source(json!([]), true);
    let protected_deleting = source(json!([FINALIZER_CLONING_PROTECTION]), true);
    let clone = json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}});
    let mut with_intent = clone.clone();
    with_intent["metadata"] = json!({"finalizers": [FINALIZER_PROVISIONING]});
    let mut abandoned = with_intent.clone();
    abandoned["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let table: [(&str, &Value, &PersistentVolumeClaim, &str); 8] = [
        ("no intent yet: the intent first", &clone, &bare, "record-intent"),
        ("intent, source bare", &with_intent, &bare, "protect-source"),
        ("intent, source protected", &with_intent, &protected, "provision"),
        ("intent, source going", &with_intent, &bare_deleting, "reject"),
        ("intent, source protected and going", &with_intent, &protected_deleting, "provision"),
        ("given up, source protected and going", &abandoned, &protected_deleting, "abandon"),
        ("given up, source bare", &abandoned, &bare, "protect-source"),
        // Found by its name alone: nothing is copied, so nothing needs protecting.
        ("given up, source gone unprotected", &abandoned, &bare_deleting, "abandon"),
    ];
    for (case, patch, src, want) in table {
        let c = claim(patch.clone());
        let ctx = ClaimContext {
            settings: &s,
            features: Features { clone: true, ..Features::default() },
            class: Some(&ours),
            volume: None,
            facts: PlanFacts { claim: Some(src), volume: Some(&source_pv), ..PlanFacts::default() },
            binds: true,
            journaled: false,
            binder_takes_ours: false,
            copy: crate::model::copy::ClaimCopy::Live,
            hold: None,
            now: std::time::Instant::now(),
        };
        assert_eq!(decide(&c, &ctx).name(), want, "{case}");
    }
}

/// A driver call goes on a copy the API gave in this pass; a journal entry's claim that the API
/// no longer has is undone as deleted.
#[test]
fn a_driver_call_waits_for_a_live_copy_and_a_gone_claim_is_undone() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let retained = class(DRIVER, json!({"reclaimPolicy": "Retain"}));
    let decide_with = |patch: Value, class: &StorageClass, copy: ClaimCopy, journaled: bool| {
        let ctx = ClaimContext {
            settings: &s,
            features: Features::default(),
            class: Some(class),
            volume: None,
            facts: PlanFacts::default(),
            binds: true,
            journaled,
            binder_takes_ours: false,
            copy,
            hold: None,
            now: std::time::Instant::now(),
        };
        decide(&claim(patch), &ctx).name()
    };
    let intent = json!({"metadata": {"finalizers": [INTENT]}});
    let deleting = json!({"metadata": {"finalizers": [INTENT],
        "deletionTimestamp": "2026-01-01T00:00:00Z"}});
    // (case, claim, class, copy, journaled, action)
    let table = [
        ("intent, cached", intent.clone(), &ours, ClaimCopy::Cached, false, "confirm-live"),
        ("intent, live", intent.clone(), &ours, ClaimCopy::Live, false, "provision"),
        ("deleting, cached", deleting.clone(), &ours, ClaimCopy::Cached, false, "confirm-live"),
        ("deleting, live", deleting, &ours, ClaimCopy::Live, false, "abandon"),
        (
            "no intent yet: the intent first",
            json!({}),
            &ours,
            ClaimCopy::Cached,
            false,
            "record-intent",
        ),
        ("journaled, gone", json!({}), &ours, ClaimCopy::Gone, true, "abandon"),
        ("journaled, gone, Retain", json!({}), &retained, ClaimCopy::Gone, true, "abandon"),
        ("journaled, live", json!({}), &ours, ClaimCopy::Live, true, "provision"),
    ];
    for (case, patch, class, copy, journaled, want) in table {
        assert_eq!(decide_with(patch, class, copy, journaled), want, "{case}");
    }
}
