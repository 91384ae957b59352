//! The flags that shape what the driver is asked, each passed to the binary in the shipped mode
//! (beside kube-controller-manager, hostpathplugin behind the test relay) and checked in the
//! requests the driver got and the objects left: csi-provisioner's `--extra-create-metadata`,
//! `--default-fstype`, `--volume-name-uuid-length`, `--controller-publish-readonly`,
//! `--strict-topology` and `--immediate-topology` (over two nodes in two zones), csi-resizer's
//! `--extra-modify-metadata`, `--handle-volume-inuse-error` and `--resync-period`, and the GA gates
//! both sidecars let a user switch off.

mod support;

use std::time::Duration;

use csi_pv_controller::csi::v1 as csi;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use tonic::Code;

use support::cluster::{World, eventually};
use support::hostpath::{TOPOLOGY_KEY, register_node_as};
use support::relayed::{Beside, Relayed};
use support::sidecar::sample;

const LIMIT: Duration = Duration::from_secs(90);
const GI: i64 = 1 << 30;

fn creates(world: &World<Relayed>) -> Vec<csi::CreateVolumeRequest> {
    world.relay().requests("CreateVolume")
}

/// The CreateVolume request for `claim` (named `pvc-<uid>`), once there is one.
async fn create_for(
    world: &World<Relayed>,
    claim: &PersistentVolumeClaim,
) -> csi::CreateVolumeRequest {
    let name = format!("pvc-{}", claim.metadata.uid.clone().unwrap_or_default());
    let found = eventually(LIMIT, || async { creates(world).into_iter().find(|r| r.name == name) });
    found.await.unwrap_or_else(|| panic!("no CreateVolume {name}:\n{}", world.sidecar.log_text()))
}

/// The topology value of each segment, in order.
fn zones(topologies: &[csi::Topology]) -> Vec<String> {
    topologies.iter().filter_map(|t| t.segments.get(TOPOLOGY_KEY).cloned()).collect()
}

/// Two more nodes of this world's driver, in zones `zone-a` and `zone-b` (hostpathplugin's
/// topology key), as kubelet would register them: `<namespace>-a` and `<namespace>-b`.
async fn two_zones(world: &World<Relayed>) {
    for zone in ["a", "b"] {
        let node = format!("{}-{zone}", world.namespace);
        let registered =
            register_node_as(&world.client, &world.driver_name, &node, &format!("zone-{zone}"))
                .await;
        registered.unwrap_or_else(|e| panic!("cannot register node {node}: {e}"));
    }
}

