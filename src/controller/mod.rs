//! The acting half: watch changes feed keyed queues; workers decide with the pure `provision`
//! functions and carry the actions out against the driver and the API.

mod activity;
mod binding;
mod dispatch;
mod error;
mod events;
mod expansion;
mod intent;
mod journal;
mod memory;
mod modify;
mod provisioning;
mod sources;
mod stranded;
mod volumes;
mod writes;

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use tracing::{Instrument, debug, error, field, info_span, warn};

pub use error::{SyncError, SyncErrorClass};
pub use journal::{Journal, JournalError};

use crate::binder::usage::ClaimUse;
use crate::binder::{Scope, VolumeIndex};
use crate::cluster::Stores;
use crate::cluster::client::ApiClients;
use crate::cluster::stores::{Change, OnChange};
use crate::csi::{ControllerCapability, CsiClient, DriverInfo};
use crate::model::{ClaimExt, VolumeExt, VolumePhase};
use crate::provision::plan::{self, Features, Settings};
use crate::queue::{Backoff, WorkQueue};

/// A claim's queue key: namespace and name.
pub type ClaimKey = ObjectRef<PersistentVolumeClaim>;

/// How a pass over one key ended, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing more to do until something changes.
    Done,
    /// Look again at once (the next step depends on a write just made).
    Again,
    /// Wait for the retry already scheduled (backoff in force, the input unchanged).
    Waiting,
}

/// Tunables of the controller.
#[derive(Debug, Clone)]
pub struct Options {
    pub workers: usize,
    pub backoff: Backoff,
    /// The periodic pass (`--pvclaimbinder-sync-period`).
    pub sync: Duration,
    /// Everything queued again (`--resync-period`).
    pub resync: Duration,
}

pub struct Controller {
    client: Client,
    /// Claim and PV patches: token first, then a look at the newest copy (writes.rs).
    writes: crate::cluster::client::Writes,
    csi: CsiClient,
    stores: Stores,
    /// The last known version of every PV, ours included, indexed for matching.
    index: Arc<RwLock<VolumeIndex>>,
    usage: Arc<Mutex<ClaimUse>>,
    /// PV names the store did not have at the last resync (dropped from the index at the next).
    unseen: Mutex<std::collections::HashSet<String>>,
    scope: Scope,
    settings: Settings,
    features: Features,
    events: events::Events,
    claims: WorkQueue<ClaimKey>,
    volumes: WorkQueue<String>,
    classes: WorkQueue<String>,
    /// Everything remembered of a claim, or of a PV, between passes (memory.rs).
    claim_memory: memory::Memories<ClaimKey, memory::ClaimMemory>,
    volume_memory: memory::Memories<String, memory::VolumeMemory>,
    /// How the driver grows volumes; None: it cannot, and claims keep their size.
    expander: Option<crate::expand::Expander>,
    /// `--handle-volume-inuse-error`: after "volume in use", wait until no pod uses the claim.
    handle_volume_inuse_error: bool,
    /// Record the pre-resize capacity on PVs the node still has to grow (`AnnotateFsResize`).
    annotate_fs_resize: bool,
    handover_grace: Duration,
    /// `--workers`: how many ControllerExpandVolume calls may run at once (csi-resizer's
    /// worker count; the other work of a pass does not wait for it).
    expansion_slots: tokio::sync::Semaphore,
    /// `--intent-journal` beside kube-controller-manager's binder: intents in files, not in a
    /// claim finalizer.
    journal: Option<Arc<Journal>>,
}

/// Process-wide switches from the flags.
#[derive(Debug, Clone)]
pub struct Switches {
    /// `--binder` (or `--bind-all`).
    pub binder: crate::binder::Binder,
    /// `--handle-volume-inuse-error`.
    pub handle_volume_inuse_error: bool,
    /// `--feature-gates=AnnotateFsResize=true`.
    pub annotate_fs_resize: bool,
    /// With `--binder=external`: how long an unbound claim of ours may wait for the cluster's
    /// binder to hand it over before we say the binder seems missing.
    pub handover_grace: Duration,
    /// `--intent-journal`, opened; None: intents are claim finalizers.
    pub journal: Option<Arc<Journal>>,
    /// `--workers`: ControllerExpandVolume calls at once.
    pub expansion_workers: usize,
}

