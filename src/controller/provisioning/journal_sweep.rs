//! The intent journal's sweep: entries whose claim is gone (deleted while we were down, or
//! between our intent and the CreateVolume) are undone as that claim being deleted would be,
//! through the provisioning pass's own decision and undo.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::reflector::ObjectRef;
use tracing::{Instrument, field, info, info_span, warn};

use crate::controller::{Controller, SyncError};
use crate::model::copy::ClaimCopy;
use crate::provision::claim::ClaimAction;

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
            self.undo_orphan(&key, &kept).instrument(span).await;
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
        let mut snapshot = match self.snapshot_facts(gone).await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "cannot read the snapshot a journaled claim restored from; trying at the next resync");
                return;
            }
        };
        let mut action = self.decide_claim(gone, ClaimCopy::Gone, (None, None), snapshot.as_ref());
        if let ClaimAction::ProtectSnapshot(found) = &action {
            // The CreateVolume that finds the volume reads the snapshot too.
            match self.protect_snapshot(found).await {
                Ok(protected) => snapshot = Some(protected),
                Err(e) => {
                    warn!(error = %e, "cannot protect the snapshot a journaled claim restored from; trying at the next resync");
                    return;
                }
            }
            action = self.decide_claim(gone, ClaimCopy::Gone, (None, None), snapshot.as_ref());
        }
        tracing::Span::current().record("op", action.name());
        let result = match action {
            ClaimAction::DropIntent => self.drop_intent(gone).await.map(|_| ()),
            ClaimAction::Abandon(plan) => {
                info!("the claim went away while it was being provisioned; finding its volume");
                match self.abandon(key, gone, &plan, ClaimCopy::Gone).await {
                    Ok(crate::controller::Outcome::Done) => {
                        self.release_snapshot(gone, snapshot.as_ref()).await;
                        Ok(())
                    }
                    other => other.map(|_| ()),
                }
            }
            ClaimAction::CannotAbandon(e) => Err(SyncError::Input(format!(
                "the claim went away while it was being provisioned, and whether the driver made its volume {} cannot be checked: {e}. Fix that, or remove the intent journal entry {}.json once the volume is known not to exist",
                self.volume_name(gone),
                gone.metadata.uid.as_deref().unwrap_or_default()
            ))),
            other => Err(SyncError::Input(format!(
                "journaled intent of a claim that went away, and no longer ours to settle ({}): its class changed; remove the intent journal entry {}.json once volume {} is known not to exist",
                other.name(),
                gone.metadata.uid.as_deref().unwrap_or_default(),
                self.volume_name(gone),
            ))),
        };
        if let Err(e) = result {
            warn!(error = %e, "journaled intent not settled; trying at the next resync");
        }
    }
}
