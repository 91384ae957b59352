use serde_json::{Value, json};

use super::*;
use crate::fixtures::data_claim as claim;
use crate::fixtures::{class, merge, settings};
use crate::provision::plan::{Features, build};

fn snapshot_json(extra: Value) -> Value {
    let mut v = json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": "snap", "namespace": "team", "uid": "snap-uid"},
        "spec": {"source": {"persistentVolumeClaimName": "data"}},
        "status": {"boundVolumeSnapshotContentName": "snapcontent-1", "readyToUse": true,
                   "restoreSize": "1Gi"}
    });
    merge(&mut v, extra);
    v
}

fn content_json(extra: Value) -> Value {
    let mut v = json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
        "metadata": {"name": "snapcontent-1"},
        "spec": {"driver": "d.csi", "deletionPolicy": "Delete",
                 "source": {"volumeHandle": "vol-1"}, "sourceVolumeMode": "Filesystem",
                 "volumeSnapshotRef": {"namespace": "team", "name": "snap", "uid": "snap-uid"}},
        "status": {"snapshotHandle": "snap-handle", "readyToUse": true, "restoreSize": 1073741824}
    });
    merge(&mut v, extra);
    v
}

fn lookup(snapshot: Value, content: Option<Value>) -> SnapshotLookup {
    let mut s = parse_snapshot(&snapshot);
    s.content = content.as_ref().map(parse_content);
    SnapshotLookup::Found(Box::new(s))
}

