//! Distributed provisioning (`--node-deployment`): one instance beside each node's driver, each
//! taking only what its node holds. Pure: the claim, its class, the instances' Leases as
//! observed and `now` in; what this instance does about it out.
//!
//! The selected-node annotation is the one lock. A claim is provisioned only by the instance of
//! the node it names, and the annotation is written with the claim's resourceVersion as
//! precondition, so it names one node at a time. An Immediate claim has no node until an
//! instance writes its own; which one writes is chosen two ways:
//! - `Rendezvous` (ours): every instance ranks the live instances that can serve the claim by
//!   a hash of the claim's UID and the node's name, and only the first writes: no wait and no
//!   conflict. If that instance's Lease lapses before it wrote, the next takes its place.
//! - `Race` (csi-provisioner's, under its flags): each instance waits a random part of the base
//!   delay, longer after each lost race up to the maximum, then writes; the losers conflict.
//!
//! Once written, the annotation is never taken from a claim for a lapsed Lease: an instance cut
//! off may still have a CreateVolume in flight, and only its own node's driver can say whether
//! the volume exists. The instance clears its own node's name only after a final failure
//! (no volume can exist), as upstream does, and an admin may clear it by hand (docs/node-local.md).

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::model::node_selector::{self, NodeView};
use crate::model::{ClaimExt, ClassExt, quantity};

/// This instance: its node, and the node's topology as the driver's NodeGetInfo gave it.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub node: &'a str,
    pub topology: &'a BTreeMap<String, String>,
    /// `--node-deployment-immediate-binding`: whether Immediate claims are taken at all.
    pub immediate_binding: bool,
    pub ownership: Ownership,
}

/// How an instance comes to own an Immediate claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    Rendezvous,
    /// `--node-deployment-base-delay` and `--node-deployment-max-delay`.
    Race {
        base: Duration,
        max: Duration,
    },
}

/// An instance as the others see it: its node, the node's topology (its Node's labels under
/// the driver's CSINode keys), its Lease as observed, and the free bytes it publishes for the
/// claim's class (None: it publishes none, and is not ruled out for room).
#[derive(Debug, Clone, Copy)]
pub struct Instance<'a> {
    pub node: &'a str,
    pub topology: &'a BTreeMap<String, String>,
    pub lease: LeaseSeen<'a>,
    pub free_bytes: Option<u128>,
}

/// An instance's Lease as this instance last read it, and since when it has read it so (by
/// the monotonic clock: another holder's renewTime, from its wall clock, is never compared).
#[derive(Debug, Clone, Copy)]
pub struct LeaseSeen<'a> {
    pub record: &'a LeaseSpec,
    pub since: Instant,
}

impl Instance<'_> {
    /// Live while its record has changed within the duration the holder wrote, by our own
    /// monotonic clock (the leader election's rule); a released Lease (no holder) is not live.
    pub fn live_until(&self) -> Option<Instant> {
        let record = self.lease.record;
        if record.holder_identity.as_deref().unwrap_or_default().is_empty() {
            return None;
        }
        let seconds = record.lease_duration_seconds.and_then(|s| u64::try_from(s).ok());
        Some(self.lease.since + Duration::from_secs(seconds.filter(|s| *s > 0)?))
    }

    fn live_at(&self, now: Instant) -> bool {
        self.live_until().is_some_and(|until| until > now)
    }
}

/// What this instance does about a claim of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimTurn {
    /// The claim names this node: provision it here.
    Provision,
    /// The claim names another node: that node's instance provisions it.
    OtherNode(String),
    /// WaitForFirstConsumer with no node yet: the scheduler's turn.
    Unscheduled,
    /// Immediate, and `--node-deployment-immediate-binding=false`: no instance takes it.
    ImmediateBindingOff,
    /// Immediate and ownerless: write this node's name into the claim after `after` (zero in
    /// rendezvous mode), preconditioned on the claim's resourceVersion.
    TakeOwnership { after: Duration },
    /// Race mode: this node cannot serve the claim (topology or room); others may.
    NotHere,
    /// Immediate and ownerless, and another live instance comes first; look again when its
    /// Lease would lapse, if it has not written by then.
    OwnedBy { node: String, recheck_at: Instant },
    /// Immediate and ownerless, and no live instance can serve it: the claim says why.
    NoInstanceCanServe(NoServer),
}

/// Why no instance can take an Immediate claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoServer {
    /// No instance holds a live Lease (this one included).
    NoLiveInstance,
    /// Live instances, none inside the class's allowedTopologies.
    OutsideAllowedTopologies { live: usize },
    /// Inside the topology, none with the room: the most any of them publishes.
    NoRoom { live: usize, most_free: u128 },
    /// This node is inside the topology but its own Lease is not live, so it may not take the
    /// claim (it may be cut off from the API): it waits for its Lease, not for the others.
    OwnLeaseLapsed,
}

