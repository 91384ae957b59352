//! The pass over a PV (`VolumePass`, driven by the one loop): phase and finalizer upkeep,
//! release, and reclaim, as `binder::volume` decides them.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use tracing::{info, warn};

use super::drive::{Flow, Pass};
use super::reference;
use super::{Controller, Outcome, SyncError, drop_finalizer, set_finalizers, with, without};
use crate::binder::index::claim_ref_key;
use crate::binder::volume::{DeleteGate, Recheck};
use crate::binder::{
    self,
    claim::Notice,
    volume::{ClaimLookup, Reclaim, VolumeStep},
};
use crate::csi::Operation;
use crate::model::gate::Gated;
use crate::model::names::*;
use crate::model::reason::Reason;
use crate::model::{VolumeExt, VolumePhase};

impl Controller {
    pub(super) async fn sync_volume(&self, name: &str) -> Result<Outcome, SyncError> {
        let Some(pv) = self.volume_in_store(name) else {
            return Ok(Outcome::Done);
        };
        if !self.scope.has_volume(&pv) {
            return Ok(Outcome::Done);
        }
        let stored = claim_ref_key(&pv)
            .and_then(|(ns, n)| self.stores.claims.get(&ObjectRef::new(&n).within(&ns)));
        let mut pass = VolumePass { controller: self, pv, stored };
        self.drive(&mut pass, OfVolume::Stored).await
    }

    /// unbindVolume: the claimRef (or its UID) goes, then the phase is Available.
    async fn unbind(&self, pv: &PersistentVolume) -> Result<(), SyncError> {
        let mut pv = pv.clone();
        if let Some(patch) = binder::bind::unbind(&pv) {
            pv = self.patch_volume(&pv, patch, "unbind the PersistentVolume").await?;
        }
        info!("unbound: its claim is bound to another volume");
        self.set_phase(&pv, VolumePhase::Available, None).await?;
        Ok(())
    }

    /// Failed with the reason in status.message, and the event.
    async fn fail_volume(&self, pv: &PersistentVolume, notice: &Notice) -> Result<(), SyncError> {
        let failed = self.set_phase(pv, VolumePhase::Failed, Some(&notice.message)).await?;
        warn!("{}", notice.message);
        self.notify(&reference(&failed), notice).await;
        Ok(())
    }

