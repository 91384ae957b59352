//! The provisioning intent: recorded before any CreateVolume, dropped once a PV records the
//! volume or the volume is known not to be left behind. In a claim finalizer, or, with
//! `--intent-journal` beside kube-controller-manager's binder, in a journal file.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use tracing::{Instrument, field, info, info_span, warn};

use super::Part;
use super::reference;
use super::{Controller, SyncError, set_finalizers, without};
use crate::model::ClaimExt;
use crate::names::*;
use crate::provision::claim::ClaimAction;
use crate::reason::Reason;

impl Controller {
    /// The claim's intent is in the journal.
    pub(super) fn journaled(&self, claim: &PersistentVolumeClaim) -> bool {
        match (&self.switches.journal, claim.metadata.uid.as_deref()) {
            (Some(journal), Some(uid)) => journal.contains(uid),
            _ => false,
        }
    }

    /// Makes the intent durable. In the journal: a synced file, and a claim write only for the
    /// provisioner annotations when no binder wrote them. Otherwise one claim write: our
    /// finalizer with those annotations.
    pub(super) async fn record_intent(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, SyncError> {
        let driver = &self.settings.driver;
        let annotated = claim.annotations().get(ANN_STORAGE_PROVISIONER) == Some(driver);
        let mut metadata = json!({ "resourceVersion": claim.resource_version() });
        if let Some(journal) = &self.switches.journal {
            journal.record(claim).await?;
        } else {
            metadata["finalizers"] = json!(super::with(claim, FINALIZER_PROVISIONING));
        }
        if !annotated {
            metadata["annotations"] = json!({
                ANN_STORAGE_PROVISIONER: driver,
                ANN_BETA_STORAGE_PROVISIONER: driver,
            });
        }
        // Beside a binder that handed the claim over, the journal needs no claim write at all.
        let updated = if self.switches.journal.is_none() || !annotated {
            self.patch_claim(
                Part::Object,
                claim,
                json!({ "metadata": metadata }),
                "record the provisioning intent on the claim",
            )
            .await?
        } else {
            claim.clone()
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

    /// The intent is settled: the journal entry goes, and our finalizer if the claim has it.
    pub(super) async fn drop_intent(&self, claim: &PersistentVolumeClaim) -> Result<(), SyncError> {
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

    /// Journal entries whose claim is gone: the claim may have left a volume in the driver
    /// (deleted while we were down, or between our intent and the CreateVolume). Decided as that
    /// claim being deleted: the PV records the volume (drop the entry), or CreateVolume finds it
    /// and it is deleted (recorded under Retain). Claims still here take the usual path.
    pub(super) async fn settle_journal(&self) {
        let Some(journal) = &self.switches.journal else {
            return;
        };
        for kept in journal.all() {
            let key = ObjectRef::from_obj(&*kept);
            let cached = self.stores.claims.get(&key);
            if cached.is_some_and(|c| c.metadata.uid == kept.metadata.uid) {
                continue;
            }
            let span = info_span!("sync", claim = %key, op = field::Empty);
            self.settle_orphan(&key, &kept).instrument(span).await;
        }
    }

    async fn settle_orphan(&self, key: &super::ClaimKey, kept: &PersistentVolumeClaim) {
        // The store may lag behind a claim just made; the API has the last word.
        match self.live_claim(kept).await {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(e) => {
                warn!(error = %e, "cannot check a journaled claim; trying at the next resync");
                return;
            }
        }
        let mut gone = kept.clone();
        gone.metadata.deletion_timestamp = gone.metadata.deletion_timestamp.or_else(|| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ))
        });
        let mut snapshot = match self.snapshot_facts(&gone).await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "cannot read the snapshot a journaled claim restored from; trying at the next resync");
                return;
            }
        };
        let mut action = self.decide_claim(&gone, None, snapshot.as_ref());
        if let ClaimAction::ProtectSnapshot(found) = &action {
            // The CreateVolume that finds the volume reads the snapshot too.
            match self.protect_snapshot(found).await {
                Ok(protected) => snapshot = Some(protected),
                Err(e) => {
                    warn!(error = %e, "cannot protect the snapshot a journaled claim restored from; trying at the next resync");
                    return;
                }
            }
            action = self.decide_claim(&gone, None, snapshot.as_ref());
        }
        tracing::Span::current().record("op", action.name());
        let result = match action {
            ClaimAction::DropIntent => self.drop_intent(&gone).await.map(|_| ()),
            ClaimAction::Abandon(plan) => {
                info!("the claim went away while it was being provisioned; finding its volume");
                match self.abandon(key, &gone, &plan).await {
                    Ok(super::Outcome::Done) => {
                        self.release_snapshot(&gone, snapshot.as_ref()).await;
                        Ok(())
                    }
                    other => other.map(|_| ()),
                }
            }
            ClaimAction::CannotAbandon(e) => Err(SyncError::Input(format!(
                "the claim went away while it was being provisioned, and whether the driver made its volume {} cannot be checked: {e}. Fix that, or remove the intent journal entry {}.json once the volume is known not to exist",
                self.volume_name(&gone),
                gone.metadata.uid.as_deref().unwrap_or_default()
            ))),
            other => Err(SyncError::Input(format!(
                "journaled intent of a claim that went away, and no longer ours to settle ({}): its class changed; remove the intent journal entry {}.json once volume {} is known not to exist",
                other.name(),
                gone.metadata.uid.as_deref().unwrap_or_default(),
                self.volume_name(&gone),
            ))),
        };
        if let Err(e) = result {
            warn!(error = %e, "journaled intent not settled; trying at the next resync");
        }
    }
}
