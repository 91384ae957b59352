//! The binder's half of a claim pass: carry out the step `binder::claim` decides, and the bind
//! itself (four writes, each skipped when done), shared with provisioning.

use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use tracing::{debug, info, warn};

use super::Part;
use super::Stage;
use super::reference;
use super::{ClaimKey, Controller, Outcome, SyncError};
use crate::binder::VolumeIndex;
use crate::binder::bind;
use crate::binder::claim::{ClaimStep, ClaimView, Notice};
use crate::binder::index::is_available;
use crate::model::reason::Reason;
use crate::model::{ClaimExt, ClaimPhase};
use crate::provision::claim::{
    Handover, awaits_consumer, awaits_handover, handover, handover_missing_note, ours_to_provision,
};
use crate::provision::waiting::{Cause, Wait};

impl Controller {
    /// The binder's step for a claim of ours: carried out here, or handed on to provisioning
    /// or expansion.
    pub(super) async fn bind_claim(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
    ) -> Result<Stage, SyncError> {
        if claim.has_intent() {
            return Ok(Stage::Provision);
        }
        let class = self.class_of(claim);
        let default = self.default_class_for(claim).and_then(|c| c.metadata.name.clone());
        // Decided and reserved under one lock: a concurrent pass cannot pick the same
        // Available PV between this decision and the bind.
        let (step, _reservation) = {
            let mut volumes = self.index_mut();
            let step = crate::binder::claim::decide(
                claim,
                &ClaimView {
                    class: class.as_deref(),
                    default_class: default.as_deref(),
                    volumes: &volumes,
                },
            );
            let reservation = match &step {
                ClaimStep::Bind(pv) if is_available(pv) => {
                    Reservation::take(&self.intake.index, &mut volumes, pv, key)
                }
                _ => None,
            };
            (step, reservation)
        };
        // The pass's operation, recorded once (a second record would be appended, not replace
        // it): a bound claim's no-op "bind" leaves it to expansion.
        let bound = claim.is_bound();
        let no_op = match step {
            ClaimStep::None => true,
            ClaimStep::Bind(_) => bound,
            _ => false,
        };
        if !no_op {
            crate::runtime::logs::record_op(step.name());
        }
        debug!(step = step.name(), "binder decided");
        let done = |outcome| Ok(Stage::Done(outcome));
        match step {
            ClaimStep::None => Ok(Stage::Bound),
            // A bound claim decides "bind" too (every write then skipped): its size is next.
            ClaimStep::Bind(pv) => {
                self.bind(claim, &pv).await?;
                Ok(Stage::Bound)
            }
            ClaimStep::Pending(notice) => {
                self.set_claim_unbound(claim, ClaimPhase::Pending).await?;
                if let Some(n) = notice {
                    self.notify(&reference(claim), &n).await;
                }
                done(Outcome::Done)
            }
            ClaimStep::WaitForConsumer => {
                self.set_claim_unbound(claim, ClaimPhase::Pending).await?;
                let pods = self.unscheduled_pods_of(claim).await;
                let notice = crate::binder::claim::wait_notice(&pods);
                self.notify(&reference(claim), &notice).await;
                let class = self.class_of(claim);
                if awaits_consumer(claim, class.as_deref(), &self.settings.driver).is_some() {
                    let wait = Wait::on(Cause::WaitForFirstConsumer, notice.message.clone());
                    self.tell_wait(claim, wait).await;
                }
                done(Outcome::Done)
            }
            ClaimStep::Lost(notice) => self.lose(claim, notice).await.map(Stage::Done),
            ClaimStep::AssignDefaultClass(name) => {
                self.patch_claim(
                    Part::Object,
                    claim,
                    bind::default_class(claim, &name),
                    "give the claim the default StorageClass",
                )
                .await?;
                info!(class = %name, "assigned the default StorageClass");
                // The watch brings the changed claim back.
                done(Outcome::Done)
            }
            ClaimStep::Provision { .. }
                if ours_to_provision(claim, class.as_deref(), &self.settings.driver) =>
            {
                Ok(Stage::Provision)
            }
            ClaimStep::Provision { provisioner } => {
                self.external_provisioning(claim, &provisioner).await?;
                done(Outcome::Done)
            }
            ClaimStep::CannotProvision(notice) => {
                warn!("{}", notice.message);
                self.notify(&reference(claim), &notice).await;
                done(Outcome::Done)
            }
            ClaimStep::Refuse(notice, error) => {
                self.notify(&reference(claim), &notice).await;
                Err(SyncError::Inconsistent(error))
            }
            ClaimStep::Fail(error) => {
                // Upstream only logs this; the user needs to see it to fix the claim or class.
                let notice =
                    Notice { warning: true, reason: Reason::FailedBinding, message: error.clone() };
                self.notify(&reference(claim), &notice).await;
                Err(SyncError::Input(error))
            }
        }
    }

