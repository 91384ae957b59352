//! The PV recorded for a volume the driver created: the plan's PV, completed from the answer.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::plan::Plan;
use crate::csi::v1 as csi;
use crate::model::names::ATTR_PROVISIONER_IDENTITY;
use crate::model::{VolumeExt, quantity};

/// An answer from CreateVolume that cannot be recorded; the volume must be deleted again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "driver created volume {volume_id} with {got} bytes, less than the {requested} requested; it is being deleted"
    )]
    TooSmall { volume_id: String, got: i64, requested: i64 },
    #[error("driver created volume {0} without the requested content source; it is being deleted")]
    NoContentSource(String),
    /// No ID: nothing to record, nor to delete by; CreateVolume is asked again.
    #[error("driver answered CreateVolume for {0} with an empty volume_id")]
    NoVolumeId(String),
    #[error(
        "driver created volume {volume_id:.64} with an answer the PV cannot hold ({what}); it is being deleted"
    )]
    Unrecordable { volume_id: String, what: String },
    #[error(
        "failed to translate CSI PV to in-tree ({plugin}) for volume {volume_id:.64}: {error}; it is being deleted"
    )]
    Migration { volume_id: String, plugin: &'static str, error: crate::migration::TranslateError },
}

/// The longest volume ID and the most volume context a PV is given: far past what drivers use,
/// well within what the API stores in one object.
pub const MAX_VOLUME_ID: usize = 4096;
pub const MAX_CONTEXT_BYTES: usize = 256 * 1024;

/// What in an answer no valid PV can hold: an ID or a context past the bounds above, or a
/// topology segment whose key or value the API refuses in a node affinity.
fn unrecordable(answer: &csi::Volume, topology: bool) -> Option<String> {
    use crate::model::labels::{is_label_value, is_qualified_name};
    if answer.volume_id.len() > MAX_VOLUME_ID {
        return Some(format!(
            "a volume_id of {} bytes, over {MAX_VOLUME_ID}",
            answer.volume_id.len()
        ));
    }
    let context: usize = answer.volume_context.iter().map(|(k, v)| k.len() + v.len()).sum();
    if context > MAX_CONTEXT_BYTES {
        return Some(format!("a volume_context of {context} bytes, over {MAX_CONTEXT_BYTES}"));
    }
    // Segments become node affinity only where topology is used.
    if !topology {
        return None;
    }
    let mut segments = answer.accessible_topology.iter().flat_map(|t| &t.segments);
    let (key, value) = segments.find(|(k, v)| !is_qualified_name(k) || !is_label_value(v))?;
    Some(format!("topology segment {key:.64?}={value:.64?} is not a valid label"))
}

/// The PV for `answer`: volume handle, attributes, capacity and (with topology) node affinity
/// from the driver.
pub fn record(
    plan: &Plan,
    answer: &csi::Volume,
    identity: &str,
) -> Result<PersistentVolume, AnswerError> {
    if answer.volume_id.is_empty() {
        return Err(AnswerError::NoVolumeId(plan.volume_name.clone()));
    }
    if let Some(what) = unrecordable(answer, plan.topology) {
        return Err(AnswerError::Unrecordable { volume_id: answer.volume_id.clone(), what });
    }
    let capacity =
        if answer.capacity_bytes == 0 { plan.requested_bytes } else { answer.capacity_bytes };
    if capacity < plan.requested_bytes {
        return Err(AnswerError::TooSmall {
            volume_id: answer.volume_id.clone(),
            got: capacity,
            requested: plan.requested_bytes,
        });
    }
    if plan.request.volume_content_source.is_some() && answer.content_source.is_none() {
        return Err(AnswerError::NoContentSource(answer.volume_id.clone()));
    }
    let mut pv = plan.volume.clone();
    if let Some(spec) = pv.spec.as_mut() {
        spec.capacity = Some(BTreeMap::from([(
            "storage".to_string(),
            Quantity(quantity::format_bytes(u64::try_from(capacity).unwrap_or(0))),
        )]));
        if let Some(source) = spec.csi.as_mut() {
            source.volume_handle = answer.volume_id.clone();
            let mut attributes: BTreeMap<String, String> =
                answer.volume_context.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            attributes.insert(ATTR_PROVISIONER_IDENTITY.to_string(), identity.to_string());
            source.volume_attributes = Some(attributes);
        }
        // As csi-provisioner: only where topology is used, whatever the driver answered.
        if plan.topology {
            spec.node_affinity = node_affinity(&answer.accessible_topology);
        }
    }
    match plan.migrated {
        None => Ok(pv),
        Some(plugin) => {
            crate::migration::pv_to_in_tree(plugin, &pv).map_err(|error| AnswerError::Migration {
                volume_id: answer.volume_id.clone(),
                plugin: plugin.in_tree_name(),
                error,
            })
        }
    }
}

