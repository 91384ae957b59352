//! The PV index matching reads: per (access modes, class) the Available unclaimed PVs sorted by
//! size, and per claim name the PVs whose claimRef names it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::matching::{ClaimFacts, Verdict, key_modes, modes_key, verdict};
use crate::model::compact::Compact;
use crate::model::{VolumeExt, VolumePhase};
/// The last known version of every PV, indexed for matching. Fed by the watch and by the
/// results of our own writes; an older resourceVersion never replaces a newer one. PVs are held
/// compact (the watch store's copy, shared) and decoded when read.
#[derive(Debug, Default)]
pub struct VolumeIndex {
    volumes: HashMap<String, Arc<Compact<PersistentVolume>>>,
    /// Every access-mode key present, with how many PVs have it.
    keys: BTreeMap<String, usize>,
    /// Available PVs without claimRef, by (access-mode key, class), sorted by (bytes, name).
    available: HashMap<(String, String), BTreeSet<(u64, String)>>,
    /// PVs by the claim their claimRef names: (namespace, name) → PV names, sorted. Almost
    /// always one: a sorted Vec, not a B-tree node of 280 bytes per bound PV.
    claimed: HashMap<(String, String), Vec<String>>,
    /// Available PVs a claim pass chose and is binding now → that claim (namespace, name).
    /// Passes run concurrently, unlike upstream's single binder: without this, every claim that
    /// fits the same smallest PV races for it, and all but one lose a conflict and back off.
    reserved: HashMap<String, (String, String)>,
    /// The PVs deleted lately, with the last version known of each: a copy no newer (the answer
    /// of a write that was in flight when the PV went) never brings it back. Without this a
    /// deleted PV could stay in the index for good, a race kube-controller-manager's binder had
    /// until 1.38 (kubernetes#124224, fixed by #140691).
    gone: HashMap<String, u64>,
    /// The order `gone` was filled in, to forget the oldest past `GONE_KEPT`.
    gone_order: VecDeque<String>,
}

/// How many deletions are remembered: a write's answer lags its PV's deletion by seconds.
const GONE_KEPT: usize = 4096;

/// What an upsert did: whether the new copy was stored, and the copy the index knew before
/// (decoded once, for the caller as for the index's own bookkeeping).
pub struct Upserted {
    pub stored: bool,
    pub known: Option<Arc<PersistentVolume>>,
}

/// Available, unclaimed and not being deleted: a PV a claim without a pre-bound PV can get.
pub fn is_available(pv: &PersistentVolume) -> bool {
    pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_none())
        && pv.phase() == Some(VolumePhase::Available)
        && pv.metadata.deletion_timestamp.is_none()
}

/// The namespace and name of the claim the PV's claimRef names.
pub fn claim_ref_key(pv: &PersistentVolume) -> Option<(String, String)> {
    let r = pv.claim_ref()?;
    Some((r.namespace.clone()?, r.name.clone()?))
}

fn pv_modes_key(pv: &PersistentVolume) -> String {
    modes_key(pv.access_modes())
}

impl VolumeIndex {
    pub fn len(&self) -> usize {
        self.volumes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.volumes.is_empty()
    }

    /// The PV, whole.
    pub fn get(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(name)?.open()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.volumes.contains_key(name)
    }