/// What the scheduler writes once it placed the claim's pod on `node`.
async fn select_node(world: &World<Relayed>, claim: &str, node: &str) {
    let patch = json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": node}}});
    world.claims().patch(claim, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_volume_flags_shape_the_request_and_the_pv() {
    let world = Beside::start(
        "flags-create",
        &[],
        &[
            "--extra-create-metadata",
            "--default-fstype=xfs",
            "--volume-name-uuid-length=8",
            "--volume-name-prefix=vol",
            "--controller-publish-readonly",
            "--worker-threads=3",
            "--log-format=json",
        ],
    )
    .await;
    let ns = world.namespace.clone();
    world.create_class("std", json!({})).await;
    world.create_class("ext4", json!({"parameters": {"csi.storage.k8s.io/fstype": "ext4"}})).await;
    world.create_claim("plain", "std", "1Gi", json!({})).await;
    world
        .create_claim("shared", "ext4", "1Gi", json!({"spec": {"accessModes": ["ReadOnlyMany"]}}))
        .await;
    let (plain, plain_pv) = world.bound("plain", LIMIT).await;
    let (_, shared_pv) = world.bound("shared", LIMIT).await;

    // --volume-name-prefix and --volume-name-uuid-length=8: the UID without dashes, cut to 8.
    let uid = plain.metadata.uid.clone().unwrap().replace('-', "");
    let name = format!("vol-{}", &uid[..8]);
    assert_eq!(plain_pv.metadata.name.as_deref(), Some(name.as_str()));
    let requests = creates(&world);
    let request =
        requests.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("{requests:?}"));
    // --extra-create-metadata.
    for (key, value) in [
        ("csi.storage.k8s.io/pvc/name", "plain"),
        ("csi.storage.k8s.io/pvc/namespace", ns.as_str()),
        ("csi.storage.k8s.io/pv/name", name.as_str()),
    ] {
        assert_eq!(request.parameters.get(key).map(String::as_str), Some(value), "{key}");
    }
    // --default-fstype where the class names none; the class's own where it does.
    let fs_type = |r: &csi::CreateVolumeRequest| match &r.volume_capabilities[0].access_type {
        Some(csi::volume_capability::AccessType::Mount(m)) => m.fs_type.clone(),
        other => panic!("not a mount volume: {other:?}"),
    };
    assert_eq!(fs_type(request), "xfs");
    let shared_name = shared_pv.metadata.name.clone().unwrap();
    let shared_request = requests.iter().find(|r| r.name == shared_name).unwrap();
    assert_eq!(fs_type(shared_request), "ext4");
    let pv_csi = |pv: &k8s_openapi::api::core::v1::PersistentVolume| {
        pv.spec.as_ref().and_then(|s| s.csi.clone()).expect("a CSI PV")
    };
    assert_eq!(pv_csi(&plain_pv).fs_type.as_deref(), Some("xfs"));
    // --controller-publish-readonly: a ReadOnlyMany claim's PV is read-only for the driver.
    assert_eq!(pv_csi(&shared_pv).read_only, Some(true));
    assert_ne!(pv_csi(&plain_pv).read_only, Some(true));
    assert_eq!(world.hostpath().state_volumes().len(), 2);
    // --log-format=json: one JSON object per line in component-base's shape: ts, caller, msg,
    // and v on every line but errors.
    let log = world.sidecar.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() > 5, "{log}");
    for line in lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(value["ts"].is_f64() && value["caller"].is_string(), "{line}");
        assert!(value["msg"].is_string(), "{line}");
        assert!(value.get("v").is_none_or(serde_json::Value::is_u64), "{line}");
        assert!(value.get("level").is_none(), "component-base has no level field: {line}");
    }
    assert!(log.lines().any(|l| l.contains("\"v\":0")), "{log}");
}

/// Two nodes in two zones. By default, an Immediate claim asks for every zone the driver is in,
/// and a delayed one for every zone with the selected node's first; with
/// `--strict-topology --immediate-topology=false`, the delayed claim asks for the selected
/// node's zone only and the Immediate one for none. `--feature-gates=Topology=false` uses no
/// topology at all, as csi-provisioner with the gate off: no requirements, no node affinity.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn topology_over_two_zones_follows_the_flags() {
    let loose = Beside::start("flags-topo", &[], &[]).await;
    let strict = World::start_relayed(
        loose.plane,
        "flags-topo-s",
        &[],
        &["--strict-topology", "--immediate-topology=false"],
    )
    .await;
    strict.register_node().await;
    for world in [&*loose, &strict] {
        two_zones(world).await;
        world.create_class("now", json!({})).await;
        world.create_class("later", json!({"volumeBindingMode": "WaitForFirstConsumer"})).await;
        world.create_claim("now", "now", "1Gi", json!({})).await;
        world.create_claim("later", "later", "1Gi", json!({})).await;
        select_node(world, "later", &format!("{}-b", world.namespace)).await;
    }

    let (now, later) = (loose.claim("now").await.unwrap(), loose.claim("later").await.unwrap());
    let immediate =
        create_for(&loose, &now).await.accessibility_requirements.expect("requirements");
    let mut asked = zones(&immediate.requisite);
    asked.sort();
    assert!(
        asked.contains(&"zone-a".to_string()) && asked.contains(&"zone-b".to_string()),
        "{asked:?}"
    );
    let delayed =
        create_for(&loose, &later).await.accessibility_requirements.expect("requirements");
    let asked = zones(&delayed.requisite);
    assert!(asked.contains(&"zone-a".to_string()) && asked.len() >= 2, "every zone: {asked:?}");
    assert_eq!(zones(&delayed.preferred).first().map(String::as_str), Some("zone-b"));

    let (now, later) = (strict.claim("now").await.unwrap(), strict.claim("later").await.unwrap());
    let immediate = create_for(&strict, &now).await;
    assert_eq!(immediate.accessibility_requirements, None, "--immediate-topology=false");
    let delayed =
        create_for(&strict, &later).await.accessibility_requirements.expect("requirements");
    assert_eq!(zones(&delayed.requisite), ["zone-b"], "--strict-topology");
    assert_eq!(zones(&delayed.preferred), ["zone-b"]);
    for world in [&*loose, &strict] {
        world.bound("now", LIMIT).await;
    }

    let off = World::start_relayed(
        loose.plane,
        "flags-topo-off",
        &[],
        &["--feature-gates=Topology=false"],
    )
    .await;
    off.register_node().await;
    two_zones(&off).await;
    off.create_class("now", json!({})).await;
    off.create_claim("now", "now", "1Gi", json!({})).await;
    let claim = off.claim("now").await.unwrap();
    assert_eq!(create_for(&off, &claim).await.accessibility_requirements, None, "Topology=false");
    let (_, pv) = off.bound("now", LIMIT).await;
    assert_eq!(pv.spec.and_then(|s| s.node_affinity), None, "no node affinity with Topology=false");
}