    /// The claim in the live API; None when it is gone.
    async fn live_claim_of(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<PersistentVolumeClaim>, SyncError> {
        let Some((namespace, name)) = claim_ref_key(pv) else {
            return Ok(None);
        };
        self.cluster
            .claims
            .get(Some(&namespace), &name)
            .await
            .map_err(|e| SyncError::api("read the volume's claim", e))
    }

    /// Marks the PV Released once the live API confirms its claim gone, then reclaims it.
    /// `live` is the claim as this pass already read it from the API, if it did.
    async fn release(
        &self,
        pv: &PersistentVolume,
        live: Option<Option<PersistentVolumeClaim>>,
    ) -> Result<Outcome, SyncError> {
        let claim = match live {
            Some(claim) => claim,
            None => self.live_claim_of(pv).await?,
        };
        if binder::volume::claim_holds(pv, claim.as_ref()) {
            return Ok(Outcome::Again); // the cache was behind
        }
        let released = self.set_phase(pv, VolumePhase::Released, None).await?;
        info!("released: its claim is gone");
        // The patch answered with the live PV, and the claim was just read: no need to read again.
        let driver = &self.settings.driver;
        let mut step = VolumeStep::Reclaim(binder::volume::reclaim(&released, driver));
        if !self.scope.binder.binds() {
            step = binder::volume::beside_cluster_binder(&released, driver, step);
        }
        match step {
            VolumeStep::Reclaim(Reclaim::Delete) => self.delete_released(&released).await,
            VolumeStep::Reclaim(Reclaim::Fail(notice)) => {
                self.fail_volume(&released, &notice).await?;
                Ok(Outcome::Done)
            }
            _ => Ok(Outcome::Done),
        }
    }

    /// Reclaims a PV the cache says is Released with policy Delete, after confirming that on the
    /// live PV and the live claim. `read`: the claim as this pass already read it from the API
    /// (after the PV was released), which need not be read again.
    async fn reclaim(
        &self,
        cached: &PersistentVolume,
        read: Option<Option<PersistentVolumeClaim>>,
    ) -> Result<Outcome, SyncError> {
        let name = cached.name_any();
        let live = self
            .cluster
            .volumes
            .get(None, &name)
            .await
            .map_err(|e| SyncError::api("read the PersistentVolume", e))?;
        // A claim read before the PV was Released says nothing of the claim since.
        let mut claim = read.filter(|_| VolumePhase::awaits_reclaim(cached.phase()));
        loop {
            let step = binder::volume::recheck_reclaim(
                live.as_ref(),
                claim.as_ref().map(Option::as_ref),
                &self.settings.driver,
            );
            let Some(pv) = &live else {
                return Ok(Outcome::Done);
            };
            return match step {
                Recheck::ReadClaim => {
                    claim = Some(self.live_claim_of(pv).await?);
                    continue;
                }
                Recheck::Gone => Ok(Outcome::Done),
                Recheck::Finished => {
                    self.index_volume(pv);
                    Ok(Outcome::Done)
                }
                Recheck::Changed => {
                    self.index_volume(pv);
                    Ok(Outcome::Again)
                }
                Recheck::Held => {
                    warn!("marked Released, but its claim still holds it; not deleting");
                    Ok(Outcome::Done)
                }
                Recheck::Delete => self.delete_released(pv).await,
            };
        }
    }

    /// DeleteVolume, then the PV, then our finalizer, for a live PV whose claim is confirmed gone.
    async fn delete_released(&self, pv: &PersistentVolume) -> Result<Outcome, SyncError> {
        let name = pv.name_any();
        let attachments = self.stores.attachments.as_ref().map(|a| a.state()).unwrap_or_default();
        let served = self.served_its_claim(pv);
        match binder::volume::may_delete(pv, attachments.iter().map(|a| &**a), served) {
            DeleteGate::Go => {}
            DeleteGate::Attached(node) => {
                // Postponed, not failed: a Normal event, as csi-provisioner v6.4 records it.
                let note = format!(
                    "persistentvolume {name} is still attached to node {node}, waiting for detach"
                );
                info!(%node, "not deleting the volume yet: it is still attached");
                self.events.normal(&reference(pv), Reason::VolumeDelete, note).await;
                return Ok(Outcome::Done);
            }
            DeleteGate::NotItsClaims => {
                let first = {
                    let mut usage = self.intake.usage.lock().unwrap_or_else(|p| p.into_inner());
                    usage.first_refusal(&name)
                };
                if first {
                    let notice = binder::usage::refusal(pv);
                    warn!("{}", notice.message);
                    self.notify(&reference(pv), &notice).await;
                }
                return Ok(Outcome::Done);
            }
        }
        // An in-tree PV is deleted by its translated handle; one whose ID does not translate
        // is never deleted by a guess.
        let handle = match crate::migration::volume_handle(pv) {
            Some(Ok(handle)) if !handle.is_empty() => handle,
            other => {
                let why = match other {
                    Some(Err(e)) => e.to_string(),
                    _ => "the PersistentVolume records no volume handle".to_string(),
                };
                let note = format!("cannot delete the volume of {name}: {why}");
                warn!("{note}");
                self.events.warning(&reference(pv), Reason::VolumeFailedDelete, note).await;
                return Ok(Outcome::Done);
            }
        };
        let secrets = self.deletion_secrets(pv).await;
        let class = pv.class();
        let started = tokio::time::Instant::now();
        crate::runtime::crash_point::here(crate::runtime::crash_point::BEFORE_DELETE);
        let about = crate::csi::About::migrated(crate::migration::Plugin::of_volume(pv).is_some());
        let deleted = self.csi.delete_volume_if_present(&handle, secrets, about).await;
        crate::metrics::metrics().delete(class, deleted.is_ok(), started.elapsed());
        if let Err(e) = deleted {
            self.strand_volume(&name, &e);
            let note = format!("failed to delete volume {handle}: {e}");
            self.events.warning(&reference(pv), Reason::VolumeFailedDelete, note).await;
            return Err(SyncError::csi(Operation::Delete, e));
        }
        info!(%handle, "deleted the volume in the driver");
        crate::runtime::crash_point::here(crate::runtime::crash_point::AFTER_DELETE);
        self.intake.nudge.answers_changed();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pv.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let remaining = self
            .cluster
            .volumes
            .delete(None, &name, &params)
            .await
            .map_err(|e| SyncError::api("delete the PersistentVolume", e))?;
        let mut remaining = remaining;
        if let Some(pv) = &remaining
            && has_finalizer(&pv.metadata, FINALIZER_VOLUME)
        {
            remaining = drop_finalizer(&*self.cluster.volumes, pv, FINALIZER_VOLUME).await?;
        }
        // The index learns that our part is over before the watch says so: the events our own
        // writes cause then decide "nothing to do" without asking the API again.
        if let Some(pv) = remaining {
            self.index_volume(&pv);
        }
        Ok(Outcome::Done)
    }

    /// See `binder::usage`: deleted only for the claim it was made for or was used by.
    fn served_its_claim(&self, pv: &PersistentVolume) -> bool {
        let usage = self.intake.usage.lock().unwrap_or_else(|p| p.into_inner());
        binder::usage::served_its_claim(
            pv,
            |uid| self.settings.naming.for_uid(uid),
            usage.user_of(&pv.name_any()),
        )
    }

    /// The secret for DeleteVolume. As upstream: a secret that cannot be read is logged, and
    /// deletion goes on without it.
    async fn deletion_secrets(
        &self,
        pv: &PersistentVolume,
    ) -> std::collections::HashMap<String, String> {
        let class = pv
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            .and_then(|c| self.stores.classes.get(&ObjectRef::new(c)));
        let secret = match crate::provision::volume::deletion_secret(pv, class.as_deref()) {
            Ok(Some(secret)) => secret,
            Ok(None) => return Default::default(),
            Err(note) => {
                warn!("{note}; deleting without secrets");
                return Default::default();
            }
        };
        match self.read_secret(&secret.namespace, &secret.name, "the StorageClass").await {
            Ok(secrets) => secrets,
            Err(note) => {
                warn!("{note}; deleting without secrets");
                Default::default()
            }
        }
    }
}

/// The claim a PV names, as a PV pass has it.
pub(super) enum OfVolume {
    /// The store's copy (the pass's `stored`).
    Stored,
    /// Read from the API in this pass; None: it is gone.
    Live(Option<Box<PersistentVolumeClaim>>),
}

impl OfVolume {
    /// As `release` and `reclaim` take it: None when not read live.
    fn read(&self) -> Option<Option<PersistentVolumeClaim>> {
        match self {
            OfVolume::Stored => None,
            OfVolume::Live(claim) => Some(claim.as_deref().cloned()),
        }
    }
}

/// A pass over one PV of ours: the PV as the index has it, and its claim from the store.
struct VolumePass<'c> {
    controller: &'c Controller,
    pv: std::sync::Arc<PersistentVolume>,
    stored: Option<std::sync::Arc<PersistentVolumeClaim>>,
}

