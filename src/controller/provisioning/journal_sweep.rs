//! The intent journal's sweep: entries whose claim is gone (deleted while we were down, or
//! between our intent and the CreateVolume) are undone as that claim being deleted would be,
//! through the provisioning pass's own decision and undo.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::reflector::ObjectRef;
use tracing::{Instrument, field, info, info_span, warn};

use crate::controller::drive::{Flow, InHand, Pass};
use crate::controller::{Controller, Outcome, SyncError};
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;
use crate::provision::claim::ClaimAction;
use crate::provision::snapshot::SnapshotLookup;

impl Controller {
    /// Journal entries whose claim is gone: the claim may have left a volume in the driver
    /// (deleted while we were down, or between our intent and the CreateVolume). Decided as that
    /// claim being deleted: the PV records the volume (drop the entry), or CreateVolume finds it
    /// and it is deleted (recorded under Retain). Claims still here take the usual path.
    pub(in crate::controller) async fn sweep_journal(&self) {
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
            let undo = crate::runtime::logs::pass_with_op(self.undo_orphan(&key, &kept));
            undo.instrument(span).await;
        }
    }

    async fn undo_orphan(&self, key: &crate::controller::ClaimKey, gone: &PersistentVolumeClaim) {
        // The store may lag behind a claim just made; the API has the last word.
        match self.live_claim(gone).await {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(e) => {
                warn!(error = %e, "cannot check a journaled claim; trying at the next resync");
                return;
            }
        }
        let snapshot = match self.snapshot_facts(gone).await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "cannot read the snapshot a journaled claim restored from; trying at the next resync");
                return;
            }
        };
        let mut pass = OrphanPass { controller: self, key, snapshot };
        if let Err(e) =
            self.drive(&mut pass, InHand { claim: gone.clone(), copy: ClaimCopy::Gone }).await
        {
            warn!(error = %e, "journaled intent not settled; trying at the next resync");
        }
    }
}

/// The undo of a journaled intent whose claim is gone, decided as that claim being deleted.
struct OrphanPass<'c> {
    controller: &'c Controller,
    key: &'c crate::controller::ClaimKey,
    /// The restore's snapshot, read live, and protected by this pass if it had to be.
    snapshot: Option<SnapshotLookup>,
}

impl OrphanPass<'_> {
    /// How an operator ends the entry when we cannot.
    fn end_by_hand(&self, gone: &PersistentVolumeClaim) -> String {
        let uid = gone.metadata.uid.as_deref().unwrap_or_default();
        format!(
            "once volume {} is known not to exist in the driver, stop this controller and end the intent of claim UID {uid} in intents.log with `csi-pv-controller --intent-journal=<dir> end-intent {uid}`",
            self.controller.volume_name(gone),
        )
    }
}

impl Pass for OrphanPass<'_> {
    type Step = ClaimAction;
    type Subject = InHand;
    /// Protect the snapshot, then the undo.
    const STEPS: usize = 2;

    fn decide(&mut self, held: &InHand) -> Gated<ClaimAction> {
        let snapshot = self.snapshot.as_ref();
        self.controller.decide_claim(&held.claim, held.copy, (None, None), snapshot)
    }

    /// Never asked: a gone claim's copy needs no confirming.
    async fn confirm(&mut self, _: &InHand) -> Result<Option<InHand>, SyncError> {
        Ok(None)
    }

    fn name(step: &ClaimAction) -> &'static str {
        step.name()
    }

    fn op(step: &ClaimAction) -> Option<&'static str> {
        Some(step.name())
    }

    async fn act(&mut self, action: ClaimAction, held: &InHand) -> Result<Flow<InHand>, SyncError> {
        let (c, gone) = (self.controller, &held.claim);
        match action {
            // The CreateVolume that finds the volume reads the snapshot too.
            ClaimAction::ProtectSnapshot(found) => {
                self.snapshot = Some(c.protect_snapshot(&found).await?);
                Ok(Flow::Again)
            }
            ClaimAction::DropIntent => {
                c.drop_intent(gone).await?;
                Ok(Flow::End(Outcome::Done))
            }
            ClaimAction::Abandon(plan) => {
                info!("the claim went away while it was being provisioned; finding its volume");
                let outcome = c.abandon(self.key, gone, &plan, ClaimCopy::Gone).await?;
                if outcome == Outcome::Done {
                    c.release_snapshot(gone, self.snapshot.as_ref()).await;
                }
                Ok(Flow::End(outcome))
            }
            ClaimAction::CannotAbandon(e) => Err(SyncError::Input(format!(
                "the claim went away while it was being provisioned, and whether the driver made its volume cannot be checked: {e}. Fix that, or {}",
                self.end_by_hand(gone)
            ))),
            other => Err(SyncError::Input(format!(
                "journaled intent of a claim that went away, and no longer ours to settle ({}): its class changed; {}",
                other.name(),
                self.end_by_hand(gone)
            ))),
        }
    }
}
