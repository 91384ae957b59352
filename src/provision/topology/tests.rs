use super::*;
use serde_json::{Value, json};

fn class(allowed: Value) -> StorageClass {
    crate::fixtures::storage_class("c").provisioner("d").allowed_topologies(allowed).build()
}

fn node(name: &str, labels: Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

fn csi_node(name: &str, keys: Value) -> CSINode {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": "d", "nodeID": name, "topologyKeys": keys}]}
    }))
    .unwrap()
}

fn seg(pairs: &[(&str, &str)]) -> Segment {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn segments(topologies: &[csi::Topology]) -> Vec<Segment> {
    topologies.iter().map(|t| t.segments.clone().into_iter().collect()).collect()
}

const STRICT: TopologyOptions = TopologyOptions { strict: true, immediate: true };
const DEFAULT: TopologyOptions = TopologyOptions { strict: false, immediate: true };
const NO_IMMEDIATE: TopologyOptions = TopologyOptions { strict: false, immediate: false };

/// Three nodes: n1 and n2 in zone a (racks 1, 2), n3 in zone b; n4 has no driver keys' labels.
struct Cluster {
    nodes: Vec<Node>,
    csi_nodes: Vec<CSINode>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            nodes: vec![
                node("n1", json!({"zone": "a", "rack": "1"})),
                node("n2", json!({"zone": "a", "rack": "2"})),
                node("n3", json!({"zone": "b", "rack": "1"})),
                node("n4", json!({"other": "x"})),
            ],
            csi_nodes: ["n1", "n2", "n3"]
                .iter()
                .map(|n| csi_node(n, json!(["zone", "rack"])))
                .collect(),
        }
    }

    fn view(&self) -> ClusterNodes<'_> {
        ClusterNodes {
            csi_nodes: self.csi_nodes.iter().collect(),
            node_labels: self
                .nodes
                .iter()
                .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref()?)))
                .collect(),
        }
    }

    fn selected<'a>(&'a self, name: &'a str) -> SelectedNode<'a> {
        SelectedNode {
            name,
            node: self.nodes.iter().find(|n| n.metadata.name.as_deref() == Some(name)),
            csi_node: self.csi_nodes.iter().find(|n| n.metadata.name.as_deref() == Some(name)),
        }
    }
}

fn all_three() -> Vec<Segment> {
    vec![
        seg(&[("rack", "1"), ("zone", "a")]),
        seg(&[("rack", "1"), ("zone", "b")]),
        seg(&[("rack", "2"), ("zone", "a")]),
    ]
}