impl Pass for VolumePass<'_> {
    type Step = VolumeStep;
    type Subject = OfVolume;
    /// Check the claim live, then the step.
    const STEPS: usize = 2;

    fn decide(&mut self, claim: &OfVolume) -> Gated<VolumeStep> {
        let lookup = match claim {
            OfVolume::Stored => ClaimLookup::Store(self.stored.as_deref()),
            OfVolume::Live(c) => ClaimLookup::Live(c.as_deref()),
        };
        let driver = &self.controller.settings.driver;
        let mut step = binder::volume::decide(&self.pv, lookup, driver);
        if !self.controller.scope.binder.binds() {
            step = binder::volume::beside_cluster_binder(&self.pv, driver, step);
        }
        match (step, claim) {
            // The binder's own "confirm live": the claim is read before anything is done.
            (VolumeStep::CheckClaim, OfVolume::Stored) => Gated::ConfirmLive,
            (step, _) => Gated::Go(step),
        }
    }

    fn name(step: &VolumeStep) -> &'static str {
        step.name()
    }

    fn op(step: &VolumeStep) -> Option<&'static str> {
        (!matches!(step, VolumeStep::None | VolumeStep::CheckClaim)).then(|| step.name())
    }

    async fn confirm(&mut self, _: &OfVolume) -> Result<Option<OfVolume>, SyncError> {
        let live = self.controller.live_claim_of(&self.pv).await?;
        Ok(Some(OfVolume::Live(live.map(Box::new))))
    }

    async fn act(
        &mut self,
        step: VolumeStep,
        claim: &OfVolume,
    ) -> Result<Flow<OfVolume>, SyncError> {
        let (c, pv) = (self.controller, &*self.pv);
        let outcome = match step {
            VolumeStep::None
            | VolumeStep::CheckClaim
            | VolumeStep::Reclaim(Reclaim::Keep | Reclaim::External) => Outcome::Done,
            VolumeStep::Phase(phase) => {
                c.set_phase(pv, phase, None).await?;
                Outcome::Done
            }
            VolumeStep::Release => c.release(pv, claim.read()).await?,
            VolumeStep::Reclaim(Reclaim::Delete) => c.reclaim(pv, claim.read()).await?,
            VolumeStep::Reclaim(Reclaim::Fail(notice)) => {
                c.fail_volume(pv, &notice).await?;
                Outcome::Done
            }
            VolumeStep::QueueClaim => {
                if let Some((ns, n)) = claim_ref_key(pv) {
                    c.intake.claims.add(ObjectRef::new(&n).within(&ns));
                }
                Outcome::Done
            }
            VolumeStep::ModeMismatch => {
                let found = claim.read().flatten().or_else(|| self.stored.as_deref().cloned());
                if let Some(found) = found {
                    let (on_pv, on_claim) =
                        binder::volume::mode_mismatch_notices(pv, &found.name_any());
                    c.notify(&reference(pv), &on_pv).await;
                    c.notify(&reference(&found), &on_claim).await;
                }
                Outcome::Done
            }
            VolumeStep::Unbind => {
                c.unbind(pv).await?;
                Outcome::Done
            }
            VolumeStep::AddFinalizer | VolumeStep::RemoveFinalizer => {
                let finalizers = if step == VolumeStep::AddFinalizer {
                    with(pv, FINALIZER_VOLUME)
                } else {
                    without(pv, FINALIZER_VOLUME)
                };
                let volumes = &*c.cluster.volumes;
                if let Some(pv) = set_finalizers(volumes, pv, finalizers).await? {
                    c.index_volume(&pv);
                }
                Outcome::Done
            }
        };
        Ok(Flow::End(outcome))
    }
}
