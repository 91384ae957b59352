//! Claims and PVs in their watch stores as `model::compact` holds them, read back whole.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::compact::Compact;

/// A kind whose objects a store holds compact.
pub trait Compactable:
    Resource<DynamicType = ()>
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Compactable for K where
    K: Resource<DynamicType = ()>
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + Serialize
        + DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The store key of a compact object: its kind's, and its identity as held.
impl<K: Resource<DynamicType = ()>> reflector::Lookup for Compact<K> {
    type DynamicType = ();

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        K::kind(&())
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        K::group(&())
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        K::version(&())
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        K::plural(&())
    }
    fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(self.name.as_ref().into())
    }
    fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.namespace.as_deref().map(Into::into)
    }
    fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.resource_version.as_deref().map(Into::into)
    }
    fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.uid.as_deref().map(Into::into)
    }
}

/// A store of compact objects of kind `K`, read back whole: a read decodes the object asked
/// for, so a caller holds it only while it works on it.
pub struct Held<K: Resource<DynamicType = ()> + 'static> {
    store: Store<Compact<K>>,
}

impl<K: Resource<DynamicType = ()>> Clone for Held<K> {
    fn clone(&self) -> Self {
        Held { store: self.store.clone() }
    }
}

impl<K: Compactable> Held<K> {
    /// The store a writer fills (`reflector::store::<Compact<K>>()`).
    pub fn new(store: Store<Compact<K>>) -> Self {
        Held { store }
    }

    /// The object at `key`, whole.
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.held(key)?.open()
    }

    /// The object at `key` as held (no decoding).
    pub fn held(&self, key: &ObjectRef<K>) -> Option<Arc<Compact<K>>> {
        self.store.get(&object_key(&key.name, key.namespace.as_deref()))
    }

    /// Every object as held.
    pub fn held_state(&self) -> Vec<Arc<Compact<K>>> {
        self.store.state()
    }

    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.store.wait_until_ready().await
    }
}

/// The key of the object `name` in `namespace`, for a store or a queue of `T`.
pub fn object_key<T: reflector::Lookup<DynamicType = ()>>(
    name: &str,
    namespace: Option<&str>,
) -> ObjectRef<T> {
    let key = ObjectRef::new(name);
    match namespace {
        Some(ns) => key.within(ns),
        None => key,
    }
}