/// The queues and the PV index, to be fed by the watches before the controller exists.
#[derive(Clone)]
pub struct Queues {
    pub claims: WorkQueue<ClaimKey>,
    pub volumes: WorkQueue<String>,
    /// Class names whose unbound claims are looked at again: the class changed, or a PV of that
    /// class became Available.
    pub classes: WorkQueue<String>,
    pub index: Arc<RwLock<VolumeIndex>>,
    /// Which claim each PV served, for the deletion check.
    pub usage: Arc<Mutex<ClaimUse>>,
}

impl Queues {
    pub fn new(backoff: Backoff) -> Self {
        Queues {
            claims: WorkQueue::named(backoff, "claims"),
            volumes: WorkQueue::named(backoff, "volumes"),
            classes: WorkQueue::named(backoff, "classes"),
            index: Arc::default(),
            usage: Arc::default(),
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
                let opened = match change {
                    Change::VolumeGone(_) => {
                        queues.index().remove(&v.name_any());
                        queues.usage().volume_gone(&v.name_any());
                        false
                    }
                    _ => {
                        queues.index().upsert(v.clone()) && crate::binder::matching::is_available(v)
                    }
                };
                if opened {
                    queues.classes.add(v.class().to_string());
                }
                queues.volumes.add(v.name_any());
                if let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
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
            // An attachment that comes or goes may hold or free a deletion.
            Change::Attachment(a) => {
                if let Some(pv) = a.spec.source.persistent_volume_name.clone() {
                    queues.volumes.add(pv);
                }
            }
        })
    }
}

impl Controller {
    pub fn new(
        clients: ApiClients,
        csi: CsiClient,
        stores: Stores,
        driver: &DriverInfo,
        settings: Settings,
        queues: Queues,
        switches: Switches,
    ) -> Arc<Self> {
        let features = Features {
            single_node_multi_writer: driver
                .controller
                .has(ControllerCapability::SingleNodeMultiWriter),
            clone: driver.controller.has(ControllerCapability::CloneVolume),
            snapshot: driver
                .controller
                .has(ControllerCapability::CreateDeleteSnapshot),
            // Classes are only known where the cluster serves them (the store exists).
            modify: driver.controller.has(ControllerCapability::ModifyVolume)
                && stores.attributes_classes.is_some(),
            topology: driver.plugin.accessibility_constraints,
        };
        Arc::new(Controller {
            events: events::Events::new(clients.events, &settings.driver, &settings.identity),
            scope: Scope {
                driver: settings.driver.clone(),
                binder: switches.binder,
            },
            index: queues.index,
            usage: queues.usage,
            unseen: Mutex::default(),
            client: clients.state,
            writes: clients.writes,
            csi,
            stores,
            settings,
            features,
            claims: queues.claims,
            volumes: queues.volumes,
            classes: queues.classes,
            claim_memory: Default::default(),
            volume_memory: Default::default(),
            expander: crate::expand::Expander::of(
                driver.controller.has(ControllerCapability::ExpandVolume),
                driver.node_expansion,
            ),
            handle_volume_inuse_error: switches.handle_volume_inuse_error,
            annotate_fs_resize: switches.annotate_fs_resize,
            handover_grace: switches.handover_grace,
            expansion_slots: tokio::sync::Semaphore::new(switches.expansion_workers.max(1)),
            journal: switches.journal,
        })
    }

