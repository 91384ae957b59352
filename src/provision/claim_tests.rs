use super::*;
use serde_json::{Value, json};

const DRIVER: &str = "d.csi";
const UID: &str = "11111111-2222-3333-4444-555555555555";

fn settings() -> Settings {
    Settings {
        driver: DRIVER.into(),
        volume_name_prefix: "pvc".into(),
        volume_name_uuid_length: None,
        default_fs_type: None,
        extra_create_metadata: false,
        controller_publish_readonly: false,
        identity: "id".into(),
        prevent_volume_mode_conversion: true,
        topology: Default::default(),
        extra_modify_metadata: false,
    }
}

fn class(provisioner: &str, extra: Value) -> StorageClass {
    let mut v = json!({"metadata": {"name": "gold"}, "provisioner": provisioner});
    crate::provision::plan::tests::merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    let mut v = json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": UID, "resourceVersion": "1"},
        "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    });
    crate::provision::plan::tests::merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn pv(driver: &str, claim_uid: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": format!("pvc-{UID}")},
        "spec": {"csi": {"driver": driver, "volumeHandle": "h"},
                 "claimRef": {"name": "c", "namespace": "ns", "uid": claim_uid}}
    }))
    .unwrap()
}

const INTENT: &str = FINALIZER_PROVISIONING;

/// (case, claim patch, class, PV named after the claim, expected action)
type Row<'a> = (
    &'static str,
    Value,
    Option<&'a StorageClass>,
    Option<&'a PersistentVolume>,
    &'static str,
);

/// Runs a decision table; `binds`: whether this process binds.
fn check(s: &Settings, table: Vec<Row<'_>>, binds: bool) {
    check_with(s, table, binds, false)
}

/// As `check`; `journaled`: the claim's intent is in the intent journal.
fn check_with(s: &Settings, table: Vec<Row<'_>>, binds: bool, journaled: bool) {
    for (case, patch, class, volume, want) in table {
        let c = claim(patch);
        let ctx = ClaimContext {
            settings: s,
            features: Features::default(),
            class,
            volume,
            facts: PlanFacts::default(),
            binds,
            journaled,
        };
        assert_eq!(decide(&c, &ctx).name(), want, "{case}");
    }
}

#[test]
fn decision_table() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let theirs = class("other.csi", json!({}));
    let wffc = class(DRIVER, json!({"volumeBindingMode": "WaitForFirstConsumer"}));
    let bad = class(
        DRIVER,
        json!({"parameters": {"csi.storage.k8s.io/nope": "x"}}),
    );
    let our_pv = pv(DRIVER, UID);
    let their_pv = pv("other.csi", UID);
    let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
    let with_intent = json!({"metadata": {"finalizers": [INTENT]}});
    let gone_deleting = json!({"metadata": {"finalizers": [INTENT], "deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let intent_deleting =
        json!({"metadata": {"finalizers": [INTENT], "deletionTimestamp": "2026-01-01T00:00:00Z"}});
    let node = json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}});
    let annotated = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let annotated_intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let elsewhere =
        json!({"metadata": {"finalizers": [INTENT]}, "spec": {"volumeName": "static-1"}});
    let populated =
        json!({"spec": {"dataSourceRef": {"apiGroup": "x.io", "kind": "Thing", "name": "t"}}});

    let table: Vec<Row<'_>> = vec![
        (
            "other driver's class",
            json!({}),
            Some(&theirs),
            None,
            "none",
        ),
        (
            "other driver's class, even with an intent",
            with_intent.clone(),
            Some(&theirs),
            None,
            "none",
        ),
        (
            "new claim of ours",
            json!({}),
            Some(&ours),
            None,
            "record-intent",
        ),
        (
            "deleting before any intent",
            deleting.clone(),
            Some(&ours),
            None,
            "none",
        ),
        (
            "pre-bound by the user",
            json!({"spec": {"volumeName": "pv-x"}}),
            Some(&ours),
            None,
            "none",
        ),
        (
            "WFFC without a node",
            json!({}),
            Some(&wffc),
            None,
            "wait-for-consumer",
        ),
        (
            "WFFC with a node",
            node.clone(),
            Some(&wffc),
            None,
            "record-intent",
        ),
        ("bad class", json!({}), Some(&bad), None, "reject"),
        (
            "populator source",
            populated,
            Some(&ours),
            None,
            "populator",
        ),
        ("class gone, no annotation", json!({}), None, None, "none"),
        (
            "class gone, annotated ours",
            annotated,
            None,
            None,
            "reject",
        ),
        (
            "intent, no PV",
            with_intent.clone(),
            Some(&ours),
            None,
            "provision",
        ),
        (
            "intent, PV recorded",
            with_intent.clone(),
            Some(&ours),
            Some(&our_pv),
            "bind",
        ),
        (
            "intent, PV of another driver with our name",
            with_intent.clone(),
            Some(&ours),
            Some(&their_pv),
            "provision",
        ),
        (
            "no intent, PV recorded (crash before binding)",
            json!({}),
            Some(&ours),
            Some(&our_pv),
            "bind",
        ),
        (
            "intent, deleting, no PV",
            intent_deleting.clone(),
            Some(&ours),
            None,
            "abandon",
        ),
        (
            "intent, deleting, PV recorded",
            intent_deleting,
            Some(&ours),
            Some(&our_pv),
            "drop-intent",
        ),
        (
            "intent, bound elsewhere",
            elsewhere,
            Some(&ours),
            None,
            "abandon",
        ),
        ("intent, class gone", annotated_intent, None, None, "reject"),
        (
            "intent, deleting, class gone",
            gone_deleting,
            None,
            None,
            "cannot-abandon",
        ),
        (
            "intent, class now bad",
            with_intent,
            Some(&bad),
            None,
            "reject",
        ),
    ];
    check(&s, table, true);
}