    /// The PVs' names, borrowed: the periodic pass walks them all and should not copy them.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.volumes.keys().map(String::as_str)
    }

    /// Stores `pv` unless a newer version is known; true if stored.
    pub fn upsert(&mut self, pv: &PersistentVolume) -> bool {
        self.upsert_held(pv, Arc::new(Compact::of(pv))).stored
    }

    /// As `upsert`, with `held` as the copy kept: the watch store's, shared.
    pub fn upsert_held(
        &mut self,
        pv: &PersistentVolume,
        held: Arc<Compact<PersistentVolume>>,
    ) -> Upserted {
        let Some(name) = pv.metadata.name.clone() else {
            return Upserted { stored: false, known: None };
        };
        // A newer version under a deleted name is the PV made again, and comes in; its entry
        // stays, so `gone` and `gone_order` always name the same PVs.
        if let Some(gone) = self.gone.get(&name)
            && held.version().is_none_or(|v| v <= *gone)
        {
            return Upserted { stored: false, known: None };
        }
        let kept = self.volumes.get(&name).cloned();
        let known = kept.as_ref().and_then(|k| k.open());
        if let (Some(o), Some(n)) = (kept.and_then(|k| k.version()), held.version())
            && o > n
        {
            return Upserted { stored: false, known };
        }
        if let Some(old) = &known {
            self.unlink(old);
        }
        self.link(pv);
        self.volumes.insert(name, held);
        Upserted { stored: true, known }
    }

    /// Sets `pv` aside for `claim` (namespace, name) while it binds: other claims' matching
    /// passes it over. False if another claim holds it already.
    pub fn reserve(&mut self, pv: &str, claim: (String, String)) -> bool {
        match self.reserved.get(pv) {
            Some(holder) if *holder != claim => false,
            _ => {
                self.reserved.insert(pv.to_string(), claim);
                true
            }
        }
    }

    /// Ends `claim`'s reservation of `pv`; another claim's is left alone.
    pub fn unreserve(&mut self, pv: &str, claim: &(String, String)) {
        if self.reserved.get(pv) == Some(claim) {
            self.reserved.remove(pv);
        }
    }

    fn reserved_for_another(&self, pv: &str, claim: &ClaimFacts) -> bool {
        self.reserved
            .get(pv)
            .is_some_and(|(ns, name)| *ns != claim.namespace || *name != claim.name)
    }

    /// Drops the PV, deleted at `deleted_version` (the delete event's, when there was one);
    /// the copy it held, decoded. No copy up to that version is taken again.
    pub fn remove(
        &mut self,
        name: &str,
        deleted_version: Option<u64>,
    ) -> Option<Arc<PersistentVolume>> {
        let held = self.volumes.remove(name);
        let last =
            [held.as_ref().and_then(|h| h.version()), deleted_version].into_iter().flatten().max();
        if let Some(last) = last {
            if self.gone.insert(name.to_string(), last).is_none() {
                self.gone_order.push_back(name.to_string());
            }
            while self.gone_order.len() > GONE_KEPT {
                if let Some(oldest) = self.gone_order.pop_front() {
                    self.gone.remove(&oldest);
                }
            }
        }
        let old = held.and_then(|held| held.open())?;
        self.unlink(&old);
        Some(old)
    }

    fn available_key(pv: &PersistentVolume) -> Option<(String, String)> {
        is_available(pv).then(|| (pv_modes_key(pv), pv.class().to_string()))
    }

    fn link(&mut self, pv: &PersistentVolume) {
        let name = pv.metadata.name.clone().unwrap_or_default();
        *self.keys.entry(pv_modes_key(pv)).or_default() += 1;
        if let Some(key) = Self::available_key(pv) {
            self.available.entry(key).or_default().insert((pv.capacity_bytes(), name.clone()));
        }
        if let Some(claim) = claim_ref_key(pv) {
            let names = self.claimed.entry(claim).or_default();
            if let Err(at) = names.binary_search(&name) {
                names.insert(at, name);
            }
        }
    }

    fn unlink(&mut self, pv: &PersistentVolume) {
        let name = pv.metadata.name.clone().unwrap_or_default();
        let key = pv_modes_key(pv);
        if let Some(n) = self.keys.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.keys.remove(&key);
            }
        }
        if let Some(key) = Self::available_key(pv)
            && let Some(set) = self.available.get_mut(&key)
        {
            set.remove(&(pv.capacity_bytes(), name.clone()));
            if set.is_empty() {
                self.available.remove(&key);
            }
        }
        if let Some(claim) = claim_ref_key(pv)
            && let Some(set) = self.claimed.get_mut(&claim)
        {
            set.retain(|n| *n != name);
            if set.is_empty() {
                self.claimed.remove(&claim);
            }
        }
    }

    /// The access-mode groups to search for `claim`, in upstream's order: those holding every
    /// mode the claim asks for, fewest modes first.
    pub fn groups(&self, claim: &ClaimFacts) -> Vec<String> {
        let mut groups: Vec<&String> = self
            .keys
            .keys()
            .filter(|k| {
                let modes = key_modes(k);
                claim.modes.iter().all(|m| modes.contains(m.as_str()))
            })
            .collect();
        groups.sort_by_key(|k| (key_modes(k).len(), (*k).clone()));
        groups.into_iter().cloned().collect()
    }

    /// findBestMatchForClaim.
    pub fn best_match(
        &self,
        claim: &ClaimFacts,
        delay_binding: bool,
    ) -> Option<Arc<PersistentVolume>> {
        let prebound = self.claimed.get(&(claim.namespace.clone(), claim.name.clone()));
        for group in self.groups(claim) {
            for name in prebound.into_iter().flatten() {
                let Some(pv) = self.get(name) else {
                    continue;
                };
                if pv_modes_key(&pv) == group
                    && verdict(claim, &pv, delay_binding) == Verdict::PreBound
                {
                    return Some(pv);
                }
            }
            if delay_binding {
                continue;
            }
            let Some(sorted) = self.available.get(&(group.clone(), claim.class.clone())) else {
                continue;
            };
            for (_, name) in sorted.range((claim.request, String::new())..) {
                if self.reserved_for_another(name, claim) {
                    continue;
                }
                if let Some(pv) = self.get(name)
                    && verdict(claim, &pv, false) == Verdict::Candidate
                {
                    return Some(pv);
                }
            }
        }
        None
    }

    /// Beside the cluster's binder, whether its matching can take only `pv` for `claim`: it is
    /// the match, and no other PV is pre-bound to the claim. Then whoever binds the claim
    /// writes the same pair with the same values (docs/binder.md §5).
    pub fn takes_only(&self, claim: &ClaimFacts, pv: &str) -> bool {
        let alone = !self
            .claimed
            .get(&(claim.namespace.clone(), claim.name.clone()))
            .into_iter()
            .flatten()
            .filter(|name| *name != pv)
            .filter_map(|name| self.get(name))
            .any(|o| o.bound_to_claim(&claim.namespace, &claim.name, &claim.uid));
        alone
            && self.best_match(claim, false).is_some_and(|m| m.metadata.name.as_deref() == Some(pv))
    }

    /// Every PV with its verdict for `claim`, for `explain`.
    pub fn verdicts(
        &self,
        claim: &ClaimFacts,
        delay_binding: bool,
    ) -> Vec<(Arc<PersistentVolume>, Verdict)> {
        let mut all: Vec<_> = self
            .volumes
            .values()
            .filter_map(|held| held.open())
            .map(|pv| {
                let v = verdict(claim, &pv, delay_binding);
                (pv, v)
            })
            .collect();
        all.sort_by(|a, b| a.0.metadata.name.cmp(&b.0.metadata.name));
        all
    }
}
