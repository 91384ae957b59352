//! VolumeAttributesClass against the real driver: hostpathplugin with
//! `--enable-controller-modify-volume` (mutable parameter `iops` only), beside
//! kube-controller-manager's binder. A claim is provisioned with its class's parameters, and a
//! new class on the bound claim goes to the driver with ControllerModifyVolume, with the status,
//! conditions and events external-resizer gives; a class the driver refuses is Infeasible, a
//! class that does not exist is Pending, and taking the class back settles the claim. `explain`
//! says ModifyFailed and Modifying at those two steps.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use support::cluster::World;
use support::control_plane::fresh_plane;
use support::hostpath::Hostpath;
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};

const LIMIT: Duration = Duration::from_secs(60);

async fn create_class(world: &World<Hostpath>, name: &str, driver: &str, parameters: Value) {
    let class: VolumeAttributesClass = serde_json::from_value(json!({
        "metadata": {"name": format!("{}-{name}", world.namespace)},
        "driverName": driver, "parameters": parameters
    }))
    .unwrap();
    Api::<VolumeAttributesClass>::all(world.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}

async fn set_class(world: &World<Hostpath>, claim: &str, class: Option<&str>) {
    let name = class.map(|c| format!("{}-{c}", world.namespace));
    world
        .claims()
        .patch(
            claim,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"volumeAttributesClassName": name}})),
        )
        .await
        .unwrap();
}

/// Waits until `check` holds for the claim's status (as JSON); returns it.
async fn status_until(
    world: &World<Hostpath>,
    claim: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let status = |c: &PersistentVolumeClaim| serde_json::to_value(&c.status).unwrap_or_default();
    let found =
        world.claim_until(claim, what, LIMIT, |c| c.status.is_some() && check(&status(c))).await;
    status(&found)
}

/// `explain` with `args`, with the driver at hand for its capabilities.
fn explain(world: &World<Hostpath>, args: &[&str]) -> String {
    let endpoint = world.driver.endpoint();
    support::sidecar::explain(&world.plane.admin_kubeconfig, Some(&endpoint), args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_class_is_provisioned_and_changed_with_controller_modify_volume() {
    let plane = fresh_plane();
    let _kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
    let world = World::start_hostpath(
        plane,
        "vac",
        &["--enable-controller-modify-volume", "--accepted-mutable-parameter-names=iops"],
        &[],
    )
    .await;
    world.register_node().await;
    let driver = world.driver_name.clone();
    let ns = world.namespace.clone();
    create_class(&world, "fast", &driver, json!({"iops": "3000"})).await;
    create_class(&world, "faster", &driver, json!({"iops": "6000"})).await;
    create_class(&world, "broken", &driver, json!({"color": "red"})).await;
    create_class(&world, "foreign", "other.csi.test", json!({"iops": "1"})).await;
    world.create_class("std", json!({})).await;

    // Provisioned with the class: the PV records it, the binder copies it to the claim.
    world
        .create_claim(
            "data",
            "std",
            "1Gi",
            json!({"spec": {"volumeAttributesClassName": format!("{ns}-fast")}}),
        )
        .await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let pv_name = pv.metadata.name.clone().unwrap();
    assert_eq!(pv.spec.unwrap().volume_attributes_class_name, Some(format!("{ns}-fast")));
    status_until(&world, "data", "the current class", |s| {
        s["currentVolumeAttributesClassName"] == json!(format!("{ns}-fast"))
    })
    .await;

    // Another driver's class is refused at provisioning, with no volume.
    world
        .create_claim(
            "foreign",
            "std",
            "1Gi",
            json!({"spec": {"volumeAttributesClassName": format!("{ns}-foreign")}}),
        )
        .await;
    world.event("foreign", "ProvisioningFailed", "is for driver other.csi.test", LIMIT).await;

    // A new class: ControllerModifyVolume, the PV first, then the claim settles.
    set_class(&world, "data", Some("faster")).await;
    status_until(&world, "data", "the new current class", |s| {
        s["currentVolumeAttributesClassName"] == json!(format!("{ns}-faster"))
            && s.get("modifyVolumeStatus").is_none_or(Value::is_null)
    })
    .await;
    let pv = world.volumes().get(&pv_name).await.unwrap();
    assert_eq!(pv.spec.unwrap().volume_attributes_class_name, Some(format!("{ns}-faster")));
    world.event("data", "VolumeModify", "is modifying volume data", LIMIT).await;
    world.event("data", "VolumeModifySuccessful", "successfully", LIMIT).await;

    // A class the driver refuses (InvalidArgument): Infeasible, with the reason.
    set_class(&world, "data", Some("broken")).await;
    let status = status_until(&world, "data", "Infeasible", |s| {
        s["modifyVolumeStatus"]["status"] == "Infeasible"
    })
    .await;
    let error = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ModifyVolumeError")
        .cloned()
        .unwrap_or_default();
    assert_eq!(error["reason"], "InvalidArgument", "{status}");
    world.event("data", "VolumeModifyFailed", "invalid parameters", LIMIT).await;
    let report = explain(&world, &[&format!("{ns}/data")]);
    assert!(report.contains("state: ModifyFailed (InvalidArgument)"), "{report}");
    assert!(report.contains("ControllerModifyVolume to VolumeAttributesClass"), "{report}");
    // The Bound claim is judged against its own PV alone, not by a search it never makes.
    assert!(report.contains("decision: nothing to do: bound to PersistentVolume"), "{report}");
    assert!(!report.contains("rejected"), "{report}");
    let all = explain(&world, &["--all"]);
    let line = all.lines().find(|l| l.starts_with(&format!("{ns}/data ")));
    assert!(line.is_some_and(|l| l.contains(" ModifyFailed ")), "{all}");

    // Taken back to the current class: applied again, and the claim settles.
    set_class(&world, "data", Some("faster")).await;
    status_until(&world, "data", "settled again", |s| {
        s.get("modifyVolumeStatus").is_none_or(Value::is_null)
            && s["currentVolumeAttributesClassName"] == json!(format!("{ns}-faster"))
    })
    .await;

    // A class that does not exist: Pending, said in an event.
    set_class(&world, "data", Some("nope")).await;
    status_until(&world, "data", "Pending", |s| s["modifyVolumeStatus"]["status"] == "Pending")
        .await;
    world.event("data", "VolumeModifyFailed", "does not exist", LIMIT).await;
    let report = explain(&world, &[&format!("{ns}/data")]);
    assert!(report.contains("state: Modifying (Pending)"), "{report}");
    assert!(report.contains(&format!("wait for VolumeAttributesClass \"{ns}-nope\"")), "{report}");
    let all = explain(&world, &["--all"]);
    let line = all.lines().find(|l| l.starts_with(&format!("{ns}/data ")));
    assert!(line.is_some_and(|l| l.contains(" Modifying ") && l.contains("Pending")), "{all}");
    println!("explain --all at Pending:\n{all}");
    let pv = world.volumes().get(&pv_name).await.unwrap();
    assert_eq!(
        pv.spec.unwrap().volume_attributes_class_name,
        Some(format!("{ns}-faster")),
        "the PV keeps the class the driver last applied"
    );
}
