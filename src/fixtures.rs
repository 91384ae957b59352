//! Builders of test objects for every unit test: `pv("pv-1").size("10Gi").bound_to(&c)`,
//! `pvc("c").uid("u").volume("pv-1")`, `storage_class("gold").binding_mode("Immediate")`,
//! each ending in `.build()`. `with` merges any other field in as JSON. The claim, class and
//! settings most tests share (`claim`, `class`, `settings`) are here too.

use std::marker::PhantomData;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::csi::v1 as csi;
use crate::provision::plan::{Features, Plan, PlanFacts, build};
use crate::provision::settings::{Settings, TopologyOptions, VolumeNaming};

/// The driver the shared fixtures belong to.
pub const DRIVER: &str = "d.csi";

/// Merges `extra` into `base`: objects key by key, anything else replaced (null included).
pub fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// `base` with `extra` merged in, as a Kubernetes object.
pub fn object<T: DeserializeOwned>(mut base: Value, extra: Value) -> T {
    merge(&mut base, extra);
    match serde_json::from_value(base) {
        Ok(object) => object,
        Err(e) => panic!("a fixture that is not a valid object: {e}"),
    }
}

/// A test object of kind `K` under construction, as the JSON it will be read from.
#[must_use]
pub struct Build<K> {
    value: Value,
    kind: PhantomData<K>,
}

impl<K: DeserializeOwned> Build<K> {
    fn of(value: Value) -> Self {
        Build { value, kind: PhantomData }
    }

    /// `extra` merged in (`merge`): any field the named setters do not cover.
    pub fn with(mut self, extra: Value) -> Self {
        merge(&mut self.value, extra);
        self
    }

    pub fn version(self, resource_version: &str) -> Self {
        self.with(json!({"metadata": {"resourceVersion": resource_version}}))
    }

    pub fn uid(self, uid: &str) -> Self {
        self.with(json!({"metadata": {"uid": uid}}))
    }

    pub fn annotation(self, key: &str, value: &str) -> Self {
        self.with(json!({"metadata": {"annotations": {key: value}}}))
    }

    pub fn label(self, key: &str, value: &str) -> Self {
        self.with(json!({"metadata": {"labels": {key: value}}}))
    }

    pub fn finalizers(self, finalizers: &[&str]) -> Self {
        self.with(json!({"metadata": {"finalizers": finalizers}}))
    }

    /// Being deleted (a deletionTimestamp).
    pub fn deleting(self) -> Self {
        self.with(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}))
    }

    pub fn build(self) -> K {
        object(self.value, json!({}))
    }
}

/// PV `name` with an empty spec.
pub fn pv(name: &str) -> Build<PersistentVolume> {
    Build::of(json!({"metadata": {"name": name}, "spec": {}}))
}

impl Build<PersistentVolume> {
    pub fn size(self, size: &str) -> Self {
        self.with(json!({"spec": {"capacity": {"storage": size}}}))
    }

    pub fn class(self, class: &str) -> Self {
        self.with(json!({"spec": {"storageClassName": class}}))
    }

    pub fn access_modes(self, modes: &[&str]) -> Self {
        self.with(json!({"spec": {"accessModes": modes}}))
    }

    pub fn reclaim(self, policy: &str) -> Self {
        self.with(json!({"spec": {"persistentVolumeReclaimPolicy": policy}}))
    }

    pub fn phase(self, phase: &str) -> Self {
        self.with(json!({"status": {"phase": phase}}))
    }

    /// A CSI volume of `driver` with this handle.
    pub fn csi(self, driver: &str, handle: &str) -> Self {
        self.with(json!({"spec": {"csi": {"driver": driver, "volumeHandle": handle}}}))
    }

    /// A claimRef to `namespace/name`, with `uid` when given.
    pub fn claim_ref(self, namespace: &str, name: &str, uid: Option<&str>) -> Self {
        self.with(json!({"spec": {"claimRef": {"namespace": namespace, "name": name, "uid": uid}}}))
    }

