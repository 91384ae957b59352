use serde_json::{Value, json};

use super::*;
use crate::fixtures::{class, merge, settings};
use crate::provision::plan::tests::claim;
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
