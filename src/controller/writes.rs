//! The patches of claims and PVs. Each takes its rate-limit token first, then looks at the
//! newest copy (`freshness`): a patch decided on a copy that only lost a label race goes on
//! the newer version, one whose object changed where it matters is decided again. A write
//! therefore never waits in the limiter holding a version that was stale before it left.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::Patch;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use tracing::debug;

use super::{Controller, SyncError, error};
use crate::binder;
use crate::cluster::objects::Objects;
use crate::freshness::{self, Rebase};
use crate::model::VolumePhase;

impl Controller {
    /// A merge patch of the claim, its version remembered (`wrote_claim`); `action` says what it
    /// does, for the error.
    pub(super) async fn patch_claim(
        &self,
        claim: &PersistentVolumeClaim,
        patch: Value,
        action: &str,
    ) -> Result<PersistentVolumeClaim, SyncError> {
        self.send_claim_patch(claim, patch, action, Part::Object)
            .await
    }

    /// The same for the claim's status.
    pub(super) async fn patch_claim_status(
        &self,
        claim: &PersistentVolumeClaim,
        patch: Value,
        action: &str,
    ) -> Result<PersistentVolumeClaim, SyncError> {
        self.send_claim_patch(claim, patch, action, Part::Status)
            .await
    }

    /// A merge patch of the PV, remembered in the index; `action` says what it does, for the
    /// error.
    pub(super) async fn patch_volume(
        &self,
        pv: &PersistentVolume,
        patch: Value,
        action: &str,
    ) -> Result<PersistentVolume, SyncError> {
        self.send_volume_patch(pv, patch, action, Part::Object)
            .await
    }

    /// updateVolumePhase: the phase and the message (cleared when None); no write when the
    /// PV has that phase already. Returns the PV as it now is.
    pub(super) async fn set_phase(
        &self,
        pv: &PersistentVolume,
        phase: VolumePhase,
        message: Option<&str>,
    ) -> Result<PersistentVolume, SyncError> {
        let phase = phase.as_str();
        let Some(patch) = binder::bind::volume_phase(pv, phase, message) else {
            return Ok(pv.clone());
        };
        let action = format!("mark the PersistentVolume {phase}");
        self.send_volume_patch(pv, patch, &action, Part::Status)
            .await
    }

    async fn send_claim_patch(
        &self,
        claim: &PersistentVolumeClaim,
        patch: Value,
        action: &str,
        part: Part,
    ) -> Result<PersistentVolumeClaim, SyncError> {
        let patch = self.fresh_claim_patch(claim, patch, action).await?;
        let namespace = claim.namespace();
        let answer = send(
            &*self.cluster.claim_writes,
            namespace.as_deref(),
            &claim.name_any(),
            patch,
            part,
        )
        .await;
        self.claim_written_or_stale(claim, answer, action).await
    }

    async fn send_volume_patch(
        &self,
        pv: &PersistentVolume,
        patch: Value,
        action: &str,
        part: Part,
    ) -> Result<PersistentVolume, SyncError> {
        let patch = self.fresh_volume_patch(pv, patch, action).await?;
        let answer = send(
            &*self.cluster.volume_writes,
            None,
            &pv.name_any(),
            patch,
            part,
        )
        .await;
        self.volume_written_or_stale(pv, answer, action).await
    }

    /// The claim as our write left it, remembered; or, when the write met a newer version
    /// (409), that version read once, so that passes on the store's older copy wait for the
    /// watch to bring it (`claim_is_behind`) instead of meeting the same 409 again. After an
    /// apiserver restart the watch may lag for seconds; retrying from its copy meanwhile was a
    /// conflict storm.
    async fn claim_written_or_stale(
        &self,
        claim: &PersistentVolumeClaim,
        answer: Result<PersistentVolumeClaim, kube::Error>,
        action: &str,
    ) -> Result<PersistentVolumeClaim, SyncError> {
        match answer {
            Ok(updated) => {
                self.wrote_claim(&updated);
                Ok(updated)
            }
            Err(error) => {
                if error::is_status(&error, 409)
                    && let Ok(Some(live)) = self.live_claim(claim).await
                {
                    self.wrote_claim(&live);
                }
                Err(SyncError::api(action, error))
            }
        }
    }

    /// The same for a PV: the version read after a 409 goes into the index, whose copy the
    /// next decision uses.
    async fn volume_written_or_stale(
        &self,
        pv: &PersistentVolume,
        answer: Result<PersistentVolume, kube::Error>,
        action: &str,
    ) -> Result<PersistentVolume, SyncError> {
        match answer {
            Ok(updated) => {
                self.remember(&updated);
                Ok(updated)
            }
            Err(error) => {
                if error::is_status(&error, 409)
                    && let Ok(Some(live)) =
                        self.cluster.volume_writes.get(None, &pv.name_any()).await
                {
                    self.remember(&live);
                }
                Err(SyncError::api(action, error))
            }
        }
    }

    async fn fresh_claim_patch(
        &self,
        claim: &PersistentVolumeClaim,
        patch: Value,
        action: &str,
    ) -> Result<Value, SyncError> {
        self.writes.token().await;
        let newest = self.stores.claims.get(&ObjectRef::from_obj(claim));
        rebased(patch, claim, newest, action)
    }

    async fn fresh_volume_patch(
        &self,
        pv: &PersistentVolume,
        patch: Value,
        action: &str,
    ) -> Result<Value, SyncError> {
        self.writes.token().await;
        let newest = self.volume_in_store(&pv.name_any());
        rebased(patch, pv, newest, action)
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
        Rebase::Stale => Err(SyncError::Stale {
            action: action.to_string(),
        }),
    }
}

/// Which part of an object a patch is for.
#[derive(Debug, Clone, Copy)]
enum Part {
    Object,
    Status,
}

async fn send<K>(
    objects: &dyn Objects<K>,
    namespace: Option<&str>,
    name: &str,
    patch: Value,
    part: Part,
) -> Result<K, kube::Error> {
    let patch = Patch::Merge(patch);
    let status = matches!(part, Part::Status);
    objects.patch(namespace, name, &patch, status).await
}