    /// Beside kube-controller-manager's binder: provision what it handed to the driver, grow
    /// what it bound; never a binding write.
    pub(super) async fn handed_over(&self, claim: &PersistentVolumeClaim) -> Stage {
        match handover(claim, &self.settings.driver, self.journaled(claim)) {
            Handover::None => {
                let age = super::age(claim);
                let class = self.class_of(claim);
                let driver = &self.settings.driver;
                let grace = self.switches.handover_grace;
                if awaits_handover(claim, class.as_deref(), driver, age, grace) {
                    let notice = Notice {
                        warning: true,
                        reason: Reason::WaitingForBinder,
                        message: handover_missing_note(driver, age),
                    };
                    warn!("{}", notice.message);
                    self.notify(&reference(claim), &notice).await;
                    let wait = Wait::on(Cause::WaitingForBinder, notice.message);
                    self.tell_wait(claim, wait).await;
                } else if let Some(note) = awaits_consumer(claim, class.as_deref(), driver) {
                    self.tell_wait(claim, Wait::on(Cause::WaitForFirstConsumer, note)).await;
                }
                Stage::Done(Outcome::Done)
            }
            Handover::Provision => Stage::Provision,
            Handover::Bound => Stage::Bound,
        }
    }

    /// Pods of the claim's namespace not yet on a node that use it. A failed listing is only
    /// logged: the event then says no pod, as when there is none.
    async fn unscheduled_pods_of(&self, claim: &PersistentVolumeClaim) -> Vec<String> {
        let params = kube::api::ListParams::default().fields("spec.nodeName=");
        let namespace = claim.namespace();
        match self.cluster.pods.list(namespace.as_deref(), &params).await {
            Ok(pods) => {
                let mut names: Vec<String> = pods
                    .iter()
                    .filter(|p| crate::binder::claim::waits_for_claim(p, &claim.name_any()))
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                names.sort();
                names
            }
            Err(error) => {
                warn!(%error, "cannot list the pods waiting for the claim");
                Vec::new()
            }
        }
    }

    /// updateClaimStatus with no volume; skipped when the claim says so already.
    async fn set_claim_unbound(
        &self,
        claim: &PersistentVolumeClaim,
        phase: ClaimPhase,
    ) -> Result<(), SyncError> {
        if let Some(patch) = bind::claim_status_unbound(claim, phase) {
            let action = format!("mark the claim {}", phase.as_str());
            self.patch_claim(Part::Status, claim, patch, &action).await?;
        }
        Ok(())
    }

    /// Lost is terminal and said once. A PV that only the index lacks is read live first: a
    /// lagging cache must never cost a user their claim. A PV the index has (a misbound claim:
    /// the PV names another claim) was decided on already: looking again would decide the same.
    async fn lose(
        &self,
        claim: &PersistentVolumeClaim,
        notice: Notice,
    ) -> Result<Outcome, SyncError> {
        if claim.phase() == Some(ClaimPhase::Lost) {
            return Ok(Outcome::Done);
        }
        if let Some(name) = claim.named_volume()
            && self.volume_in_store(name).is_none()
            && let Some(pv) = self.live_volume_if_missing(name).await?
        {
            self.index_volume(&pv);
            return Ok(Outcome::Again);
        }
        let updated = self
            .patch_claim(
                Part::Status,
                claim,
                bind::claim_status_unbound(claim, ClaimPhase::Lost).unwrap_or_default(),
                "mark the claim Lost",
            )
            .await?;
        warn!("{}", notice.message);
        self.notify(&reference(&updated), &notice).await;
        Ok(Outcome::Done)
    }

    /// A claim whose class another provisioner serves (with `--bind-all`): say who is expected
    /// to provision it, as the binder does.
    async fn external_provisioning(
        &self,
        claim: &PersistentVolumeClaim,
        provisioner: &str,
    ) -> Result<(), SyncError> {
        let mut claim = claim.clone();
        if let Some(patch) = bind::hand_over(&claim, provisioner) {
            claim = self
                .patch_claim(Part::Object, &claim, patch, "save the claim's provisioner")
                .await?;
        }
        let notice = Notice {
            warning: false,
            reason: Reason::ExternalProvisioning,
            message: format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            ),
        };
        self.notify(&reference(&claim), &notice).await;
        Ok(())
    }
}

/// An Available PV set aside in the index for one claim's bind; the reservation ends when the
/// pass does, however it ends (bound, conflict, error).
struct Reservation {
    index: Arc<RwLock<VolumeIndex>>,
    volume: String,
    claim: (String, String),
}

impl Reservation {
    fn take(
        shared: &Arc<RwLock<VolumeIndex>>,
        index: &mut VolumeIndex,
        pv: &PersistentVolume,
        key: &ClaimKey,
    ) -> Option<Reservation> {
        let volume = pv.metadata.name.clone()?;
        let claim = (key.namespace.clone().unwrap_or_default(), key.name.clone());
        index.reserve(&volume, claim.clone()).then(|| Reservation {
            index: shared.clone(),
            volume,
            claim,
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.index.write().unwrap_or_else(|p| p.into_inner()).unreserve(&self.volume, &self.claim);
    }
}
