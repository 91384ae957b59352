//! The provisioning intent: recorded before any CreateVolume, dropped once a PV records the
//! volume or the volume is known not to be left behind. In a claim finalizer, or, with
//! `--intent-journal` beside kube-controller-manager's binder, in the journal's log.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;

use crate::controller::Part;
use crate::controller::reference;
use crate::controller::{Controller, SyncError, set_finalizers, without};
use crate::model::ClaimExt;
use crate::model::names::*;
use crate::model::reason::Reason;
use crate::provision::patches;

impl Controller {
    /// Makes the intent durable. In the journal: a synced line, and a claim write only for the
    /// provisioner annotations when no binder wrote them. Otherwise one claim write: our
    /// finalizer with those annotations.
    pub(in crate::controller) async fn record_intent(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, SyncError> {
        if let Some(journal) = &self.switches.journal {
            journal.record(claim).await?;
        }
        // Beside a binder that handed the claim over, the journal needs no claim write at all.
        let journaled = self.switches.journal.is_some();
        let updated = match patches::intent(claim, &self.settings.driver, journaled) {
            Some(patch) => {
                let action = "record the provisioning intent on the claim";
                self.patch_claim(Part::Object, claim, patch, action).await?
            }
            None => claim.clone(),
        };
        self.events
            .normal(
                &reference(&updated),
                Reason::Provisioning,
                format!(
                    "External provisioner is provisioning volume for claim \"{}/{}\"",
                    updated.namespace().unwrap_or_default(),
                    updated.name_any()
                ),
            )
            .await;
        Ok(updated)
    }

    /// The intent is over: the journal entry goes, and our finalizer if the claim has it.
    pub(in crate::controller) async fn drop_intent(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), SyncError> {
        if let (Some(journal), Some(uid)) = (&self.switches.journal, claim.metadata.uid.as_deref())
        {
            journal.remove(uid).await?;
        }
        if !claim.has_intent() {
            return Ok(());
        }
        let updated =
            set_finalizers(&*self.cluster.claims, claim, without(claim, FINALIZER_PROVISIONING))
                .await?;
        if let Some(claim) = updated {
            self.wrote_claim(&claim);
        }
        Ok(())
    }
}
