//! The objects the periodic pass looks at, kept as the watches change them instead of found by
//! a walk over every claim and PV (docs/binder.md §4). Whether an object needs the pass
//! (`resync`) depends only on it and on its partner (a claim's PV, a PV's claimRef claim), never
//! on the clock, so a settled object can only become unsettled through a change to one of the
//! two: each change marks both, and a pass judges the marked ones and those still unsettled from
//! the last pass. At rest a pass costs what is unsettled, not what is stored.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::runtime::reflector::ObjectRef;

use super::ClaimKey;
use crate::model::{ClaimExt, VolumeExt};

/// What the next pass looks at.
#[derive(Debug, Default)]
pub struct Unsettled {
    state: Mutex<Candidates>,
}

/// Keys to judge at a pass, and the index names to check against the store.
#[derive(Debug, Default)]
pub struct Candidates {
    /// Changed since the last pass, or unsettled at it.
    pub claims: HashSet<ClaimKey>,
    pub volumes: HashSet<String>,
    /// PV names the index may hold while the store does not (`resync::sweep`): written by us
    /// since the last pass, and not checked yet.
    pub suspects: HashSet<String>,
    /// Names the store lacked at the last pass: checked again, and dropped at a second miss.
    pub unseen: HashSet<String>,
    /// The PV watch listed again since the last pass: every name in the index is a suspect.
    pub relisted: bool,
}

impl Unsettled {
    fn state(&self) -> MutexGuard<'_, Candidates> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A claim changed or went: it, and the PV it names, are judged again.
    pub fn claim_changed(&self, claim: &PersistentVolumeClaim) {
        let mut state = self.state();
        state.claims.insert(ObjectRef::from_obj(claim));
        if let Some(volume) = claim.volume_name() {
            state.volumes.insert(volume.to_string());
        }
    }

    /// A PV changed or went (`old`: the copy the index had before): it, and the claims its old
    /// and new claimRef name, are judged again. A claim settled with this PV is the one its
    /// claimRef named then, so it hears of a PV that moved on.
    pub fn volume_changed(&self, old: Option<&PersistentVolume>, new: &PersistentVolume) {
        let mut state = self.state();
        state.volumes.insert(new.name().to_string());
        for volume in old.into_iter().chain([new]) {
            if let Some((namespace, name)) = crate::binder::index::claim_ref_key(volume) {
                state.claims.insert(ObjectRef::new(&name).within(&namespace));
            }
        }
    }

    /// We wrote `new` and the index took it ahead of the watch: judged again like a change,
    /// and a suspect until the store has it too.
    pub fn volume_written(&self, old: Option<&PersistentVolume>, new: &PersistentVolume) {
        self.volume_changed(old, new);
        self.state().suspects.insert(new.name().to_string());
    }

    /// The PV watch listed again.
    pub fn volumes_relisted(&self) {
        self.state().relisted = true;
    }

    /// Everything the pass looks at; what changes from now on waits for the next pass.
    pub fn take(&self) -> Candidates {
        std::mem::take(&mut *self.state())
    }

    /// What the pass found still unsettled, suspect or unseen, for the next pass.
    pub fn keep(&self, kept: Candidates) {
        let mut state = self.state();
        state.claims.extend(kept.claims);
        state.volumes.extend(kept.volumes);
        state.suspects.extend(kept.suspects);
        state.unseen.extend(kept.unseen);
        state.relisted |= kept.relisted;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, claim, object};
    use serde_json::json;

    fn pv(name: &str, claim: Option<&str>) -> PersistentVolume {
        let pv = fixtures::pv(name);
        match claim {
            Some(c) => pv.claim_ref("ns", c, Some("u")).build(),
            None => pv.build(),
        }
    }

    fn names(c: &Candidates) -> (Vec<String>, Vec<String>) {
        let mut claims: Vec<String> = c.claims.iter().map(|k| k.name.clone()).collect();
        let mut volumes: Vec<String> = c.volumes.iter().cloned().collect();
        claims.sort();
        volumes.sort();
        (claims, volumes)
    }

    /// A claim's change marks its PV; a PV's change marks the claims of its old and new
    /// claimRef; a take empties the marks, and what is kept comes back at the next take.
    #[test]
    fn changes_mark_both_partners_and_a_take_starts_afresh() {
        let unsettled = Unsettled::default();
        let bound = object(
            serde_json::to_value(claim(json!({}))).expect("a claim"),
            json!({"metadata": {"name": "a"}, "spec": {"volumeName": "pv-a"}}),
        );
        unsettled.claim_changed(&bound);
        unsettled.volume_changed(Some(&pv("pv-b", Some("old"))), &pv("pv-b", Some("new")));
        let taken = unsettled.take();
        assert_eq!(
            names(&taken),
            (vec!["a".into(), "new".into(), "old".into()], vec!["pv-a".into(), "pv-b".into()])
        );
        assert!(taken.suspects.is_empty() && !taken.relisted);
        assert_eq!(names(&unsettled.take()), (vec![], vec![]), "a take clears the marks");

        unsettled.keep(Candidates {
            claims: [ObjectRef::new("a").within("ns")].into(),
            ..Candidates::default()
        });
        unsettled.volume_written(None, &pv("pv-c", None));
        unsettled.volumes_relisted();
        let taken = unsettled.take();
        assert_eq!(names(&taken), (vec!["a".into()], vec!["pv-c".into()]));
        assert_eq!(taken.suspects, HashSet::from(["pv-c".to_string()]));
        assert!(taken.relisted);
    }
}
