//! Restoring a claim from a VolumeSnapshot: what the snapshot and its content say, read from
//! their JSON (the snapshot CRDs are not k8s-openapi types), and the checks before CreateVolume
//! gets the snapshot's handle. Every refusal names the object and what is wrong with it.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::Value;

pub use super::facts::{Content, Snapshot, SnapshotLookup};
use super::facts::{PlanError, PlanFacts};
use crate::csi::v1 as csi;
use crate::model::ClaimExt;
use crate::model::names::*;
use crate::model::quantity;

fn text(v: &Value, path: &[&str]) -> Option<String> {
    path.iter().try_fold(v, |v, key| v.get(key))?.as_str().map(str::to_string)
}

/// A VolumeSnapshot's fields, with its content to be filled in by `with_content`.
pub fn parse_snapshot(v: &Value) -> Snapshot {
    let finalizers: Vec<String> = v["metadata"]["finalizers"]
        .as_array()
        .map(|f| f.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    Snapshot {
        namespace: text(v, &["metadata", "namespace"]).unwrap_or_default(),
        name: text(v, &["metadata", "name"]).unwrap_or_default(),
        uid: text(v, &["metadata", "uid"]).unwrap_or_default(),
        deleting: v["metadata"].get("deletionTimestamp").is_some_and(|t| !t.is_null()),
        protected: finalizers.iter().any(|f| f == FINALIZER_SNAPSHOT_SOURCE_PROTECTION),
        held: finalizers.iter().any(|f| f == FINALIZER_RESTORE_PROTECTION),
        resource_version: text(v, &["metadata", "resourceVersion"]).unwrap_or_default(),
        finalizers,
        ready: v["status"]["readyToUse"].as_bool() == Some(true),
        restore_size: match &v["status"]["restoreSize"] {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        },
        content_name: text(v, &["status", "boundVolumeSnapshotContentName"])
            .filter(|c| !c.is_empty()),
        error: text(v, &["status", "error", "message"]),
        content: None,
    }
}

/// A VolumeSnapshotContent's fields.
pub fn parse_content(v: &Value) -> Content {
    let reference = |key| text(v, &["spec", "volumeSnapshotRef", key]).unwrap_or_default();
    Content {
        name: text(v, &["metadata", "name"]).unwrap_or_default(),
        driver: text(v, &["spec", "driver"]).unwrap_or_default(),
        handle: text(v, &["status", "snapshotHandle"])
            .or_else(|| text(v, &["spec", "source", "snapshotHandle"]))
            .filter(|h| !h.is_empty()),
        snapshot_ref: (reference("namespace"), reference("name"), reference("uid")),
        source_volume_mode: text(v, &["spec", "sourceVolumeMode"]),
        allow_mode_change: text(v, &["metadata", "annotations", ANN_ALLOW_VOLUME_MODE_CHANGE])
            .as_deref()
            == Some("true"),
    }
}

/// The CreateVolume content source of a restore from VolumeSnapshot `name`, checked as
/// external-provisioner checks it.
pub fn restore_source(
    name: &str,
    claim: &PersistentVolumeClaim,
    required_bytes: i64,
    driver: &str,
    prevent_mode_conversion: bool,
    facts: PlanFacts<'_>,
) -> Result<csi::VolumeContentSource, PlanError> {
    let fail = |reason: String| PlanError::SnapshotSource { name: name.to_string(), reason };
    let snapshot = match facts.snapshot {
        Some(SnapshotLookup::Found(s)) => s,
        Some(SnapshotLookup::Unserved) => {
            return Err(fail(
                "the cluster does not serve snapshot.storage.k8s.io/v1; install the VolumeSnapshot CRDs and snapshot-controller".into(),
            ));
        }
        Some(SnapshotLookup::Unreadable(why)) => {
            return Err(fail(format!(
                "it cannot be read ({why}); csi-pv-controller needs get on volumesnapshots and volumesnapshotcontents (deploy/rbac/rbac.yaml)"
            )));
        }
        Some(SnapshotLookup::Missing) | None => {
            return Err(fail("it does not exist in the claim's namespace".into()));
        }
    };
    if snapshot.deleting && !snapshot.protected && !snapshot.held {
        return Err(fail("it is being deleted".into()));
    }
    let Some(content_name) = &snapshot.content_name else {
        return Err(fail(
            "it is not bound to a VolumeSnapshotContent yet; snapshot-controller binds it".into(),
        ));
    };
    let Some(content) = &snapshot.content else {
        return Err(fail(format!("its VolumeSnapshotContent {content_name} does not exist")));
    };
    let (ns, n, uid) = &content.snapshot_ref;
    if (ns.as_str(), n.as_str(), uid.as_str())
        != (snapshot.namespace.as_str(), name, snapshot.uid.as_str())
    {
        return Err(fail(format!(
            "its VolumeSnapshotContent {content_name} is bound to another snapshot ({ns}/{n})"
        )));
    }
    if content.driver != driver {
        return Err(fail(format!(
            "it was taken by driver {}, not {driver}; a volume can only be restored by the driver that took the snapshot",
            content.driver
        )));
    }
    if !snapshot.ready {
        let why = snapshot.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
        return Err(fail(format!("it is not ready to use yet{why}")));
    }
    let Some(handle) = &content.handle else {
        return Err(fail(format!(
            "its VolumeSnapshotContent {content_name} has no snapshot handle yet"
        )));
    };
    if let Some(size) = &snapshot.restore_size
        && let Ok(bytes) = quantity::parse_bytes(size)
        && i64::try_from(bytes).unwrap_or(i64::MAX) > required_bytes
    {
        return Err(fail(format!(
            "the claim requests less than the snapshot's restore size {size}; request at least that"
        )));
    }
    if prevent_mode_conversion
        && let Some(source_mode) = &content.source_volume_mode
        && source_mode != claim.volume_mode().as_str()
        && !content.allow_mode_change
    {
        return Err(fail(format!(
            "it was taken from a {source_mode} volume and the claim asks for {}; converting the volume mode is refused (--prevent-volume-mode-conversion) unless VolumeSnapshotContent {content_name} is annotated {ANN_ALLOW_VOLUME_MODE_CHANGE}=\"true\"",
            claim.volume_mode()
        )));
    }
    Ok(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource { snapshot_id: handle.clone() },
        )),
    })
}

