//! What the binder does with a PV: syncVolume row by row (docs/binder.md §3.7), reclaim
//! (§3.8), and the upkeep of the deletion finalizer on this driver's PVs.
//!
//! The store's claim is a hint. Where upstream double-checks a missing claim against the API
//! (kubernetes#83177, #105131), the decision asks for the live claim and is made again with it.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttachment;

use super::claim::Notice;
use crate::model::names::*;
use crate::model::reason::Reason;
use crate::model::{ClaimExt, ReclaimPolicy, VolumeExt, VolumePhase};

/// Where the claim named by the PV's claimRef was looked up.
#[derive(Debug, Clone, Copy)]
pub enum ClaimLookup<'a> {
    /// The watch cache: a missing claim or another UID must be confirmed live.
    Store(Option<&'a PersistentVolumeClaim>),
    /// The API, just now.
    Live(Option<&'a PersistentVolumeClaim>),
}

/// How a PV that is no longer wanted is reclaimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaim {
    /// Retain: nothing; the PV stays Released until an admin reuses or deletes it.
    Keep,
    /// Delete, and the PV is this driver's: DeleteVolume, then the PV.
    Delete,
    /// Delete, but someone else deletes it (another provisioner, or an in-tree plugin).
    External,
    /// Recycle, or an unknown policy: the PV goes Failed with this event.
    Fail(Notice),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeStep {
    None,
    /// Set the phase (message cleared), when it differs.
    Phase(VolumePhase),
    /// The store does not show the claim (or shows another UID): read it live and decide again.
    CheckClaim,
    /// The claim is gone: mark Released, then reclaim.
    Release,
    /// Already Released or Failed: reclaim.
    Reclaim(Reclaim),
    /// The claim has not written its side yet: look at the claim now.
    QueueClaim,
    /// The PV and the claim that names it disagree on volumeMode.
    ModeMismatch,
    /// The claim is bound to another PV: take this PV's claimRef back and make it Available.
    Unbind,
    /// Our deletion finalizer is missing on a bound PV with policy Delete.
    AddFinalizer,
    /// Our deletion finalizer is on a PV whose policy is not Delete.
    RemoveFinalizer,
}

impl VolumeStep {
    pub fn name(&self) -> &'static str {
        match self {
            VolumeStep::None => "none",
            VolumeStep::Phase(_) => "phase",
            VolumeStep::CheckClaim => "check-claim",
            VolumeStep::Release => "release",
            VolumeStep::Reclaim(_) => "reclaim",
            VolumeStep::QueueClaim => "queue-claim",
            VolumeStep::ModeMismatch => "mode-mismatch",
            VolumeStep::Unbind => "unbind",
            VolumeStep::AddFinalizer => "add-finalizer",
            VolumeStep::RemoveFinalizer => "remove-finalizer",
        }
    }
}

/// The PV is a CSI volume of `driver`, or an in-tree volume that `driver` provisioned or was
/// handed through CSI migration (`migration::deleted_by`).
pub fn is_drivers(pv: &PersistentVolume, driver: &str) -> bool {
    pv.csi_driver() == Some(driver) || crate::migration::deleted_by(pv, driver).is_some()
}

/// `driver` made the PV's volume: `provisioned-by` names it, or the volume is an in-tree one
/// migrated to it.
fn provisioned_by(pv: &PersistentVolume, driver: &str) -> bool {
    annotation(&pv.metadata, ANN_PROVISIONED_BY) == Some(driver)
        || crate::migration::deleted_by(pv, driver).is_some()
}

fn has_finalizer(pv: &PersistentVolume) -> bool {
    crate::model::names::has_finalizer(&pv.metadata, FINALIZER_VOLUME)
}

fn set_phase(pv: &PersistentVolume, wanted: VolumePhase) -> VolumeStep {
    if pv.phase() == Some(wanted) { VolumeStep::None } else { VolumeStep::Phase(wanted) }
}

/// reclaimVolume for a PV whose claim is gone.
pub fn reclaim(pv: &PersistentVolume, driver: &str) -> Reclaim {
    // Migrated to another CSI driver: its provisioner deletes it (kube-controller-manager
    // stands down the same way).
    let migrated_to = crate::migration::migrated_to(&pv.metadata);
    if !migrated_to.is_empty() && migrated_to != driver {
        return Reclaim::External;
    }
    match pv.reclaim_policy() {
        ReclaimPolicy::Retain => Reclaim::Keep,
        ReclaimPolicy::Delete if is_drivers(pv, driver) => Reclaim::Delete,
        // Another provisioner made it and deletes it; any CSI PV is left to its driver's
        // provisioner (kube-controller-manager's "external deleter": Released, silently).
        ReclaimPolicy::Delete
            if annotation(&pv.metadata, ANN_PROVISIONED_BY).is_some()
                || pv.csi_driver().is_some() =>
        {
            Reclaim::External
        }
        // Nothing can delete it (no plugin here, no provisioner named): say so, as upstream.
        ReclaimPolicy::Delete => Reclaim::Fail(Notice {
            warning: true,
            reason: Reason::VolumeFailedDelete,
            message: format!(
                "error getting deleter volume plugin for volume {:?}: no deletable volume plugin matched",
                pv.metadata.name.as_deref().unwrap_or_default()
            ),
        }),
        ReclaimPolicy::Recycle => Reclaim::Fail(Notice {
            warning: true,
            reason: Reason::VolumeFailedRecycle,
            message: "No recycler plugin found for the volume!".into(),
        }),
        ReclaimPolicy::Unknown(_) => Reclaim::Fail(Notice {
            warning: true,
            reason: Reason::VolumeUnknownReclaimPolicy,
            message: "Volume has unrecognized PersistentVolumeReclaimPolicy".into(),
        }),
    }
}

