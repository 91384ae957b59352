//! The volume reconciler's I/O: pages through ListVolumes at a bounded rate, gathers what the
//! caches and the intent journal know, and acts on what `inventory` decides. It runs while
//! leading, and its driver calls go through the same fence as every other.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use tracing::{info, warn};

use super::paging::{PageStep, Pager};
use super::{Census, Known, Listed, Memory, State, classify, known, orphan_secret};
use crate::cluster::Stores;
use crate::cluster::events::Events;
use crate::cluster::objects::{Cluster, read_secret};
use crate::csi::{CsiClient, CsiError, v1 as csi};
use crate::journal::Journal;
use crate::model::ClassExt;
use crate::model::reason::Reason;
use crate::provision::settings::VolumeNaming;

/// How the flags set the reconciler up.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `--reconcile-period`.
    pub period: Duration,
    /// `--reconcile-grace`.
    pub grace: Duration,
    /// `--reconcile-delete-orphans`.
    pub delete_orphans: bool,
    /// `--reconcile-page-size`.
    pub page_size: i32,
    /// `--reconcile-page-interval`.
    pub page_interval: Duration,
}

/// The driver's volumes, and whether the listing can be trusted to be whole.
#[derive(Debug, Default)]
pub struct Listing {
    pub volumes: Vec<Listed>,
    /// False when the driver handed back a token it had given before (the one it was sent, or
    /// a cycle), paged past `paging::MAX_PAGES`, or handed a token to a listing with no limit.
    pub complete: bool,
    pub pages: usize,
}

/// Every volume the driver lists, `page_size` at a time, pausing `interval` between pages; the
/// steps are `paging::Pager`'s.
pub async fn list(
    csi: &CsiClient,
    page_size: i32,
    interval: Duration,
) -> Result<Listing, CsiError> {
    let mut listing = Listing::default();
    let mut pager = Pager::new(page_size);
    let mut step = pager.first();
    loop {
        let (token, max_entries) = match step {
            PageStep::Next { token, max_entries } => (token, max_entries),
            PageStep::Whole => {
                warn!(
                    page_size,
                    "volume reconciler: the driver's first page was full and had no next token (it may not page); listing again with no limit"
                );
                listing.volumes.clear();
                (String::new(), 0)
            }
            PageStep::Done { complete } => {
                listing.complete = complete;
                listing.pages = pager.pages();
                return Ok(listing);
            }
        };
        if pager.pages() > 0 {
            tokio::time::sleep(interval).await;
        }
        let (volumes, next) = csi.list_volumes_page(max_entries, &token).await?;
        crate::metrics::metrics().list_volumes_page();
        step = pager.after(volumes.len(), &next);
        listing.volumes.extend(
            volumes
                .into_iter()
                .map(|v| Listed { id: v.volume_id, capacity_bytes: v.capacity_bytes }),
        );
    }
}

/// The reconciler as the controller runs it.
pub struct Reconciler {
    pub csi: CsiClient,
    pub stores: Stores,
    /// PV reads and Secret reads, through the API.
    pub objects: Cluster,
    pub events: Events,
    pub driver: String,
    pub naming: VolumeNaming,
    pub journal: Option<Arc<Journal>>,
    pub options: Options,
    pub memory: Memory,
}