/// VolumeAttributesClasses `fast` (iops 3000) and `faster` (6000), an expandable class `grow`,
/// and claim `name` of it naming `fast`.
async fn classes_and_claim(world: &World<Relayed>, name: &str) {
    for (class, iops) in [("fast", "3000"), ("faster", "6000")] {
        world.create_attributes_class(class, json!({"iops": iops})).await;
    }
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    let spec = json!({"spec": {"volumeAttributesClassName": format!("{}-fast", world.namespace)}});
    world.create_claim(name, "grow", "1Gi", spec).await;
}

/// `--extra-modify-metadata` adds the claim's and PV's names to ControllerModifyVolume;
/// `--handle-volume-inuse-error=false` asks the driver again even while a pod uses the claim;
/// `--resync-period` queues every claim again on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resizer_flags_modify_metadata_in_use_and_resync() {
    let metadata =
        "csi.storage.k8s.io/pvc/name,csi.storage.k8s.io/pvc/namespace,csi.storage.k8s.io/pv/name";
    let accepted = format!("--accepted-mutable-parameter-names=iops,{metadata}");
    let world = Beside::start(
        "flags-resize",
        &["--enable-controller-modify-volume", &accepted, "--disable-node-expansion"],
        &["--extra-modify-metadata", "--handle-volume-inuse-error=false", "--resync-period=2s"],
    )
    .await;
    let ns = world.namespace.clone();
    classes_and_claim(&world, "data").await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let volume = pv.metadata.name.clone().unwrap();

    // --resync-period=2s: with nothing changing, the claim is queued again and again.
    let adds = |text: &str| sample(text, "workqueue_adds_total{name=\"claims\"}").unwrap_or(0.0);
    let before = adds(&world.sidecar.metrics().await);
    // The window measured: three resync periods or more.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let after = adds(&world.sidecar.metrics().await);
    assert!(after >= before + 2.0, "claims queued {before} then {after} times");

    let patch = json!({"spec": {"volumeAttributesClassName": format!("{ns}-faster")}});
    world.claims().patch("data", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    world
        .claim_until("data", "the new current class", LIMIT, |c| {
            c.status.as_ref().and_then(|s| s.current_volume_attributes_class_name.clone())
                == Some(format!("{ns}-faster"))
        })
        .await;
    let modify =
        world.relay().requests::<csi::ControllerModifyVolumeRequest>("ControllerModifyVolume");
    let last = modify.last().expect("ControllerModifyVolume");
    assert_eq!(last.mutable_parameters.get("iops").map(String::as_str), Some("6000"));
    for (key, value) in [
        ("csi.storage.k8s.io/pvc/name", "data"),
        ("csi.storage.k8s.io/pvc/namespace", ns.as_str()),
        ("csi.storage.k8s.io/pv/name", volume.as_str()),
    ] {
        assert_eq!(last.mutable_parameters.get(key).map(String::as_str), Some(value), "{key}");
    }

    // A pod uses the claim and the driver answers "in use": asked again all the same.
    let pods = world.pod_using("user", "data").await;
    world.relay().fail("ControllerExpandVolume", Code::FailedPrecondition);
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    world.claims().patch("data", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    let again = eventually(LIMIT, || async {
        (world.relay().calls("ControllerExpandVolume") >= 3).then_some(())
    });
    assert!(again.await.is_some(), "not asked again:\n{}", world.sidecar.log_text());
    world.relay().clear("ControllerExpandVolume");
    world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .and_then(|m| m.get("storage"))
                .map(|q| q.0.as_str())
                == Some("2Gi")
        })
        .await;
    assert_eq!(world.hostpath().state_volumes()[0].size, 2 * GI);
    pods.delete("user", &DeleteParams::default().grace_period(0)).await.unwrap();
}

