//! One pass over a claim, in the order its life goes: the binder first (ours, or the cluster's
//! handing the claim over), then provisioning for what has no volume yet, then expansion and
//! attribute changes for what is bound.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tracing::debug;

use super::{ClaimKey, Controller, Outcome, Stage, SyncError};
use crate::model::ClaimExt;

impl Controller {
    pub(super) async fn sync_claim(&self, key: &ClaimKey) -> Result<Outcome, SyncError> {
        crate::runtime::crash_point::panic_on_claim(&key.name);
        let Some(claim) = self.claim_to_sync(key) else {
            return Ok(Outcome::Done);
        };
        self.release_clone_source(&claim).await?;
        let stage = if self.scope.binder.binds() {
            self.bind_claim(key, &claim).await?
        } else {
            self.handed_over(&claim).await
        };
        match stage {
            Stage::Done(outcome) => Ok(outcome),
            Stage::Provision => self.sync_provisioning(key, claim).await,
            Stage::Bound => self.sync_bound(key, &claim).await,
        }
    }

    /// The claim as the store has it, if a pass over it has anything to look at: not while the
    /// store is behind our own last write to it, not once it is gone (everything remembered of
    /// it goes then), and not when it is outside this driver's scope.
    fn claim_to_sync(&self, key: &ClaimKey) -> Option<PersistentVolumeClaim> {
        let cached = self.stores.claims.get(key);
        if self.claim_is_behind(key, cached.as_deref()) {
            debug!("the store is behind our last write to the claim; waiting for the watch");
            return None;
        }
        let Some(cached) = cached else {
            self.forget_claim(key);
            return None;
        };
        let class = self.class_of(&cached);
        let default = self.default_class_for(&cached);
        let named = cached.named_volume().and_then(|v| self.volume_in_store(v));
        let ours =
            self.scope.has_claim(&cached, class.as_deref(), default.as_deref(), named.as_deref());
        ours.then(|| (*cached).clone())
    }

    /// A pass over a Bound claim: its size, then its VolumeAttributesClass.
    pub(super) async fn sync_bound(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
    ) -> Result<Outcome, SyncError> {
        // Bound: a condition that said why it waited goes (the next pass sees the new copy).
        if self.clear_wait(claim).await? {
            return Ok(Outcome::Again);
        }
        let expanded = self.sync_expansion(key, claim).await?;
        let modified = self.sync_modify(key, claim).await?;
        Ok(match (expanded, modified) {
            (Outcome::Again, _) | (_, Outcome::Again) => Outcome::Again,
            (Outcome::Waiting, _) | (_, Outcome::Waiting) => Outcome::Waiting,
            _ => Outcome::Done,
        })
    }
}
