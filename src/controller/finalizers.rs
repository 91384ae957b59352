//! Finalizer writes as the passes make them: the list with one added or removed, set on a given
//! version, or one taken off whatever the version (`cluster::finalizers`), failures named.

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