/// `--feature-gates=VolumeAttributesClass=false`, as csi-provisioner and csi-resizer take it: a
/// claim naming a class is provisioned without it (no mutable parameters, no class on the PV,
/// which kube-controller-manager's binder then leaves unbound, as beside upstream), and a change
/// of class is never sent to the driver. `RecoverVolumeExpansionFailure=false` is taken, said at
/// start, and expansion still records what Kubernetes reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attributes_classes_gate_off_leaves_classes_out() {
    let world = Beside::start(
        "flags-vac-off",
        &["--enable-controller-modify-volume", "--accepted-mutable-parameter-names=iops"],
        &["--feature-gates=VolumeAttributesClass=false,RecoverVolumeExpansionFailure=false"],
    )
    .await;
    let ns = world.namespace.clone();
    classes_and_claim(&world, "named").await;
    let named = world.claim("named").await.unwrap();
    assert!(create_for(&world, &named).await.mutable_parameters.is_empty(), "class sent");
    let name = format!("pvc-{}", named.metadata.uid.clone().unwrap_or_default());
    let pv = eventually(LIMIT, || async { world.volumes().get_opt(&name).await.ok()? }).await;
    let pv = pv.unwrap_or_else(|| panic!("no PV {name}:\n{}", world.sidecar.log_text()));
    assert_eq!(pv.spec.and_then(|s| s.volume_attributes_class_name), None, "class on the PV");
    let log = world.sidecar.log_text();
    assert!(log.contains("RecoverVolumeExpansionFailure=false"), "not said at start:\n{log}");

    // A new class and a new size in one patch on a bound claim; the resize's end is the later
    // event that shows the claim was passed over after the change, with no modify sent.
    world.create_claim("data", "grow", "1Gi", json!({})).await;
    world.bound("data", LIMIT).await;
    let patch = json!({"spec": {
        "volumeAttributesClassName": format!("{ns}-faster"),
        "resources": {"requests": {"storage": "2Gi"}},
    }});
    world.claims().patch("data", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    let grown = world
        .claim_until("data", "the driver's part of the resize done", LIMIT, |c| {
            c.status
                .as_ref()
                .and_then(|s| s.allocated_resource_statuses.as_ref())
                .and_then(|m| m.get("storage"))
                .is_some_and(|s| s == "NodeResizePending")
        })
        .await;
    let volume = grown.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
    let grown_pv = world.volumes().get(&volume).await.unwrap();
    assert_eq!(grown_pv.spec.and_then(|s| s.capacity).unwrap()["storage"].0, "2Gi");
    let status = grown.status.unwrap_or_default();
    assert_eq!(status.current_volume_attributes_class_name, None);
    assert_eq!(status.modify_volume_status, None, "a modify was started");
    assert_eq!(world.relay().calls("ControllerModifyVolume"), 0, "ControllerModifyVolume sent");
}