    /// Runs `workers` claim workers and as many volume workers until `stop` resolves.
    pub async fn run(self: Arc<Self>, options: Options, stop: impl Future<Output = ()>) {
        let mut tasks = Vec::new();
        for _ in 0..options.workers {
            let me = self.clone();
            tasks.push(tokio::spawn(async move { me.volume_worker().await }));
        }
        if self.scope.binder.binds() {
            // PVs first: one a previous binder left Pending (or unclaimed in another phase) is
            // Available before claims look for a match, as kube-controller-manager's binder
            // ends up; else a claim might be handed to a provisioner for nothing.
            let started = Instant::now();
            while !self.volumes.is_idle() && started.elapsed() < options.sync {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        for _ in 0..options.workers {
            let me = self.clone();
            tasks.push(tokio::spawn(async move { me.claim_worker().await }));
        }
        let classes = {
            let me = self.clone();
            tokio::spawn(async move { me.class_worker().await })
        };
        let recovery = {
            let me = self.clone();
            tokio::spawn(async move { me.resume_when_driver_returns().await })
        };
        let resync = {
            let me = self.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(options.sync);
                tick.tick().await;
                me.settle_journal().await;
                let mut last_full = Instant::now();
                loop {
                    tick.tick().await;
                    me.report_activity();
                    let full = last_full.elapsed() >= options.resync;
                    if full || me.scope.binder.binds() {
                        me.enqueue_all();
                        if full {
                            last_full = Instant::now();
                        }
                    } else {
                        me.enqueue_unsettled();
                    }
                    me.settle_journal().await;
                }
            })
        };
        stop.await;
        resync.abort();
        recovery.abort();
        self.claims.close();
        self.volumes.close();
        self.classes.close();
        let _ = classes.await;
        for task in tasks {
            // Workers finish the key in hand; every step is safe to repeat after a restart.
            let _ = task.await;
        }
    }

    /// Queues every claim and volume (resync), after bringing the index up to the store: a
    /// PV the store has not had for two resyncs in a row was deleted while the watch was down.
    pub fn enqueue_all(&self) {
        let volumes = self.stores.volumes.state();
        {
            let mut index = self.index_mut();
            let present: std::collections::HashSet<String> =
                volumes.iter().map(|v| v.name_any()).collect();
            let mut unseen = self.unseen.lock().unwrap_or_else(|p| p.into_inner());
            let missing: std::collections::HashSet<String> = index
                .names()
                .into_iter()
                .filter(|n| !present.contains(n))
                .collect();
            for gone in missing.intersection(&unseen) {
                index.remove(gone);
            }
            *unseen = missing;
            for v in &volumes {
                index.upsert(v.clone());
            }
        }
        for c in self.stores.claims.state() {
            self.claims.add(ObjectRef::from_obj(&*c));
        }
        for v in volumes {
            self.volumes.add(v.name_any());
        }
    }

    /// Beside the cluster's binder, the periodic pass looks only at what can still change with
    /// time: claims and PVs not Bound (a handover awaited, a Released volume to delete) and
    /// claims with a resize under way (one may wait for its pods to go). Settled ones wait for
    /// a change or the full resync.
    fn enqueue_unsettled(&self) {
        for c in self.stores.claims.state() {
            let status = c.status.as_ref();
            let resizing = status.is_some_and(|s| {
                s.allocated_resource_statuses
                    .as_ref()
                    .is_some_and(|r| !r.is_empty())
                    || s.conditions.as_ref().is_some_and(|r| !r.is_empty())
            }) || c
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
                != status.and_then(|s| s.capacity.as_ref()?.get("storage"));
            if resizing || !c.is_bound() {
                self.claims.add(ObjectRef::from_obj(&*c));
            }
        }
        for v in self.stores.volumes.state() {
            if v.phase() != Some(VolumePhase::Bound) {
                self.volumes.add(v.name_any());
            }
        }
    }

    fn index_mut(&self) -> std::sync::RwLockWriteGuard<'_, VolumeIndex> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    fn index(&self) -> std::sync::RwLockReadGuard<'_, VolumeIndex> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers the version of a claim we just wrote (see `ClaimMemory::written`).
    fn wrote_claim(&self, claim: &PersistentVolumeClaim) {
        if let Some(rv) = numeric_version(claim) {
            self.claim_memory
                .update_claim(&ObjectRef::from_obj(claim), claim, |m| m.written = Some(rv));
        }
    }

