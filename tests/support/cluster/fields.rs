//! Fields of API objects as plain values.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::Value;

/// JSON merge (objects merge, anything else replaces).
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

pub fn annotations(claim: &PersistentVolumeClaim) -> BTreeMap<String, String> {
    claim.metadata.annotations.clone().unwrap_or_default()
}

pub fn finalizers<K: kube::Resource>(object: &K) -> Vec<String> {
    object.meta().finalizers.clone().unwrap_or_default()
}