/// Our deletion is over: the PV is being deleted and our finalizer is gone, so only someone
/// else's finalizer (pv-protection) holds it. Looking again would repeat DeleteVolume and the
/// PV delete for nothing (upstream's shouldDelete says no here too).
pub fn deletion_done(pv: &PersistentVolume) -> bool {
    pv.metadata.deletion_timestamp.is_some() && !has_finalizer(pv)
}

/// Released or Failed already: reclaim; otherwise release first.
fn release_or_reclaim(pv: &PersistentVolume, driver: &str) -> VolumeStep {
    match pv.phase() {
        Some(phase @ (VolumePhase::Released | VolumePhase::Failed)) => match reclaim(pv, driver) {
            // A Failed PV stays Failed: the event was given when it failed.
            Reclaim::Fail(_) if phase == VolumePhase::Failed => VolumeStep::None,
            Reclaim::Keep | Reclaim::External => VolumeStep::None,
            Reclaim::Delete if deletion_done(pv) => VolumeStep::None,
            r => VolumeStep::Reclaim(r),
        },
        _ => VolumeStep::Release,
    }
}

/// syncVolume for `pv`; `driver` is ours (its PVs get the finalizer upkeep and CSI deletion).
pub fn decide(pv: &PersistentVolume, claim: ClaimLookup<'_>, driver: &str) -> VolumeStep {
    let ours = is_drivers(pv, driver);
    let delete = pv.reclaim_policy() == ReclaimPolicy::Delete;
    if ours && has_finalizer(pv) && !delete {
        return VolumeStep::RemoveFinalizer;
    }
    let Some(claim_ref) = pv.claim_ref() else {
        return set_phase(pv, VolumePhase::Available); // row 1
    };
    let Some(ref_uid) = claim_ref.uid.as_deref().filter(|u| !u.is_empty()) else {
        return set_phase(pv, VolumePhase::Available); // row 2: pre-bound by name only
    };
    let awaits_reclaim = VolumePhase::awaits_reclaim(pv.phase());
    let claim = match claim {
        // Rows 3 and 4: confirm in the API before believing the claim is gone.
        ClaimLookup::Store(c) => match c {
            Some(c) if c.metadata.uid.as_deref() == Some(ref_uid) => Some(c),
            None if awaits_reclaim => None,
            _ => return VolumeStep::CheckClaim,
        },
        ClaimLookup::Live(c) => c.filter(|c| c.metadata.uid.as_deref() == Some(ref_uid)),
    };
    let Some(claim) = claim else {
        return release_or_reclaim(pv, driver); // row 5
    };
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    match claim.volume_name().unwrap_or("") {
        // Row 6: the claim's side is not written yet.
        "" => {
            if pv.volume_mode() != claim.volume_mode() {
                VolumeStep::ModeMismatch
            } else {
                VolumeStep::QueueClaim
            }
        }
        // Row 7.
        v if v == name => match set_phase(pv, VolumePhase::Bound) {
            VolumeStep::None
                if ours
                    && delete
                    && !has_finalizer(pv)
                    && pv.metadata.deletion_timestamp.is_none() =>
            {
                VolumeStep::AddFinalizer
            }
            step => step,
        },
        // Row 8: a provisioned PV with Delete whose claim took another PV.
        _ if annotation(&pv.metadata, ANN_PROVISIONED_BY).is_some() && delete => {
            release_or_reclaim(pv, driver)
        }
        // Rows 9 and 10.
        _ => VolumeStep::Unbind,
    }
}

/// Beside kube-controller-manager's binder, the steps of `decide` that stay ours: the upkeep of
/// our deletion finalizer; releasing our driver's PVs whose claim the live API shows gone (or,
/// provisioned with Delete, bound to another PV); and deleting the volumes of Released PVs the
/// driver provisioned (`pv.kubernetes.io/provisioned-by`), as external-provisioner. Released is
/// the value that binder writes itself, after the same live check, and whoever is first writes
/// it (docs/binder.md §5): a burst of claims queued at that binder does not hold up deletions.
/// Other phases, unbinding, the claim's side and the binder's events are its own.
pub fn beside_cluster_binder(pv: &PersistentVolume, driver: &str, step: VolumeStep) -> VolumeStep {
    match step {
        VolumeStep::Phase(_)
        | VolumeStep::QueueClaim
        | VolumeStep::ModeMismatch
        | VolumeStep::Unbind
        | VolumeStep::Reclaim(Reclaim::Fail(_)) => VolumeStep::None,
        VolumeStep::Reclaim(Reclaim::Delete) if !provisioned_by(pv, driver) => VolumeStep::None,
        step => step,
    }
}