    /// True when the store's copy of the claim is older than our last write to it. A copy that
    /// caught up (or a claim gone from the store) ends the wait.
    fn claim_is_behind(&self, key: &ClaimKey, cached: Option<&PersistentVolumeClaim>) -> bool {
        let Some(wrote) = self.claim_memory.get(key).written else {
            return false;
        };
        match cached.and_then(numeric_version) {
            Some(seen) if seen < wrote => true,
            _ => {
                self.claim_memory.update_if_known(key, |m| m.written = None);
                false
            }
        }
    }

    /// The claim is gone: everything remembered of it goes too.
    fn forget_claim(&self, key: &ClaimKey) {
        self.claim_memory.forget(key);
        self.claims.forget(key);
    }

    /// Remembers a PV we just wrote, so the next decision does not act on an older copy.
    fn remember(&self, pv: &PersistentVolume) {
        self.index_mut().upsert(pv.clone());
    }

    /// Every log line of a pass sits in a span naming the object (`namespace/name`) and, once
    /// decided, the operation (`op`), in text and JSON alike.
    async fn claim_worker(&self) {
        while let Some(key) = self.claims.next().await {
            let name = format!(
                "{}/{}",
                key.namespace.as_deref().unwrap_or_default(),
                key.name
            );
            let span = info_span!("sync", claim = %name, op = field::Empty);
            let result = self.sync_claim(&key).instrument(span.clone()).await;
            self.claims.done(&key);
            span.in_scope(|| self.settle(&self.claims, key, result));
        }
    }

    /// A class changed (or appeared): its unbound claims may now be provisionable.
    async fn class_worker(&self) {
        while let Some(class) = self.classes.next().await {
            for c in self.stores.claims.state() {
                let unbound = c.volume_name().is_none();
                if unbound && c.class() == class {
                    self.claims.add(ObjectRef::from_obj(&*c));
                }
            }
            self.classes.done(&class);
        }
    }

    async fn volume_worker(&self) {
        while let Some(key) = self.volumes.next().await {
            let span = info_span!("sync", volume = %key, op = field::Empty);
            let result = self.sync_volume(&key).instrument(span.clone()).await;
            self.volumes.done(&key);
            span.in_scope(|| self.settle(&self.volumes, key, result));
        }
    }

    /// Requeues by outcome: at once after a conflict or a step that needs another look, with
    /// backoff after a failure.
    fn settle<K>(&self, queue: &WorkQueue<K>, key: K, result: Result<Outcome, SyncError>)
    where
        K: Clone + Eq + std::hash::Hash + Send + std::fmt::Display + 'static,
    {
        match result {
            Ok(Outcome::Done) => queue.forget(&key),
            Ok(Outcome::Waiting) => {}
            Ok(Outcome::Again) => queue.add(key),
            Err(e) if e.class() == SyncErrorClass::Conflict => {
                let delay = queue.retry_conflict(key);
                debug!(error = %e, retry_in = ?delay, "conflict; looking again once the watch has the newer version");
            }
            // The same request would get the same answer: said loudly, tried again rarely.
            Err(e) if e.class() == SyncErrorClass::Refused => {
                let delay = queue.retry_slowly(key);
                error!(error = %e, retry_in = ?delay, "refused; nothing changes until the input, the object or the RBAC named here does");
            }
            Err(e) => {
                let delay = queue.retry(key.clone());
                warn!(error = %e, retry_in = ?delay, "sync failed");
            }
        }
    }

    /// True while a failed driver call on this version of the claim waits for its retry.
    fn backing_off(&self, key: &ClaimKey, claim: &PersistentVolumeClaim) -> bool {
        let rv = claim.resource_version().unwrap_or_default();
        match self.claim_memory.get(key).not_before {
            Some((failed_rv, until)) => failed_rv == rv && Instant::now() < until,
            None => false,
        }
    }

    /// Schedules the retry of a failed driver call and holds watch-driven passes off till then.
    /// `slow`: the failure is infeasible; wait the longest backoff delay at once.
    fn back_off(&self, key: &ClaimKey, claim: &PersistentVolumeClaim, slow: bool) -> Duration {
        let delay = if slow {
            self.claims.retry_slowly(key.clone())
        } else {
            self.claims.retry(key.clone())
        };
        let until = (claim.resource_version().unwrap_or_default(), due_at(delay));
        self.claim_memory
            .update_claim(key, claim, |m| m.not_before = Some(until));
        delay
    }

