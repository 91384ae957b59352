//! The objects the pod scenarios create: two classes (bind at once, or wait for the first
//! consumer), a StatefulSet with a volume claim template, claims made ahead of one, and pods
//! with generic ephemeral volumes. Every pod writes into its volume, then waits for its end.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

pub const IMMEDIATE_CLASS: &str = "pods-immediate";
pub const WFFC_CLASS: &str = "pods-first-consumer";
/// The volume's name in every pod, so that a StatefulSet's claims are `data-<set>-<ordinal>`
/// and an ephemeral pod's is `<pod>-data`.
pub const VOLUME: &str = "data";
pub const SIZE: &str = "1Mi";
pub const GROWN_SIZE: &str = "2Mi";

pub fn class(name: &str, driver: &str, wait_for_consumer: bool) -> Result<StorageClass, String> {
    let mode = if wait_for_consumer { "WaitForFirstConsumer" } else { "Immediate" };
    from(json!({
        "metadata": {"name": name},
        "provisioner": driver,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": mode,
        "allowVolumeExpansion": true,
    }))
}

/// The container every pod runs: it writes into the volume and then waits; the shell is the
/// container's first process, so it needs a handler to end at once on SIGTERM.
fn container() -> Value {
    json!({
        "name": "app",
        // Imported into the node's containerd, never pulled.
        "image": crate::support::node::busybox(),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c",
            "trap 'exit 0' TERM; echo up > /data/up; sleep 1000000 & wait"],
        "volumeMounts": [{"name": VOLUME, "mountPath": "/data"}],
    })
}

fn pod_spec(volumes: Value) -> Value {
    json!({
        "terminationGracePeriodSeconds": 5,
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "containers": [container()],
        "volumes": volumes,
    })
}

/// A StatefulSet of `replicas` pods started all at once (Parallel), each with a claim of
/// `class` from its template; scaling down or deleting it deletes the claims.
pub fn statefulset(name: &str, class: &str, replicas: i32) -> Result<StatefulSet, String> {
    let labels = json!({"app": name});
    from(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(json!([]))},
            "volumeClaimTemplates": [{
                "metadata": {"name": VOLUME},
                "spec": {
                    "storageClassName": class,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": SIZE}},
                },
            }],
        },
    }))
}

/// The claim a StatefulSet's pod `ordinal` uses, by the controller's naming.
pub fn set_claim_name(set: &str, ordinal: usize) -> String {
    format!("{VOLUME}-{set}-{ordinal}")
}

pub fn set_pod_name(set: &str, ordinal: usize) -> String {
    format!("{set}-{ordinal}")
}

/// A claim as the StatefulSet would make it, made ahead of the set.
pub fn claim(name: &str, class: &str) -> Result<PersistentVolumeClaim, String> {
    from(json!({
        "metadata": {"name": name},
        "spec": {
            "storageClassName": class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": SIZE}},
        },
    }))
}

/// A pod with a generic ephemeral volume of `class`: its claim, `<pod>-data`, is made for it
/// and deleted with it.
pub fn ephemeral_pod(name: &str, class: &str) -> Result<Pod, String> {
    let volumes = json!([{
        "name": VOLUME,
        "ephemeral": {"volumeClaimTemplate": {"spec": {
            "storageClassName": class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": SIZE}},
        }}},
    }]);
    from(json!({"metadata": {"name": name}, "spec": pod_spec(volumes)}))
}

pub fn ephemeral_claim_name(pod: &str) -> String {
    format!("{pod}-{VOLUME}")
}

fn from<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| format!("bench object: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_names_its_claims_as_the_statefulset_controller_does() {
        let set = statefulset("web", IMMEDIATE_CLASS, 3).unwrap();
        let template = &set.spec.as_ref().unwrap().volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(template.metadata.name.as_deref(), Some(VOLUME));
        assert_eq!(set_claim_name("web", 2), "data-web-2");
        assert_eq!(set_pod_name("web", 2), "web-2");
        let policy = set.spec.unwrap().persistent_volume_claim_retention_policy.unwrap();
        assert_eq!(policy.when_scaled.as_deref(), Some("Delete"));
    }

    #[test]
    fn classes_bind_as_asked() {
        let wffc = class(WFFC_CLASS, "d", true).unwrap();
        assert_eq!(wffc.volume_binding_mode.as_deref(), Some("WaitForFirstConsumer"));
        let now = class(IMMEDIATE_CLASS, "d", false).unwrap();
        assert_eq!(now.volume_binding_mode.as_deref(), Some("Immediate"));
        assert_eq!(ephemeral_claim_name("job-1"), "job-1-data");
    }
}
