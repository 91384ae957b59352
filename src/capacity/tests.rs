use super::*;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

fn class(name: &str, driver: &str, mode: &str) -> StorageClass {
    crate::fixtures::storage_class(name).provisioner(driver).binding_mode(mode).build()
}

fn node(name: &str, zone: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"zone": zone}}})).unwrap()
}

fn csi_node(name: &str, driver: &str, keys: serde_json::Value) -> CSINode {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": driver, "nodeID": name, "topologyKeys": keys}]}
    }))
    .unwrap()
}

fn seg(zone: &str) -> Segment {
    Segment::from([("zone".to_string(), zone.to_string())])
}

fn existing(name: &str, class: &str, zone: &str, bytes: &str) -> CSIStorageCapacity {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "csi", "resourceVersion": "3",
                     "labels": {DRIVER_LABEL: "d.csi", MANAGED_BY_LABEL: MANAGED_BY}},
        "storageClassName": class,
        "nodeTopology": {"matchLabels": {"zone": zone}},
        "capacity": bytes, "maximumVolumeSize": bytes
    }))
    .unwrap()
}

const GIB: i64 = 1 << 30;

#[test]
fn segments_come_from_the_nodes_the_driver_is_on() {
    let nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("c1", "c")];
    let csi_nodes = [
        csi_node("a1", "d.csi", json!(["zone"])),
        csi_node("a2", "d.csi", json!(["zone"])),
        csi_node("b1", "d.csi", json!(["zone"])),
        // Another driver's node, and one of ours without a Node.
        csi_node("c1", "x.csi", json!(["zone"])),
        csi_node("z9", "d.csi", json!(["zone"])),
    ];
    let got = segments(
        "d.csi",
        true,
        &csi_nodes.iter().collect::<Vec<_>>(),
        &nodes.iter().map(|n| &n.metadata).collect::<Vec<_>>(),
    );
    assert_eq!(got, [seg("a"), seg("b")]);
    assert_eq!(segments("d.csi", false, &[], &[]), [Segment::new()]);
}

#[test]
fn only_delayed_classes_of_the_driver_unless_immediate_is_asked_for() {
    let classes = [
        class("late", "d.csi", "WaitForFirstConsumer"),
        class("now", "d.csi", "Immediate"),
        class("theirs", "x.csi", "WaitForFirstConsumer"),
    ];
    let refs: Vec<_> = classes.iter().collect();
    let names = |items: Vec<Item>| -> Vec<(String, Segment)> {
        items.into_iter().map(|i| (i.class, i.segment)).collect()
    };
    assert_eq!(
        names(wanted(&refs, "d.csi", &[seg("a"), seg("b")], false)),
        [("late".into(), seg("a")), ("late".into(), seg("b"))]
    );
    assert_eq!(wanted(&refs, "d.csi", &[seg("a")], true).len(), 2);
}

#[test]
fn objects_are_created_updated_kept_and_deleted() {
    let item = |class: &str, zone: &str| Item { class: class.into(), segment: seg(zone) };
    let answer =
        |gib: i64| Some(Answer { available: gib * GIB, maximum_volume_size: Some(gib * GIB) });
    let answers = vec![
        (item("late", "a"), answer(10)),  // exists, same: nothing
        (item("late", "b"), answer(9)),   // exists, changed: update
        (item("fast", "a"), answer(100)), // missing: create
        (item("fast", "b"), None),        // GetCapacity failed: its object stays
    ];
    let objects = [
        existing("csisc-1", "late", "a", "10Gi"),
        existing("csisc-2", "late", "b", "10Gi"),
        existing("csisc-3", "fast", "b", "1Gi"),
        existing("csisc-4", "gone", "a", "1Gi"), // nothing wants it: delete
        existing("csisc-5", "late", "a", "10Gi"), // a second one for late/a: delete
    ];
    let changes = reconcile(&answers, &objects.iter().collect::<Vec<_>>(), "d.csi", None);
    let mut summary: Vec<String> = changes
        .iter()
        .map(|c| match c {
            Change::Create(o) => format!("create {} {:?}", o.storage_class_name, o.capacity),
            Change::Update { name, answer, .. } => {
                format!("update {name} {}", answer.available / GIB)
            }
            Change::Delete { name } => format!("delete {name}"),
        })
        .collect();
    summary.sort();
    assert_eq!(
        summary,
        [
            "create fast Some(Quantity(\"100Gi\"))",
            "delete csisc-4",
            "delete csisc-5",
            "update csisc-2 9",
        ]
    );
    let Some(Change::Create(made)) = changes.iter().find(|c| matches!(c, Change::Create(_))) else {
        panic!("no create");
    };
    assert_eq!(made.metadata.generate_name.as_deref(), Some("csisc-"));
    assert_eq!(made.metadata.labels.as_ref().unwrap()[DRIVER_LABEL], "d.csi");
    assert_eq!(made.metadata.labels.as_ref().unwrap()[MANAGED_BY_LABEL], MANAGED_BY);
    assert_eq!(made.node_topology.as_ref().unwrap().match_labels.as_ref(), Some(&seg("a")));
}

#[test]
fn an_owner_is_added_where_it_is_missing() {
    let owner = OwnerReference {
        api_version: "apps/v1".into(),
        kind: "StatefulSet".into(),
        name: "csi-hostpathplugin".into(),
        uid: "sts-uid".into(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let answers = vec![(
        Item { class: "late".into(), segment: seg("a") },
        Some(Answer { available: 10 * GIB, maximum_volume_size: Some(10 * GIB) }),
    )];
    let object = existing("csisc-1", "late", "a", "10Gi");
    let changes = reconcile(&answers, &[&object], "d.csi", Some(&owner));
    assert!(
        matches!(&changes[..], [Change::Update { owner: Some(o), .. }] if o.uid == "sts-uid"),
        "{changes:?}"
    );
    let mut owned = object.clone();
    owned.metadata.owner_references = Some(vec![owner.clone()]);
    assert!(reconcile(&answers, &[&owned], "d.csi", Some(&owner)).is_empty());
    let patch = update_patch(Some("3"), answers[0].1.unwrap(), Some(vec![owner]));
    assert_eq!(patch["metadata"]["resourceVersion"], "3");
    assert_eq!(patch["capacity"], "10Gi");
    assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "sts-uid");
    assert_eq!(
        selector("d.csi"),
        "csi.storage.k8s.io/drivername=d.csi,csi.storage.k8s.io/managed-by=external-provisioner"
    );
}