#[test]
fn upstreams_table() {
    let cluster = Cluster::new();
    let view = cluster.view();
    let none = class(Value::Null);
    let zone_a = class(json!([{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]));
    let zone_b = class(json!([{"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}]));
    let n2 = Some(cluster.selected("n2"));
    // (case, class, selected, options, requisite, first preferred)
    type Row<'a> = (
        &'static str,
        &'a StorageClass,
        Option<SelectedNode<'a>>,
        TopologyOptions,
        Vec<Segment>,
        Segment,
    );
    let r2a = || seg(&[("rack", "2"), ("zone", "a")]);
    let (za, zb) = (|| seg(&[("zone", "a")]), || seg(&[("zone", "b")]));
    let table: Vec<Row<'_>> = vec![
        ("delayed, strict: the node's segment only", &none, n2, STRICT, vec![r2a()], r2a()),
        ("delayed, strict, allowed", &zone_a, n2, STRICT, vec![r2a()], r2a()),
        (
            "delayed, not strict: every node's segment, the selected first",
            &none,
            n2,
            DEFAULT,
            all_three(),
            r2a(),
        ),
        (
            "delayed, not strict, allowed: the allowed segments",
            &zone_a,
            n2,
            DEFAULT,
            vec![za()],
            za(),
        ),
        ("immediate, allowed", &zone_b, None, DEFAULT, vec![zb()], zb()),
    ];
    for (case, class, selected, options, requisite, first) in table {
        let r = requirement(class, "d", "data", selected, &view, options)
            .unwrap_or_else(|e| panic!("{case}: {e}"))
            .unwrap_or_else(|| panic!("{case}: no requirement"));
        assert_eq!(segments(&r.requisite), requisite, "{case}");
        let preferred = segments(&r.preferred);
        assert_eq!(preferred[0], first, "{case}");
        let mut sorted = preferred.clone();
        sorted.sort_by(compare);
        assert_eq!(sorted, requisite, "{case}: preferred is requisite turned");
    }
}

#[test]
fn immediate_binding_aggregates_unless_told_not_to() {
    let cluster = Cluster::new();
    let view = cluster.view();
    let none = class(Value::Null);
    let r = requirement(&none, "d", "data", None, &view, DEFAULT).unwrap().unwrap();
    assert_eq!(segments(&r.requisite), all_three());
    assert_eq!(requirement(&none, "d", "data", None, &view, NO_IMMEDIATE).unwrap(), None);
    // No CSINode names the driver's keys yet: wait for its node plugin.
    let empty = ClusterNodes::default();
    assert!(matches!(
        requirement(&none, "d", "data", None, &empty, DEFAULT),
        Err(TopologyError::NoTopology(_))
    ));
    // Keys registered, but no node carries them as labels.
    let bare = ClusterNodes { csi_nodes: view.csi_nodes.clone(), node_labels: vec![] };
    assert!(matches!(
        requirement(&none, "d", "data", None, &bare, DEFAULT),
        Err(TopologyError::KeysOnNoNode { .. })
    ));
}

#[test]
fn statefulset_replicas_spread_and_one_replicas_claims_stay_together() {
    // The replica's claims hash alike; consecutive ordinals move on by one.
    assert_eq!(spread("data-web-0", 3), spread("logs-web-0", 3));
    assert_eq!((spread("data-web-0", 3) + 1) % 3, spread("data-web-1", 3));
    assert_eq!(spread("anything", 0), 0);
    // FNV-1 (multiply, then xor, per byte) over the set name, plus the ordinal.
    let fnv1 = |s: &str| {
        s.bytes().fold(2_166_136_261u32, |h, b| h.wrapping_mul(16_777_619) ^ u32::from(b))
    };
    assert_eq!(spread("data-web-4", 7), (fnv1("web").wrapping_add(4) % 7) as usize);
}

#[test]
fn nodes_the_driver_cannot_describe_are_errors() {
    let cluster = Cluster::new();
    let view = cluster.view();
    let none = class(Value::Null);
    let unlabeled = node("n9", json!({"zone": "a"}));
    let registered = csi_node("n9", json!(["zone", "rack"]));
    let selected = SelectedNode { name: "n9", node: Some(&unlabeled), csi_node: Some(&registered) };
    let e = requirement(&none, "d", "c", Some(selected), &view, STRICT).unwrap_err();
    assert!(e.to_string().contains("no label rack"), "{e}");
    let unregistered = SelectedNode { csi_node: None, ..selected };
    let e = requirement(&none, "d", "c", Some(unregistered), &view, DEFAULT).unwrap_err();
    assert!(matches!(e, TopologyError::NotRegistered { .. }));
    // Strict: the node must be allowed; not strict: it must be among the allowed.
    let zone_b = class(json!([{"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}]));
    let n1 = Some(cluster.selected("n1"));
    assert!(matches!(
        requirement(&zone_b, "d", "c", n1, &view, STRICT),
        Err(TopologyError::NotAllowed { .. })
    ));
    assert!(matches!(
        requirement(&zone_b, "d", "c", n1, &view, DEFAULT),
        Err(TopologyError::SelectedNotRequisite { .. })
    ));
}

#[test]
fn allowed_topologies_are_flattened() {
    let view = ClusterNodes::default();
    let allowed = class(json!([
        {"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}, {"key": "tier", "values": ["ssd"]}]},
        {"matchLabelExpressions": [{"key": "zone", "values": ["c"]}]}
    ]));
    let r = requirement(&allowed, "d", "c", None, &view, DEFAULT).unwrap().unwrap();
    assert_eq!(
        segments(&r.requisite),
        [
            seg(&[("zone", "c")]),
            seg(&[("tier", "ssd"), ("zone", "a")]),
            seg(&[("tier", "ssd"), ("zone", "b")]),
        ]
    );
    let bad = class(json!([{"matchLabelExpressions": [{"key": "zone", "values": []}]}]));
    assert!(matches!(
        requirement(&bad, "d", "c", None, &view, DEFAULT),
        Err(TopologyError::BadTerm(0))
    ));
}

/// csi-provisioner v6.4 (#1582): a node counts only where the driver registered the keys on its
/// CSINode, and immediate binding aggregates every registered key set on its own.
#[test]
fn only_registered_nodes_count_and_every_key_set_is_aggregated() {
    let mut cluster = Cluster::new();
    // n5 carries the labels, but the driver registered nothing there.
    cluster.nodes.push(node("n5", json!({"zone": "c", "rack": "9"})));
    // n6 reports a coarser granularity: the zone only.
    cluster.nodes.push(node("n6", json!({"zone": "d", "rack": "3"})));
    cluster.csi_nodes.push(csi_node("n6", json!(["zone"])));
    let view = cluster.view();
    let none = class(Value::Null);

    let r = requirement(&none, "d", "data", None, &view, DEFAULT).unwrap().unwrap();
    // The zone set over every node that registered the zone (n1-n3 and n6), then the finer set
    // over n1-n3; n5 in neither.
    let mut want = vec![seg(&[("zone", "a")]), seg(&[("zone", "b")]), seg(&[("zone", "d")])];
    want.extend(all_three());
    assert_eq!(segments(&r.requisite), want, "both key sets, no n5");

    // Delayed on n1: n1's key set, over the nodes that registered all of it (not n5, not n6).
    let r = requirement(&none, "d", "data", Some(cluster.selected("n1")), &view, DEFAULT)
        .unwrap()
        .unwrap();
    assert_eq!(segments(&r.requisite), all_three());
    assert_eq!(segments(&r.preferred)[0], seg(&[("rack", "1"), ("zone", "a")]));

    // Delayed on n6: the zone key set, which n1-n3 cover too.
    let r = requirement(&none, "d", "data", Some(cluster.selected("n6")), &view, DEFAULT)
        .unwrap()
        .unwrap();
    let zones = [seg(&[("zone", "a")]), seg(&[("zone", "b")]), seg(&[("zone", "d")])];
    assert_eq!(segments(&r.requisite), zones);
    assert_eq!(segments(&r.preferred)[0], seg(&[("zone", "d")]));

    // Labels only on a node the driver did not register: no segment to offer.
    let lone = ClusterNodes {
        csi_nodes: vec![&cluster.csi_nodes[0]],
        node_labels: vec![("n5", cluster.nodes[4].metadata.labels.as_ref().unwrap())],
    };
    let e = requirement(&none, "d", "data", None, &lone, DEFAULT).unwrap_err();
    assert!(matches!(e, TopologyError::KeysOnNoNode { .. }), "{e}");
    assert!(e.to_string().contains("registered its topology keys"), "{e}");
}
