//! The writes of a binding, in upstream's order (docs/binder.md §3.5): PV spec, PV status,
//! claim spec, claim status. Each builder returns None when its object already says it, so a
//! binding cut short by a crash finishes with only the writes that are missing.
//!
//! Every patch carries the resourceVersion it was built from: the API refuses it (409) when the
//! object changed meanwhile, and the caller decides again.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::{Value, json};

use crate::model::names::*;
use crate::model::quantity::parse_bytes;
use crate::model::{ClaimExt, ClaimPhase, VolumeExt, VolumePhase};

/// Step 1: the PV's claimRef names the claim with its UID (bound-by-controller when the PV was
/// not pre-bound to it).
pub fn volume_spec(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Option<Value> {
    let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    let prebound = pv.bound_to_claim(ns, name, uid);
    let current = pv.claim_ref();
    let same = current.is_some_and(|r| {
        r.name.as_deref() == Some(name)
            && r.namespace.as_deref() == Some(ns)
            && r.uid.as_deref() == Some(uid)
    });
    let mark = !prebound && annotation(&pv.metadata, ANN_BOUND_BY_CONTROLLER).is_none();
    if same && !mark {
        return None;
    }
    let mut patch = json!({"metadata": {"resourceVersion": pv.metadata.resource_version}});
    if !same {
        patch["spec"] = json!({"claimRef": {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": ns,
            "name": name,
            "uid": uid,
            "resourceVersion": claim.metadata.resource_version,
            "fieldPath": null,
        }});
    }
    if mark {
        patch["metadata"]["annotations"] = json!({ANN_BOUND_BY_CONTROLLER: "yes"});
    }
    Some(patch)
}

/// Step 2, and every other phase change (updateVolumePhase): the phase and the message
/// (cleared when None). None when the PV has that phase already, whatever its message.
pub fn volume_phase(
    pv: &PersistentVolume,
    phase: VolumePhase,
    message: Option<&str>,
) -> Option<Value> {
    (pv.phase() != Some(phase)).then(|| {
        json!({
            "metadata": {"resourceVersion": pv.metadata.resource_version},
            "status": {"phase": phase.as_str(), "message": message},
        })
    })
}

/// Step 3: the claim names the PV, with bind-completed (and bound-by-controller when the user
/// did not name it). Our provisioning finalizer goes in the same write: the volume is recorded.
pub fn claim_spec(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> Option<Value> {
    let pv_name = pv.metadata.name.as_deref().unwrap_or_default();
    let named = claim.volume_name() == Some(pv_name);
    let mut annotations = serde_json::Map::new();
    if !named && annotation(&claim.metadata, ANN_BOUND_BY_CONTROLLER).is_none() {
        annotations.insert(ANN_BOUND_BY_CONTROLLER.into(), json!("yes"));
    }
    if annotation(&claim.metadata, ANN_BIND_COMPLETED).is_none() {
        annotations.insert(ANN_BIND_COMPLETED.into(), json!("yes"));
    }
    let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
    let intent = finalizers.iter().any(|f| f == FINALIZER_PROVISIONING);
    if named && annotations.is_empty() && !intent {
        return None;
    }
    let mut patch = json!({"metadata": {"resourceVersion": claim.metadata.resource_version}});
    if !annotations.is_empty() {
        patch["metadata"]["annotations"] = Value::Object(annotations);
    }
    if intent {
        let kept: Vec<&String> =
            finalizers.iter().filter(|f| *f != FINALIZER_PROVISIONING).collect();
        patch["metadata"]["finalizers"] = json!(kept);
    }
    if !named {
        patch["spec"] = json!({"volumeName": pv_name});
    }
    Some(patch)
}

/// The hand-over to a provisioner (setClaimProvisioner): both provisioner annotations, unless
/// the claim names `provisioner` already.
pub fn hand_over(claim: &PersistentVolumeClaim, provisioner: &str) -> Option<Value> {
    (annotation(&claim.metadata, ANN_STORAGE_PROVISIONER) != Some(provisioner)).then(|| {
        json!({"metadata": {
            "resourceVersion": claim.metadata.resource_version,
            "annotations": {
                ANN_STORAGE_PROVISIONER: provisioner,
                ANN_BETA_STORAGE_PROVISIONER: provisioner,
            },
        }})
    })
}

/// Step 4 (updateClaimStatus with a volume): phase Bound, the PV's access modes, and, when the
/// phase changes, the capacity (the pre-resize capacity if the resizer left one).
pub fn claim_status_bound(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> Option<Value> {
    let status = claim.status.clone().unwrap_or_default();
    let spec = pv.spec.clone().unwrap_or_default();
    let mut changes = serde_json::Map::new();
    let phase_changes = claim.phase() != Some(ClaimPhase::Bound);
    if phase_changes {
        changes.insert("phase".into(), json!(ClaimPhase::Bound.as_str()));
    }
    if status.access_modes != spec.access_modes {
        changes.insert("accessModes".into(), json!(spec.access_modes));
    }
    // On binding, the claim's current VolumeAttributesClass is the PV's (upstream's binder
    // with the VolumeAttributesClass gate, GA since 1.34).
    if phase_changes
        && spec.volume_attributes_class_name.is_some()
        && status.current_volume_attributes_class_name != spec.volume_attributes_class_name
    {
        changes.insert(
            "currentVolumeAttributesClassName".into(),
            json!(spec.volume_attributes_class_name),
        );
    }
    if phase_changes {
        let pre_resize =
            annotation(&pv.metadata, ANN_PRE_RESIZE_CAPACITY).filter(|q| parse_bytes(q).is_ok());
        let claim_storage = status.capacity.as_ref().and_then(|c| c.get("storage"));
        let pv_storage = spec.capacity.as_ref().and_then(|c| c.get("storage"));
        if let Some(q) = pre_resize {
            changes.insert("capacity".into(), json!({"storage": q}));
        } else if claim_storage.is_none()
            || claim_storage.and_then(|q| parse_bytes(&q.0).ok())
                != pv_storage.and_then(|q| parse_bytes(&q.0).ok())
        {
            // The whole map replaces the old one, as upstream does.
            let mut capacity = serde_json::Map::new();
            for key in status.capacity.iter().flat_map(|c| c.keys()) {
                capacity.insert(key.clone(), Value::Null);
            }
            for (key, q) in spec.capacity.iter().flatten() {
                capacity.insert(key.clone(), json!(q));
            }
            changes.insert("capacity".into(), Value::Object(capacity));
        }
    }
    if changes.is_empty() {
        return None;
    }
    Some(json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": changes,
    }))
}

/// updateClaimStatus with no volume: `phase`, access modes and capacity cleared.
pub fn claim_status_unbound(claim: &PersistentVolumeClaim, phase: ClaimPhase) -> Option<Value> {
    let status = claim.status.clone().unwrap_or_default();
    let dirty = claim.phase() != Some(phase)
        || status.access_modes.is_some()
        || status.capacity.is_some()
        || status.current_volume_attributes_class_name.is_some();
    dirty.then(|| {
        json!({
            "metadata": {"resourceVersion": claim.metadata.resource_version},
            "status": {"phase": phase.as_str(), "accessModes": null, "capacity": null,
                       "currentVolumeAttributesClassName": null},
        })
    })
}

/// unbindVolume: a PV the controller bound loses its claimRef and the annotation; one a user
/// pre-bound keeps the name and loses only the UID. Skipped when there is nothing to take back
/// (upstream always writes: kubernetes#118545).
pub fn unbind(pv: &PersistentVolume) -> Option<Value> {
    let claim_ref = pv.claim_ref()?;
    let rv = &pv.metadata.resource_version;
    if annotation(&pv.metadata, ANN_BOUND_BY_CONTROLLER).is_some() {
        Some(json!({
            "metadata": {"resourceVersion": rv, "annotations": {ANN_BOUND_BY_CONTROLLER: null}},
            "spec": {"claimRef": null},
        }))
    } else if claim_ref.uid.as_deref().is_some_and(|u| !u.is_empty()) {
        Some(json!({
            "metadata": {"resourceVersion": rv},
            "spec": {"claimRef": {"uid": null}},
        }))
    } else {
        None
    }
}

/// assignDefaultStorageClass.
pub fn default_class(claim: &PersistentVolumeClaim, class: &str) -> Value {
    json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "spec": {"storageClassName": class},
    })
}
