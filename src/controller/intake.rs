//! What the watches feed before any pass runs: the work queues, and the indexes a pass reads
//! instead of the API (the PV index, which claim each PV served, the unbound claims, what the
//! periodic pass looks at). `on_change` says which keys a change makes worth another look.

use super::*;
use crate::model::turn::{Lane, Ticket};

/// The work queues and the watch-fed indexes, made before the controller so the watches can
/// feed them from the start.
#[derive(Clone)]
pub struct Intake {
    /// The last known version of every PV, indexed for matching.
    pub index: Arc<RwLock<VolumeIndex>>,
    pub claims: WorkQueue<ClaimKey>,
    pub volumes: WorkQueue<String>,
    /// Class names whose unbound claims are looked at again: the class changed, or a PV of that
    /// class became Available.
    pub classes: WorkQueue<String>,
    /// Which claim each PV served, for the deletion check.
    pub usage: Arc<Mutex<ClaimUse>>,
    /// What the periodic pass looks at (unsettled.rs).
    pub unsettled: Arc<Unsettled>,
    /// The claims not bound to a PV yet, with their class: those a class's change, or a PV of
    /// the class becoming Available, is worth another look for. Kept as the watch sees claims,
    /// so that finding them reads no claim (the stores hold claims compact).
    pub unbound: Arc<Mutex<std::collections::HashMap<ClaimKey, String>>>,
    /// Tells the capacity publisher what may change its answers.
    pub nudge: crate::capacity::publisher::Nudge,
}

/// The claim queue: a claim's namespace is its share of the fair order until its own ticket is
/// known (intake gives it one on every change the watch shows).
fn claim_queue(backoff: Backoff) -> WorkQueue<ClaimKey> {
    let queue = WorkQueue::named(backoff, "claims");
    queue.place_by(Arc::new(|key: &ClaimKey| {
        Ticket::new(Lane::Other, key.namespace.as_deref().unwrap_or_default())
    }));
    queue
}

impl Intake {
    pub fn new(backoff: Backoff) -> Self {
        Intake {
            index: Arc::default(),
            claims: claim_queue(backoff),
            volumes: WorkQueue::named(backoff, "volumes"),
            classes: WorkQueue::named(backoff, "classes"),
            usage: Arc::default(),
            unsettled: Arc::default(),
            unbound: Arc::default(),
            nudge: Default::default(),
        }
    }

    fn usage(&self) -> MutexGuard<'_, ClaimUse> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The unbound claims of `class`.
    pub fn unbound_of(&self, class: &str) -> Vec<ClaimKey> {
        let unbound = self.unbound.lock().unwrap_or_else(|p| p.into_inner());
        unbound.iter().filter(|(_, c)| c.as_str() == class).map(|(k, _)| k.clone()).collect()
    }

    /// Keeps `unbound` up to the claim the watch shows.
    fn track_unbound(&self, claim: &PersistentVolumeClaim, gone: bool) {
        let key = ObjectRef::from_obj(claim);
        let mut unbound = self.unbound.lock().unwrap_or_else(|p| p.into_inner());
        if gone || claim.volume_name().is_some() {
            unbound.remove(&key);
        } else {
            unbound.insert(key, claim.class().to_string());
        }
    }

