//! Carrying out volume actions: phase and finalizer upkeep, release, and reclaim.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use tracing::{debug, info, warn};

use super::claims::reference;
use super::error::is_status;
use super::{Controller, Outcome, SyncError, set_finalizers, without};
use crate::csi::Operation;
use crate::names::*;
use crate::provision::reclaim::{self, VolumeAction};

impl Controller {
    pub(super) async fn sync_volume(&self, name: &str) -> Result<Outcome, SyncError> {
        let Some(pv) = self.volume_in_store(name) else {
            return Ok(Outcome::Done);
        };
        let claim = claim_ref(&pv)
            .and_then(|(ns, n)| self.stores.claims.get(&ObjectRef::new(&n).within(&ns)));
        let action = reclaim::decide(&pv, claim.as_deref(), &self.settings.driver);
        if action != VolumeAction::None {
            debug!(volume = %name, ?action, "decided");
        }
        match action {
            VolumeAction::None => Ok(Outcome::Done),
            VolumeAction::MarkBound => {
                self.set_phase(&pv, PHASE_BOUND).await?;
                Ok(Outcome::Done)
            }
            VolumeAction::AddFinalizer => {
                let mut finalizers = pv.finalizers().to_vec();
                finalizers.push(FINALIZER_VOLUME.to_string());
                set_finalizers(&self.pvs(), &*pv, finalizers).await?;
                Ok(Outcome::Done)
            }
            VolumeAction::RemoveFinalizer => {
                set_finalizers(&self.pvs(), &*pv, without(&*pv, FINALIZER_VOLUME)).await?;
                Ok(Outcome::Done)
            }
            VolumeAction::ConfirmReleased => self.release(&pv).await,
            VolumeAction::Delete => self.reclaim(&pv).await,
        }
    }

    pub(super) fn pvs(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// The claim in the live API; None when it is gone.
    async fn live_claim_of(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<PersistentVolumeClaim>, SyncError> {
        let Some((namespace, name)) = claim_ref(pv) else {
            return Ok(None);
        };
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &namespace)
            .get_opt(&name)
            .await
            .map_err(|e| SyncError::api("read the volume's claim", e))
    }

    /// Marks the PV Released once the live API confirms its claim gone, then reclaims it.
    async fn release(&self, pv: &PersistentVolume) -> Result<Outcome, SyncError> {
        let claim = self.live_claim_of(pv).await?;
        if reclaim::claim_holds(pv, claim.as_ref()) {
            return Ok(Outcome::Done); // the cache was behind
        }
        let released = self.set_phase(pv, PHASE_RELEASED).await?;
        info!(volume = %pv.name_any(), "released: its claim is gone");
        // The patch answered with the live PV, and the claim was just read: no need to read again.
        match reclaim::decide(&released, None, &self.settings.driver) {
            VolumeAction::Delete => self.delete_released(&released).await,
            _ => Ok(Outcome::Again),
        }
    }

    /// Reclaims a PV the cache says is Released with policy Delete, after confirming that on the
    /// live PV and the live claim.
    async fn reclaim(&self, cached: &PersistentVolume) -> Result<Outcome, SyncError> {
        let name = cached.name_any();
        let Some(pv) = self
            .pvs()
            .get_opt(&name)
            .await
            .map_err(|e| SyncError::api("read the PersistentVolume", e))?
        else {
            return Ok(Outcome::Done);
        };
        if reclaim::decide(&pv, None, &self.settings.driver) != VolumeAction::Delete {
            return Ok(Outcome::Again);
        }
        if reclaim::claim_holds(&pv, self.live_claim_of(&pv).await?.as_ref()) {
            warn!(volume = %name, "marked Released, but its claim still holds it; not deleting");
            return Ok(Outcome::Done);
        }
        self.delete_released(&pv).await
    }

    /// DeleteVolume, then the PV, then our finalizer, for a live PV whose claim is confirmed gone.
    async fn delete_released(&self, pv: &PersistentVolume) -> Result<Outcome, SyncError> {
        let name = pv.name_any();
        let handle = pv
            .spec
            .as_ref()
            .and_then(|s| s.csi.as_ref())
            .map(|c| c.volume_handle.clone())
            .unwrap_or_default();
        let secrets = self.deletion_secrets(pv).await;
        if let Err(e) = self.delete_backend(&handle, secrets).await {
            let note = format!("failed to delete volume {handle}: {e}");
            self.events
                .warning(&reference(pv), EVENT_VOLUME_FAILED_DELETE, note)
                .await;
            return Err(SyncError::csi(Operation::Delete, e));
        }
        info!(volume = %name, %handle, "deleted the volume in the driver");
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pv.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let remaining = match self.pvs().delete(&name, &params).await {
            Ok(either) => either.left(),
            Err(e) if is_status(&e, 404) => None,
            Err(e) => return Err(SyncError::api("delete the PersistentVolume", e)),
        };
        if let Some(remaining) = remaining
            && remaining.finalizers().iter().any(|f| f == FINALIZER_VOLUME)
        {
            set_finalizers(
                &self.pvs(),
                &remaining,
                without(&remaining, FINALIZER_VOLUME),
            )
            .await?;
        }
        Ok(Outcome::Done)
    }

    /// The provisioner secret recorded on the PV for deletion. As upstream: a secret that
    /// cannot be read is logged, and deletion goes on without it.
    async fn deletion_secrets(
        &self,
        pv: &PersistentVolume,
    ) -> std::collections::HashMap<String, String> {
        let annotations = pv.annotations();
        let (Some(name), Some(namespace)) = (
            annotations.get(ANN_DELETION_SECRET_NAME),
            annotations.get(ANN_DELETION_SECRET_NAMESPACE),
        ) else {
            return Default::default();
        };
        if name.is_empty() && namespace.is_empty() {
            return Default::default();
        }
        match self.read_secret(namespace, name).await {
            Ok(secrets) => secrets,
            Err(note) => {
                warn!(volume = %pv.name_any(), "{note}; deleting without secrets");
                Default::default()
            }
        }
    }

    async fn set_phase(
        &self,
        pv: &PersistentVolume,
        phase: &str,
    ) -> Result<PersistentVolume, SyncError> {
        self.pvs()
            .patch_status(
                &pv.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": pv.resource_version()},
                    "status": {"phase": phase, "message": null},
                })),
            )
            .await
            .map_err(|e| SyncError::api(format!("mark the PersistentVolume {phase}"), e))
    }
}

fn claim_ref(pv: &PersistentVolume) -> Option<(String, String)> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some((r.namespace.clone()?, r.name.clone()?))
}
