//! Which objects the periodic pass (`--pvclaimbinder-sync-period`) looks at again. The watches
//! queue every change, so a pass over an object nothing has touched can only matter when its
//! next step waits on time: a claim not yet Bound (a backoff, a handover, WaitForFirstConsumer),
//! a resize or attributes change under way, a volume on its way to reclaim, anything being
//! deleted. A Bound pair that agrees with itself, or an Available PV nobody names, is settled
//! and waits for a change or for the full resync (`--resync-period`). See docs/binder.md §4.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use crate::model::{ClaimExt, VolumeExt, VolumePhase};

/// Whether the periodic pass looks at `claim` again. `volume`: the PV it names, from the store.
/// `binds`: this process is the binder, so a Bound claim is settled only when its PV agrees.
pub fn claim_needs_pass(
    claim: &PersistentVolumeClaim,
    volume: Option<&PersistentVolume>,
    binds: bool,
) -> bool {
    if claim.metadata.deletion_timestamp.is_some() || claim.has_intent() || !claim.is_bound() {
        return true;
    }
    if resizing(claim) || modifying(claim) {
        return true;
    }
    let agrees =
        volume.is_some_and(|pv| pv.phase() == Some(VolumePhase::Bound) && pv.bound_to(claim));
    binds && !agrees
}

/// Whether the periodic pass looks at `volume` again. `claim`: the claim its claimRef names,
/// from the store. `binds` as for claims.
pub fn volume_needs_pass(
    volume: &PersistentVolume,
    claim: Option<&PersistentVolumeClaim>,
    binds: bool,
) -> bool {
    if volume.metadata.deletion_timestamp.is_some() {
        return true;
    }
    match volume.phase() {
        Some(VolumePhase::Available) => volume.claim_ref().is_some(),
        Some(VolumePhase::Bound) => {
            // The claim the PV was bound to: none when it is gone or was recreated.
            let its_claim = claim.filter(|c| {
                volume.claim_ref_uid().is_some_and(|u| Some(u) == c.metadata.uid.as_deref())
            });
            let agrees = its_claim.is_some_and(|c| c.named_volume() == Some(volume.name()));
            // Beside the cluster's binder only a claim gone (or recreated) is ours to act on:
            // the PV is released.
            if binds { !agrees } else { its_claim.is_none() }
        }
        // Pending, Released, Failed or unknown: reclaim or a first phase is still to come.
        _ => true,
    }
}

/// A resize is under way or owed: the request differs from the capacity, or the status
/// records a resize in progress or a condition.
fn resizing(claim: &PersistentVolumeClaim) -> bool {
    let status = claim.status.as_ref();
    let recorded = status.is_some_and(|s| {
        s.allocated_resource_statuses.as_ref().is_some_and(|r| !r.is_empty())
            || s.conditions.as_ref().is_some_and(|r| !r.is_empty())
    });
    recorded || claim.requested_storage() != claim.recorded_capacity()
}

/// A VolumeAttributesClass change is owed or under way (an Infeasible one is retried slowly).
fn modifying(claim: &PersistentVolumeClaim) -> bool {
    claim.wanted_attributes_class() != claim.current_attributes_class()
        || claim.modify_status().is_some()
}

/// What a pass makes of the PV names the index may hold while the store does not (`suspects`):
/// names our own writes put in the index ahead of the watch, and after a relist every name (a
/// PV deleted while the watch was down brings no delete event).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Missing from the store at this pass and the one before: dropped from the index.
    pub gone: Vec<String>,
    /// Missing from the store for the first time: still suspects, gone if missing next time.
    pub unseen: HashSet<String>,
}

/// Sorts the suspects: a name the store has, or the index no longer has, is cleared; one the
/// store lacked at the last pass too (`unseen_before`) is gone; any other the store lacks is
/// unseen. One pass is not enough: a PV we just created is in the index before the watch
/// brings it.
pub fn sweep(
    suspects: impl IntoIterator<Item = String>,
    in_store: impl Fn(&str) -> bool,
    in_index: impl Fn(&str) -> bool,
    unseen_before: &HashSet<String>,
) -> Sweep {
    let mut sweep = Sweep::default();
    for name in suspects {
        if in_store(&name) || !in_index(&name) {
            continue;
        }
        if unseen_before.contains(&name) {
            sweep.gone.push(name);
        } else {
            sweep.unseen.insert(name);
        }
    }
    sweep.gone.sort();
    sweep
}

#[cfg(test)]
mod tests;