/// The turn for `claim` (of `class`), with `instances` every instance's Lease as observed,
/// this one's included; `attempt` counts this instance's lost races for the claim and `jitter`
/// is a fresh random number in [0, 1) (race mode only).
pub fn claim_turn(
    scope: Scope<'_>,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    instances: &[Instance<'_>],
    now: Instant,
    attempt: u32,
    jitter: f64,
) -> ClaimTurn {
    match super::claim::selected_node(claim) {
        Some(node) if node == scope.node => return ClaimTurn::Provision,
        Some(node) => return ClaimTurn::OtherNode(node.to_string()),
        None => {}
    }
    if class.waits_for_consumer() {
        return ClaimTurn::Unscheduled;
    }
    if !scope.immediate_binding {
        return ClaimTurn::ImmediateBindingOff;
    }
    let allowed = class.allowed_topologies.as_deref().unwrap_or_default();
    let wanted = claim.requested_storage().map_or(0, |q| quantity::comparable_bytes(&q.0));
    let has_room = |i: &Instance<'_>| i.free_bytes.is_none_or(|f| f >= wanted);
    let own = instances.iter().find(|i| i.node == scope.node);
    // This node by its own topology and the room it publishes (none published: not ruled out).
    let own_fits =
        node_selector::topology_allows(allowed, scope.topology) && own.is_none_or(has_room);
    if let Ownership::Race { base, max } = scope.ownership {
        // Upstream's rule: this node's own fit only; whoever fits races.
        return if own_fits {
            ClaimTurn::TakeOwnership { after: race_delay(base, max, attempt, jitter) }
        } else {
            ClaimTurn::NotHere
        };
    }
    let live: Vec<&Instance<'_>> = instances.iter().filter(|i| i.live_at(now)).collect();
    let inside: Vec<&Instance<'_>> = live
        .iter()
        .copied()
        .filter(|i| node_selector::topology_allows(allowed, i.topology))
        .collect();
    let roomy = inside.iter().copied().filter(|i| has_room(i));
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    if let Some(first) = roomy.max_by_key(|i| (score(uid, i.node), i.node)) {
        return if first.node == scope.node {
            ClaimTurn::TakeOwnership { after: Duration::ZERO }
        } else {
            ClaimTurn::OwnedBy {
                node: first.node.to_string(),
                recheck_at: first.live_until().unwrap_or(now),
            }
        };
    }
    let own_lapsed = own_fits && own.is_some_and(|i| !i.live_at(now));
    ClaimTurn::NoInstanceCanServe(if own_lapsed {
        NoServer::OwnLeaseLapsed
    } else if live.is_empty() {
        NoServer::NoLiveInstance
    } else if inside.is_empty() {
        NoServer::OutsideAllowedTopologies { live: live.len() }
    } else {
        let most_free = inside.iter().filter_map(|i| i.free_bytes).max().unwrap_or(0);
        NoServer::NoRoom { live: live.len(), most_free }
    })
}

/// csi-provisioner's wait before a try: a random part of the base delay, doubled for each
/// race already lost, never past the maximum.
pub fn race_delay(base: Duration, max: Duration, attempt: u32, jitter: f64) -> Duration {
    let grown = base.saturating_mul(2u32.saturating_pow(attempt.min(31))).min(max);
    grown.mul_f64(jitter.clamp(0.0, 1.0))
}

/// The claim's rank for a node: FNV-1a of the UID and the node's name, mixed so that nearby
/// names spread (splitmix64's finalizer). Stable across builds and versions, since every
/// instance must compute the same ranking.
pub fn score(uid: &str, node: &str) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(uid.as_bytes());
    hasher.write(&[0xff]);
    hasher.write(node.as_bytes());
    let mut z = hasher.finish();
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whose a PV of the driver is, for deletion and expansion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeTurn {
    /// Its node affinity selects this node: this instance deletes and grows it.
    ThisNode,
    /// Its node affinity selects another node.
    OtherNode,
    /// No node affinity: any node's driver would answer "gone" for a volume it never held, so
    /// no instance acts on it; the PV says so, and an admin ends it (docs/node-local.md).
    NoAffinity,
}

/// Whether this node's instance acts on the PV: its affinity selects this node by the topology
/// the driver reported (and by name, for a `matchFields` term).
pub fn volume_turn(scope: Scope<'_>, pv: &PersistentVolume) -> VolumeTurn {
    match node_selector::volume_terms(pv) {
        None => VolumeTurn::NoAffinity,
        Some(terms) => {
            let view = NodeView { name: scope.node, labels: scope.topology };
            if node_selector::selects(terms, view) {
                VolumeTurn::ThisNode
            } else {
                VolumeTurn::OtherNode
            }
        }
    }
}

#[cfg(test)]
#[path = "node_local_tests.rs"]
mod tests;