impl Reconciler {
    /// A pass every period until `stopped`; a failed pass is logged and waits for the next.
    pub async fn run(mut self, stopped: impl Future<Output = ()>) {
        let mut ticks = tokio::time::interval(self.options.period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stop = stopped;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = ticks.tick() => {}
            }
            let pass = crate::runtime::panics::contain_or_log("reconciler", self.pass()).await;
            if let Some(Err(e)) = pass {
                warn!(error = %e, "volume reconciler: ListVolumes failed; trying again next period");
            }
        }
    }

    /// One pass: list, judge, report, and delete or name what is due.
    pub async fn pass(&mut self) -> Result<Census, CsiError> {
        let began = Time(k8s_openapi::jiff::Timestamp::now());
        let listing = list(&self.csi, self.options.page_size, self.options.page_interval).await?;
        if !listing.complete {
            warn!(
                pages = listing.pages,
                "volume reconciler: the driver's listing may be incomplete (a token handed back or repeated, or more pages than are read); lost PVs are not judged this pass"
            );
        }
        let census = self.census(&listing, &began);
        report(&census);
        let actions = self.memory.after_pass(
            &census,
            tokio::time::Instant::now().into_std(),
            self.options.grace,
        );
        for pv in actions.announce_lost {
            self.announce_lost(&pv).await;
        }
        if !self.options.delete_orphans {
            for id in &actions.deletable {
                info!(volume = %id, grace = ?self.options.grace, "volume reconciler (dry run): would delete this orphaned volume; --reconcile-delete-orphans deletes it");
            }
        } else if !actions.deletable.is_empty() {
            // The caches once more, as they are now, for every orphan due.
            let (_, known_now) = self.known();
            for id in &actions.deletable {
                self.delete_orphan(id, &known_now).await;
            }
        }
        Ok(census)
    }

    fn census(&mut self, listing: &Listing, began: &Time) -> Census {
        let (pvs, known) = self.known();
        super::census(
            &listing.volumes,
            listing.complete,
            pvs.iter().map(|p| p.as_ref()),
            &self.driver,
            &known,
            &self.naming,
            began,
        )
    }

    /// The PVs as the cache holds them, and what the caches and the journal know.
    fn known(&mut self) -> (Vec<Arc<PersistentVolume>>, Known) {
        let pvs = open_all(&self.stores.volumes.held_state());
        let claims = open_all(&self.stores.claims.held_state());
        let journaled = self.journal.as_ref().map(|j| j.all()).unwrap_or_default();
        let classes = self.stores.classes.state();
        let known = known(
            pvs.iter().map(|p| p.as_ref()),
            claims.iter().map(|c| c.as_ref()),
            journaled.iter().map(|c| c.as_ref()),
            classes.iter().map(|c| c.as_ref()),
            (&self.driver, &self.naming),
        );
        (pvs, self.memory.with_retained(known))
    }

    async fn announce_lost(&self, name: &str) {
        let Some(pv) = self.stores.volumes.get(&kube::runtime::reflector::ObjectRef::new(name))
        else {
            return;
        };
        let handle = pv.spec.as_ref().and_then(|s| s.csi.as_ref()).map(|c| c.volume_handle.clone());
        let note = format!(
            "the driver {} does not list volume {}: it may have been deleted outside Kubernetes",
            self.driver,
            handle.unwrap_or_default()
        );
        warn!(pv = %name, "volume reconciler: {note}");
        self.events.warning(&pv.object_ref(&()), Reason::VolumeMissing, note).await;
    }

    /// Deletes an orphan after checking once more that it is still one by `known_now`, and,
    /// against the API rather than the caches, that no PV of its name exists.
    async fn delete_orphan(&mut self, id: &str, known_now: &Known) {
        let verdict = classify(id, known_now, &self.naming);
        let (State::Orphaned, Some(name)) = (verdict.state, verdict.name) else {
            info!(volume = %id, "volume reconciler: no longer an orphan; not deleted");
            return;
        };
        match self.objects.volumes.get(None, &name).await {
            Ok(None) => {}
            Ok(Some(_)) => {
                info!(volume = %id, pv = %name, "volume reconciler: a PV of its name exists; not deleted");
                return;
            }
            Err(e) => {
                warn!(volume = %id, error = %e, "volume reconciler: cannot read the PV of its name; not deleted this pass");
                return;
            }
        }
        let secrets = self.orphan_secrets(&name).await;
        let request = csi::DeleteVolumeRequest { volume_id: id.to_string(), secrets };
        match self.csi.delete_volume(request).await {
            Ok(()) => {
                info!(volume = %id, "volume reconciler: deleted an orphaned volume");
                crate::metrics::metrics().orphan_deleted();
                self.memory.deleted(id);
            }
            Err(e) if e.code() == Some(tonic::Code::NotFound) => self.memory.deleted(id),
            Err(e) => {
                warn!(volume = %id, error = %e, "volume reconciler: DeleteVolume of an orphan failed; trying again next pass");
            }
        }
    }

    /// As upstream's deletion: a secret that cannot be named or read is logged, and deletion
    /// goes on without it.
    async fn orphan_secrets(&self, volume_name: &str) -> HashMap<String, String> {
        let classes = self.stores.classes.state();
        let ours: Vec<_> =
            classes.iter().filter(|c| c.served_by(&self.driver)).map(|c| c.as_ref()).collect();
        let secret = match orphan_secret(&ours, volume_name) {
            Ok(Some(secret)) => secret,
            Ok(None) => return HashMap::new(),
            Err(note) => {
                warn!(volume = volume_name, "volume reconciler: {note}; deleting without secrets");
                return HashMap::new();
            }
        };
        let secrets = &*self.objects.secrets;
        match read_secret(secrets, &secret.namespace, &secret.name, "the StorageClass").await {
            Ok(secrets) => secrets,
            Err(note) => {
                warn!(volume = volume_name, "volume reconciler: {note}; deleting without secrets");
                HashMap::new()
            }
        }
    }
}

/// The counts as metrics and one log line.
pub fn report(census: &Census) {
    let mut counts: Vec<(&str, usize)> =
        State::ALL.iter().map(|s| (s.as_str(), census.count(*s))).collect();
    if let Some(lost) = &census.lost {
        counts.push(("lost", lost.len()));
    }
    crate::metrics::metrics().volumes(&counts);
    let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{s}={n}")).collect();
    info!(volumes = census.verdicts.len(), "volume reconciler pass: {}", summary.join(" "));
}

fn open_all<K: crate::cluster::held::Compactable>(
    held: &[Arc<crate::model::compact::Compact<K>>],
) -> Vec<Arc<K>> {
    held.iter().filter_map(|h| h.open()).collect()
}
