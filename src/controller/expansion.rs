//! Carrying out a resize (docs/expansion.md): the pass `expand::Resizer::decide` plans, the
//! ControllerExpandVolume call, the writes `Resizer::after_expand` builds, and what a failure
//! leaves behind. What upstream keeps in memory (the last attempt's final error, "volume in
//! use", the slow set) is an `expand::ResizeMemory`, kept per claim in `memory`.

// The decision compares standard instants; the executor reads them off tokio's clock, which
// tests pause.
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::ListParams;
use tracing::{info, warn};

use super::Part;
use super::drive::{Flow, InHand, Pass};
use super::reference;
use super::{ClaimKey, Controller, Outcome, SyncError, due_at, now};
use crate::csi::Operation;
use crate::expand::failure::{ResizeFailure, after_failure};
use crate::expand::{self, Expander, ResizeMemory, ResizeStep, Resizer};
use crate::model::ClaimExt;
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;
use crate::model::reason::Reason;

fn requested(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> u64 {
    expand::Sizes::of(claim, pv).requested
}

impl Controller {
    fn resizer(&self) -> Resizer<'_> {
        Resizer {
            driver: &self.settings.driver,
            expander: self.expander,
            handle_in_use: self.switches.handle_volume_inuse_error,
            annotate_fs_resize: self.switches.gates.annotate_fs_resize,
        }
    }

    /// The resize half of a pass over a Bound claim.
    pub(super) async fn sync_expansion(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
    ) -> Result<Outcome, SyncError> {
        let Some(name) = claim.named_volume() else {
            return Ok(Outcome::Done);
        };
        let Some(pv) = self.live_volume_if_missing(name).await? else {
            return Ok(Outcome::Done);
        };
        let memory = self.memory.claims.of_claim(key, claim).resize;
        let mut pass = ResizePass { controller: self, key, pv, memory };
        self.drive(&mut pass, InHand { claim: claim.clone(), copy: ClaimCopy::Cached }).await
    }

    /// Starts the resize (T1), checks the pods when the driver refused an in-use volume, calls
    /// the driver, and records what it answered.
    async fn expand(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        mut memory: ResizeMemory,
        Attempt { bytes, start, check_in_use }: Attempt,
    ) -> Result<Outcome, SyncError> {
        let asked = requested(claim, pv);
        let claim = match start {
            Some(patch) => self.patch_claim(Part::Status, claim, patch, "start the resize").await?,
            None => claim.clone(),
        };
        let volume = pv.name_any();
        self.events
            .normal(&reference(&claim), Reason::Resizing, expand::resizing_note(&volume))
            .await;

        if check_in_use && self.claim_in_use(&claim).await {
            let note = expand::in_use_note(
                &claim.namespace().unwrap_or_default(),
                &claim.name_any(),
                &self.settings.driver,
            );
            return Ok(self.resize_waits(key, &claim, memory, asked, note, false).await);
        }
        memory.in_use = false;

        let outcome = match self.expander {
            Some(Expander::Controller) => self.expand_in_driver(key, pv, bytes).await,
            _ => Ok((bytes, true)),
        };
        match outcome {
            Ok((capacity, node_required)) => {
                self.resized(key, &claim, pv, capacity, node_required).await
            }
            Err(failure) => {
                let next = after_failure(failure);
                let claim = match &next.record {
                    Some(message) => {
                        let patch = expand::failed(&claim, message, next.infeasible, &now());
                        self.patch_claim(Part::Status, &claim, patch, "record the failed resize")
                            .await?
                    }
                    None => claim,
                };
                memory.final_error = next.final_error;
                memory.in_use = next.in_use;
                Ok(self.resize_waits(key, &claim, memory, asked, next.note, next.infeasible).await)
            }
        }
    }

    /// ControllerExpandVolume, with the PV's expansion secret: the new capacity and whether the
    /// node must finish.
    async fn expand_in_driver(
        &self,
        key: &ClaimKey,
        pv: &PersistentVolume,
        bytes: u64,
    ) -> Result<(u64, bool), ResizeFailure> {
        let mut request = expand::request(pv, bytes, self.features.single_node_multi_writer)
            .map_err(|e| {
                ResizeFailure::unusable(format!(
                    "cannot ask the driver to expand volume {}: {e}",
                    pv.name_any()
                ))
            })?;
        if let Some(secret) = expand::expansion_secret(pv) {
            let namespace = secret.namespace.as_deref().unwrap_or_default();
            let name = secret.name.as_deref().unwrap_or_default();
            request.secrets = self
                .read_secret(namespace, name, "the PersistentVolume's controllerExpandSecretRef")
                .await
                .map_err(|e| ResizeFailure::Uncertain(e.to_string()))?;
        }
        // The semaphore is never closed; were it, the call goes unthrottled.
        let _slot = self.expansion_slots.acquire().await.ok();
        let about = crate::csi::About::migrated(crate::migration::Plugin::of_volume(pv).is_some());
        let answer = self.csi.controller_expand_volume(request, about).await.map_err(|e| {
            self.strand_claim(key, &e);
            ResizeFailure::of_call(&e.failure(Operation::Expand))
        })?;
        let capacity = expand::answer(bytes, answer.capacity_bytes)
            .map_err(|e| ResizeFailure::unusable(e.to_string()))?;
        Ok((capacity, answer.node_expansion_required))
    }

    /// T2/T3: the PV first, then the claim (kubelet and the next pass cope with a crash between).
    async fn resized(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        capacity: u64,
        node_required: bool,
    ) -> Result<Outcome, SyncError> {
        crate::runtime::crash_point::here(crate::runtime::crash_point::AFTER_EXPAND);
        let expanded = self.resizer().after_expand(claim, pv, capacity, node_required, &now());
        self.patch_volume(
            pv,
            expanded.volume,
            &format!("patch PersistentVolume {} to record its new capacity", pv.name_any()),
        )
        .await?;
        crate::runtime::crash_point::here(crate::runtime::crash_point::AFTER_EXPAND_PV);
        let claim =
            self.patch_claim(Part::Status, claim, expanded.claim, "record the resize").await?;
        if let Some(seconds) = expanded.started.as_ref().and_then(crate::metrics::seconds_since) {
            crate::metrics::metrics().resize_done.observe(seconds);
        }
        self.forget_resize(key);
        self.intake.claims.forget(key);
        info!(volume = %pv.name_any(), bytes = capacity, node_required, "volume expanded");
        self.events.normal(&reference(&claim), expanded.reason, expanded.note.to_string()).await;
        Ok(Outcome::Done)
    }

    /// The resize is over (or there is none): what was remembered of it goes.
    fn forget_resize(&self, key: &ClaimKey) {
        self.memory.claims.update_if_known(key, |m| m.resize = ResizeMemory::default());
    }

    /// A larger size asked of a driver that cannot expand: said once per size.
    async fn cannot_expand(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        mut memory: ResizeMemory,
        size: u64,
    ) {
        memory.announced = Some(size);
        self.memory.claims.update_claim(key, claim, |m| m.resize = memory);
        let note = self.resizer().cannot_expand_note();
        warn!("{note}");
        self.events.warning(&reference(claim), Reason::VolumeResizeFailed, note).await;
    }

    /// A failed attempt: remember it, hold passes on this size off until the retry, and say why.
    async fn resize_waits(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        mut memory: ResizeMemory,
        asked: u64,
        note: String,
        slow: bool,
    ) -> Outcome {
        // The claims' backoff rule; held on the size asked rather than the claim's version,
        // which our own status writes change (as csi-resizer holds it).
        let delay = self.retry_delay(key, slow);
        memory.wait = Some((asked, due_at(delay).into_std()));
        self.memory.claims.update_claim(key, claim, |m| m.resize = memory);
        warn!(retry_in = ?delay, "resize failed: {note}");
        self.events.warning(&reference(claim), Reason::VolumeResizeFailed, note).await;
        Outcome::Waiting
    }

    /// Whether a pod that may still run uses the claim. A failed listing counts as "in use":
    /// calling an offline-only driver on a mounted volume is what the check is there to avoid.
    async fn claim_in_use(&self, claim: &PersistentVolumeClaim) -> bool {
        let namespace = claim.namespace();
        let params = ListParams::default();
        match self.cluster.pods.list(namespace.as_deref(), &params).await {
            Ok(pods) => expand::in_use(claim, &pods),
            Err(error) => {
                warn!(%error, "cannot list pods to see whether the claim is in use");
                true
            }
        }
    }
}

