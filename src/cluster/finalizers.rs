//! Finalizer writes on any kind behind `Objects`: the list replaced on the version it was read
//! at, or one entry taken off whatever the version. An object already gone is no error:
//! finalizers are only ever removed from something on its way out.

use kube::ResourceExt;

use super::is_status;
use super::objects::{Objects, Part};

/// Replaces the finalizers of `object`, preconditioned on the version it was read at. Returns
/// the object as the API answered, or None when it is gone.
pub async fn set_finalizers<K>(
    objects: &dyn Objects<K>,
    object: &K,
    finalizers: Vec<String>,
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = kube::api::Patch::Merge(serde_json::json!({
        "metadata": {
            "resourceVersion": object.resource_version(),
            "finalizers": finalizers,
        }
    }));
    patch_unless_gone(objects, object, &patch).await
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
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = kube::api::Patch::Strategic(serde_json::json!({
        "metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}
    }));
    patch_unless_gone(objects, object, &patch).await
}

async fn patch_unless_gone<K>(
    objects: &dyn Objects<K>,
    object: &K,
    patch: &kube::api::Patch<serde_json::Value>,
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    let namespace = object.meta().namespace.as_deref();
    match objects.patch(namespace, &name, Part::Object, patch).await {
        Ok(updated) => Ok(Some(updated)),
        Err(e) if is_status(&e, 404) => Ok(None),
        Err(e) => Err(e),
    }
}
