//! The driver's volumes against the cluster's records, decided purely: which volume a PV
//! records (adopted), which one a claim or an intent is still making (in flight), which one
//! nobody will ever claim (orphaned), which ones we cannot attribute (unknown), and which PVs
//! point at a volume the driver no longer has (lost).
//!
//! A volume is ours by its ID: drivers that put the CreateVolume name in the ID (the whole ID,
//! or one `/`, `#` or `:` separated part of it, as disk paths do) carry `<prefix>-<claim UID>`.
//! A driver that makes up its own IDs gives nothing to attribute a volume by, so its volumes
//! that no PV records are "unknown" and are never deleted.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::model::{ClassExt, ReclaimPolicy, VolumeExt, VolumePhase};
use crate::provision::secrets::SecretRef;
use crate::provision::settings::VolumeNaming;

pub mod paging;
pub mod reconciler;

#[cfg(test)]
mod tests;

/// One volume as ListVolumes reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    pub capacity_bytes: i64,
}

/// What the cluster knows, gathered by the executor from its caches (and the intent journal).
#[derive(Debug, Default)]
pub struct Known {
    /// Volume handle → PV name, for every PV of this driver.
    pub handles: HashMap<String, String>,
    /// The volume name (`VolumeNaming::for_claim`) of every claim that exists.
    pub claims: HashSet<String>,
    /// The volume names of provisioning intents whose claim may be gone (the intent journal).
    pub intents: HashSet<String>,
    /// Handles a Retain PV of this driver records, or recorded when this process saw it: the
    /// admin keeps such a volume on purpose, and deletes its PV to keep it.
    pub retained: HashSet<String>,
    /// A StorageClass of this driver retains its volumes: a volume named for a claim that is
    /// gone may be one whose Retain PV was deleted before this process saw it.
    pub retain_classes: bool,
    /// A PV of this driver whose volume ID cannot be worked out (an in-tree PV whose ID does
    /// not translate): any listed volume may be its, so none is taken for an orphan.
    pub unattributed: bool,
}

/// The driver's ID of a PV's volume (translated for an in-tree PV); None when it has none that
/// can be known.
fn handle(pv: &PersistentVolume) -> Option<String> {
    crate::migration::volume_handle(pv)?.ok().filter(|h| !h.is_empty())
}

/// Where a listed volume stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// A PV records it.
    Adopted,
    /// Named for a claim that exists or an intent still open: provisioning may be under way.
    InFlight,
    /// Named by us for a claim that no longer exists, with no PV and no intent.
    Orphaned,
    /// As orphaned, but a Retain PV recorded it, or may have (a class of the driver retains):
    /// kept on purpose, reported and never deleted.
    Retained,
    /// Not named by our prefix and recorded by no PV: someone else's, or a driver whose IDs
    /// do not carry names.
    Unknown,
}

impl State {
    pub const ALL: [State; 5] =
        [State::Adopted, State::InFlight, State::Orphaned, State::Retained, State::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Adopted => "adopted",
            State::InFlight => "in_flight",
            State::Orphaned => "orphaned",
            State::Retained => "retained",
            State::Unknown => "unknown",
        }
    }
}

/// A listed volume's state, with the names it was judged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub state: State,
    /// Our volume name found in the ID.
    pub name: Option<String>,
    /// The PV that records it.
    pub pv: Option<String>,
}

/// Judges one listed volume.
pub fn classify(id: &str, known: &Known, naming: &VolumeNaming) -> Verdict {
    let name = our_name(id, naming);
    if let Some(pv) = known.handles.get(id) {
        return Verdict { state: State::Adopted, name, pv: Some(pv.clone()) };
    }
    let state = match &name {
        _ if known.retained.contains(id) => State::Retained,
        None => State::Unknown,
        Some(n) if known.claims.contains(n) || known.intents.contains(n) => State::InFlight,
        Some(_) if known.retain_classes || known.unattributed => State::Retained,
        Some(_) => State::Orphaned,
    };
    Verdict { state, name, pv: None }
}