/// A restore about to send CreateVolume from a snapshot that does not carry our protection yet
/// (and can still take it: a finalizer cannot be added to an object being deleted). None:
/// not a restore, or nothing to do.
pub fn unprotected(facts: &PlanFacts<'_>) -> Option<Snapshot> {
    match facts.snapshot {
        Some(SnapshotLookup::Found(s)) if !s.held && !s.deleting => Some((**s).clone()),
        _ => None,
    }
}

/// The snapshot's finalizers with ours added.
pub fn protected_finalizers(snapshot: &Snapshot) -> Vec<String> {
    with_finalizer(&snapshot.finalizers, FINALIZER_RESTORE_PROTECTION)
}

/// The snapshot's finalizers without ours.
pub fn released_finalizers(snapshot: &Snapshot) -> Vec<String> {
    without_finalizer(&snapshot.finalizers, FINALIZER_RESTORE_PROTECTION)
}

/// Whether `claim` may still send a CreateVolume from VolumeSnapshot `name` of its namespace:
/// it restores from it and carries an intent (our finalizer, or an entry in the journal:
/// `journaled`), or it is neither bound nor being deleted and so may yet get one (as
/// csi-provisioner's sweep counts a Pending claim).
pub fn needs_snapshot(
    claim: &PersistentVolumeClaim,
    name: &str,
    journaled: impl Fn(&PersistentVolumeClaim) -> bool,
) -> bool {
    if super::facts::of(claim) != (super::facts::Source::Snapshot { name: name.to_string() }) {
        return false;
    }
    claim.has_intent()
        || journaled(claim)
        || (claim.named_volume().is_none() && claim.metadata.deletion_timestamp.is_none())
}

/// Our protection of `snapshot` may go: no claim of its namespace needs it any more. `settled`
/// is the UID of a claim whose restore was just settled (its volume recorded in a PV, or known
/// not to exist): whatever a list still says of it, it needs the snapshot no longer.
pub fn may_release<'a>(
    snapshot: &Snapshot,
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    settled: Option<&str>,
    journaled: impl Fn(&PersistentVolumeClaim) -> bool,
) -> bool {
    snapshot.held
        && !claims.into_iter().any(|c| {
            c.metadata.namespace.as_deref() == Some(snapshot.namespace.as_str())
                && (settled.is_none() || c.metadata.uid.as_deref() != settled)
                && needs_snapshot(c, &snapshot.name, &journaled)
        })
}

#[cfg(test)]
mod tests;
