//! What to do next for one PV of our driver: keep its phase and finalizer right while it is
//! bound, release it when its claim is gone, and reclaim it (delete the volume, or retain it).
//!
//! The store's view of the claim is only a hint: releasing and deleting are confirmed against
//! the live API by the executor, never judged from the cache alone.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use crate::names::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeAction {
    /// Not ours, or nothing to do.
    None,
    /// Its claim is bound to it, but the PV does not say Bound yet.
    MarkBound,
    /// Reclaim policy Delete, bound, and our finalizer missing (as upstream, for static PVs too).
    AddFinalizer,
    /// Our finalizer is on a PV whose policy is not Delete.
    RemoveFinalizer,
    /// The claim looks gone: confirm in the live API, then mark the PV Released.
    ConfirmReleased,
    /// Released with policy Delete: delete the backend volume, then the PV.
    Delete,
}

/// Decides for `volume`; `claim` is the store's object named by its claimRef, if any.
pub fn decide(
    volume: &PersistentVolume,
    claim: Option<&PersistentVolumeClaim>,
    driver: &str,
) -> VolumeAction {
    let Some(spec) = volume.spec.as_ref() else {
        return VolumeAction::None;
    };
    if spec.csi.as_ref().map(|c| c.driver.as_str()) != Some(driver) {
        return VolumeAction::None;
    }
    let has_finalizer = volume
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER_VOLUME));
    let deleting = volume.metadata.deletion_timestamp.is_some();
    if deleting && !has_finalizer {
        return VolumeAction::None;
    }
    let policy = spec
        .persistent_volume_reclaim_policy
        .as_deref()
        .unwrap_or("Retain");
    let phase = volume.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase == Some(PHASE_RELEASED) || phase == Some("Failed") {
        return match (policy, has_finalizer) {
            ("Delete", _) => VolumeAction::Delete,
            (_, true) => VolumeAction::RemoveFinalizer,
            _ => VolumeAction::None,
        };
    }
    if policy != "Delete" && has_finalizer {
        return VolumeAction::RemoveFinalizer;
    }
    let Some(claim_ref) = spec.claim_ref.as_ref() else {
        return VolumeAction::None; // unclaimed: the binder's
    };
    let Some(ref_uid) = claim_ref.uid.as_deref().filter(|u| !u.is_empty()) else {
        return VolumeAction::None; // pre-bound by name: the binder's
    };
    let name = volume.metadata.name.as_deref();
    match claim.filter(|c| c.metadata.uid.as_deref() == Some(ref_uid)) {
        None => VolumeAction::ConfirmReleased,
        Some(c) => {
            let claim_volume = c
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .filter(|v| !v.is_empty());
            match claim_volume {
                // The claim side is not written yet; the claim's own sync does that.
                None => VolumeAction::None,
                Some(v) if Some(v) == name => {
                    if phase != Some(PHASE_BOUND) {
                        VolumeAction::MarkBound
                    } else if policy == "Delete" && !has_finalizer && !deleting {
                        VolumeAction::AddFinalizer
                    } else {
                        VolumeAction::None
                    }
                }
                // Bound to another volume: a provisioned PV of ours with Delete is released, as the
                // binder does; other cases are the binder's.
                Some(_) => {
                    let provisioned = volume
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(ANN_PROVISIONED_BY))
                        .is_some_and(|p| p == driver);
                    if provisioned && policy == "Delete" {
                        VolumeAction::ConfirmReleased
                    } else {
                        VolumeAction::None
                    }
                }
            }
        }
    }
}