/// Before a Released PV's volume is deleted, its state is read again from the API: the live PV,
/// then (only if that still says delete) the live claim. What the reading shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recheck {
    /// The PV is gone: nothing to do.
    Gone,
    /// Our deletion is over; only another finalizer holds the PV.
    Finished,
    /// No longer Released (or Failed) with a volume of ours to delete: decide again on it.
    Changed,
    /// Read the live claim and look again.
    ReadClaim,
    /// The claim still holds the PV: the cache was wrong to call it Released. Never delete.
    Held,
    /// Delete the volume.
    Delete,
}

/// `pv`: the live PV (None: not found); `claim`: the live claim, once read (Some(None): not
/// found).
pub fn recheck_reclaim(
    pv: Option<&PersistentVolume>,
    claim: Option<Option<&PersistentVolumeClaim>>,
    driver: &str,
) -> Recheck {
    let Some(pv) = pv else {
        return Recheck::Gone;
    };
    if deletion_done(pv) {
        return Recheck::Finished;
    }
    if !VolumePhase::awaits_reclaim(pv.phase()) || reclaim(pv, driver) != Reclaim::Delete {
        return Recheck::Changed;
    }
    match claim {
        None => Recheck::ReadClaim,
        Some(claim) if claim_holds(pv, claim) => Recheck::Held,
        Some(_) => Recheck::Delete,
    }
}

/// The mode-mismatch events of row 6: one on the PV, one on the claim.
pub fn mode_mismatch_notices(pv: &PersistentVolume, claim_name: &str) -> (Notice, Notice) {
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    (
        Notice {
            warning: true,
            reason: Reason::VolumeMismatch,
            message: format!(
                "Cannot bind PersistentVolume to requested PersistentVolumeClaim {claim_name:?} due to incompatible volumeMode."
            ),
        },
        Notice {
            warning: true,
            reason: Reason::VolumeMismatch,
            message: format!(
                "Cannot bind PersistentVolume {pv_name:?} to requested PersistentVolumeClaim due to incompatible volumeMode."
            ),
        },
    )
}

/// Whether the live claim `claim` (None: not found) still holds `volume`. Only a claim with the
/// referenced UID that is bound to this volume, or not bound at all yet, holds it.
pub fn claim_holds(volume: &PersistentVolume, claim: Option<&PersistentVolumeClaim>) -> bool {
    let Some(claim) = claim else {
        return false;
    };
    let ref_uid = volume.claim_ref_uid();
    if ref_uid.is_none() || claim.metadata.uid.as_deref() != ref_uid {
        return false;
    }
    match claim.volume_name() {
        None | Some("") => true,
        Some(v) => Some(v) == volume.metadata.name.as_deref(),
    }
}

/// The node a VolumeAttachment still attaches the PV `name` to, if any. Such a volume is not
/// deleted, whatever its reclaim policy says, until the attachment is gone (external-provisioner
/// checks the same before DeleteVolume).
pub fn attached_to<'a>(
    name: &str,
    attachments: impl IntoIterator<Item = &'a VolumeAttachment>,
) -> Option<&'a str> {
    attachments
        .into_iter()
        .find(|a| a.spec.source.persistent_volume_name.as_deref() == Some(name))
        .map(|a| a.spec.node_name.as_str())
}

/// The last gates before the DeleteVolume of a PV whose reclaim is confirmed (`recheck_reclaim`
/// said Delete): "never delete a volume that is held", in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteGate<'a> {
    Go,
    /// A VolumeAttachment still attaches it to this node; its removal queues the PV again.
    Attached(&'a str),
    /// Not provably the volume of the claim its claimRef names (a PV pre-bound by hand to a
    /// claim of ours, say): deleting it could destroy data that claim never owned.
    NotItsClaims,
}

/// Whether the released PV `pv` may go to DeleteVolume now. `served_its_claim`: the volume is
/// the one provisioned for, or bound to, the claim its claimRef names (`usage::served_its_claim`).
pub fn may_delete<'a>(
    pv: &PersistentVolume,
    attachments: impl IntoIterator<Item = &'a VolumeAttachment>,
    served_its_claim: bool,
) -> DeleteGate<'a> {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    if let Some(node) = attached_to(name, attachments) {
        return DeleteGate::Attached(node);
    }
    if !served_its_claim {
        return DeleteGate::NotItsClaims;
    }
    DeleteGate::Go
}
