//! Accessibility requirements for CreateVolume, for drivers with VOLUME_ACCESSIBILITY_CONSTRAINTS
//! (reference/provisioner.md §6.5).
//!
//! Implemented: delayed binding in strict form (requisite = preferred = the selected node's
//! segment, which must lie within allowedTopologies), and immediate binding with
//! allowedTopologies (requisite = preferred = the allowed terms). Not implemented yet: the
//! aggregated cluster topology upstream sends by default (--immediate-topology, non-strict delayed
//! binding), which needs every node's labels.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::csi::v1 as csi;

/// Why no requirement could be worked out; the text tells the user what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// The Node or its CSINode is gone: the scheduler must choose again (upstream reschedules).
    #[error(
        "selected node {0} or its CSINode does not exist; asking the scheduler to choose another node"
    )]
    NodeGone(String),
    #[error(
        "selected node {node} has no CSINode entry for driver {driver}; the driver's node plugin is not registered there"
    )]
    NotRegistered { node: String, driver: String },
    #[error("selected node {node} has no label {key}, a topology key of driver {driver}")]
    MissingLabel {
        node: String,
        key: String,
        driver: String,
    },
    #[error(
        "selected node {node} (topology {segment:?}) is outside the StorageClass's allowedTopologies; the driver cannot place the volume there"
    )]
    NotAllowed {
        node: String,
        segment: BTreeMap<String, String>,
    },
    #[error(
        "StorageClass allowedTopologies term {0} uses an operator other than In or has no values"
    )]
    BadTerm(usize),
}

/// The selected node's view: its Node (labels) and CSINode (the driver's topology keys). None
/// for a node that does not exist.
#[derive(Debug, Clone, Copy)]
pub struct SelectedNode<'a> {
    pub name: &'a str,
    pub node: Option<&'a Node>,
    pub csi_node: Option<&'a CSINode>,
}

/// The requirement for a claim of `class`, placed on `selected` (delayed binding) or anywhere.
pub fn requirement(
    class: &StorageClass,
    driver: &str,
    selected: Option<SelectedNode<'_>>,
) -> Result<Option<csi::TopologyRequirement>, TopologyError> {
    let allowed = allowed_segments(class)?;
    let segments = match selected {
        Some(node) => {
            let segment = node_segment(node, driver)?;
            if !allowed.is_empty() && !allowed.iter().any(|a| within(&segment, a)) {
                return Err(TopologyError::NotAllowed {
                    node: node.name.to_string(),
                    segment,
                });
            }
            vec![segment]
        }
        None if allowed.is_empty() => return Ok(None),
        None => allowed,
    };
    let topologies: Vec<csi::Topology> = segments
        .into_iter()
        .map(|s| csi::Topology {
            segments: s.into_iter().collect::<HashMap<_, _>>(),
        })
        .collect();
    Ok(Some(csi::TopologyRequirement {
        requisite: topologies.clone(),
        preferred: topologies,
    }))
}

/// The node's values for the driver's topology keys.
fn node_segment(
    node: SelectedNode<'_>,
    driver: &str,
) -> Result<BTreeMap<String, String>, TopologyError> {
    let not_registered = || TopologyError::NotRegistered {
        node: node.name.to_string(),
        driver: driver.to_string(),
    };
    let keys = node
        .csi_node
        .and_then(|c| c.spec.drivers.iter().find(|d| d.name == driver))
        .and_then(|d| d.topology_keys.clone())
        .filter(|k| !k.is_empty())
        .ok_or_else(not_registered)?;
    let labels = node
        .node
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    keys.into_iter()
        .map(|key| match labels.get(&key) {
            Some(value) => Ok((key, value.clone())),
            None => Err(TopologyError::MissingLabel {
                node: node.name.to_string(),
                key,
                driver: driver.to_string(),
            }),
        })
        .collect()
}

/// allowedTopologies flattened: each term's value combinations become one segment each.
fn allowed_segments(class: &StorageClass) -> Result<Vec<BTreeMap<String, String>>, TopologyError> {
    let mut out = Vec::new();
    for (i, term) in class.allowed_topologies.iter().flatten().enumerate() {
        let mut combos = vec![BTreeMap::new()];
        for requirement in term.match_label_expressions.iter().flatten() {
            if requirement.values.is_empty() {
                return Err(TopologyError::BadTerm(i));
            }
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    requirement.values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.insert(requirement.key.clone(), v.clone());
                        c
                    })
                })
                .collect();
        }
        out.extend(combos.into_iter().filter(|c| !c.is_empty()));
    }
    Ok(out)
}

/// Every key the allowed segment names has the same value in `segment`.
fn within(segment: &BTreeMap<String, String>, allowed: &BTreeMap<String, String>) -> bool {
    allowed.iter().all(|(k, v)| segment.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn class(allowed: Value) -> StorageClass {
        serde_json::from_value(json!({
            "metadata": {"name": "c"}, "provisioner": "d", "allowedTopologies": allowed
        }))
        .unwrap()
    }

    fn node(labels: Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}})).unwrap()
    }

    fn csi_node(keys: Value) -> CSINode {
        serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "d", "nodeID": "n1", "topologyKeys": keys}]}
        }))
        .unwrap()
    }

    fn segments(r: &csi::TopologyRequirement) -> Vec<BTreeMap<String, String>> {
        r.requisite
            .iter()
            .map(|t| t.segments.clone().into_iter().collect())
            .collect()
    }

    fn seg(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn delayed_binding_uses_the_selected_nodes_segment() {
        let n = node(json!({"zone": "a", "rack": "7", "other": "x"}));
        let c = csi_node(json!(["zone", "rack"]));
        let selected = SelectedNode {
            name: "n1",
            node: Some(&n),
            csi_node: Some(&c),
        };
        let r = requirement(&class(Value::Null), "d", Some(selected))
            .unwrap()
            .unwrap();
        assert_eq!(segments(&r), [seg(&[("zone", "a"), ("rack", "7")])]);
        assert_eq!(r.requisite, r.preferred);

        let inside =
            class(json!([{"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}]));
        assert!(requirement(&inside, "d", Some(selected)).is_ok());
        let outside = class(json!([{"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}]));
        assert!(matches!(
            requirement(&outside, "d", Some(selected)),
            Err(TopologyError::NotAllowed { .. })
        ));
    }

    #[test]
    fn nodes_the_driver_cannot_describe_are_errors() {
        let n = node(json!({"zone": "a"}));
        let c = csi_node(json!(["zone", "rack"]));
        let e = requirement(
            &class(Value::Null),
            "d",
            Some(SelectedNode {
                name: "n1",
                node: Some(&n),
                csi_node: Some(&c),
            }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no label rack"), "{e}");
        let e = requirement(
            &class(Value::Null),
            "d",
            Some(SelectedNode {
                name: "n1",
                node: Some(&n),
                csi_node: None,
            }),
        )
        .unwrap_err();
        assert!(matches!(e, TopologyError::NotRegistered { .. }));
    }

    #[test]
    fn immediate_binding_sends_allowed_topologies_only() {
        assert_eq!(requirement(&class(Value::Null), "d", None).unwrap(), None);
        let allowed = class(json!([
            {"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}, {"key": "tier", "values": ["ssd"]}]},
            {"matchLabelExpressions": [{"key": "zone", "values": ["c"]}]}
        ]));
        let r = requirement(&allowed, "d", None).unwrap().unwrap();
        assert_eq!(
            segments(&r),
            [
                seg(&[("zone", "a"), ("tier", "ssd")]),
                seg(&[("zone", "b"), ("tier", "ssd")]),
                seg(&[("zone", "c")]),
            ]
        );
    }
}
