//! The work queues and the PV index, fed by the watches: which keys a change to an object
//! makes worth another look.

use super::*;

/// The queues and the PV index, to be fed by the watches before the controller exists.
#[derive(Clone)]
pub struct Queues {
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
}

impl Queues {
    pub fn new(backoff: Backoff) -> Self {
        Queues {
            index: Arc::default(),
            claims: WorkQueue::named(backoff, "claims"),
            volumes: WorkQueue::named(backoff, "volumes"),
            classes: WorkQueue::named(backoff, "classes"),
            usage: Arc::default(),
            unsettled: Arc::default(),
        }
    }

    fn usage(&self) -> MutexGuard<'_, ClaimUse> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn index(&self) -> std::sync::RwLockWriteGuard<'_, VolumeIndex> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    /// What the watches call on every change: the object's key, and the keys of the objects
    /// whose next step depends on it.
    /// A claim's change also queues the PV it is bound to and the PV provisioned for it (named
    /// with `prefix` and `uuid_length`), whose release depends on the claim.
    pub fn on_change(&self, prefix: String, uuid_length: Option<usize>) -> OnChange {
        let queues = self.clone();
        Arc::new(move |change| match change {
            Change::Claim(c) | Change::ClaimGone(c) => {
                queues.usage().saw_claim(c);
                queues.unsettled.claim_changed(c);
                queues.claims.add(ObjectRef::from_obj(c));
                // A clone that moves may free its source's protection.
                if let Some((ns, name)) = crate::provision::source::clone_source_key(c) {
                    queues.claims.add(ObjectRef::new(&name).within(&ns));
                }
                if let Some(v) = c.volume_name() {
                    queues.volumes.add(v.to_string());
                }
                if let Some(uid) = c.metadata.uid.as_deref() {
                    queues.volumes.add(crate::provision::request::volume_name(
                        &prefix,
                        uid,
                        uuid_length,
                    ));
                }
            }
            Change::Volume(v) | Change::VolumeGone(v) => {
                let old = queues.index().get(&v.name_any());
                queues.unsettled.volume_changed(old.as_deref(), v);
                let opened = match change {
                    Change::VolumeGone(_) => {
                        queues.index().remove(&v.name_any());
                        queues.usage().volume_gone(&v.name_any());
                        false
                    }
                    _ => queues.index().upsert(v.clone()) && crate::binder::index::is_available(v),
                };
                if opened {
                    queues.classes.add(v.class().to_string());
                }
                queues.volumes.add(v.name_any());
                if let Some(r) = v.claim_ref()
                    && let (Some(ns), Some(name)) = (&r.namespace, &r.name)
                {
                    queues.claims.add(ObjectRef::new(name).within(ns));
                }
            }
            Change::Class(c) => {
                queues.classes.add(c.name_any());
                crate::capacity::publisher::nudge();
            }
            // A node the capacity objects may be made for (or an attributes class).
            Change::Reference => crate::capacity::publisher::nodes_changed(),
            Change::Listed(kind) => {
                if kind == "PersistentVolume" {
                    queues.unsettled.volumes_relisted();
                }
            }
            // An attachment that comes or goes may hold or free a deletion.
            Change::Attachment(a) => {
                if let Some(pv) = a.spec.source.persistent_volume_name.clone() {
                    queues.volumes.add(pv);
                }
            }
        })
    }
}
