//! Finalizer writes: the list with one added or removed, set on a given version, or one taken
//! off whatever the version.

use super::*;
use crate::cluster::objects::{Objects, Part};

/// The object's finalizers with `finalizer` added at the end.
pub(super) fn with<K: kube::Resource>(object: &K, finalizer: &str) -> Vec<String> {
    crate::names::with_finalizer(object.finalizers(), finalizer)
}

/// The object's finalizers without `finalizer`.
pub(super) fn without<K: kube::Resource>(object: &K, finalizer: &str) -> Vec<String> {
    crate::names::without_finalizer(object.finalizers(), finalizer)
}

/// Replaces the finalizers of `object`, preconditioned on the version it was read at. An object
/// already gone is fine: finalizers are only ever removed from something on its way out.
/// Returns the object as the API answered, or None when it is gone.
pub(super) async fn set_finalizers<K>(
    objects: &dyn Objects<K>,
    object: &K,
    finalizers: Vec<String>,
) -> Result<Option<K>, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = kube::api::Patch::Merge(serde_json::json!({
        "metadata": {
            "resourceVersion": object.resource_version(),
            "finalizers": finalizers,
        }
    }));
    patch_unless_gone(objects, object, &patch, "update the finalizers").await
}

/// Takes `finalizer` off `object` whatever its version, for when what it guards is over however
/// the object changed meanwhile (the backend volume is deleted). A strategic merge patch removes
/// just that entry, so another controller taking its own finalizer off at the same moment (KCM's
/// pv-protection, on every PV we delete) cannot make it fail with a conflict and cost a retry.
/// Returns the object as the API answered, or None when it is gone.
pub async fn drop_finalizer<K>(
    objects: &dyn Objects<K>,
    object: &K,
    finalizer: &str,
) -> Result<Option<K>, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = kube::api::Patch::Strategic(serde_json::json!({
        "metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}
    }));
    let action = format!("remove the finalizer {finalizer}");
    patch_unless_gone(objects, object, &patch, &action).await
}

/// Patches `object`; None when it is gone. `action` names the patch in the error.
async fn patch_unless_gone<K>(
    objects: &dyn Objects<K>,
    object: &K,
    patch: &kube::api::Patch<serde_json::Value>,
    action: &str,
) -> Result<Option<K>, SyncError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    let namespace = object.meta().namespace.as_deref();
    match objects.patch(namespace, &name, Part::Object, patch).await {
        Ok(updated) => Ok(Some(updated)),
        Err(e) if error::is_status(&e, 404) => Ok(None),
        Err(e) => Err(SyncError::api(format!("{action} of {name}"), e)),
    }
}
