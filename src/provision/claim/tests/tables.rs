//! The decision tables: with our binder, beside the cluster's, and with the intent journal.

use super::*;

#[test]
fn decision_table() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let theirs = class("other.csi", json!({}));
    let wffc = class(DRIVER, json!({"volumeBindingMode": "WaitForFirstConsumer"}));
    let bad = class(DRIVER, json!({"parameters": {"csi.storage.k8s.io/nope": "x"}}));
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
        ("other driver's class", json!({}), Some(&theirs), None, "none"),
        (
            "other driver's class, even with an intent",
            with_intent.clone(),
            Some(&theirs),
            None,
            "none",
        ),
        ("new claim of ours", json!({}), Some(&ours), None, "record-intent"),
        ("deleting before any intent", deleting.clone(), Some(&ours), None, "none"),
        (
            "pre-bound by the user",
            json!({"spec": {"volumeName": "pv-x"}}),
            Some(&ours),
            None,
            "none",
        ),
        ("WFFC without a node", json!({}), Some(&wffc), None, "wait-for-consumer"),
        ("WFFC with a node", node.clone(), Some(&wffc), None, "record-intent"),
        ("bad class", json!({}), Some(&bad), None, "reject"),
        ("populator source", populated, Some(&ours), None, "populator"),
        ("class gone, no annotation", json!({}), None, None, "none"),
        ("class gone, annotated ours", annotated, None, None, "reject"),
        ("intent, no PV", with_intent.clone(), Some(&ours), None, "provision"),
        ("intent, PV recorded", with_intent.clone(), Some(&ours), Some(&our_pv), "bind"),
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
        ("intent, deleting, no PV", intent_deleting.clone(), Some(&ours), None, "abandon"),
        (
            "intent, deleting, PV recorded",
            intent_deleting,
            Some(&ours),
            Some(&our_pv),
            "drop-intent",
        ),
        ("intent, bound elsewhere", elsewhere, Some(&ours), None, "abandon"),
        ("intent, class gone", annotated_intent, None, None, "reject"),
        ("intent, deleting, class gone", gone_deleting, None, None, "cannot-abandon"),
        ("intent, class now bad", with_intent, Some(&bad), None, "reject"),
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
        ("handed over", handed.clone(), Some(&ours), None, "record-intent"),
        ("handed over (beta annotation)", beta, Some(&ours), None, "record-intent"),
        ("intent", handed_intent.clone(), Some(&ours), None, "provision"),
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
            "drop-intent",
        ),
        (
            "intent, PV made, claim deleted",
            deleting_intent,
            Some(&ours),
            Some(&our_pv),
            "drop-intent",
        ),
        ("PV made, no intent: the binder's to bind", handed, Some(&ours), Some(&our_pv), "none"),
        ("bound by the binder", bound_by_binder, Some(&ours), Some(&our_pv), "none"),
    ];
    check(&s, table, false);
}

/// Beside the cluster's binder, once its matching can take only the PV we made: we write the
/// binding ourselves (docs/binder.md §5), in both intent forms, and only for a claim it handed
/// to us that names no volume and is not being deleted.
#[test]
fn beside_the_cluster_binder_we_finish_the_binding_of_our_pv() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let our_pv = pv(DRIVER, UID);
    let handed = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let handed_intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let other = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: "x.csi"}}});
    let named = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}, "spec": {"volumeName": format!("pvc-{UID}")}});
    let named_intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}, "spec": {"volumeName": format!("pvc-{UID}")}});
    let deleting = json!({"metadata": {"finalizers": [INTENT], "deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let bound = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER, ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": format!("pvc-{UID}")}, "status": {"phase": "Bound"}});
    let finalizer_rows = || -> Vec<Row<'_>> {
        vec![
            ("finalizer, PV made", handed_intent.clone(), Some(&ours), Some(&our_pv), "bind"),
            ("no intent left, PV made", handed.clone(), Some(&ours), Some(&our_pv), "bind"),
            ("no PV yet", handed_intent.clone(), Some(&ours), None, "provision"),
            ("handed to another driver", other.clone(), Some(&ours), Some(&our_pv), "none"),
            (
                "the claim names the PV: the binder's to finish",
                named.clone(),
                Some(&ours),
                Some(&our_pv),
                "none",
            ),
            (
                "finalizer, the claim names the PV",
                named_intent.clone(),
                Some(&ours),
                Some(&our_pv),
                "none",
            ),
            (
                "finalizer, claim deleted",
                deleting.clone(),
                Some(&ours),
                Some(&our_pv),
                "drop-intent",
            ),
            ("bound", bound.clone(), Some(&ours), Some(&our_pv), "none"),
        ]
    };
    check_beside(&s, finalizer_rows(), false, false, true);
    let journal: Vec<Row<'_>> = vec![
        ("journaled, PV made", handed.clone(), Some(&ours), Some(&our_pv), "bind"),
        ("journaled, no PV yet", handed.clone(), Some(&ours), None, "provision"),
        (
            "journaled, the claim names the PV",
            named.clone(),
            Some(&ours),
            Some(&our_pv),
            "drop-intent",
        ),
    ];
    check_beside(&s, journal, false, true, true);
    // Another PV pre-bound to the claim, or our PV not the binder's match: the binder binds.
    let not_ours: Vec<Row<'_>> = vec![
        ("finalizer, PV made", handed_intent.clone(), Some(&ours), Some(&our_pv), "none"),
        ("no intent left, PV made", handed.clone(), Some(&ours), Some(&our_pv), "none"),
    ];
    check_beside(&s, not_ours, false, false, false);
    check_beside(
        &s,
        vec![("journaled", handed.clone(), Some(&ours), Some(&our_pv), "drop-intent")],
        false,
        true,
        false,
    );
    // Our own binder binds whatever the flag says.
    check_beside(&s, finalizer_rows().into_iter().take(1).collect(), true, false, false);
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
        ("journaled, PV made: dropped at once", handed, Some(&ours), Some(&our_pv), "drop-intent"),
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
        ("journaled, claim deleted, class gone", deleting, None, None, "cannot-abandon"),
        ("journaled, bound to another PV", elsewhere, Some(&ours), None, "abandon"),
    ];
    check_with(&s, table, false, true);
}