    fn clear_backoff(&self, key: &ClaimKey) {
        self.claim_memory
            .update_if_known(key, |m| m.not_before = None);
        self.claims.forget(key);
    }

    /// The newest PV we know of by that name: the index holds our own writes too.
    fn volume_in_store(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.index().get(name)
    }

    fn volume_name(&self, claim: &PersistentVolumeClaim) -> String {
        plan::volume_name_for(claim, &self.settings)
    }
}

/// When a retry queued `delay` from now is due. A little early: the queue's timer started just
/// before this, and a pass that arrives a hair before the deadline must not be put off again.
/// The time now as status conditions record it (RFC 3339, whole seconds).
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn due_at(delay: Duration) -> Instant {
    Instant::now() + delay.saturating_sub(Duration::from_millis(20))
}

/// The object's finalizers with `finalizer` added at the end.
fn with<K: kube::Resource>(object: &K, finalizer: &str) -> Vec<String> {
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(finalizer.to_string());
    finalizers
}

/// The object's finalizers without `finalizer`.
fn without<K: kube::Resource>(object: &K, finalizer: &str) -> Vec<String> {
    object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect()
}

/// Replaces the finalizers of `object`, preconditioned on the version it was read at. An object
/// already gone is fine: finalizers are only ever removed from something on its way out.
/// Returns the object as the API answered, or None when it is gone.
async fn set_finalizers<K>(
    api: &kube::Api<K>,
    object: &K,
    finalizers: Vec<String>,
) -> Result<Option<K>, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = kube::api::Patch::Merge(serde_json::json!({
        "metadata": {
            "resourceVersion": object.resource_version(),
            "finalizers": finalizers,
        }
    }));
    patch_unless_gone(api, object, &patch, "update the finalizers").await
}

/// Takes `finalizer` off `object` whatever its version, for when what it guards is over however
/// the object changed meanwhile (the backend volume is deleted). A strategic merge patch removes
/// just that entry, so another controller taking its own finalizer off at the same moment (KCM's
/// pv-protection, on every PV we delete) cannot make it fail with a conflict and cost a retry.
/// Returns the object as the API answered, or None when it is gone.
pub async fn drop_finalizer<K>(
    api: &kube::Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<Option<K>, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = kube::api::Patch::Strategic(serde_json::json!({
        "metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}
    }));
    let action = format!("remove the finalizer {finalizer}");
    patch_unless_gone(api, object, &patch, &action).await
}

/// Patches `object`; None when it is gone. `action` names the patch in the error.
async fn patch_unless_gone<K>(
    api: &kube::Api<K>,
    object: &K,
    patch: &kube::api::Patch<serde_json::Value>,
    action: &str,
) -> Result<Option<K>, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    match api
        .patch(&name, &kube::api::PatchParams::default(), patch)
        .await
    {
        Ok(updated) => Ok(Some(updated)),
        Err(e) if error::is_status(&e, 404) => Ok(None),
        Err(e) => Err(SyncError::api(format!("{action} of {name}"), e)),
    }
}

/// etcd's resourceVersions are increasing integers; the PV index compares them the same way.
fn numeric_version<K: kube::Resource>(object: &K) -> Option<u64> {
    object.meta().resource_version.as_deref()?.parse().ok()
}

/// `<unix-ms>-<0..9999>-<driver>`, as upstream's csiProvisionerIdentity.
pub fn provisioner_identity(driver: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let salt = (now.subsec_nanos() ^ std::process::id()) % 10_000;
    format!("{}-{salt}-{driver}", now.as_millis())
}

/// The reference an Event about `object` names.
pub(super) fn reference<K: kube::Resource<DynamicType = ()>>(
    object: &K,
) -> k8s_openapi::api::core::v1::ObjectReference {
    object.object_ref(&())
}
