//! The patches of claims and PVs, and the binding they make up (`bind`, for the binder's pass
//! and for the PV provisioning just made). Each takes its rate-limit token first, then looks at the
//! newest copy (`freshness`): a patch decided on a copy that only lost a label race goes on
//! the newer version, one whose object changed where it matters is decided again. A write
//! therefore never waits in the limiter holding a version that was stale before it left.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::Patch;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use tracing::{debug, info};

use super::{Controller, SyncError, error};
use crate::binder;
use crate::cluster::objects::Objects;
pub(super) use crate::cluster::objects::Part;
use crate::model::VolumePhase;
use crate::model::freshness::{self, Rebase};

impl Controller {
    /// updateVolumePhase: the phase and the message (cleared when None); no write when the
    /// PV has that phase already. Returns the PV as it now is.
    pub(super) async fn set_phase(
        &self,
        pv: &PersistentVolume,
        phase: VolumePhase,
        message: Option<&str>,
    ) -> Result<PersistentVolume, SyncError> {
        let Some(patch) = binder::bind::volume_phase(pv, phase, message) else {
            return Ok(pv.clone());
        };
        let action = format!("mark the PersistentVolume {}", phase.as_str());
        self.write_volume(pv, (Part::Status, patch), &action).await
    }

    /// A merge patch of the claim or its status, its version remembered (`wrote_claim`);
    /// `action` says what it does, for the error.
    pub(super) async fn patch_claim(
        &self,
        part: Part,
        claim: &PersistentVolumeClaim,
        patch: Value,
        action: &str,
    ) -> Result<PersistentVolumeClaim, SyncError> {
        self.writes.token().await;
        let newest = self.stores.claims.get(&ObjectRef::from_obj(claim));
        let mut patch = rebased(patch, claim, newest.clone(), action)?;
        if let Some(newest) = newest.as_deref() {
            freshness::keep_others_conditions(&mut patch, claim, newest);
        }
        let (namespace, name) = (claim.namespace(), claim.name_any());
        let answer = send(&*self.cluster.claim_writes, namespace.as_deref(), &name, patch, part);
        let reread = async { self.live_claim(claim).await.ok().flatten() };
        after_write(answer.await, action, reread, |c| self.wrote_claim(c)).await
    }

    /// A merge patch of the PV; `action` says what it does, for the error.
    pub(super) async fn patch_volume(
        &self,
        pv: &PersistentVolume,
        patch: Value,
        action: &str,
    ) -> Result<PersistentVolume, SyncError> {
        self.write_volume(pv, (Part::Object, patch), action).await
    }

    /// A patch of the PV or its status, remembered in the index, whose copy the next decision
    /// uses.
    async fn write_volume(
        &self,
        pv: &PersistentVolume,
        (part, patch): (Part, Value),
        action: &str,
    ) -> Result<PersistentVolume, SyncError> {
        self.writes.token().await;
        let patch = rebased(patch, pv, self.volume_in_store(&pv.name_any()), action)?;
        let writes = &*self.cluster.volume_writes;
        let name = pv.name_any();
        let answer = send(writes, None, &name, patch, part).await;
        let reread = async { writes.get(None, &name).await.ok().flatten() };
        after_write(answer, action, reread, |pv| self.index_volume(pv)).await
    }

    /// The binding, in upstream's order: PV spec, PV status, claim spec, claim status. Each
    /// write is skipped when already done and preconditioned on the version it was built from.
    /// Returns the claim as the last claim write left it.
    pub(super) async fn bind(
        &self,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
    ) -> Result<PersistentVolumeClaim, SyncError> {
        let mut pv = pv.clone();
        let name = pv.name_any();
        if let Some(patch) = binder::bind::volume_spec(&pv, claim) {
            pv = self.patch_volume(&pv, patch, "bind the PersistentVolume to the claim").await?;
        }
        let pv = self.set_phase(&pv, VolumePhase::Bound, None).await?;
        let mut claim = claim.clone();
        let mut wrote = false;
        if let Some(patch) = binder::bind::claim_spec(&claim, &pv) {
            claim = self
                .patch_claim(Part::Object, &claim, patch, "bind the claim to its PersistentVolume")
                .await?;
            wrote = true;
        }
        if let Some(patch) = binder::bind::claim_status_bound(&claim, &pv) {
            claim = self.patch_claim(Part::Status, &claim, patch, "mark the claim Bound").await?;
            wrote = true;
            if let Some(seconds) =
                claim.metadata.creation_timestamp.as_ref().and_then(crate::metrics::seconds_since)
            {
                crate::metrics::metrics().claim_bound.observe(seconds);
            }
        }
        if wrote {
            info!(volume = %name, "bound");
        }
        Ok(claim)
    }
}

fn rebased<K>(
    mut patch: Value,
    decided: &K,
    newest: Option<Arc<K>>,
    action: &str,
) -> Result<Value, SyncError>
where
    K: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>
        + Clone
        + PartialEq,
{
    match freshness::rebase(&patch, decided, newest.as_deref()) {
        Rebase::AsIs => Ok(patch),
        Rebase::Onto(version) => {
            debug!(%version, "only labels changed since the decision; writing on the newer version");
            freshness::precondition(&mut patch, &version);
            Ok(patch)
        }
        Rebase::Stale => Err(SyncError::Stale { action: action.to_string() }),
    }
}

/// The object as our write left it, remembered; or, when the write met a newer version (409),
/// that version read once and remembered, so that passes on the store's older copy wait for the
/// watch to bring it (`claim_is_behind`) instead of meeting the same 409 again. After an
/// apiserver restart the watch may lag for seconds; retrying from its copy meanwhile was a
/// conflict storm.
async fn after_write<K>(
    answer: Result<K, kube::Error>,
    action: &str,
    reread: impl Future<Output = Option<K>>,
    remember: impl Fn(&K),
) -> Result<K, SyncError> {
    match answer {
        Ok(updated) => {
            remember(&updated);
            Ok(updated)
        }
        Err(error) => {
            if error::is_status(&error, 409)
                && let Some(live) = reread.await
            {
                remember(&live);
            }
            Err(SyncError::api(action, error))
        }
    }
}

async fn send<K>(
    objects: &dyn Objects<K>,
    namespace: Option<&str>,
    name: &str,
    patch: Value,
    part: Part,
) -> Result<K, kube::Error> {
    objects.patch(namespace, name, part, &Patch::Merge(patch)).await
}
