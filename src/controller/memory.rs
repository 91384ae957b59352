//! Everything the controller remembers of a claim or a PV between passes, in one place: one
//! map per kind of key, one lock each, and one `forget` that ends all of it when the object is
//! gone. Memory is lost on restart by design: each field says what a restart costs.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::ClaimKey;

/// What is remembered of one claim.
#[derive(Debug, Clone, Default)]
pub(super) struct ClaimMemory {
    /// The claim this memory is of: a claim replaced under the same name starts afresh. Empty
    /// while only marks made by key alone (`stranded`) are kept: the next claim adopts them.
    pub uid: String,
    /// A failed driver call on this resourceVersion holds passes off until then; a change to
    /// the claim lifts it, watch noise does not.
    pub not_before: Option<(String, Instant)>,
    /// The resourceVersion our last write to the claim answered with: a pass on an older copy
    /// from the store waits for the watch instead of writing on stale data.
    pub written: Option<u64>,
    /// Its populator data source was announced in an Event (said once; again after a restart).
    pub announced: bool,
    /// Its last pass failed because the driver was unreachable: retried when the driver is back.
    pub stranded: bool,
    /// Its resize (upstream keeps the same in memory; after a restart an attempt counts as
    /// uncertain until it fails again).
    pub resize: crate::expand::ResizeMemory,
}

/// What is remembered of one PV.
#[derive(Debug, Clone, Default)]
pub(super) struct VolumeMemory {
    /// Its last pass failed because the driver was unreachable.
    pub stranded: bool,
}

/// Everything remembered between passes: of claims by their key, of PVs by their name.
#[derive(Default)]
pub(super) struct Memory {
    pub claims: Memories<ClaimKey, ClaimMemory>,
    pub volumes: Memories<String, VolumeMemory>,
}

/// Per-key memories of one kind.
pub(super) struct Memories<K, M> {
    map: Mutex<HashMap<K, M>>,
}

impl<K, M> Default for Memories<K, M> {
    fn default() -> Self {
        Memories { map: Mutex::new(HashMap::new()) }
    }
}

impl<K: Hash + Eq + Clone, M: Default + Clone> Memories<K, M> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, M>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of what is remembered of `key` (the default if nothing).
    pub fn get(&self, key: &K) -> M {
        self.lock().get(key).cloned().unwrap_or_default()
    }

    /// Changes what is remembered of `key`.
    pub fn update<R>(&self, key: &K, change: impl FnOnce(&mut M) -> R) -> R {
        change(self.lock().entry(key.clone()).or_default())
    }

    /// Changes what is remembered of `key`, if anything is.
    pub fn update_if_known(&self, key: &K, change: impl FnOnce(&mut M)) {
        if let Some(memory) = self.lock().get_mut(key) {
            change(memory);
        }
    }

    /// The keys whose memory `pick` selects, changed by it: it returns whether to take the key.
    pub fn take_where(&self, mut pick: impl FnMut(&mut M) -> bool) -> Vec<K> {
        self.lock().iter_mut().filter_map(|(k, m)| pick(m).then(|| k.clone())).collect()
    }

    pub fn any(&self, test: impl Fn(&M) -> bool) -> bool {
        self.lock().values().any(test)
    }

    /// Ends everything remembered of `key`.
    pub fn forget(&self, key: &K) {
        self.lock().remove(key);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Memories<ClaimKey, ClaimMemory> {
    /// Changes what is remembered of `claim`, starting afresh if it is another claim of the
    /// same name.
    pub fn update_claim<R>(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        change: impl FnOnce(&mut ClaimMemory) -> R,
    ) -> R {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        self.update(key, |m| {
            if !m.uid.is_empty() && m.uid != uid {
                *m = ClaimMemory::default();
            }
            if m.uid.is_empty() {
                m.uid = uid.to_string();
            }
            change(m)
        })
    }

    /// What is remembered of `claim`; nothing if the memory is of another claim of that name.
    pub fn of_claim(&self, key: &ClaimKey, claim: &PersistentVolumeClaim) -> ClaimMemory {
        let memory = self.get(key);
        if memory.uid.is_empty() || memory.uid == claim.metadata.uid.as_deref().unwrap_or_default()
        {
            memory
        } else {
            ClaimMemory::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::ObjectRef;

    fn claim(uid: &str) -> PersistentVolumeClaim {
        crate::fixtures::pvc("c").uid(uid).build()
    }

    #[test]
    fn a_claim_replaced_under_its_name_starts_afresh() {
        let memories = Memories::<ClaimKey, ClaimMemory>::default();
        let key = ObjectRef::new("c").within("ns");
        memories.update_claim(&key, &claim("u1"), |m| {
            m.announced = true;
            m.resize.final_error = true;
        });
        assert!(memories.of_claim(&key, &claim("u1")).announced);
        let other = memories.of_claim(&key, &claim("u2"));
        assert!(!other.announced && !other.resize.final_error);
        memories.update_claim(&key, &claim("u2"), |m| m.written = Some(7));
        let now = memories.get(&key);
        assert_eq!((now.uid.as_str(), now.announced, now.written), ("u2", false, Some(7)));
    }

    #[test]
    fn a_mark_made_by_key_alone_is_kept_by_the_claim() {
        let memories = Memories::<ClaimKey, ClaimMemory>::default();
        let key = ObjectRef::new("c").within("ns");
        memories.update(&key, |m| m.stranded = true);
        memories.update_claim(&key, &claim("u1"), |m| m.not_before = None);
        let now = memories.get(&key);
        assert!(now.stranded, "the driver's return still retries the claim");
        assert_eq!(now.uid, "u1");
    }

    #[test]
    fn forget_ends_everything_and_take_where_clears_what_it_takes() {
        let memories = Memories::<String, VolumeMemory>::default();
        for name in ["a", "b"] {
            memories.update(&name.to_string(), |m| m.stranded = true);
        }
        memories.forget(&"a".to_string());
        assert_eq!(memories.len(), 1);
        assert!(memories.any(|m| m.stranded));
        let taken = memories.take_where(|m| std::mem::take(&mut m.stranded));
        assert_eq!(taken, vec!["b".to_string()]);
        assert!(!memories.any(|m| m.stranded));
        memories.update_if_known(&"zzz".to_string(), |m| m.stranded = true);
        assert_eq!(memories.len(), 1, "an unknown key is not made up");
    }
}
