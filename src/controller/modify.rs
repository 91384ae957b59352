//! Carrying out a VolumeAttributesClass change (`modify::decide`): the status marks, the
//! ControllerModifyVolume call with the PV's modify secret, then the PV and the claim, or what
//! a failure leaves on the claim. Nothing is kept in memory: whether an attempt may still be
//! running in the driver is read back from the claim's `ModifyVolumeError` condition.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use tracing::{info, warn};

use super::Part;
use super::drive::{Flow, InHand, Pass};
use super::reference;
use super::{ClaimKey, Controller, Outcome, SyncError, now};
use crate::model::ClaimExt;
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;
use crate::model::reason::Reason;
use crate::modify::{self, ModifyStep};

impl Controller {
    /// The VolumeAttributesClass half of a pass over a Bound claim.
    pub(super) async fn sync_modify(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
    ) -> Result<Outcome, SyncError> {
        if !self.features.modify {
            return Ok(Outcome::Done);
        }
        let Some(pv) = claim.named_volume().and_then(|n| self.volume_in_store(n)) else {
            return Ok(Outcome::Done);
        };
        let mut pass = ModifyPass { controller: self, key, pv: &pv };
        self.drive(&mut pass, InHand { claim: claim.clone(), copy: ClaimCopy::Cached }).await
    }

    fn decide_modify(
        &self,
        (claim, copy): (&PersistentVolumeClaim, ClaimCopy),
        pv: &PersistentVolume,
    ) -> Gated<ModifyStep> {
        let store = self.stores.attributes_classes.as_ref();
        let class = |name: &str| {
            let found = store?.get(&kube::runtime::reflector::ObjectRef::new(name))?;
            Some((*found).clone())
        };
        let hold = self.hold(claim);
        let clock = tokio::time::Instant::now().into_std();
        let driver = &self.settings.driver;
        modify::decide(claim, pv, driver, class, &now(), (hold.as_ref(), clock), copy)
    }

    /// ControllerModifyVolume, then the PV (first: a crash before the claim's patch repeats an
    /// idempotent call), then the claim; or the failure recorded on the claim.
    async fn modify_in_driver(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        class: &k8s_openapi::api::storage::v1::VolumeAttributesClass,
    ) -> Result<Outcome, SyncError> {
        let target = class.name_any();
        let mut request = modify::request(claim, pv, class, self.settings.extra_modify_metadata);
        request.secrets = match self.modify_secrets(pv).await {
            Ok(s) => s,
            Err(note) => {
                return Ok(self.failed(key, claim, Reason::VolumeModifyFailed, note, false).await);
            }
        };
        let answer = self.csi.controller_modify_volume(request).await;
        let error = match answer {
            Ok(()) => {
                self.patch_volume(
                    pv,
                    modify::volume_done(&target),
                    "record the PersistentVolume's new VolumeAttributesClass",
                )
                .await?;
                let claim = self
                    .patch_claim(
                        Part::Status,
                        claim,
                        modify::claim_done(claim, &target),
                        "record the claim's new VolumeAttributesClass",
                    )
                    .await?;
                self.clear_backoff(key);
                info!(class = %target, "volume modified");
                let note = modify::modified_note(&claim.name_any(), &target);
                let reason = Reason::VolumeModifySuccessful;
                self.events.normal(&reference(&claim), reason, note).await;
                return Ok(Outcome::Done);
            }
            Err(e) => e,
        };
        let Some(code) = error.code() else {
            // Never reached the driver (or fenced): nothing to record, try again later.
            let note = format!("cannot modify the volume to class {target}: {error}");
            warn!(retry_in = ?self.back_off(key, claim, false), "{note}");
            return Ok(Outcome::Waiting);
        };
        let code = crate::metrics::code_name(code);
        let message = error.message().unwrap_or_default().to_string();
        let patch = modify::failed(claim, &target, &code, &message, &now());
        let claim = self
            .patch_claim(Part::Status, claim, patch, "record the failed volume modification")
            .await?;
        let mut note = error.to_string();
        if !modify::is_final(&code) {
            note.push_str(&format!(". Still modifying to VAC {target}"));
        }
        let infeasible = modify::infeasible(&code);
        Ok(self.failed(key, &claim, Reason::VolumeModifyFailed, note, infeasible).await)
    }

    /// The contents of the secret ControllerModifyVolume carries (`modify::secret_ref`).
    async fn modify_secrets(
        &self,
        pv: &PersistentVolume,
    ) -> Result<HashMap<String, String>, String> {
        match modify::secret_ref(pv) {
            Some((namespace, name)) => self
                .read_secret(&namespace, &name, "the PersistentVolume")
                .await
                .map_err(|e| e.to_string()),
            None => Ok(HashMap::new()),
        }
    }
}

/// A modify pass over one bound claim of the driver's PV `pv`.
struct ModifyPass<'c> {
    controller: &'c Controller,
    key: &'c ClaimKey,
    pv: &'c PersistentVolume,
}

impl Pass for ModifyPass<'_> {
    type Step = ModifyStep;
    type Subject = InHand;
    /// Confirm the copy, then the step.
    const STEPS: usize = 2;

    fn decide(&mut self, held: &InHand) -> Gated<ModifyStep> {
        self.controller.decide_modify((&held.claim, held.copy), self.pv)
    }

    async fn confirm(&mut self, held: &InHand) -> Result<Option<InHand>, SyncError> {
        self.controller.confirm_claim(held).await
    }

    fn name(step: &ModifyStep) -> &'static str {
        step.name()
    }

    fn op(step: &ModifyStep) -> Option<&'static str> {
        (*step != ModifyStep::None).then(|| step.name())
    }

    async fn act(&mut self, step: ModifyStep, held: &InHand) -> Result<Flow<InHand>, SyncError> {
        let (c, key, claim) = (self.controller, self.key, &held.claim);
        let outcome = match step {
            ModifyStep::None | ModifyStep::RolledBack { patch: None } => Outcome::Done,
            ModifyStep::RolledBack { patch: Some(patch) } => {
                let action = "cancel the volume modification";
                let claim = c.patch_claim(Part::Status, claim, patch, action).await?;
                info!("volume modification canceled: the claim names no class any more");
                let note = modify::CANCELED_NOTE.into();
                c.events.normal(&reference(&claim), Reason::VolumeModifyCanceled, note).await;
                Outcome::Done
            }
            ModifyStep::Missing { target, patch } => {
                let claim = match patch {
                    Some(p) => {
                        let action = "mark the modification pending";
                        c.patch_claim(Part::Status, claim, p, action).await?
                    }
                    None => claim.clone(),
                };
                let note = modify::missing_note(&target);
                c.failed(key, &claim, Reason::VolumeModifyFailed, note, false).await
            }
            ModifyStep::Modify { class, start } => {
                let target = class.name_any();
                let claim = match start {
                    Some(patch) => {
                        let action = "start the volume modification";
                        let claim = c.patch_claim(Part::Status, claim, patch, action).await?;
                        let note = modify::modifying_note(&claim.name_any(), &target);
                        c.events.normal(&reference(&claim), Reason::VolumeModify, note).await;
                        claim
                    }
                    None => claim.clone(),
                };
                c.modify_in_driver(key, &claim, self.pv, &class).await?
            }
        };
        Ok(Flow::End(outcome))
    }
}
