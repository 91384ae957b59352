//! The acting half: watch changes feed keyed queues; workers run a pass per key, which one loop
//! drives (`drive`): the pure decision modules decide each step, and the pass carries it out
//! against the driver and the API.

mod activity;
mod binding;
mod dispatch;
mod drive;
mod error;
mod expansion;
mod finalizers;
mod intake;
mod memory;
mod modify;
mod pass;
mod provisioning;
mod reads;
mod report;
mod stranded;
mod unsettled;
mod volumes;
mod waiting;
mod workers;
mod writes;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use tracing::{Instrument, debug, error, field, info_span, warn};

pub use error::{Retry, SyncError, SyncErrorClass};
use finalizers::drop_finalizer;
use finalizers::{set_finalizers, with, without};
pub use intake::Intake;
use pass::Stage;
pub use pass::{ClaimKey, Options, Outcome, Switches};
use unsettled::{Candidates, Unsettled};
use writes::Part;

use crate::binder::usage::ClaimUse;
use crate::binder::{Scope, VolumeIndex};
use crate::cluster::Stores;
use crate::cluster::client::ApiClients;
use crate::cluster::events::Events;
use crate::cluster::objects::Cluster;
use crate::cluster::stores::{Change, OnChange};
use crate::csi::{ControllerCapability, Driver, DriverInfo};
use crate::model::compact::Compact;
use crate::model::{ClaimExt, VolumeExt};
use crate::provision::plan::{Features, Settings};
use crate::provision::settings::VolumeNaming;
use crate::runtime::queue::{Backoff, WorkQueue};

pub struct Controller {
    client: Client,
    /// The objects the executor reads and writes (`cluster::objects`).
    cluster: Cluster,
    /// Claim and PV patches: token first, then a look at the newest copy (writes.rs).
    writes: crate::cluster::client::Writes,
    csi: Arc<dyn Driver>,
    stores: Stores,
    /// The work queues, the PV index (the last known version of every PV, ours included) and
    /// which claim each PV served.
    intake: Intake,
    scope: Scope,
    settings: Settings,
    features: Features,
    events: Events,
    /// Everything remembered of a claim, or of a PV, between passes (memory.rs).
    memory: memory::Memory,
    /// How the driver grows volumes; None: it cannot, and claims keep their size.
    expander: Option<crate::expand::Expander>,
    /// `--workers`: how many ControllerExpandVolume calls may run at once (csi-resizer's
    /// worker count; the other work of a pass does not wait for it).
    expansion_slots: tokio::sync::Semaphore,
    /// The process-wide switches from the flags.
    switches: Switches,
}

impl Controller {
    pub fn new(
        clients: ApiClients,
        csi: Arc<dyn Driver>,
        stores: Stores,
        driver: &DriverInfo,
        settings: Settings,
        intake: Intake,
        switches: Switches,
    ) -> Arc<Self> {
        let features = crate::config::features::features(driver, &switches.gates);
        // Classes are only known where the cluster serves them (the store exists).
        let features =
            Features { modify: features.modify && stores.attributes_classes.is_some(), ..features };
        Arc::new(Controller {
            events: Events::new(clients.events, &settings.driver, &settings.identity),
            scope: Scope { driver: settings.driver.clone(), binder: switches.binder },
            intake,
            cluster: Cluster::kube(clients.state.clone(), clients.writes.client.clone()),
            client: clients.state,
            writes: clients.writes,
            csi,
            stores,
            settings,
            features,
            memory: memory::Memory::default(),
            expander: crate::expand::Expander::of(
                driver.controller.has(ControllerCapability::ExpandVolume),
                driver.node_expansion,
            ),
            expansion_slots: tokio::sync::Semaphore::new(switches.expansion_workers.max(1)),
            switches,
        })
    }