/// A resize pass over one bound claim: its PV as this pass last wrote it, and what is
/// remembered of earlier attempts.
struct ResizePass<'c> {
    controller: &'c Controller,
    key: &'c ClaimKey,
    pv: PersistentVolume,
    memory: ResizeMemory,
}

impl Pass for ResizePass<'_> {
    type Step = ResizeStep;
    type Subject = InHand;
    /// Drop the pre-resize capacity, confirm the copy, expand.
    const STEPS: usize = 4;

    fn decide(&mut self, held: &InHand) -> Gated<ResizeStep> {
        let clock = Instant::now().into_std();
        let resizer = self.controller.resizer();
        resizer.decide((&held.claim, held.copy), &self.pv, &self.memory, clock, &now())
    }

    async fn confirm(&mut self, held: &InHand) -> Result<Option<InHand>, SyncError> {
        self.controller.confirm_claim(held).await
    }

    fn name(step: &ResizeStep) -> &'static str {
        step.name()
    }

    fn op(step: &ResizeStep) -> Option<&'static str> {
        matches!(step, ResizeStep::Expand { .. }).then_some("expand")
    }

    async fn act(&mut self, step: ResizeStep, held: &InHand) -> Result<Flow<InHand>, SyncError> {
        let (c, key, claim) = (self.controller, self.key, &held.claim);
        match step {
            ResizeStep::None => {
                c.forget_resize(key);
                Ok(Flow::End(Outcome::Done))
            }
            ResizeStep::DropPreResize(patch) => {
                let action = format!(
                    "patch PersistentVolume {} to drop its pre-resize capacity",
                    self.pv.name_any()
                );
                self.pv = c.patch_volume(&self.pv, patch, &action).await?;
                Ok(Flow::Again)
            }
            ResizeStep::CannotExpand { announce } => {
                if let Some(size) = announce {
                    c.cannot_expand(key, claim, self.memory.clone(), size).await;
                }
                Ok(Flow::End(Outcome::Done))
            }
            ResizeStep::Expand { bytes, start, check_in_use } => {
                let attempt = Attempt { bytes, start, check_in_use };
                let memory = std::mem::take(&mut self.memory);
                c.expand(key, claim, &self.pv, memory, attempt).await.map(Flow::End)
            }
        }
    }
}

/// An expansion the pass decided on.
struct Attempt {
    bytes: u64,
    start: Option<serde_json::Value>,
    check_in_use: bool,
}
