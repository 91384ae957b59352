//! The object patches provisioning writes, built here so that the executor only sends them.
//! Each carries the resourceVersion it was decided on: a change meanwhile makes it a conflict,
//! and the next pass decides again.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use super::snapshot::Snapshot;
use crate::model::names::*;

/// The provisioning intent on the claim: our finalizer (unless the intent is in the journal,
/// `journaled`) and the provisioner annotations (unless a binder wrote them for `driver`).
/// None: nothing to write.
pub fn intent(claim: &PersistentVolumeClaim, driver: &str, journaled: bool) -> Option<Value> {
    let annotated = annotation(&claim.metadata, ANN_STORAGE_PROVISIONER) == Some(driver);
    if journaled && annotated {
        return None;
    }
    let mut metadata = json!({ "resourceVersion": claim.metadata.resource_version });
    if !journaled {
        let finalizers = claim.metadata.finalizers.as_deref().unwrap_or_default();
        metadata["finalizers"] = json!(with_finalizer(finalizers, FINALIZER_PROVISIONING));
    }
    if !annotated {
        metadata["annotations"] = json!({
            ANN_STORAGE_PROVISIONER: driver,
            ANN_BETA_STORAGE_PROVISIONER: driver,
        });
    }
    Some(json!({ "metadata": metadata }))
}

/// The scheduler's node choice taken back (`volume.kubernetes.io/selected-node` removed), so
/// that it picks again.
pub fn unselect_node(claim: &PersistentVolumeClaim) -> Value {
    json!({"metadata": {
        "resourceVersion": claim.metadata.resource_version,
        "annotations": {ANN_SELECTED_NODE: null},
    }})
}

/// The cloning-protection finalizer on a clone's source claim.
pub fn protect_clone_source(source: &PersistentVolumeClaim) -> Value {
    json!({"metadata": {
        "resourceVersion": source.metadata.resource_version,
        "finalizers": with_finalizer(
            source.metadata.finalizers.as_deref().unwrap_or_default(),
            FINALIZER_CLONING_PROTECTION,
        ),
    }})
}

/// A VolumeSnapshot's finalizers replaced by `finalizers`, on the version it was read at.
pub fn snapshot_finalizers(snapshot: &Snapshot, finalizers: Vec<String>) -> Value {
    json!({"metadata": {
        "resourceVersion": snapshot.resource_version,
        "finalizers": finalizers,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::claim;

    #[test]
    fn the_intent_writes_only_what_is_missing() {
        let bare = claim(json!({"metadata": {"finalizers": ["kubernetes.io/pvc-protection"]}}));
        let handed = claim(json!({"metadata": {"annotations": {
            ANN_STORAGE_PROVISIONER: "d.csi"}}}));
        let p = intent(&bare, "d.csi", false).unwrap();
        assert_eq!(
            p["metadata"]["finalizers"],
            json!(["kubernetes.io/pvc-protection", FINALIZER_PROVISIONING])
        );
        assert_eq!(p["metadata"]["annotations"][ANN_BETA_STORAGE_PROVISIONER], "d.csi");
        assert_eq!(p["metadata"]["resourceVersion"], "1");
        let p = intent(&handed, "d.csi", false).unwrap();
        assert!(p["metadata"].get("annotations").is_none(), "the binder's hand-over stays");
        let p = intent(&bare, "d.csi", true).unwrap();
        assert!(p["metadata"].get("finalizers").is_none(), "the journal holds the intent");
        assert_eq!(intent(&handed, "d.csi", true), None, "journaled and handed over: no write");
        // Never twice.
        let held = claim(json!({"metadata": {"finalizers": [FINALIZER_PROVISIONING]}}));
        let p = intent(&held, "d.csi", false).unwrap();
        assert_eq!(p["metadata"]["finalizers"], json!([FINALIZER_PROVISIONING]));
    }

    #[test]
    fn node_choice_clone_protection_and_snapshot_finalizers() {
        let c = claim(json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}}));
        assert_eq!(unselect_node(&c)["metadata"]["annotations"][ANN_SELECTED_NODE], Value::Null);
        assert_eq!(unselect_node(&c)["metadata"]["resourceVersion"], "1");
        let p = protect_clone_source(&c);
        assert_eq!(p["metadata"]["finalizers"], json!([FINALIZER_CLONING_PROTECTION]));
        let s = Snapshot { resource_version: "7".into(), ..Snapshot::default() };
        let p = snapshot_finalizers(&s, vec!["a".into()]);
        assert_eq!(p, json!({"metadata": {"resourceVersion": "7", "finalizers": ["a"]}}));
    }
}
