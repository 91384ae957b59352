//! The API calls the executor makes, behind one trait per kind of object: get, list, create,
//! patch (object or status) and delete. `KubeObjects` answers them with kube's `Api`; this is
//! the one place the executor's objects meet the client. (Events, the Lease, the capacity
//! objects and the snapshot kinds found by discovery have their own writers.)

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What the API answers, later.
pub type Reply<'a, T> = BoxFuture<'a, Result<T, kube::Error>>;

/// Which part of an object a patch is for: the object itself, or its status subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Object,
    Status,
}

/// Objects of one kind; `namespace` is None for cluster-scoped kinds.
pub trait Objects<K>: Send + Sync {
    fn get<'a>(&'a self, namespace: Option<&'a str>, name: &'a str) -> Reply<'a, Option<K>>;

    fn list<'a>(&'a self, namespace: Option<&'a str>, params: &'a ListParams) -> Reply<'a, Vec<K>>;

    fn create<'a>(&'a self, object: &'a K) -> Reply<'a, K>;

    fn patch<'a>(
        &'a self,
        namespace: Option<&'a str>,
        name: &'a str,
        part: Part,
        patch: &'a Patch<Value>,
    ) -> Reply<'a, K>;

    /// The object as the API answered when a finalizer holds it; None once it is gone.
    fn delete<'a>(
        &'a self,
        namespace: Option<&'a str>,
        name: &'a str,
        params: &'a DeleteParams,
    ) -> Reply<'a, Option<K>>;
}

/// `Objects` through kube's client.
pub struct KubeObjects {
    client: Client,
}

/// The namespaced and cluster-scoped kinds differ only in how their `Api` is made.
trait Scoped:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static
{
    fn api(client: &Client, namespace: Option<&str>) -> Api<Self>;
}

macro_rules! namespaced {
    ($($kind:ty),*) => {$(
        impl Scoped for $kind {
            fn api(client: &Client, namespace: Option<&str>) -> Api<Self> {
                match namespace {
                    Some(ns) => Api::namespaced(client.clone(), ns),
                    None => Api::default_namespaced(client.clone()),
                }
            }
        }
    )*};
}

macro_rules! cluster_scoped {
    ($($kind:ty),*) => {$(
        impl Scoped for $kind {
            fn api(client: &Client, _namespace: Option<&str>) -> Api<Self> {
                Api::all(client.clone())
            }
        }
    )*};
}

namespaced!(PersistentVolumeClaim, Secret, Pod);
cluster_scoped!(PersistentVolume, Node, CSINode);

impl<K: Scoped> Objects<K> for KubeObjects {
    fn get<'a>(&'a self, namespace: Option<&'a str>, name: &'a str) -> Reply<'a, Option<K>> {
        Box::pin(async move { K::api(&self.client, namespace).get_opt(name).await })
    }

    fn list<'a>(&'a self, namespace: Option<&'a str>, params: &'a ListParams) -> Reply<'a, Vec<K>> {
        Box::pin(async move { Ok(K::api(&self.client, namespace).list(params).await?.items) })
    }

    fn create<'a>(&'a self, object: &'a K) -> Reply<'a, K> {
        Box::pin(async move {
            let namespace = object.meta().namespace.as_deref();
            K::api(&self.client, namespace).create(&PostParams::default(), object).await
        })
    }

    fn patch<'a>(
        &'a self,
        namespace: Option<&'a str>,
        name: &'a str,
        part: Part,
        patch: &'a Patch<Value>,
    ) -> Reply<'a, K> {
        Box::pin(async move {
            let api = K::api(&self.client, namespace);
            let params = PatchParams::default();
            match part {
                Part::Object => api.patch(name, &params, patch).await,
                Part::Status => api.patch_status(name, &params, patch).await,
            }
        })
    }

    fn delete<'a>(
        &'a self,
        namespace: Option<&'a str>,
        name: &'a str,
        params: &'a DeleteParams,
    ) -> Reply<'a, Option<K>> {
        Box::pin(async move {
            match K::api(&self.client, namespace).delete(name, params).await {
                Ok(either) => Ok(either.left()),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
                Err(e) => Err(e),
            }
        })
    }
}

/// The objects the executor reads and writes. `writes` are the claim and PV patches that took
/// their rate-limit token already (see `client::Writes`); everything else waits its turn.
#[derive(Clone)]
pub struct Cluster {
    pub claims: Arc<dyn Objects<PersistentVolumeClaim>>,
    pub volumes: Arc<dyn Objects<PersistentVolume>>,
    pub claim_writes: Arc<dyn Objects<PersistentVolumeClaim>>,
    pub volume_writes: Arc<dyn Objects<PersistentVolume>>,
    pub secrets: Arc<dyn Objects<Secret>>,
    pub pods: Arc<dyn Objects<Pod>>,
    pub nodes: Arc<dyn Objects<Node>>,
    pub csi_nodes: Arc<dyn Objects<CSINode>>,
}

/// A Secret a CSI call needs that cannot be had. The text names the Secret (and who named it),
/// never its contents.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The API says there is no such Secret: only the user can change that.
    #[error("secret {namespace}/{name} named by {named_by} does not exist; create it")]
    Missing { namespace: String, name: String, named_by: String },
    /// The API did not answer, or refused the read: retried, as the cause may pass.
    #[error("cannot read secret {namespace}/{name} named by {named_by}: {source}")]
    Unreadable { namespace: String, name: String, named_by: String, source: kube::Error },
}

/// The Secret `namespace/name` as its keys and values, for a CSI call's `secrets`; `named_by`
/// says who named it.
pub async fn read_secret(
    secrets: &dyn Objects<Secret>,
    namespace: &str,
    name: &str,
    named_by: &str,
) -> Result<std::collections::HashMap<String, String>, SecretError> {
    let (namespace, name, named_by) =
        (namespace.to_string(), name.to_string(), named_by.to_string());
    match secrets.get(Some(&namespace), &name).await {
        Ok(Some(secret)) => Ok(secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect()),
        Ok(None) => Err(SecretError::Missing { namespace, name, named_by }),
        Err(source) => Err(SecretError::Unreadable { namespace, name, named_by, source }),
    }
}

impl Cluster {
    /// Every kind through kube: `state` for reads and state changes, `writes` for the patches
    /// that took their token first.
    pub fn kube(state: Client, writes: Client) -> Self {
        let state = Arc::new(KubeObjects { client: state });
        let writes = Arc::new(KubeObjects { client: writes });
        Cluster {
            claims: state.clone(),
            volumes: state.clone(),
            claim_writes: writes.clone(),
            volume_writes: writes,
            secrets: state.clone(),
            pods: state.clone(),
            nodes: state.clone(),
            csi_nodes: state,
        }
    }
}
