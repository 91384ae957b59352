//! Topology: the volume's place from the selected node and the class's allowedTopologies.

use super::*;

/// One of the topologies is the fake driver's zone-a.
fn in_zone_a(topologies: &[csi::Topology]) -> bool {
    topologies.iter().any(|t| t.segments[support::fake_driver::TOPOLOGY_KEY] == "zone-a")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_comes_from_the_selected_node_and_the_class() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::storage::v1::CSINode;
    use support::fake_driver::TOPOLOGY_KEY;

    let world =
        World::start("prov-topo", DriverConfig { topology: true, ..DriverConfig::default() }, &[])
            .await;
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "topo-node-a", "labels": {TOPOLOGY_KEY: "zone-a"}}
    }))
    .unwrap();
    kube::Api::<Node>::all(world.client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let csi_node: CSINode = serde_json::from_value(json!({
        "metadata": {"name": "topo-node-a"},
        "spec": {"drivers": [{"name": world.driver_name, "nodeID": "topo-node-a",
                              "topologyKeys": [TOPOLOGY_KEY]}]}
    }))
    .unwrap();
    kube::Api::<CSINode>::all(world.client.clone())
        .create(&PostParams::default(), &csi_node)
        .await
        .unwrap();
    world.create_class("late", json!({"volumeBindingMode": "WaitForFirstConsumer"})).await;
    world
        .create_class(
            "zone-b",
            json!({"volumeBindingMode": "WaitForFirstConsumer",
                   "allowedTopologies": [{"matchLabelExpressions": [{"key": TOPOLOGY_KEY, "values": ["zone-b"]}]}]}),
        )
        .await;
    let on = |node: &str| json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": node}}});
    world.create_claim("placed", "late", "1Gi", on("topo-node-a")).await;
    world.create_claim("unregistered", "late", "1Gi", on("nowhere")).await;
    world.create_claim("excluded", "zone-b", "1Gi", on("topo-node-a")).await;

    let (_, pv) = world.bound("placed", BIND_LIMIT).await;
    let request = &create_calls(&world)[0];
    let requirement = request.accessibility_requirements.clone().unwrap();
    // Not strict (csi-provisioner's default): every node's segment may take the volume, the
    // selected node's comes first.
    assert_eq!(requirement.preferred[0].segments[TOPOLOGY_KEY], "zone-a");
    assert!(in_zone_a(&requirement.requisite), "{requirement:?}");
    let term = &pv.spec.unwrap().node_affinity.unwrap().required.unwrap().node_selector_terms[0];
    let expression = &term.match_expressions.as_ref().unwrap()[0];
    assert_eq!(
        (expression.key.as_str(), expression.values.clone().unwrap()),
        (TOPOLOGY_KEY, vec!["zone-a".to_string()])
    );

    // A node that does not exist: the scheduler is asked to choose again.
    world
        .event(
            "unregistered",
            "ProvisioningFailed",
            "selected node nowhere or its CSINode does not exist; asking the scheduler",
            BIND_LIMIT,
        )
        .await;
    let selected = |claim: k8s_openapi::api::core::v1::PersistentVolumeClaim| {
        claim
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("volume.kubernetes.io/selected-node")
    };
    assert!(!selected(world.claim("unregistered").await.unwrap()));
    world
        .event(
            "excluded",
            "ProvisioningFailed",
            "the StorageClass's allowedTopologies exclude it",
            BIND_LIMIT,
        )
        .await;
    assert_eq!(create_calls(&world).len(), 1, "nothing created for unsatisfiable topology");

    // Out of space on the selected node: rescheduled, then provisioned on the next choice.
    world.driver.fail("CreateVolume", tonic::Code::ResourceExhausted, 1);
    world.create_claim("full", "late", "1Gi", on("topo-node-a")).await;
    world
        .event("full", "ProvisioningFailed", "asking the scheduler to choose another", BIND_LIMIT)
        .await;
    let rescheduled =
        eventually(BIND_LIMIT, || async { (!selected(world.claim("full").await?)).then_some(()) })
            .await;
    assert!(rescheduled.is_some(), "{}", world.sidecar.log_text());
    world
        .claims()
        .patch("full", &PatchParams::default(), &Patch::Merge(on("topo-node-a")))
        .await
        .unwrap();
    world.bound("full", BIND_LIMIT).await;

    // Immediate binding with no allowedTopologies (--immediate-topology, on by default): the
    // segments of every node the driver is on.
    world.create_class("now", json!({})).await;
    world.create_claim("anywhere", "now", "1Gi", json!({})).await;
    let (claim, _) = world.bound("anywhere", BIND_LIMIT).await;
    let uid = claim.metadata.uid.unwrap();
    let request = create_calls(&world).into_iter().rfind(|r| r.name.ends_with(&uid)).unwrap();
    let requirement = request.accessibility_requirements.unwrap();
    assert!(in_zone_a(&requirement.requisite), "{requirement:?}");
    let mut preferred = requirement.preferred.clone();
    preferred.sort_by_key(|t| t.segments[TOPOLOGY_KEY].clone());
    let mut requisite = requirement.requisite.clone();
    requisite.sort_by_key(|t| t.segments[TOPOLOGY_KEY].clone());
    assert_eq!(preferred, requisite, "preferred is the requisite, turned");
}