    fn index_mut(&self) -> std::sync::RwLockWriteGuard<'_, VolumeIndex> {
        self.intake.index.write().unwrap_or_else(|p| p.into_inner())
    }

    fn index(&self) -> std::sync::RwLockReadGuard<'_, VolumeIndex> {
        self.intake.index.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers the version of a claim we just wrote (see `ClaimMemory::written`).
    fn wrote_claim(&self, claim: &PersistentVolumeClaim) {
        if let Some(rv) = numeric_version(claim) {
            self.memory
                .claims
                .update_claim(&ObjectRef::from_obj(claim), claim, |m| m.written = Some(rv));
        }
    }

    /// True when the store's copy of the claim is older than our last write to it. A copy that
    /// caught up (or a claim gone from the store) ends the wait.
    fn claim_is_behind(&self, key: &ClaimKey, cached: Option<&PersistentVolumeClaim>) -> bool {
        let Some(wrote) = self.memory.claims.get(key).written else {
            return false;
        };
        match cached.and_then(numeric_version) {
            Some(seen) if seen < wrote => true,
            _ => {
                self.memory.claims.update_if_known(key, |m| m.written = None);
                false
            }
        }
    }

    /// The claim is gone: everything remembered of it goes too.
    fn forget_claim(&self, key: &ClaimKey) {
        self.memory.claims.forget(key);
        self.intake.claims.forget(key);
    }

    /// Puts the newest copy of a PV we know (one we wrote, made or read live) in the index, so
    /// the next decision does not act on an older one.
    fn index_volume(&self, pv: &PersistentVolume) {
        let known = self.index_mut().upsert_held(pv, Arc::new(Compact::of(pv))).known;
        self.intake.unsettled.volume_written(known.as_deref(), pv);
    }

    /// The hold of the claim's last failed attempt, for the decisions (`model::hold`).
    fn hold(&self, claim: &PersistentVolumeClaim) -> Option<crate::model::hold::Hold> {
        let key = ObjectRef::from_obj(claim);
        let (version, until) = self.memory.claims.get(&key).not_before?;
        Some(crate::model::hold::Hold { version, until: until.into_std() })
    }

    /// True while a failed attempt on this version of the claim waits for its retry, for the
    /// passes whose failure is an I/O outcome (a secret or a kind that cannot be read).
    fn backing_off(&self, claim: &PersistentVolumeClaim) -> bool {
        let now = Instant::now().into_std();
        crate::model::hold::held(self.hold(claim).as_ref(), claim, now)
    }

    /// Schedules the retry of a failed driver call and holds watch-driven passes off till then.
    /// `slow`: the failure is infeasible; wait the longest backoff delay at once.
    fn back_off(&self, key: &ClaimKey, claim: &PersistentVolumeClaim, slow: bool) -> Duration {
        let delay = self.retry_delay(key, slow);
        let until = (claim.resource_version().unwrap_or_default(), due_at(delay));
        self.memory.claims.update_claim(key, claim, |m| m.not_before = Some(until));
        delay
    }

    /// The one backoff rule of every claim pass: the key's next retry, exponential from
    /// `--retry-interval-start`; `slow` (an infeasible answer, which only the user can change)
    /// waits the longest delay at once.
    fn retry_delay(&self, key: &ClaimKey, slow: bool) -> Duration {
        match slow {
            true => self.intake.claims.retry_slowly(key.clone()),
            false => self.intake.claims.retry(key.clone()),
        }
    }

    fn clear_backoff(&self, key: &ClaimKey) {
        self.memory.claims.update_if_known(key, |m| m.not_before = None);
        self.intake.claims.forget(key);
    }

    /// The newest PV we know of by that name: the index holds our own writes too.
    fn volume_in_store(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.index().get(name)
    }

    fn volume_name(&self, claim: &PersistentVolumeClaim) -> String {
        self.settings.naming.for_claim(claim)
    }
}

/// How long the claim exists (zero when its creation time is unknown).
fn age(claim: &PersistentVolumeClaim) -> Duration {
    claim
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(crate::metrics::seconds_since)
        .map(Duration::from_secs_f64)
        .unwrap_or_default()
}

/// The time now as status conditions record it (RFC 3339, whole seconds).
fn now() -> String {
    crate::model::condition_time(k8s_openapi::jiff::Timestamp::now())
}

/// When a retry queued `delay` from now is due. A little early: the queue's timer started just
/// before this, and a pass that arrives a hair before the deadline must not be put off again.
fn due_at(delay: Duration) -> Instant {
    Instant::now() + delay.saturating_sub(Duration::from_millis(20))
}

/// etcd's resourceVersions are increasing integers; the PV index compares them the same way.
fn numeric_version<K: kube::Resource>(object: &K) -> Option<u64> {
    object.meta().resource_version.as_deref()?.parse().ok()
}

/// The reference an Event about `object` names.
pub(super) fn reference<K: kube::Resource<DynamicType = ()>>(
    object: &K,
) -> k8s_openapi::api::core::v1::ObjectReference {
    object.object_ref(&())
}