/// The `<prefix>-<claim UID>` that `id` carries, as a whole or as one of its parts.
pub fn our_name(id: &str, naming: &VolumeNaming) -> Option<String> {
    std::iter::once(id)
        .chain(id.split(['/', '#', ':']))
        .find(|part| names_a_claim(part, naming))
        .map(str::to_string)
}

fn names_a_claim(part: &str, naming: &VolumeNaming) -> bool {
    let Some(uid) = part.strip_prefix(naming.prefix.as_str()).and_then(|r| r.strip_prefix('-'))
    else {
        return false;
    };
    match naming.uuid_length {
        Some(n) => uid.len() == n && uid.chars().all(|c| c.is_ascii_hexdigit()),
        None => is_uuid(uid),
    }
}

/// 8-4-4-4-12 hexadecimal digits, as Kubernetes writes UIDs.
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The PVs of `driver` whose volume the (complete) listing does not have. Only PVs that existed
/// before the listing began count, and not those on their way out: being deleted, or Released
/// or Failed under Delete (their volume is deleted before the PV).
pub fn lost<'a>(
    pvs: impl IntoIterator<Item = &'a PersistentVolume>,
    driver: &str,
    listed: &HashSet<&str>,
    listing_began: &Time,
) -> Vec<String> {
    let mut lost: Vec<String> = pvs
        .into_iter()
        .filter(|pv| pv.served_by() == Some(driver))
        .filter(|pv| pv.metadata.deletion_timestamp.is_none())
        .filter(|pv| pv.metadata.creation_timestamp.as_ref().is_some_and(|t| t.0 < listing_began.0))
        .filter(|pv| {
            !(VolumePhase::awaits_reclaim(pv.phase())
                && matches!(pv.reclaim_policy(), ReclaimPolicy::Delete))
        })
        .filter(|pv| handle(pv).is_some_and(|h| !listed.contains(h.as_str())))
        .map(|pv| pv.name().to_string())
        .collect();
    lost.sort();
    lost
}

/// What one pass found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Census {
    pub verdicts: Vec<(Listed, Verdict)>,
    /// Lost PVs, or None when the listing may be incomplete.
    pub lost: Option<Vec<String>>,
}

impl Census {
    pub fn count(&self, state: State) -> usize {
        self.verdicts.iter().filter(|(_, v)| v.state == state).count()
    }

    pub fn orphans(&self) -> impl Iterator<Item = &Listed> {
        self.verdicts.iter().filter(|(_, v)| v.state == State::Orphaned).map(|(l, _)| l)
    }
}

/// Judges every listed volume, and the PVs against the listing when it is complete.
pub fn census<'a>(
    listing: &[Listed],
    complete: bool,
    pvs: impl IntoIterator<Item = &'a PersistentVolume>,
    driver: &str,
    known: &Known,
    naming: &VolumeNaming,
    listing_began: &Time,
) -> Census {
    let verdicts: Vec<(Listed, Verdict)> =
        listing.iter().map(|l| (l.clone(), classify(&l.id, known, naming))).collect();
    let lost = complete.then(|| {
        let ids: HashSet<&str> = listing.iter().map(|l| l.id.as_str()).collect();
        lost(pvs, driver, &ids, listing_began)
    });
    Census { verdicts, lost }
}

/// What is remembered between passes: since when each orphan has been seen, and which PVs were
/// lost on the last pass.
#[derive(Debug, Default)]
pub struct Memory {
    orphaned_since: HashMap<String, Instant>,
    /// Every handle a Retain PV recorded on any pass: still retained once its PV is deleted.
    retained: HashSet<String>,
    lost_last_pass: HashSet<String>,
    announced_lost: HashSet<String>,
}