    /// A claimRef to `ns/c` with this UID, when there is one.
    pub fn claim_ref_if(self, uid: Option<&str>) -> Self {
        match uid {
            Some(uid) => self.claim_ref("ns", "c", Some(uid)),
            None => self,
        }
    }

    /// Bound to `claim`: its claimRef (with the UID), phase Bound.
    pub fn bound_to(self, claim: &PersistentVolumeClaim) -> Self {
        let meta = &claim.metadata;
        let (namespace, name) = (meta.namespace.as_deref(), meta.name.as_deref());
        self.claim_ref(namespace.unwrap_or_default(), name.unwrap_or_default(), meta.uid.as_deref())
            .phase("Bound")
    }
}

/// Claim `name` in namespace `ns`, with an empty spec.
pub fn pvc(name: &str) -> Build<PersistentVolumeClaim> {
    Build::of(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {}}))
}

impl Build<PersistentVolumeClaim> {
    pub fn namespace(self, namespace: &str) -> Self {
        self.with(json!({"metadata": {"namespace": namespace}}))
    }

    pub fn class(self, class: &str) -> Self {
        self.with(json!({"spec": {"storageClassName": class}}))
    }

    pub fn access_modes(self, modes: &[&str]) -> Self {
        self.with(json!({"spec": {"accessModes": modes}}))
    }

    /// `spec.resources.requests.storage`.
    pub fn size(self, size: &str) -> Self {
        self.with(json!({"spec": {"resources": {"requests": {"storage": size}}}}))
    }

    /// `spec.resources.limits.storage`.
    pub fn limit(self, size: &str) -> Self {
        self.with(json!({"spec": {"resources": {"limits": {"storage": size}}}}))
    }

    /// `spec.volumeName`.
    pub fn volume(self, name: &str) -> Self {
        self.with(json!({"spec": {"volumeName": name}}))
    }

    pub fn phase(self, phase: &str) -> Self {
        self.with(json!({"status": {"phase": phase}}))
    }

    /// Bound to `pv`: its name in `volumeName`, phase Bound.
    pub fn bound_to(self, pv: &PersistentVolume) -> Self {
        self.volume(pv.metadata.name.as_deref().unwrap_or_default()).phase("Bound")
    }
}

/// StorageClass `name` of `DRIVER`.
pub fn storage_class(name: &str) -> Build<StorageClass> {
    Build::of(json!({"metadata": {"name": name}, "provisioner": DRIVER}))
}

impl Build<StorageClass> {
    pub fn provisioner(self, driver: &str) -> Self {
        self.with(json!({"provisioner": driver}))
    }

    pub fn binding_mode(self, mode: &str) -> Self {
        self.with(json!({"volumeBindingMode": mode}))
    }

    pub fn allowed_topologies(self, allowed: Value) -> Self {
        self.with(json!({"allowedTopologies": allowed}))
    }
}

/// StorageClass `gold` of `DRIVER`, changed by `extra`.
pub fn class(extra: Value) -> StorageClass {
    storage_class("gold").with(extra).build()
}

/// The UID of the `claim` fixture (a UUID, as the API gives, since provisioned PVs are named
/// after it).
pub const CLAIM_UID: &str = "11111111-2222-3333-4444-555555555555";

/// Claim `ns/c` of class `gold` asking for 1Gi ReadWriteOnce, Pending, changed by `extra`.
pub fn claim(extra: Value) -> PersistentVolumeClaim {
    pvc("c")
        .uid(CLAIM_UID)
        .version("1")
        .class("gold")
        .access_modes(&["ReadWriteOnce"])
        .size("1Gi")
        .phase("Pending")
        .with(extra)
        .build()
}