/// One term per accessible segment (terms are ORed), each key `In [value]`.
/// The secret DeleteVolume needs for `pv`: the one recorded on the PV at provisioning, or, for
/// PVs without that record, the class's provisioner secret resolved for the PV's claim (as
/// upstream does). None: no secret. Err: the class names one that cannot be resolved.
pub fn deletion_secret(
    pv: &PersistentVolume,
    class: Option<&k8s_openapi::api::storage::v1::StorageClass>,
) -> Result<Option<super::secrets::SecretRef>, String> {
    use crate::model::names::{ANN_DELETION_SECRET_NAME, ANN_DELETION_SECRET_NAMESPACE};
    let annotations = pv.metadata.annotations.clone().unwrap_or_default();
    if let (Some(name), Some(namespace)) =
        (annotations.get(ANN_DELETION_SECRET_NAME), annotations.get(ANN_DELETION_SECRET_NAMESPACE))
    {
        return Ok((!name.is_empty() || !namespace.is_empty()).then(|| {
            super::secrets::SecretRef { name: name.clone(), namespace: namespace.clone() }
        }));
    }
    let (Some(class), Some(claim_ref)) = (class, pv.claim_ref()) else {
        return Ok(None);
    };
    // An in-tree class names its secrets as the plugin did (Portworx): read in its CSI form.
    let translated = match crate::migration::Plugin::by_in_tree_name(&class.provisioner) {
        Some(plugin) => {
            Some(crate::migration::class_to_csi(plugin, class).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let class = translated.as_ref().unwrap_or(class);
    class_provisioner_secret(
        class,
        pv.metadata.name.as_deref().unwrap_or_default(),
        claim_ref.name.as_deref().unwrap_or_default(),
        claim_ref.namespace.as_deref().unwrap_or_default(),
    )
}

/// The class's provisioner secret resolved for the PV `pv_name` of claim `pvc_namespace/
/// pvc_name` (the claim's annotations are not at hand when deleting). None: the class names
/// none. Err: it names one that cannot be resolved.
pub fn class_provisioner_secret(
    class: &k8s_openapi::api::storage::v1::StorageClass,
    pv_name: &str,
    pvc_name: &str,
    pvc_namespace: &str,
) -> Result<Option<super::secrets::SecretRef>, String> {
    let parameters = super::parameters::parse(&class.parameters.clone().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let Some(template) = parameters.secrets.get(&super::parameters::SecretKind::Provisioner) else {
        return Ok(None);
    };
    let no_annotations = BTreeMap::new();
    let input = super::secrets::TemplateInput {
        pv_name,
        pvc_name,
        pvc_namespace,
        pvc_annotations: &no_annotations,
    };
    super::secrets::resolve(template, &input).map(Some).map_err(|e| e.to_string())
}

fn node_affinity(topology: &[csi::Topology]) -> Option<VolumeNodeAffinity> {
    let terms: Vec<NodeSelectorTerm> = topology
        .iter()
        .filter(|t| !t.segments.is_empty())
        .map(|t| {
            let mut segments: Vec<(&String, &String)> = t.segments.iter().collect();
            segments.sort();
            NodeSelectorTerm {
                match_expressions: Some(
                    segments
                        .into_iter()
                        .map(|(k, v)| NodeSelectorRequirement {
                            key: k.clone(),
                            operator: "In".into(),
                            values: Some(vec![v.clone()]),
                        })
                        .collect(),
                ),
                match_fields: None,
            }
        })
        .collect();
    (!terms.is_empty()).then_some(VolumeNodeAffinity {
        required: Some(NodeSelector { node_selector_terms: terms }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{created as answer, plan};
    use serde_json::json;

    #[test]
    fn the_answer_completes_the_pv() {
        let topology = Plan { topology: true, ..plan(false) };
        let pv = record(&topology, &answer(3 << 30), "ident").unwrap();
        let spec = pv.spec.unwrap();
        assert_eq!(
            spec.capacity.unwrap()["storage"].0,
            "3Gi",
            "the driver's size, not the request"
        );
        let csi = spec.csi.unwrap();
        assert_eq!(csi.volume_handle, "vol-1");
        let attributes = csi.volume_attributes.unwrap();
        assert_eq!(attributes["k"], "v");
        assert_eq!(attributes[ATTR_PROVISIONER_IDENTITY], "ident");
        let terms = spec.node_affinity.unwrap().required.unwrap().node_selector_terms;
        assert_eq!(terms.len(), 2, "one term per accessible segment");
        let first: Vec<(String, Vec<String>)> = terms[0]
            .match_expressions
            .clone()
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.values.unwrap()))
            .collect();
        assert_eq!(first, [("rack".into(), vec!["1".into()]), ("zone".into(), vec!["a".into()])]);
        // Without topology (no capability, or Topology=false) the answer's segments are not
        // recorded, as csi-provisioner does.
        let pv = record(&Plan { topology: false, ..plan(false) }, &answer(3 << 30), "i").unwrap();
        assert_eq!(pv.spec.unwrap().node_affinity, None);
    }

    #[test]
    fn size_zero_means_the_request_and_smaller_is_refused() {
        let pv = record(&plan(false), &answer(0), "i").unwrap();
        assert_eq!(pv.spec.unwrap().capacity.unwrap()["storage"].0, "1Gi");
        assert_eq!(
            record(&plan(false), &answer(1), "i").unwrap_err(),
            AnswerError::TooSmall { volume_id: "vol-1".into(), got: 1, requested: 1 << 30 }
        );
    }

    fn segment(key: &str, value: &str) -> csi::Topology {
        csi::Topology { segments: [(key.to_string(), value.to_string())].into() }
    }

    #[test]
    fn answers_no_valid_pv_can_hold_are_refused() {
        let topology = Plan { topology: true, ..plan(false) };
        let with = |change: fn(&mut csi::Volume)| {
            let mut a = answer(1 << 30);
            change(&mut a);
            a
        };
        // (the answer, the plan uses topology, what the refusal says; "" for none)
        let table: [(csi::Volume, bool, &str); 8] = [
            (with(|a| a.volume_id.clear()), false, "empty volume_id"),
            (
                with(|a| a.volume_id = "v".repeat(MAX_VOLUME_ID + 1)),
                false,
                "a volume_id of 4097 bytes",
            ),
            (with(|a| a.volume_id = "v".repeat(MAX_VOLUME_ID)), false, ""),
            (
                with(|a| {
                    a.volume_context.insert("k".into(), "x".repeat(MAX_CONTEXT_BYTES));
                }),
                false,
                "a volume_context of 262145 bytes",
            ),
            (
                with(|a| a.accessible_topology = vec![segment("", "a")]),
                true,
                "is not a valid label",
            ),
            (
                with(|a| a.accessible_topology = vec![segment("zone", "-a")]),
                true,
                "is not a valid label",
            ),
            // Not recorded without topology, so not refused either.
            (with(|a| a.accessible_topology = vec![segment("", "a")]), false, ""),
            (with(|a| a.capacity_bytes = -1), false, "with -1 bytes"),
        ];
        for (answer, uses_topology, refusal) in table {
            let plan = if uses_topology { topology.clone() } else { plan(false) };
            let got = record(&plan, &answer, "i");
            match (refusal, got) {
                ("", Ok(_)) => {}
                ("", Err(e)) => panic!("{:.80?}: refused: {e}", answer.volume_id),
                (text, Ok(_)) => panic!("recorded, not refused with {text:?}"),
                (text, Err(e)) => assert!(e.to_string().contains(text), "{e} lacks {text:?}"),
            }
        }
    }

    #[test]
    fn a_clone_without_its_source_is_refused() {
        assert_eq!(
            record(&plan(true), &answer(1 << 30), "i").unwrap_err(),
            AnswerError::NoContentSource("vol-1".into())
        );
    }

    #[test]
    fn deletion_secret_from_the_pv_record_else_from_the_class() {
        use crate::model::names::{ANN_DELETION_SECRET_NAME, ANN_DELETION_SECRET_NAMESPACE};
        let pv = |annotations: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(json!({
                "metadata": {"name": "pvc-1", "annotations": annotations},
                "spec": {"claimRef": {"name": "data", "namespace": "team"}}
            }))
            .unwrap()
        };
        let class: k8s_openapi::api::storage::v1::StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "gold"}, "provisioner": "d",
            "parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": "${pvc.name}-key",
                "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}",
            }
        }))
        .unwrap();
        let recorded =
            pv(json!({ANN_DELETION_SECRET_NAME: "s", ANN_DELETION_SECRET_NAMESPACE: "ns"}));
        let got = deletion_secret(&recorded, Some(&class)).unwrap().unwrap();
        assert_eq!((got.name.as_str(), got.namespace.as_str()), ("s", "ns"));
        let none = pv(json!({ANN_DELETION_SECRET_NAME: "", ANN_DELETION_SECRET_NAMESPACE: ""}));
        assert_eq!(deletion_secret(&none, Some(&class)), Ok(None));
        let old = pv(json!({}));
        let got = deletion_secret(&old, Some(&class)).unwrap().unwrap();
        assert_eq!((got.name.as_str(), got.namespace.as_str()), ("data-key", "team"));
        assert_eq!(deletion_secret(&old, None), Ok(None));
    }
}
