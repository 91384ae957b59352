//! The loops: workers that take keys off the queues and settle each pass's outcome, the
//! class worker, and the periodic passes (resync).

use super::*;

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
            while !self.queues.volumes.is_idle() && started.elapsed() < options.sync {
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
        self.queues.claims.close();
        self.queues.volumes.close();
        self.queues.classes.close();
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
            let missing: std::collections::HashSet<String> =
                index.names().into_iter().filter(|n| !present.contains(n)).collect();
            for gone in missing.intersection(&unseen) {
                index.remove(gone);
            }
            *unseen = missing;
            for v in &volumes {
                index.upsert(v.clone());
            }
        }
        for c in self.stores.claims.state() {
            self.queues.claims.add(ObjectRef::from_obj(&*c));
        }
        for v in volumes {
            self.queues.volumes.add(v.name_any());
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
                s.allocated_resource_statuses.as_ref().is_some_and(|r| !r.is_empty())
                    || s.conditions.as_ref().is_some_and(|r| !r.is_empty())
            }) || c
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
                != status.and_then(|s| s.capacity.as_ref()?.get("storage"));
            if resizing || !c.is_bound() {
                self.queues.claims.add(ObjectRef::from_obj(&*c));
            }
        }
        for v in self.stores.volumes.state() {
            if v.phase() != Some(VolumePhase::Bound) {
                self.queues.volumes.add(v.name_any());
            }
        }
    }

    /// Every log line of a pass sits in a span naming the object (`namespace/name`) and, once
    /// decided, the operation (`op`), in text and JSON alike.
    async fn claim_worker(&self) {
        while let Some(key) = self.queues.claims.next().await {
            let name = format!("{}/{}", key.namespace.as_deref().unwrap_or_default(), key.name);
            let span = info_span!("sync", claim = %name, op = field::Empty);
            let result = self.sync_claim(&key).instrument(span.clone()).await;
            self.queues.claims.done(&key);
            span.in_scope(|| self.settle(&self.queues.claims, key, result));
        }
    }

    /// A class changed (or appeared): its unbound claims may now be provisionable.
    async fn class_worker(&self) {
        while let Some(class) = self.queues.classes.next().await {
            for c in self.stores.claims.state() {
                let unbound = c.volume_name().is_none();
                if unbound && c.class() == class {
                    self.queues.claims.add(ObjectRef::from_obj(&*c));
                }
            }
            self.queues.classes.done(&class);
        }
    }

    async fn volume_worker(&self) {
        while let Some(key) = self.queues.volumes.next().await {
            let span = info_span!("sync", volume = %key, op = field::Empty);
            let result = self.sync_volume(&key).instrument(span.clone()).await;
            self.queues.volumes.done(&key);
            span.in_scope(|| self.settle(&self.queues.volumes, key, result));
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
}