/// What follows a recorded volume is decided whole: whether we write the binding, and whether
/// the intent goes right after it (beside the cluster's binder) or on the next pass (we bind).
#[test]
fn the_binding_says_whether_the_intent_goes_with_it() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let our_pv = pv(DRIVER, UID);
    let intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let handed = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
    let bound_by_binder = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER, ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": format!("pvc-{UID}")}, "status": {"phase": "Bound"}});
    // (case, claim, we bind, journaled, binder takes ours, binding written?, intent dropped after?)
    let rows = [
        ("we bind, finalizer", intent.clone(), true, false, false, Some(false)),
        ("beside, finalizer, binder takes ours", intent.clone(), false, false, true, Some(true)),
        ("beside, journaled, binder takes ours", handed.clone(), false, true, true, Some(true)),
        (
            "beside, no intent left, binder takes ours",
            handed.clone(),
            false,
            false,
            true,
            Some(true),
        ),
        ("beside, finalizer, binder may take another", intent.clone(), false, false, false, None),
        ("beside, bound by the binder", bound_by_binder, false, false, false, None),
    ];
    for (case, patch, binds, journaled, takes, want) in rows {
        let c = claim(patch);
        let ctx = ClaimContext {
            settings: &s,
            features: Features::default(),
            class: Some(&ours),
            volume: Some(&our_pv),
            facts: PlanFacts::default(),
            binds,
            journaled,
            binder_takes_ours: takes,
            copy: ClaimCopy::Live,
            hold: None,
            now: std::time::Instant::now(),
        };
        let got = match decide(&c, &ctx) {
            Gated::Go(ClaimAction::Bind { drop_intent, .. }) => Some(drop_intent),
            _ => None,
        };
        assert_eq!(got, want, "{case}: {:?}", decide(&c, &ctx).name());
    }
}

/// A failed attempt holds its claim version until the retry: the steps that retry it (a
/// refusal, CreateVolume, its undo) wait; the store's copy is still confirmed live first (the
/// live copy may be a newer version, which the hold does not cover); the others go on.
#[test]
fn a_failed_attempt_waits_for_its_retry_on_the_same_version() {
    let s = settings();
    let ours = class(DRIVER, json!({}));
    let bad = class(DRIVER, json!({"parameters": {"csi.storage.k8s.io/nope": "x"}}));
    let our_pv = pv(DRIVER, UID);
    let t0 = crate::fixtures::instant();
    let intent = json!({"metadata": {"finalizers": [INTENT], "resourceVersion": "7"}});
    let deleting = json!({"metadata": {"finalizers": [INTENT], "resourceVersion": "7", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
    let fresh = json!({"metadata": {"resourceVersion": "7"}});
    let later = json!({"metadata": {"finalizers": [INTENT], "resourceVersion": "8"}});
    let hold = Hold { version: "7".into(), until: t0 + std::time::Duration::from_secs(5) };
    // (case, claim patch, class, PV, copy, seconds after the failure, action)
    let rows = [
        ("provision, held", intent.clone(), &ours, None, ClaimCopy::Live, 0, "wait-for-retry"),
        ("provision, retry due", intent.clone(), &ours, None, ClaimCopy::Live, 6, "provision"),
        ("provision, newer version", later, &ours, None, ClaimCopy::Live, 0, "provision"),
        // The hold first, on any copy: a held claim costs no read of the API.
        ("store copy, held", intent.clone(), &ours, None, ClaimCopy::Cached, 0, "wait-for-retry"),
        (
            "store copy, retry due",
            intent.clone(),
            &ours,
            None,
            ClaimCopy::Cached,
            6,
            "confirm-live",
        ),
        ("undo, held", deleting, &ours, None, ClaimCopy::Live, 0, "wait-for-retry"),
        ("refusal, held", fresh.clone(), &bad, None, ClaimCopy::Live, 0, "wait-for-retry"),
        // Refused on this version (a missing secret): its intent waits too, with no read.
        ("intent, held", fresh.clone(), &ours, None, ClaimCopy::Cached, 0, "wait-for-retry"),
        ("intent, retry due", fresh, &ours, None, ClaimCopy::Cached, 6, "record-intent"),
        ("PV recorded: bind", intent, &ours, Some(&our_pv), ClaimCopy::Live, 0, "bind"),
    ];
    for (case, patch, class, volume, copy, after, want) in rows {
        let c = claim(patch);
        let ctx = ClaimContext {
            settings: &s,
            features: Features::default(),
            class: Some(class),
            volume,
            facts: PlanFacts::default(),
            binds: true,
            journaled: false,
            binder_takes_ours: false,
            copy,
            hold: Some(&hold),
            now: t0 + std::time::Duration::from_secs(after),
        };
        assert_eq!(decide(&c, &ctx).name(), want, "{case}");
    }
}
