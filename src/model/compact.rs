//! Claims and PVs as they are held between passes: the object's JSON, with its identity beside it.
//!
//! A k8s-openapi `PersistentVolume` is 3,472 bytes before any heap data (every volume source is
//! an inline `Option`), and each of its maps (annotations, capacity, volume attributes) is a
//! B-tree node of about 540 bytes however few entries it has: 6.7 KB per PV and 3.7 KB per claim
//! as the watch delivers them. Their JSON is 1.2 KB and 0.9 KB. Decisions still read the whole
//! typed object: it is decoded when a pass asks for it and dropped after, so only the objects a
//! pass works on are ever whole, and a settled cluster holds only the bytes.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// An object of kind `K` held as its JSON. Decoding what `of` encoded gives the object back
/// field for field (a unit test holds each kind to that).
pub struct Compact<K> {
    pub name: Box<str>,
    pub namespace: Option<Box<str>>,
    pub resource_version: Option<Box<str>>,
    pub uid: Option<Box<str>>,
    json: Box<[u8]>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Compact<K> {
    fn clone(&self) -> Self {
        Compact {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            resource_version: self.resource_version.clone(),
            uid: self.uid.clone(),
            json: self.json.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Compact<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compact")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("resource_version", &self.resource_version)
            .field("bytes", &self.json.len())
            .finish()
    }
}

fn boxed(s: Option<&String>) -> Option<Box<str>> {
    s.map(|s| s.as_str().into())
}

impl<K> Compact<K>
where
    K: Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
{
    /// The held form of `object`. An object serde cannot write (it always can: these are plain
    /// data) would be held as `{}`, and decode to nothing.
    pub fn of(object: &K) -> Self {
        let meta = object.metadata();
        Compact {
            name: meta.name.as_deref().unwrap_or_default().into(),
            namespace: boxed(meta.namespace.as_ref()),
            resource_version: boxed(meta.resource_version.as_ref()),
            uid: boxed(meta.uid.as_ref()),
            json: serde_json::to_vec(object).unwrap_or_else(|_| b"{}".to_vec()).into(),
            kind: PhantomData,
        }
    }

    /// The whole object again; None only if the bytes were not written by `of`.
    pub fn open(&self) -> Option<Arc<K>> {
        serde_json::from_slice(&self.json).ok().map(Arc::new)
    }

    /// The resourceVersion as the number etcd gives it, for ordering versions of one object.
    pub fn version(&self) -> Option<u64> {
        self.resource_version.as_deref()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use serde_json::json;

    /// Every field the decisions read survives the round trip: the decoded object equals the
    /// one encoded, maps, quantities, times and nested sources included.
    #[test]
    fn objects_come_back_whole() {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-1", "uid": "u", "resourceVersion": "42",
                         "creationTimestamp": "2026-11-24T10:00:00Z",
                         "deletionTimestamp": "2026-11-24T10:05:00Z",
                         "annotations": {"pv.kubernetes.io/provisioned-by": "d", "empty": ""},
                         "labels": {"tier": "fast"},
                         "finalizers": ["kubernetes.io/pv-protection"]},
            "spec": {"capacity": {"storage": "1536Mi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                     "claimRef": {"namespace": "ns", "name": "c", "uid": "cu", "resourceVersion": "7"},
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "gold",
                     "mountOptions": ["ro"], "volumeMode": "Block",
                     "csi": {"driver": "d", "volumeHandle": "h", "fsType": "ext4",
                             "volumeAttributes": {"a": "b"},
                             "controllerExpandSecretRef": {"name": "s", "namespace": "ns"}},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "status": {"phase": "Released", "message": "m", "reason": "r",
                       "lastPhaseTransitionTime": "2026-11-24T10:01:00Z"}
        }))
        .expect("a PV");
        let held = Compact::of(&pv);
        assert_eq!(held.open().as_deref(), Some(&pv));
        assert_eq!((&*held.name, held.version()), ("pv-1", Some(42)));
        assert!(held.json.len() < 1200, "{} bytes", held.json.len());

        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "cu", "resourceVersion": "8",
                         "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": "gold", "volumeName": "pv-1",
                     "selector": {"matchLabels": {"tier": "fast"}},
                     "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "src"}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
                       "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
                       "conditions": [{"type": "Resizing", "status": "True",
                                       "lastTransitionTime": "2026-11-24T10:02:00Z"}]}
        }))
        .expect("a claim");
        let held = Compact::of(&claim);
        assert_eq!(held.open().as_deref(), Some(&claim));
        assert_eq!(held.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn bytes_not_from_of_open_to_nothing() {
        let mut held = Compact::of(&PersistentVolume::default());
        held.json = b"not json".to_vec().into();
        assert!(held.open().is_none());
    }
}