    fn index(&self) -> std::sync::RwLockWriteGuard<'_, VolumeIndex> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    /// What the watches call on every change: the object's key, and the keys of the objects
    /// whose next step depends on it.
    /// A claim's change also queues the PV it is bound to and the PV provisioned for it (named
    /// by `naming`), whose release depends on the claim.
    pub fn on_change(&self, naming: VolumeNaming) -> OnChange {
        let intake = self.clone();
        Arc::new(move |change| match change {
            Change::Claim(c) | Change::ClaimGone(c) => {
                intake.usage().saw_claim(c);
                intake.unsettled.claim_changed(c);
                intake.track_unbound(c, matches!(change, Change::ClaimGone(_)));
                let key = ObjectRef::from_obj(c);
                if matches!(change, Change::ClaimGone(_)) {
                    intake.claims.drop_ticket(&key);
                    intake.claims.add(key);
                } else {
                    let made = c.metadata.uid.as_deref().is_some_and(|uid| {
                        intake.index.read().is_ok_and(|index| index.contains(&naming.for_uid(uid)))
                    });
                    intake.claims.add_with(key, crate::provision::turn::ticket(c, made));
                }
                // A clone that moves may free its source's protection.
                if let Some((ns, name)) = crate::provision::source::clone_source_key(c) {
                    intake.claims.add(ObjectRef::new(&name).within(&ns));
                }
                if let Some(v) = c.volume_name() {
                    intake.volumes.add(v.to_string());
                }
                if let Some(uid) = c.metadata.uid.as_deref() {
                    intake.volumes.add(naming.for_uid(uid));
                }
            }
            Change::Volume(v, _) | Change::VolumeGone(v) => {
                let (known, opened) = match change {
                    Change::Volume(_, held) => {
                        let upserted = intake.index().upsert_held(v, held.clone());
                        let opened = upserted.stored && crate::binder::index::is_available(v);
                        (upserted.known, opened)
                    }
                    _ => {
                        let deleted =
                            v.metadata.resource_version.as_deref().and_then(|r| r.parse().ok());
                        let known = intake.index().remove(&v.name_any(), deleted);
                        intake.usage().volume_gone(&v.name_any());
                        (known, false)
                    }
                };
                intake.unsettled.volume_changed(known.as_deref(), v);
                if opened {
                    intake.classes.add(v.class().to_string());
                }
                intake.volumes.add(v.name_any());
                if let Some(r) = v.claim_ref()
                    && let (Some(ns), Some(name)) = (&r.namespace, &r.name)
                {
                    // The claim's next pass is on a volume that exists (its binding, release
                    // or deletion): it goes ahead of creates.
                    let key = ObjectRef::new(name).within(ns);
                    let released = matches!(
                        v.phase(),
                        Some(
                            crate::model::VolumePhase::Released | crate::model::VolumePhase::Failed
                        )
                    );
                    if released || matches!(change, Change::VolumeGone(_)) {
                        intake.claims.add(key);
                    } else {
                        intake.claims.add_with(key, Ticket::new(Lane::Existing, ns));
                    }
                }
            }
            Change::Class(c) => {
                intake.classes.add(c.name_any());
                intake.nudge.answers_changed();
            }
            // A node the capacity objects may be made for (or an attributes class).
            Change::Reference => intake.nudge.nodes_changed(),
            Change::Listed(kind) => {
                if kind == "PersistentVolume" {
                    intake.unsettled.volumes_relisted();
                }
            }
            // An attachment that comes or goes may hold or free a deletion.
            Change::Attachment(a) => {
                if let Some(pv) = a.spec.source.persistent_volume_name.clone() {
                    intake.volumes.add(pv);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{claim, merge};
    use serde_json::json;

    fn named(name: &str, extra: serde_json::Value) -> PersistentVolumeClaim {
        let mut fields = json!({"metadata": {"name": name}});
        merge(&mut fields, extra);
        claim(fields)
    }

    /// A class's change looks again at exactly its unbound claims: a claim joins when the watch
    /// shows it without a volume, and leaves when it names one or is gone.
    #[test]
    fn unbound_claims_are_kept_by_class() {
        let intake =
            Intake::new(Backoff { start: Duration::from_secs(1), max: Duration::from_secs(2) });
        let tell = intake.on_change(VolumeNaming { prefix: "pvc".into(), uuid_length: None });
        let gold = |n: &str| named(n, json!({"spec": {"storageClassName": "gold"}}));
        let (a, b, c) =
            (gold("a"), gold("b"), named("c", json!({"spec": {"storageClassName": "tin"}})));
        for claim in [&a, &b, &c] {
            tell(Change::Claim(claim));
        }
        let names = |class: &str| {
            let mut n: Vec<String> = intake.unbound_of(class).into_iter().map(|k| k.name).collect();
            n.sort();
            n
        };
        assert_eq!(names("gold"), ["a", "b"]);
        assert_eq!(names("tin"), ["c"]);
        let bound = named("a", json!({"spec": {"storageClassName": "gold", "volumeName": "pv-a"}}));
        tell(Change::Claim(&bound));
        tell(Change::ClaimGone(&b));
        assert!(names("gold").is_empty());
        assert_eq!(names("tin"), ["c"]);
    }
}
