//! The PV recorded for a volume the driver created: the plan's PV, completed from the answer.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::plan::Plan;
use crate::cluster::quantity;
use crate::csi::v1 as csi;
use crate::names::ATTR_PROVISIONER_IDENTITY;

/// An answer from CreateVolume that cannot be recorded; the volume must be deleted again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "driver created volume {volume_id} with {got} bytes, less than the {requested} requested; it is being deleted"
    )]
    TooSmall {
        volume_id: String,
        got: i64,
        requested: i64,
    },
    #[error("driver created volume {0} without the requested content source; it is being deleted")]
    NoContentSource(String),
}

/// The PV for `answer`: volume handle, attributes, capacity and node affinity from the driver.
pub fn record(
    plan: &Plan,
    answer: &csi::Volume,
    identity: &str,
) -> Result<PersistentVolume, AnswerError> {
    let capacity = if answer.capacity_bytes == 0 {
        plan.requested_bytes
    } else {
        answer.capacity_bytes
    };
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
            let mut attributes: BTreeMap<String, String> = answer
                .volume_context
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            attributes.insert(ATTR_PROVISIONER_IDENTITY.to_string(), identity.to_string());
            source.volume_attributes = Some(attributes);
        }
        spec.node_affinity = node_affinity(&answer.accessible_topology);
    }
    Ok(pv)
}

/// One term per accessible segment (terms are ORed), each key `In [value]`.
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
        required: Some(NodeSelector {
            node_selector_terms: terms,
        }),
    })
}