/// Claim `team/data` (UID `u-1`, version 7, annotated `owner: alice`) of class `gold` asking for
/// 1Gi ReadWriteOnce, with no status: the provisioning tests' claim, whose names the templates
/// and parameters they check carry.
pub fn data_claim(extra: Value) -> PersistentVolumeClaim {
    pvc("data")
        .namespace("team")
        .uid("u-1")
        .version("7")
        .annotation("owner", "alice")
        .class("gold")
        .access_modes(&["ReadWriteOnce"])
        .size("1Gi")
        .with(extra)
        .build()
}

/// The settings of a sidecar for `DRIVER` with the flags' defaults (and ext4 as default fsType).
pub fn settings() -> Settings {
    Settings {
        driver: DRIVER.into(),
        naming: VolumeNaming { prefix: "pvc".into(), uuid_length: None },
        default_fs_type: Some("ext4".into()),
        extra_create_metadata: false,
        controller_publish_readonly: false,
        identity: "id".into(),
        prevent_volume_mode_conversion: true,
        topology: TopologyOptions::default(),
        extra_modify_metadata: false,
    }
}

/// The plan for claim `ns/c` of class `gold`; with `clone`, a clone of `ns/src` (bound to
/// `pv-src`, handle `h`).
pub fn plan(clone: bool) -> Plan {
    let class = class(json!({}));
    let mut claim = json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    });
    let source_claim = pvc("src").uid("s").size("1Gi").phase("Bound").build();
    let source_pv =
        pv("pv-src").csi(DRIVER, "h").with(json!({"spec": {"claimRef": {"uid": "s"}}})).build();
    if clone {
        claim["spec"]["dataSource"] = json!({"kind": "PersistentVolumeClaim", "name": "src"});
    }
    build(
        &serde_json::from_value(claim).unwrap(),
        &class,
        &settings(),
        Features { clone: true, ..Features::default() },
        PlanFacts { claim: Some(&source_claim), volume: Some(&source_pv), ..PlanFacts::default() },
    )
    .unwrap()
}

/// A CreateVolume answer: volume `vol-1` of `bytes`, with a context and two segments.
pub fn created(bytes: i64) -> csi::Volume {
    csi::Volume {
        capacity_bytes: bytes,
        volume_id: "vol-1".into(),
        volume_context: [("k".to_string(), "v".to_string())].into(),
        content_source: None,
        accessible_topology: vec![
            csi::Topology {
                segments: [
                    ("zone".to_string(), "a".to_string()),
                    ("rack".to_string(), "1".to_string()),
                ]
                .into(),
            },
            csi::Topology { segments: [("zone".to_string(), "b".to_string())].into() },
        ],
    }
}

/// An instant to build decisions' times from (decision modules never read the clock).
pub fn instant() -> std::time::Instant {
    std::time::Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_set_what_they_name() {
        use crate::model::{ClaimExt, VolumeExt, VolumePhase};
        let c = pvc("c").uid("u").size("2Gi").build();
        let v = pv("pv-1").size("10Gi").csi(DRIVER, "h").bound_to(&c).build();
        assert_eq!(v.capacity_bytes(), 10 << 30);
        assert_eq!(v.phase(), Some(VolumePhase::Bound));
        assert!(v.bound_to_claim("ns", "c", "u"));
        assert_eq!(v.csi_handle(), Some("h"));
        let bound = pvc("c").bound_to(&v).build();
        assert!(bound.is_bound() && bound.named_volume() == Some("pv-1"));
        assert_eq!(claim(json!({})).requested_storage().map(|q| q.0.as_str()), Some("1Gi"));
    }

    #[test]
    fn merge_goes_into_objects_and_replaces_the_rest() {
        let mut base = json!({"a": {"b": 1, "c": [1]}, "d": 1});
        merge(&mut base, json!({"a": {"c": [2], "e": null}, "d": {"x": 1}}));
        assert_eq!(base, json!({"a": {"b": 1, "c": [2], "e": null}, "d": {"x": 1}}));
    }
}
