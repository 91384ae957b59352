use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, TopologySelectorTerm};
use serde_json::json;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn terms(value: serde_json::Value) -> Vec<NodeSelectorTerm> {
    serde_json::from_value(value).expect("node selector terms")
}

#[test]
fn node_selector_terms_select_as_kubernetes_does() {
    let node = labels(&[("topology.hostpath.csi/node", "n1"), ("zone", "a"), ("disks", "4")]);
    let view = NodeView { name: "n1", labels: &node };
    let rows: &[(&str, serde_json::Value, bool)] = &[
        (
            "In with the value",
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]),
            true,
        ),
        (
            "In without it",
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]),
            false,
        ),
        (
            "In on a missing label",
            json!([{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}]),
            false,
        ),
        (
            "NotIn on another value",
            json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]),
            true,
        ),
        (
            "NotIn on a missing label",
            json!([{"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["a"]}]}]),
            true,
        ),
        (
            "NotIn on the value",
            json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]),
            false,
        ),
        ("Exists", json!([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]), true),
        (
            "DoesNotExist on a present label",
            json!([{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}]),
            false,
        ),
        (
            "DoesNotExist on a missing label",
            json!([{"matchExpressions": [{"key": "rack", "operator": "DoesNotExist"}]}]),
            true,
        ),
        (
            "Gt below",
            json!([{"matchExpressions": [{"key": "disks", "operator": "Gt", "values": ["3"]}]}]),
            true,
        ),
        (
            "Gt equal",
            json!([{"matchExpressions": [{"key": "disks", "operator": "Gt", "values": ["4"]}]}]),
            false,
        ),
        (
            "Lt above",
            json!([{"matchExpressions": [{"key": "disks", "operator": "Lt", "values": ["5"]}]}]),
            true,
        ),
        (
            "Gt on a word",
            json!([{"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["1"]}]}]),
            false,
        ),
        (
            "Gt with two values",
            json!([{"matchExpressions": [{"key": "disks", "operator": "Gt", "values": ["1", "2"]}]}]),
            false,
        ),
        (
            "an unknown operator",
            json!([{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]),
            false,
        ),
        (
            "expressions are ANDed",
            json!([{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]},
            {"key": "topology.hostpath.csi/node", "operator": "In", "values": ["n2"]}]}]),
            false,
        ),
        (
            "terms are ORed",
            json!([
            {"matchExpressions": [{"key": "topology.hostpath.csi/node", "operator": "In", "values": ["n2"]}]},
            {"matchExpressions": [{"key": "topology.hostpath.csi/node", "operator": "In", "values": ["n1"]}]}]),
            true,
        ),
        ("an empty term selects nothing", json!([{}]), false),
        ("no term selects nothing", json!([]), false),
        (
            "the node's name by field",
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]),
            true,
        ),
        (
            "another node's name by field",
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]),
            false,
        ),
        (
            "NotIn by field",
            json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}]),
            true,
        ),
        (
            "an unknown field",
            json!([{"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["n1"]}]}]),
            false,
        ),
        (
            "fields and labels ANDed",
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]),
            false,
        ),
    ];
    for (what, value, want) in rows {
        assert_eq!(selects(&terms(value.clone()), view), *want, "{what}");
    }
}

#[test]
fn allowed_topologies_admit_as_kubernetes_does() {
    let node = labels(&[("zone", "a"), ("rack", "r1")]);
    let rows: &[(&str, serde_json::Value, bool)] = &[
        ("no term: anywhere", json!([]), true),
        ("the zone", json!([{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]), true),
        (
            "another zone",
            json!([{"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}]),
            false,
        ),
        (
            "a key the node lacks",
            json!([{"matchLabelExpressions": [{"key": "region", "values": ["a"]}]}]),
            false,
        ),
        (
            "both keys",
            json!([{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}, {"key": "rack", "values": ["r1"]}]}]),
            true,
        ),
        (
            "one key of two wrong",
            json!([{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}, {"key": "rack", "values": ["r2"]}]}]),
            false,
        ),
        (
            "a second term matches",
            json!([
            {"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]},
            {"matchLabelExpressions": [{"key": "rack", "values": ["r1"]}]}]),
            true,
        ),
    ];
    for (what, value, want) in rows {
        let terms: Vec<TopologySelectorTerm> =
            serde_json::from_value(value.clone()).expect("terms");
        assert_eq!(topology_allows(&terms, &node), *want, "{what}");
    }
}

#[test]
fn a_volume_without_required_terms_has_none() {
    let none: PersistentVolume = serde_json::from_value(json!({"spec": {}})).expect("pv");
    let empty: PersistentVolume = serde_json::from_value(
        json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": []}}}}),
    )
    .expect("pv");
    let one: PersistentVolume =
        serde_json::from_value(json!({"spec": {"nodeAffinity": {"required":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}}}}))
        .expect("pv");
    assert!(volume_terms(&none).is_none());
    assert!(volume_terms(&empty).is_none());
    assert_eq!(volume_terms(&one).map(<[_]>::len), Some(1));
}
