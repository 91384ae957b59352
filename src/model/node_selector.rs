//! Whether a node, by its name and topology labels, is inside a PV's node affinity or a class's
//! allowedTopologies, with Kubernetes' own rules: terms are ORed, a term's expressions ANDed, and
//! a term with no expression at all selects no node (a PV's) or every node (a class's, where an
//! empty list already means "anywhere").

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, TopologySelectorTerm,
};

/// A node as a selector sees it.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// The PV's required node affinity, if it has one with at least one term.
pub fn volume_terms(pv: &PersistentVolume) -> Option<&[NodeSelectorTerm]> {
    let terms =
        pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms.as_slice();
    (!terms.is_empty()).then_some(terms)
}

/// Whether the node is selected by any of the terms.
pub fn selects(terms: &[NodeSelectorTerm], node: NodeView<'_>) -> bool {
    terms.iter().any(|term| term_selects(term, node))
}

fn term_selects(term: &NodeSelectorTerm, node: NodeView<'_>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions.iter().all(|e| label_requirement_holds(e, node.labels))
        && fields.iter().all(|f| field_requirement_holds(f, node.name))
}

fn label_requirement_holds(
    req: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> bool {
    let value = labels.get(&req.key);
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        // One integer on each side, or no match: upstream refuses anything else the same way.
        "Gt" | "Lt" => {
            let (Some(have), [want]) = (value.and_then(|v| v.parse::<i64>().ok()), values) else {
                return false;
            };
            let Ok(want) = want.parse::<i64>() else { return false };
            if req.operator == "Gt" { have > want } else { have < want }
        }
        _ => false,
    }
}

/// `matchFields` knows one field, the node's name, with In and NotIn.
fn field_requirement_holds(req: &NodeSelectorRequirement, name: &str) -> bool {
    if req.key != "metadata.name" {
        return false;
    }
    let values = req.values.as_deref().unwrap_or_default();
    let listed = values.iter().any(|v| v == name);
    match req.operator.as_str() {
        "In" => listed,
        "NotIn" => !listed,
        _ => false,
    }
}

/// Whether a class's allowedTopologies admit a node with these labels: no term means anywhere;
/// otherwise some term whose every expression has the label with one of its values.
pub fn topology_allows(terms: &[TopologySelectorTerm], labels: &BTreeMap<String, String>) -> bool {
    terms.is_empty()
        || terms.iter().any(|term| {
            term.match_label_expressions
                .as_deref()
                .unwrap_or_default()
                .iter()
                .all(|e| labels.get(&e.key).is_some_and(|v| e.values.iter().any(|want| want == v)))
        })
}

#[cfg(test)]
#[path = "node_selector_tests.rs"]
mod tests;
