//! Finalizer writes as the passes make them: the list with one added or removed, set on a given
//! version, or one taken off whatever the version (`cluster::finalizers`), failures named; and
//! the verb that takes a clone source's protection off once no copy of it is in flight.

use super::*;
use crate::cluster::finalizers;
use crate::cluster::objects::Objects;

/// The object's finalizers with `finalizer` added at the end.
pub(super) fn with<K: kube::Resource>(object: &K, finalizer: &str) -> Vec<String> {
    crate::model::names::with_finalizer(object.finalizers(), finalizer)
}

/// The object's finalizers without `finalizer`.
pub(super) fn without<K: kube::Resource>(object: &K, finalizer: &str) -> Vec<String> {
    crate::model::names::without_finalizer(object.finalizers(), finalizer)
}

/// `cluster::finalizers::set_finalizers`; None when the object is gone.
pub(super) async fn set_finalizers<K>(
    objects: &dyn Objects<K>,
    object: &K,
    finalizers: Vec<String>,
) -> Result<Option<K>, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    finalizers::set_finalizers(objects, object, finalizers)
        .await
        .map_err(|e| SyncError::api(format!("update the finalizers of {name}"), e))
}

/// `cluster::finalizers::drop_finalizer`; None when the object is gone.
pub(super) async fn drop_finalizer<K>(
    objects: &dyn Objects<K>,
    object: &K,
    finalizer: &str,
) -> Result<Option<K>, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    finalizers::drop_finalizer(objects, object, finalizer)
        .await
        .map_err(|e| SyncError::api(format!("remove the finalizer {finalizer} of {name}"), e))
}

impl Controller {
    /// A claim on its way out that holds clones back: its finalizer goes once no claim of its
    /// namespace that clones it may have a CreateVolume in flight. The clones are listed live:
    /// one just given our intent may not be in the store yet.
    pub(super) async fn release_clone_source(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), SyncError> {
        if !crate::provision::source::protection_pending(claim) {
            return Ok(());
        }
        let clones = self
            .cluster
            .claims
            .list(claim.namespace().as_deref(), &kube::api::ListParams::default())
            .await
            .map_err(|e| SyncError::api("list the claims that may clone this one", e))?;
        let in_flight = |c: &PersistentVolumeClaim| c.has_intent() || self.journaled(c);
        if !crate::provision::source::release_clone_protection(claim, &clones, in_flight) {
            return Ok(());
        }
        let updated = drop_finalizer(
            &*self.cluster.claims,
            claim,
            crate::model::names::FINALIZER_CLONING_PROTECTION,
        )
        .await?;
        if let Some(updated) = updated {
            self.wrote_claim(&updated);
        }
        tracing::info!("no clone of this claim is in flight: clone protection removed");
        Ok(())
    }
}