fn restore(extra: Value) -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
    let mut v = json!({"spec": {"dataSource": {
        "apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}}});
    merge(&mut v, extra);
    claim(v)
}

fn plan_with(
    c: &k8s_openapi::api::core::v1::PersistentVolumeClaim,
    l: &SnapshotLookup,
    snapshot: bool,
    prevent: bool,
) -> Result<super::super::plan::Plan, PlanError> {
    let mut s = settings();
    s.prevent_volume_mode_conversion = prevent;
    build(
        c,
        &class(json!({})),
        &s,
        Features { snapshot, ..Features::default() },
        PlanFacts { snapshot: Some(l), ..PlanFacts::default() },
    )
}

#[test]
fn the_fields_a_restore_reads_are_parsed() {
    let s = parse_snapshot(&snapshot_json(json!({"metadata": {
        "deletionTimestamp": "2026-01-01T00:00:00Z",
        "finalizers": [FINALIZER_SNAPSHOT_SOURCE_PROTECTION]}})));
    assert!(s.deleting && s.protected && s.ready);
    assert_eq!(s.restore_size.as_deref(), Some("1Gi"));
    assert_eq!(s.content_name.as_deref(), Some("snapcontent-1"));
    let c = parse_content(&content_json(json!({"metadata": {"annotations": {
        ANN_ALLOW_VOLUME_MODE_CHANGE: "true"}}})));
    assert_eq!(c.handle.as_deref(), Some("snap-handle"));
    assert_eq!(c.driver, "d.csi");
    assert!(c.allow_mode_change);
    assert_eq!(c.snapshot_ref, ("team".into(), "snap".into(), "snap-uid".into()));
    // Nonsense in the fields is read as absent, never a panic.
    let odd = parse_snapshot(&json!({"metadata": 7, "status": {"readyToUse": "yes"}}));
    assert!(!odd.ready && odd.content_name.is_none());
    let odd = parse_content(&json!([]));
    assert!(odd.handle.is_none());
}

#[test]
fn a_ready_snapshot_of_our_driver_is_restored_with_its_handle() {
    let l = lookup(snapshot_json(json!({})), Some(content_json(json!({}))));
    let plan = plan_with(&restore(json!({})), &l, true, true).unwrap();
    assert_eq!(
        plan.request.volume_content_source.unwrap().r#type,
        Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource { snapshot_id: "snap-handle".into() }
        ))
    );
    // A bigger volume than the snapshot is the driver's to grow.
    let bigger = restore(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    assert!(plan_with(&bigger, &l, true, true).is_ok());
    // A pre-provisioned content has its handle in the spec only.
    let static_content = content_json(json!({"spec": {"source": {"volumeHandle": null,
        "snapshotHandle": "given"}}, "status": {"snapshotHandle": null}}));
    let l = lookup(snapshot_json(json!({})), Some(static_content));
    assert!(plan_with(&restore(json!({})), &l, true, true).is_ok());
}

#[test]
fn a_snapshot_that_cannot_be_restored_is_refused_with_the_reason() {
    let good = || Some(content_json(json!({})));
    let table: [(&str, SnapshotLookup, Value, bool, &str); 13] = [
        (
            "no capability",
            lookup(snapshot_json(json!({})), good()),
            json!({}),
            false,
            "CREATE_DELETE_SNAPSHOT",
        ),
        ("missing", SnapshotLookup::Missing, json!({}), true, "does not exist"),
        (
            "forbidden",
            SnapshotLookup::Unreadable("403 Forbidden".into()),
            json!({}),
            true,
            "get on volumesnapshots",
        ),
        (
            "no CRDs",
            SnapshotLookup::Unserved,
            json!({}),
            true,
            "does not serve snapshot.storage.k8s.io/v1",
        ),
        (
            "deleting",
            lookup(
                snapshot_json(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})),
                good(),
            ),
            json!({}),
            true,
            "being deleted",
        ),
        (
            "unbound",
            lookup(
                snapshot_json(json!({"status": {"boundVolumeSnapshotContentName": null}})),
                None,
            ),
            json!({}),
            true,
            "not bound",
        ),
        (
            "content gone",
            lookup(snapshot_json(json!({})), None),
            json!({}),
            true,
            "snapcontent-1 does not exist",
        ),
        (
            "content of another snapshot",
            lookup(
                snapshot_json(json!({})),
                Some(content_json(json!({"spec": {"volumeSnapshotRef": {"uid": "other"}}}))),
            ),
            json!({}),
            true,
            "bound to another snapshot",
        ),
        (
            "other driver",
            lookup(
                snapshot_json(json!({})),
                Some(content_json(json!({"spec": {"driver": "x.csi"}}))),
            ),
            json!({}),
            true,
            "taken by driver x.csi",
        ),
        (
            "not ready",
            lookup(
                snapshot_json(json!({"status": {"readyToUse": false,
                    "error": {"message": "disk on fire"}}})),
                good(),
            ),
            json!({}),
            true,
            "not ready to use yet: disk on fire",
        ),
        (
            "no handle",
            lookup(
                snapshot_json(json!({})),
                Some(content_json(json!({"status": {"snapshotHandle": null}}))),
            ),
            json!({}),
            true,
            "no snapshot handle",
        ),
        (
            "too small",
            lookup(snapshot_json(json!({"status": {"restoreSize": "2Gi"}})), good()),
            json!({}),
            true,
            "restore size 2Gi",
        ),
        (
            "mode conversion",
            lookup(snapshot_json(json!({})), good()),
            json!({"spec": {"volumeMode": "Block"}}),
            true,
            "--prevent-volume-mode-conversion",
        ),
    ];
    for (case, l, extra, capable, text) in table {
        let e = plan_with(&restore(extra), &l, capable, true).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(text), "{case}: {e}");
        assert!(e.contains("snap"), "{case}: names the snapshot: {e}");
    }
}