/// What the executor does after a pass.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Actions {
    /// Orphans seen on two passes at least the grace apart: deleted with
    /// `--reconcile-delete-orphans`, named by the dry run otherwise.
    pub deletable: Vec<String>,
    /// PVs lost on two passes in a row, not yet announced: one Event each.
    pub announce_lost: Vec<String>,
}

impl Memory {
    /// Remembers `census` (taken at `now`) and says what is due. An orphan that stopped being
    /// one (a PV or a claim turned up) starts its grace again if it comes back.
    pub fn after_pass(&mut self, census: &Census, now: Instant, grace: Duration) -> Actions {
        let orphans: HashSet<&str> = census.orphans().map(|l| l.id.as_str()).collect();
        self.orphaned_since.retain(|id, _| orphans.contains(id.as_str()));
        let mut deletable = Vec::new();
        for id in orphans {
            let since = *self.orphaned_since.entry(id.to_string()).or_insert(now);
            if since < now && now.duration_since(since) >= grace {
                deletable.push(id.to_string());
            }
        }
        deletable.sort();
        let mut announce_lost = Vec::new();
        if let Some(lost) = &census.lost {
            let now_lost: HashSet<String> = lost.iter().cloned().collect();
            for pv in lost {
                if self.lost_last_pass.contains(pv) && self.announced_lost.insert(pv.clone()) {
                    announce_lost.push(pv.clone());
                }
            }
            self.announced_lost.retain(|pv| now_lost.contains(pv));
            self.lost_last_pass = now_lost;
        }
        Actions { deletable, announce_lost }
    }

    /// `known` with every handle a Retain PV recorded on an earlier pass, remembered from now.
    pub fn with_retained(&mut self, mut known: Known) -> Known {
        self.retained.extend(known.retained.iter().cloned());
        known.retained.clone_from(&self.retained);
        known
    }

    /// Forgets an orphan once it is deleted.
    pub fn deleted(&mut self, id: &str) {
        self.orphaned_since.remove(id);
    }
}

/// The secret DeleteVolume gets for an orphan. Neither its PV nor its claim is left, so its
/// class is known only when the driver has one class; then that class's provisioner secret, if
/// its templates need nothing of the claim. Err says why no secret could be named.
pub fn orphan_secret(
    classes: &[&StorageClass],
    volume_name: &str,
) -> Result<Option<SecretRef>, String> {
    let [class] = classes else {
        return match classes.len() {
            0 => Ok(None),
            n => Err(format!("{n} StorageClasses name the driver: which one made it is unknown")),
        };
    };
    // No claim is left: a template that needs one cannot be resolved.
    crate::provision::volume::class_provisioner_secret(class, volume_name, "", "")
}

/// What the cluster knows, from the PVs, the claims, the intent journal's claims and the
/// driver's classes.
pub fn known<'a>(
    pvs: impl IntoIterator<Item = &'a PersistentVolume>,
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    journaled: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    classes: impl IntoIterator<Item = &'a StorageClass>,
    (driver, naming): (&str, &VolumeNaming),
) -> Known {
    let ours: Vec<&PersistentVolume> =
        pvs.into_iter().filter(|pv| pv.served_by() == Some(driver)).collect();
    let handles = ours.iter().filter_map(|pv| Some((handle(pv)?, pv.name().to_string()))).collect();
    let retained = ours
        .iter()
        .filter(|pv| pv.reclaim_policy() == ReclaimPolicy::Retain)
        .filter_map(|pv| handle(pv))
        .collect();
    let unattributed = ours.iter().any(|pv| handle(pv).is_none());
    let named = |c: &PersistentVolumeClaim| c.metadata.uid.is_some().then(|| naming.for_claim(c));
    Known {
        handles,
        claims: claims.into_iter().filter_map(named).collect(),
        intents: journaled.into_iter().filter_map(named).collect(),
        retained,
        unattributed,
        retain_classes: classes.into_iter().any(|c| {
            c.served_by(driver)
                && crate::model::ClassExt::reclaim_policy(c) == ReclaimPolicy::Retain
        }),
    }
}
