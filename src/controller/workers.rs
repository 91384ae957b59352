//! The loops: workers that take keys off the queues and finish each pass by its outcome, the
//! class worker, and the periodic passes (resync).

use k8s_openapi::api::core::v1::ObjectReference;

use super::*;
use crate::cluster::held::object_key;
use crate::model::reason::Reason;
use crate::runtime::logs::pass_with_op;
use crate::runtime::panics::{contain, contain_or_log};

impl Controller {
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
            while !self.intake.volumes.is_idle() && started.elapsed() < options.sync {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let reserved = crate::model::turn::reserved_for_existing(options.workers);
        self.intake.claims.reserve_for_existing(options.workers, reserved);
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
                // Ticks at the shorter of the two periods, so that neither waits for the other;
                // each pass comes every so many ticks.
                let period = options.sync.min(options.resync);
                let ticks = |d: Duration| (d.as_millis() / period.as_millis().max(1)).max(1);
                let (full_every, sync_every) = (ticks(options.resync), ticks(options.sync));
                let mut tick = tokio::time::interval(period);
                tick.tick().await;
                me.sweep_journal().await;
                let mut n: u128 = 0;
                loop {
                    tick.tick().await;
                    n += 1;
                    let full = n.is_multiple_of(full_every);
                    if !full && !n.is_multiple_of(sync_every) {
                        continue;
                    }
                    let pass = async {
                        me.report_activity();
                        debug!(full, "periodic pass");
                        if full {
                            me.enqueue_all();
                        } else {
                            me.enqueue_unsettled();
                        }
                        me.sweep_journal().await;
                        me.tell_queue_waits().await;
                    };
                    contain_or_log("periodic", pass).await;
                }
            })
        };
        let sweep = (!options.snapshot_sweep.is_zero()).then(|| {
            let me = self.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(options.snapshot_sweep);
                loop {
                    tick.tick().await;
                    me.sweep_restore_protection().await;
                }
            })
        });
        // client-go refreshes its unfinished-work gauges every half second.
        let unfinished = {
            let me = self.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                loop {
                    tick.tick().await;
                    me.intake.claims.measure_unfinished();
                    me.intake.volumes.measure_unfinished();
                    me.intake.classes.measure_unfinished();
                }
            })
        };
        stop.await;
        unfinished.abort();
        if let Some(sweep) = sweep {
            sweep.abort();
        }
        resync.abort();
        recovery.abort();
        self.intake.claims.close();
        self.intake.volumes.close();
        self.intake.classes.close();
        let _ = classes.await;
        for task in tasks {
            // Workers finish the key in hand; every step is safe to repeat after a restart.
            let _ = task.await;
        }
    }

    /// Queues every claim and volume (the full resync), after bringing the index up to the store;
    /// every name in the index is checked against the store from the next pass on.
    pub fn enqueue_all(&self) {
        let volumes = self.stores.volumes.held_state();
        {
            let mut index = self.index_mut();
            for held in &volumes {
                if let Some(v) = held.open() {
                    index.upsert_held(&v, held.clone());
                }
            }
        }
        self.intake.unsettled.volumes_relisted();
        let claims: std::collections::HashSet<ClaimKey> = self
            .stores
            .claims
            .held_state()
            .iter()
            .map(|c| object_key(&c.name, c.namespace.as_deref()))
            .collect();
        // Tickets given by a late event to claims gone since are forgotten here.
        self.intake.claims.retain_tickets(|k| claims.contains(k));
        for key in claims {
            self.intake.claims.add(key);
        }
        for v in volumes {
            self.intake.volumes.add(v.name.to_string());
        }
    }

    /// The periodic pass between full resyncs: only what can still change with time
    /// (`resync`), among what changed since the last pass or was unsettled at it (unsettled.rs);
    /// a settled object waits for a change, which its watch queues and marks.
    fn enqueue_unsettled(&self) {
        let candidates = self.intake.unsettled.take();
        let binds = self.scope.binder.binds();
        let mut kept =
            self.sweep_index(candidates.suspects, &candidates.unseen, candidates.relisted);
        for key in candidates.claims {
            let Some(c) = self.stores.claims.get(&key) else { continue };
            let volume = c.named_volume().and_then(|v| self.stores.volumes.get(&ObjectRef::new(v)));
            if crate::resync::claim_needs_pass(&c, volume.as_deref(), binds) {
                self.intake.claims.add(key.clone());
                kept.claims.insert(key);
            }
        }
        for name in candidates.volumes {
            let Some(v) = self.stores.volumes.get(&ObjectRef::new(&name)) else { continue };
            let claim = v.claim_ref().and_then(|r| {
                let key = ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?);
                self.stores.claims.get(&key)
            });
            if crate::resync::volume_needs_pass(&v, claim.as_deref(), binds) {
                self.intake.volumes.add(name.clone());
                kept.volumes.insert(name);
            }
        }
        self.intake.unsettled.keep(kept);
    }

    /// Drops from the index a PV the store has not had for two passes in a row (`resync::sweep`):
    /// our own write ahead of a delete event, or one deleted while the watch was down (after a
    /// relist every name is checked). What stays suspect or unseen is kept for the next pass.
    fn sweep_index(
        &self,
        mut suspects: std::collections::HashSet<String>,
        unseen: &std::collections::HashSet<String>,
        relisted: bool,
    ) -> Candidates {
        let mut index = self.index_mut();
        // The unseen are suspects still: a second miss drops them.
        suspects.extend(unseen.iter().cloned());
        if relisted {
            suspects.extend(index.names().map(str::to_string));
        }
        let in_store = |n: &str| self.stores.volumes.held(&ObjectRef::new(n)).is_some();
        let sweep = crate::resync::sweep(suspects, in_store, |n| index.contains(n), unseen);
        for gone in &sweep.gone {
            index.remove(gone, None);
        }
        Candidates { unseen: sweep.unseen, ..Candidates::default() }
    }

    /// Every log line of a pass sits in a span naming the object (`namespace/name`) and, once
    /// decided, the operation (`op`), in text and JSON alike.
    async fn claim_worker(&self) {
        while let Some(key) = self.intake.claims.next().await {
            let name = format!("{}/{}", key.namespace.as_deref().unwrap_or_default(), key.name);
            let span = info_span!("sync", claim = %name, op = field::Empty);
            let object = || self.stores.claims.get(&key).as_deref().map(reference);
            // On the heap, as `drive` puts each step: the pass's future is large in a debug
            // build, and polled deep in a task's stack.
            // Its driver calls take their turn among its namespace's, its creates in its
            // class's budget.
            let share = key.namespace.clone().unwrap_or_default();
            let class = self
                .stores
                .claims
                .get(&key)
                .and_then(|c| crate::provision::plan::class_name(&c).map(str::to_string));
            let work = crate::csi::limited::in_share(share, class, Box::pin(self.sync_claim(&key)));
            let pass = self.contained("claim", pass_with_op(work), object);
            let result = pass.instrument(span.clone()).await;
            self.intake.claims.done(&key);
            span.in_scope(|| self.finish_pass(&self.intake.claims, key, result));
        }
    }

    /// A pass over one key whose panic is a failed pass (runtime::panics): counted, and a
    /// Warning on its object, which the retry follows.
    async fn contained(
        &self,
        pass: &str,
        work: impl Future<Output = Result<Outcome, SyncError>>,
        object: impl FnOnce() -> Option<ObjectReference>,
    ) -> Result<Outcome, SyncError> {
        let panicked = match contain(work).await {
            Ok(result) => return result,
            Err(panicked) => panicked,
        };
        crate::metrics::metrics().panicked(pass);
        if let Some(object) = object() {
            let note = format!("{panicked}; retried with backoff");
            self.events.warning(&object, Reason::InternalError, note).await;
        }
        Err(SyncError::Panicked(panicked))
    }

    /// A class changed (or appeared): its unbound claims may now be provisionable.
    async fn class_worker(&self) {
        while let Some(class) = self.intake.classes.next().await {
            let pass = async {
                for key in self.intake.unbound_of(&class) {
                    self.intake.claims.add(key);
                }
                // A default class may now be the one a claim that names none is given.
                let is_default =
                    self.stores.classes.get(&ObjectRef::new(&class)).is_some_and(|c| {
                        crate::binder::matching::default_class(std::iter::once(&*c)).is_some()
                    });
                if is_default {
                    for key in self.intake.unbound_of("") {
                        self.intake.claims.add(key);
                    }
                }
            };
            contain_or_log("class", pass.instrument(info_span!("sync", class = %class))).await;
            self.intake.classes.done(&class);
        }
    }

    async fn volume_worker(&self) {
        while let Some(key) = self.intake.volumes.next().await {
            let span = info_span!("sync", volume = %key, op = field::Empty);
            let object =
                || self.stores.volumes.get(&ObjectRef::new(&key)).as_deref().map(reference);
            let pass =
                self.contained("volume", pass_with_op(Box::pin(self.sync_volume(&key))), object);
            let result = pass.instrument(span.clone()).await;
            self.intake.volumes.done(&key);
            span.in_scope(|| self.finish_pass(&self.intake.volumes, key, result));
        }
    }

    /// Requeues by outcome: at once after a conflict or a step that needs another look, with
    /// backoff after a failure.
    fn finish_pass<K>(&self, queue: &WorkQueue<K>, key: K, result: Result<Outcome, SyncError>)
    where
        K: Clone + Eq + std::hash::Hash + Send + std::fmt::Display + 'static,
    {
        // One line per pass, its actions done: what a test waits for to know a pass happened.
        debug!("pass done");
        match result {
            Ok(Outcome::Done) => queue.forget(&key),
            Ok(Outcome::Waiting) => {}
            Ok(Outcome::Again) => queue.add(key),
            Err(e) => {
                let class = e.class();
                crate::metrics::metrics().sync_failure(queue.name(), class.as_str());
                let delay = match class.retry() {
                    Retry::Soon => queue.retry_conflict(key),
                    Retry::Backoff => queue.retry(key),
                    Retry::Slowly => queue.retry_slowly(key),
                };
                match class {
                    SyncErrorClass::Conflict => {
                        debug!(error = %e, retry_in = ?delay, "conflict; looking again once the watch has the newer version");
                    }
                    // The same request would get the same answer: said loudly, tried again rarely.
                    SyncErrorClass::Refused => {
                        error!(error = %e, retry_in = ?delay, "refused; nothing changes until the input, the object or the RBAC named here does");
                    }
                    SyncErrorClass::Infeasible => {
                        warn!(error = %e, retry_in = ?delay, "cannot work as asked; tried again slowly, or at once when the object changes");
                    }
                    SyncErrorClass::Final | SyncErrorClass::InProgress => {
                        warn!(error = %e, retry_in = ?delay, "sync failed");
                    }
                }
            }
        }
    }
}