/// Beside kube-controller-manager's binder: nothing before its hand-over, no claim-side
/// bind writes, and the intent still guards every CreateVolume.
#[test]
fn decision_table_beside_the_cluster_binder() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let our_pv = pv(DRIVER, UID);
    let handed = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let beta = json!({"metadata": {"annotations": {ANN_BETA_STORAGE_PROVISIONER: DRIVER}}});
    let other = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: "x.csi"}}});
    let handed_intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let bound_intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER, ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": format!("pvc-{UID}")}, "status": {"phase": "Bound"}});
    let deleting_intent = json!({"metadata": {"finalizers": [INTENT], "deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let bound_by_binder = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER, ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": format!("pvc-{UID}")}, "status": {"phase": "Bound"}});
    let table: Vec<Row<'_>> = vec![
        ("not handed over yet", json!({}), Some(&ours), None, "none"),
        ("handed to another driver", other, Some(&ours), None, "none"),
        (
            "handed over",
            handed.clone(),
            Some(&ours),
            None,
            "record-intent",
        ),
        (
            "handed over (beta annotation)",
            beta,
            Some(&ours),
            None,
            "record-intent",
        ),
        (
            "intent",
            handed_intent.clone(),
            Some(&ours),
            None,
            "provision",
        ),
        (
            "intent, PV made: the binder binds",
            handed_intent.clone(),
            Some(&ours),
            Some(&our_pv),
            "none",
        ),
        (
            "intent, PV made, bound by the binder: drop the intent",
            bound_intent,
            Some(&ours),
            Some(&our_pv),
            "bind",
        ),
        (
            "intent, PV made, claim deleted",
            deleting_intent,
            Some(&ours),
            Some(&our_pv),
            "drop-intent",
        ),
        (
            "PV made, no intent: the binder's to bind",
            handed,
            Some(&ours),
            Some(&our_pv),
            "none",
        ),
        (
            "bound by the binder",
            bound_by_binder,
            Some(&ours),
            Some(&our_pv),
            "none",
        ),
    ];
    check(&s, table, false);
}

/// The intent in the journal (`--intent-journal`): the same guard before CreateVolume, and
/// it goes as soon as the PV records the volume, with no claim write.
#[test]
fn decision_table_with_the_intent_journal() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let our_pv = pv(DRIVER, UID);
    let handed = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let elsewhere = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}, "spec": {"volumeName": "static-1"}});
    let table: Vec<Row<'_>> = vec![
        ("journaled", handed.clone(), Some(&ours), None, "provision"),
        (
            "journaled, PV made: dropped at once",
            handed,
            Some(&ours),
            Some(&our_pv),
            "drop-intent",
        ),
        (
            "journaled, claim deleted (or gone: its copy)",
            deleting.clone(),
            Some(&ours),
            None,
            "abandon",
        ),
        (
            "journaled, claim deleted, PV made",
            deleting.clone(),
            Some(&ours),
            Some(&our_pv),
            "drop-intent",
        ),
        (
            "journaled, claim deleted, class gone",
            deleting,
            None,
            None,
            "cannot-abandon",
        ),
        (
            "journaled, bound to another PV",
            elsewhere,
            Some(&ours),
            None,
            "abandon",
        ),
    ];
    check_with(&s, table, false, true);
}

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
        (
            "bound",
            json!({"spec": {"volumeName": "v"}}),
            &ours,
            old,
            false,
        ),
        (
            "WaitForFirstConsumer, no node yet",
            json!({}),
            &wffc,
            old,
            false,
        ),
        ("WaitForFirstConsumer, node chosen", node, &wffc, old, true),
        (
            "carrying our intent",
            json!({"metadata": {"finalizers": [INTENT]}}),
            &ours,
            old,
            false,
        ),
    ];
    for (case, patch, class, age, want) in table {
        assert_eq!(
            awaits_handover(&claim(patch), Some(class), DRIVER, age, grace),
            want,
            "{case}"
        );
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
        (
            "intent",
            json!({"metadata": {"finalizers": [INTENT]}}),
            Handover::Provision,
        ),
        (
            "binder half-way: volumeName without bind-completed",
            json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}, "spec": {"volumeName": "v"}}),
            Handover::None,
        ),
        (
            "bound",
            json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "v"}, "status": {"phase": "Bound"}}),
            Handover::Expand,
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
        (
            "no intent yet: the intent first",
            &clone,
            &bare,
            "record-intent",
        ),
        ("intent, source bare", &with_intent, &bare, "protect-source"),
        (
            "intent, source protected",
            &with_intent,
            &protected,
            "provision",
        ),
        (
            "intent, source going",
            &with_intent,
            &bare_deleting,
            "reject",
        ),
        (
            "intent, source protected and going",
            &with_intent,
            &protected_deleting,
            "provision",
        ),
        (
            "given up, source protected and going",
            &abandoned,
            &protected_deleting,
            "abandon",
        ),
        ("given up, source bare", &abandoned, &bare, "protect-source"),
        (
            "given up, source gone unprotected",
            &abandoned,
            &bare_deleting,
            "cannot-abandon",
        ),
    ];
    for (case, patch, src, want) in table {
        let c = claim(patch.clone());
        let ctx = ClaimContext {
            settings: &s,
            features: Features {
                clone: true,
                ..Features::default()
            },
            class: Some(&ours),
            volume: None,
            facts: PlanFacts {
                claim: Some(src),
                volume: Some(&source_pv),
                ..PlanFacts::default()
            },
            binds: true,
            journaled: false,
        };
        assert_eq!(decide(&c, &ctx).name(), want, "{case}");
    }
}