/// Whether the live claim `claim` (None: not found) still holds `volume`. Only a claim with the
/// referenced UID that is bound to this volume, or not bound at all yet, holds it.
pub fn claim_holds(volume: &PersistentVolume, claim: Option<&PersistentVolumeClaim>) -> bool {
    let Some(claim) = claim else {
        return false;
    };
    let ref_uid = super::volume::claim_ref_uid(volume);
    if ref_uid.is_none() || claim.metadata.uid.as_deref() != ref_uid {
        return false;
    }
    match claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
        None | Some("") => true,
        Some(v) => Some(v) == volume.metadata.name.as_deref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::plan::tests::merge;
    use serde_json::{Value, json};

    fn pv(extra: Value) -> PersistentVolume {
        let mut v = json!({
            "metadata": {"name": "pv-1", "finalizers": [FINALIZER_VOLUME],
                         "annotations": {ANN_PROVISIONED_BY: "d.csi"}},
            "spec": {"csi": {"driver": "d.csi", "volumeHandle": "h"},
                     "persistentVolumeReclaimPolicy": "Delete",
                     "claimRef": {"name": "c", "namespace": "ns", "uid": "u-1"}},
            "status": {"phase": "Bound"}
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn claim(uid: &str, volume: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": uid},
            "spec": {"volumeName": volume}
        }))
        .unwrap()
    }

    #[test]
    fn decision_table() {
        use VolumeAction::*;
        let bound = claim("u-1", Some("pv-1"));
        let unbound = claim("u-1", Option::None);
        let elsewhere = claim("u-1", Some("pv-2"));
        let replaced = claim("u-2", Some("pv-1"));
        let table: Vec<(&str, Value, Option<&PersistentVolumeClaim>, VolumeAction)> = vec![
            ("bound and in order", json!({}), Some(&bound), None),
            (
                "another driver's",
                json!({"spec": {"csi": {"driver": "x.csi"}}}),
                Option::None,
                None,
            ),
            (
                "phase lags the claim",
                json!({"status": {"phase": "Pending"}}),
                Some(&bound),
                MarkBound,
            ),
            (
                "Delete without finalizer",
                json!({"metadata": {"finalizers": null}}),
                Some(&bound),
                AddFinalizer,
            ),
            (
                "Retain with our finalizer",
                json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}}),
                Some(&bound),
                RemoveFinalizer,
            ),
            ("claim not bound yet", json!({}), Some(&unbound), None),
            (
                "claim missing from the cache",
                json!({}),
                Option::None,
                ConfirmReleased,
            ),
            (
                "claim replaced by a new UID",
                json!({}),
                Some(&replaced),
                ConfirmReleased,
            ),
            (
                "claim bound elsewhere, provisioned, Delete",
                json!({}),
                Some(&elsewhere),
                ConfirmReleased,
            ),
            (
                "claim bound elsewhere, static",
                json!({"metadata": {"annotations": null}}),
                Some(&elsewhere),
                None,
            ),
            (
                "Released, Delete",
                json!({"status": {"phase": "Released"}}),
                Option::None,
                Delete,
            ),
            (
                "Failed, Delete",
                json!({"status": {"phase": "Failed"}}),
                Option::None,
                Delete,
            ),
            (
                "Released, Retain, finalizer",
                json!({"status": {"phase": "Released"}, "spec": {"persistentVolumeReclaimPolicy": "Retain"}}),
                Option::None,
                RemoveFinalizer,
            ),
            (
                "Released, Retain, clean",
                json!({"status": {"phase": "Released"}, "metadata": {"finalizers": null}, "spec": {"persistentVolumeReclaimPolicy": "Retain"}}),
                Option::None,
                None,
            ),
            (
                "unclaimed",
                json!({"spec": {"claimRef": null}}),
                Option::None,
                None,
            ),
            (
                "pre-bound by name",
                json!({"spec": {"claimRef": {"uid": null}}}),
                Option::None,
                None,
            ),
            (
                "deleting, finalizer gone",
                json!({"metadata": {"finalizers": null, "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
                Option::None,
                None,
            ),
            (
                "deleted while bound (KEP-2644 waits)",
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
                Some(&bound),
                None,
            ),
        ];
        for (case, patch, c, want) in table {
            assert_eq!(decide(&pv(patch), c, "d.csi"), want, "{case}");
        }
    }

    #[test]
    fn what_holds_a_volume() {
        let v = pv(json!({}));
        assert!(!claim_holds(&v, Option::None), "gone");
        assert!(claim_holds(&v, Some(&claim("u-1", Some("pv-1")))));
        assert!(
            claim_holds(&v, Some(&claim("u-1", Option::None))),
            "binding not finished"
        );
        assert!(!claim_holds(&v, Some(&claim("u-1", Some("pv-2")))));
        assert!(
            !claim_holds(&v, Some(&claim("u-2", Some("pv-1")))),
            "another claim of that name"
        );
    }
}