#[test]
fn a_mode_change_passes_when_allowed_or_not_prevented() {
    let block = restore(json!({"spec": {"volumeMode": "Block"}}));
    let plain = lookup(snapshot_json(json!({})), Some(content_json(json!({}))));
    assert!(plan_with(&block, &plain, true, false).is_ok());
    let allowed = lookup(
        snapshot_json(json!({})),
        Some(content_json(json!({"metadata": {"annotations": {
            ANN_ALLOW_VOLUME_MODE_CHANGE: "true"}}}))),
    );
    assert!(plan_with(&block, &allowed, true, true).is_ok());
    // A protected snapshot being deleted still serves.
    let protected = lookup(
        snapshot_json(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": [FINALIZER_SNAPSHOT_SOURCE_PROTECTION]}})),
        Some(content_json(json!({}))),
    );
    assert!(plan_with(&restore(json!({})), &protected, true, true).is_ok());
}

const DELETING: &str = "2026-01-01T00:00:00Z";

fn found(extra: Value) -> SnapshotLookup {
    lookup(snapshot_json(extra), Some(content_json(json!({}))))
}

fn held() -> Value {
    json!({"metadata": {"resourceVersion": "9",
        "finalizers": ["other/keep", FINALIZER_RESTORE_PROTECTION]}})
}

#[test]
fn our_restore_protection_is_read_and_written_beside_other_finalizers() {
    let SnapshotLookup::Found(s) = found(held()) else { unreachable!() };
    assert!(s.held && !s.protected);
    assert_eq!(s.resource_version, "9");
    assert_eq!(released_finalizers(&s), vec!["other/keep".to_string()]);
    assert_eq!(protected_finalizers(&s), s.finalizers, "never twice");
    let SnapshotLookup::Found(bare) = found(json!({})) else { unreachable!() };
    assert_eq!(protected_finalizers(&bare), vec![FINALIZER_RESTORE_PROTECTION.to_string()]);
    // A snapshot being deleted under our protection still serves the restore.
    let mut deleting = held();
    deleting["metadata"]["deletionTimestamp"] = json!(DELETING);
    assert!(plan_with(&restore(json!({})), &found(deleting), true, true).is_ok());
}

#[test]
fn a_restore_protects_its_snapshot_unless_held_or_on_its_way_out() {
    let facts = |l: &SnapshotLookup| {
        unprotected(&PlanFacts { snapshot: Some(l), ..PlanFacts::default() }).is_some()
    };
    assert!(facts(&found(json!({}))));
    assert!(!facts(&found(held())), "already ours");
    let deleting = found(json!({"metadata": {"deletionTimestamp": DELETING}}));
    assert!(!facts(&deleting), "no finalizer can be added to an object being deleted");
    assert!(!facts(&SnapshotLookup::Missing));
    assert!(unprotected(&PlanFacts::default()).is_none(), "not a restore");
}

#[test]
fn the_protection_goes_once_no_claim_of_the_namespace_needs_the_snapshot() {
    let SnapshotLookup::Found(s) = found(held()) else { unreachable!() };
    let journaled = |c: &k8s_openapi::api::core::v1::PersistentVolumeClaim| {
        c.metadata.name.as_deref() == Some("journaled")
    };
    let bound = json!({"spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}});
    let other = |extra: Value| {
        let mut c = restore(extra);
        c.metadata.uid = Some("u-2".into());
        c
    };
    // (case, another claim, settled UID, may release)
    let table: Vec<(
        &str,
        Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
        Option<&str>,
        bool,
    )> = vec![
        ("no claim at all", None, None, true),
        ("a pending restore may still get an intent", Some(other(json!({}))), None, false),
        ("a bound restore needs it no more", Some(other(bound.clone())), None, true),
        (
            "an intent, bound or being deleted",
            Some(other(json!({"metadata": {"finalizers": [FINALIZER_PROVISIONING],
                "deletionTimestamp": DELETING}}))),
            None,
            false,
        ),
        (
            "deleted, no intent",
            Some(other(
                json!({"metadata": {"finalizers": ["x/y"], "deletionTimestamp": DELETING}}),
            )),
            None,
            true,
        ),
        (
            "a journaled intent",
            Some(other(json!({"metadata": {"name": "journaled"}, "spec": {"volumeName": "p"}}))),
            None,
            false,
        ),
        (
            "the claim just settled, whatever the list says",
            Some(restore(json!({"metadata": {"finalizers": [FINALIZER_PROVISIONING]}}))),
            Some("u-1"),
            true,
        ),
        (
            "another snapshot",
            Some(other(json!({"spec": {"dataSource": {"name": "other-snap"}}}))),
            None,
            true,
        ),
        (
            "another namespace",
            Some(other(json!({"metadata": {"namespace": "elsewhere"}}))),
            None,
            true,
        ),
    ];
    for (case, claim, settled, want) in table {
        assert_eq!(may_release(&s, claim.iter(), settled, journaled), want, "{case}");
    }
    let SnapshotLookup::Found(bare) = found(json!({})) else { unreachable!() };
    assert!(!may_release(&bare, None, None, journaled), "nothing of ours to release");
}

#[test]
fn a_probe_for_a_given_up_claim_leaves_out_a_source_it_cannot_read() {
    let l = lookup(snapshot_json(json!({})), None);
    let facts = PlanFacts { snapshot: Some(&l), probe: true, ..PlanFacts::default() };
    let plan = build(
        &restore(json!({})),
        &class(json!({})),
        &settings(),
        Features { snapshot: true, ..Features::default() },
        facts,
    )
    .unwrap();
    assert_eq!(plan.request.volume_content_source, None);
    // A readable source is still sent, and the driver's lack of support still refuses.
    let good = lookup(snapshot_json(json!({})), Some(content_json(json!({}))));
    let facts = PlanFacts { snapshot: Some(&good), probe: true, ..PlanFacts::default() };
    let features = Features { snapshot: true, ..Features::default() };
    let plan = build(&restore(json!({})), &class(json!({})), &settings(), features, facts);
    assert!(plan.unwrap().request.volume_content_source.is_some());
    let refused =
        build(&restore(json!({})), &class(json!({})), &settings(), Features::default(), facts);
    assert!(matches!(refused, Err(PlanError::SnapshotUnsupported(..))));
}

#[test]
fn the_claim_decision_protects_before_the_intent_and_releases_on_the_way_out() {
    use crate::provision::claim::{ClaimContext, decide};
    let settings = crate::fixtures::settings();
    let gold = class(json!({}));
    // With the cluster's binder (`binds` false) or as the binder, and our PV if there is one.
    let decide_on = |c: &k8s_openapi::api::core::v1::PersistentVolumeClaim,
                     l: &SnapshotLookup,
                     volume: Option<&k8s_openapi::api::core::v1::PersistentVolume>,
                     binds: bool| {
        let ctx = ClaimContext {
            settings: &settings,
            features: Features { snapshot: true, ..Features::default() },
            class: Some(&gold),
            volume,
            facts: PlanFacts { snapshot: Some(l), ..PlanFacts::default() },
            binds,
            journaled: false,
            binder_takes_ours: false,
            copy: crate::model::copy::ClaimCopy::Live,
            hold: None,
            now: std::time::Instant::now(),
        };
        decide(c, &ctx).name()
    };
    let intent = json!({"metadata": {"finalizers": [FINALIZER_PROVISIONING]}});
    let mut gone = intent.clone();
    gone["metadata"]["deletionTimestamp"] = json!(DELETING);
    let mut held_deleting = held();
    held_deleting["metadata"]["deletionTimestamp"] = json!(DELETING);
    let no_intent_gone =
        json!({"metadata": {"finalizers": ["x/y"], "deletionTimestamp": DELETING}});
    // (case, claim, snapshot, action)
    let table = [
        ("new restore", json!({}), found(json!({})), "protect-snapshot"),
        ("new restore, held", json!({}), found(held()), "record-intent"),
        ("intent, unprotected", intent.clone(), found(json!({})), "protect-snapshot"),
        ("intent, held", intent.clone(), found(held()), "provision"),
        (
            "intent, held, snapshot deleted",
            intent.clone(),
            found(held_deleting.clone()),
            "provision",
        ),
        ("claim deleted, snapshot deleted", gone.clone(), found(held_deleting.clone()), "abandon"),
        // The volume is found by its name alone, and deleted; one never made comes back empty.
        ("claim deleted, snapshot gone", gone.clone(), SnapshotLookup::Missing, "abandon"),
        ("claim deleted, content gone", gone, lookup(snapshot_json(json!({})), None), "abandon"),
        ("no intent, deleted, held", no_intent_gone.clone(), found(held()), "release-snapshot"),
        ("no intent, deleted, not held", no_intent_gone, found(json!({})), "none"),
    ];
    for (case, extra, l, want) in table {
        assert_eq!(decide_on(&restore(extra), &l, None, true), want, "{case}");
    }

    // Bound to the volume made for it, no intent left: a held snapshot is released (the pass
    // that bound it may have ended before); one not held, or a claim not yet Bound, is left.
    let bound = |phase: &str| {
        let mut c = restore(json!({"metadata": {"uid": "u-1",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}}}));
        let name = settings.naming.for_claim(&c);
        c.spec.get_or_insert_with(Default::default).volume_name = Some(name.clone());
        c.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        let pv = crate::fixtures::pv(&name).csi(&settings.driver, "h").bound_to(&c).build();
        (c, pv)
    };
    for (case, phase, snapshot, want) in [
        ("bound, held", "Bound", found(held()), "release-snapshot"),
        ("bound, not held", "Bound", found(json!({})), "none"),
        ("not yet Bound, held", "Pending", found(held()), "none"),
    ] {
        let (c, pv) = bound(phase);
        assert_eq!(decide_on(&c, &snapshot, Some(&pv), false), want, "{case}");
    }
}
