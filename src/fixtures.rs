//! Builders of test objects for every unit test: a module states its base object as JSON and
//! each test the fields it changes, merged in (`object`). The settings and the class most
//! tests share are here too.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

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

/// StorageClass `gold` of `DRIVER`, changed by `extra`.
pub fn class(extra: Value) -> StorageClass {
    object(json!({"metadata": {"name": "gold"}, "provisioner": DRIVER}), extra)
}

/// The UID of the `claim` fixture (a UUID, as the API gives, since provisioned PVs are named
/// after it).
pub const CLAIM_UID: &str = "11111111-2222-3333-4444-555555555555";

/// Claim `ns/c` of class `gold` asking for 1Gi ReadWriteOnce, Pending, changed by `extra`.
pub fn claim(extra: Value) -> PersistentVolumeClaim {
    object(
        json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": CLAIM_UID, "resourceVersion": "1"},
            "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}
        }),
        extra,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_goes_into_objects_and_replaces_the_rest() {
        let mut base = json!({"a": {"b": 1, "c": [1]}, "d": 1});
        merge(&mut base, json!({"a": {"c": [2], "e": null}, "d": {"x": 1}}));
        assert_eq!(base, json!({"a": {"b": 1, "c": [2], "e": null}, "d": {"x": 1}}));
    }
}
