//! Data sources against the real driver and the real snapshot stack: hostpathplugin,
//! kube-controller-manager's storage controllers, snapshot-controller and csi-snapshotter. A
//! restored or cloned volume holds the source's data as it was when the copy was taken (read
//! from the driver's folders: hostpathplugin v1.18.0 does not keep a volume's parent in its
//! state file), and a source we cannot honour gets a ProvisioningFailed event and no volume.

mod support;

use csi_pv_controller::model::VolumeExt;
use csi_pv_controller::model::names::FINALIZER_RESTORE_PROTECTION;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};

use serde_json::json;

use support::cluster::{World, eventually, finalizers};
use support::control_plane::fresh_plane;
use support::hostpath::Hostpath;
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use support::snapshots::{self, Snapshotter};

const LIMIT: Duration = Duration::from_secs(120);
const CLONE_PROTECTION: &str = "provisioner.storage.kubernetes.io/cloning-protection";

async fn cluster(name: &str) -> (World<Hostpath>, Kcm) {
    cluster_with(name, &[], &[]).await
}

/// As `cluster`, the sidecar with `args` too, and kube-controller-manager with `kcm_args`.
async fn cluster_with(name: &str, args: &[&str], kcm_args: &[&str]) -> (World<Hostpath>, Kcm) {
    let plane = fresh_plane();
    let kcm = Kcm::start_with(plane, KCM_STORAGE_CONTROLLERS, kcm_args);
    let world = World::start_hostpath(plane, name, &[], args).await;
    world.register_node().await;
    (world, kcm)
}

/// The driver's folder of the volume behind claim `name`'s PV, and its state entry.
async fn volume_folder(
    world: &World<Hostpath>,
    name: &str,
) -> (String, support::hostpath::StateVolume) {
    let (_, pv) = world.bound(name, LIMIT).await;
    let handle = pv.csi_handle().expect("a CSI PV").to_string();
    let state = world
        .driver
        .state_volumes()
        .into_iter()
        .find(|v| v.id == handle)
        .unwrap_or_else(|| panic!("volume {handle} of {name} not in the driver's state"));
    (handle, state)
}

/// No PV was made for claim `name`, which stays Pending.
async fn never_provisioned(world: &World<Hostpath>, name: &str) {
    let claim = world.claim(name).await.unwrap();
    assert_eq!(claim.status.and_then(|s| s.phase).as_deref(), Some("Pending"), "{name}");
    let uid = claim.metadata.uid.unwrap();
    assert!(
        world.volumes().get_opt(&format!("pvc-{uid}")).await.unwrap().is_none(),
        "{name} got a PV"
    );
}

/// A snapshot taken by csi-snapshotter is restored by us: CreateVolume gets the content's
/// handle, and the new volume holds the file as it was when the snapshot was taken.
/// Restores we must refuse are refused with the reason, with no volume made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restore_from_a_real_snapshot() {
    // Intents in the journal, as deploy/ runs us; kube-controller-manager's binder slowed
    // down so that we bind the restored claim in the pass that made its volume (as on a busy
    // node), after which no pass of ours comes back to the claim.
    let journal = ["--intent-journal={dir}/intents"];
    let slow = ["--kube-api-qps=2", "--kube-api-burst=2"];
    let (world, _kcm) = cluster_with("restore", &journal, &slow).await;
    let snapshotter = Snapshotter::start(world.plane, &world.driver.socket, world.dir.path()).await;
    world.create_class("std", json!({})).await;
    snapshots::create_class(&world.client, "restore-snap", &world.driver_name).await;
    world.create_claim("origin", "std", "1Gi", json!({})).await;
    let (_, origin) = volume_folder(&world, "origin").await;
    std::fs::write(format!("{}/hello.txt", origin.path), "kept by the snapshot").unwrap();

    let Some(snapshot) =
        snapshots::take(&world.client, &world.namespace, "snap", "restore-snap", "origin", LIMIT)
            .await
    else {
        panic!("snapshot never ready:\n{}", snapshotter.log_text());
    };
    let content_name =
        snapshot["status"]["boundVolumeSnapshotContentName"].as_str().unwrap().to_string();
    let content =
        serde_json::to_value(snapshots::contents(&world.client).get(&content_name).await.unwrap())
            .unwrap();
    let handle = content["status"]["snapshotHandle"].as_str().unwrap().to_string();
    // The file changes after the snapshot: the restore must hold the old text.
    std::fs::write(format!("{}/hello.txt", origin.path), "changed later").unwrap();

    let from_snapshot = json!({"spec": {"dataSource": {
        "apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}}});
    world.create_claim("restored", "std", "2Gi", from_snapshot.clone()).await;
    let (_, restored) = volume_folder(&world, "restored").await;
    // The restore is over once the claim is bound: our protection leaves the snapshot in
    // that pass, not at the sweep minutes later (a deleted snapshot waits for it).
    let released = eventually(Duration::from_secs(20), || async {
        let snap = snapshots::snapshots(&world.client, &world.namespace).get("snap").await.ok()?;
        (!finalizers(&snap).iter().any(|f| f == FINALIZER_RESTORE_PROTECTION)).then_some(())
    })
    .await;
    assert!(released.is_some(), "the restore protection stayed on the snapshot after the restore");
    assert!(
        world.driver.data_entries().iter().any(|e| e.starts_with(&handle)),
        "the snapshot {handle} is in the driver: {:?}",
        world.driver.data_entries()
    );
    assert_eq!(
        std::fs::read_to_string(format!("{}/hello.txt", restored.path)).unwrap(),
        "kept by the snapshot"
    );

    // Smaller than the snapshot, another volume mode, a snapshot that does not exist.
    let mut small = from_snapshot.clone();
    small["spec"]["resources"] = json!({"requests": {"storage": "512Mi"}});
    world.create_claim("too-small", "std", "512Mi", small).await;
    let mut block = from_snapshot.clone();
    block["spec"]["volumeMode"] = json!("Block");
    world.create_claim("as-block", "std", "1Gi", block).await;
    let mut missing = from_snapshot.clone();
    missing["spec"]["dataSource"]["name"] = json!("no-such-snap");
    world.create_claim("missing", "std", "1Gi", missing).await;

    // A snapshot of a claim that does not exist never gets a content; one of another driver
    // (pre-provisioned, as an admin imports it) is bound but not ours to restore.
    let api = snapshots::snapshots(&world.client, &world.namespace);
    let dynamic =
        |v: serde_json::Value| -> kube::api::DynamicObject { serde_json::from_value(v).unwrap() };
    api.create(
        &PostParams::default(),
        &dynamic(json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": "orphan-snap", "namespace": world.namespace},
            "spec": {"volumeSnapshotClassName": "restore-snap",
                     "source": {"persistentVolumeClaimName": "no-such-claim"}}
        })),
    )
    .await
    .unwrap();
    snapshots::contents(&world.client)
        .create(
            &PostParams::default(),
            &dynamic(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
                "metadata": {"name": "foreign-content"},
                "spec": {"driver": "other.csi.test", "deletionPolicy": "Retain",
                         "source": {"snapshotHandle": "foreign-handle"},
                         "volumeSnapshotRef": {"namespace": world.namespace, "name": "foreign-snap"}}
            })),
        )
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &dynamic(json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": "foreign-snap", "namespace": world.namespace},
            "spec": {"source": {"volumeSnapshotContentName": "foreign-content"}}
        })),
    )
    .await
    .unwrap();
    for (claim, snap) in [("unbound", "orphan-snap"), ("foreign", "foreign-snap")] {
        let mut spec = from_snapshot.clone();
        spec["spec"]["dataSource"]["name"] = json!(snap);
        world.create_claim(claim, "std", "1Gi", spec).await;
    }
    for (name, text) in [
        ("too-small", "less than the snapshot's restore size"),
        ("as-block", "converting the volume mode is refused"),
        ("missing", "\"no-such-snap\": it does not exist"),
        ("unbound", "not bound to a VolumeSnapshotContent yet"),
        ("foreign", "taken by driver other.csi.test"),
    ] {
        world.event(name, "ProvisioningFailed", text, LIMIT).await;
        never_provisioned(&world, name).await;
    }
    assert_eq!(world.driver.state_volumes().len(), 2, "origin and restored only");

    // explain reads the snapshot as the controller does: its restore size, not "missing".
    let endpoint = world.driver.endpoint();
    let target = format!("{}/too-small", world.namespace);
    let text = support::sidecar::explain(
        &world.plane.admin_kubeconfig,
        Some(&endpoint),
        &[target.as_str()],
    );
    assert!(text.contains("state: Pending (DataSourceRefused)"), "{text}");
    assert!(text.contains("less than the snapshot's restore size"), "{text}");

    // With --prevent-volume-mode-conversion=false the block claim is no longer refused by us:
    // it goes to the driver, as with csi-provisioner's flag off.
    let mut world = world;
    world.args.push("--prevent-volume-mode-conversion=false".into());
    world.kill_and_restart();
    let asked = eventually(LIMIT, || async {
        let log = world.sidecar.log_text();
        log.lines()
            .any(|l| l.contains("\"CSI call\" method=\"CreateVolume\"") && l.contains("as-block"))
            .then_some(())
    })
    .await;
    assert!(
        asked.is_some(),
        "as-block never sent with the flag off:\n{}",
        world.sidecar.log_text()
    );
}

/// A clone of a claim on hostpathplugin holds the source's data; the source carries the
/// cloning-protection finalizer from before the copy until it is deleted with no clone in
/// flight, and then goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clone_on_the_real_driver() {
    let (world, _kcm) = cluster("clone").await;
    world.create_class("std", json!({})).await;
    world.create_claim("origin", "std", "1Gi", json!({})).await;
    let (_, origin) = volume_folder(&world, "origin").await;
    std::fs::write(format!("{}/hello.txt", origin.path), "copied").unwrap();
    world.create_clone("copy", "std", "1Gi", "origin").await;
    let (_, copy) = volume_folder(&world, "copy").await;
    assert_ne!(copy.path, origin.path);
    assert_eq!(std::fs::read_to_string(format!("{}/hello.txt", copy.path)).unwrap(), "copied");
    assert!(finalizers(&world.claim("origin").await.unwrap()).contains(&CLONE_PROTECTION.into()));

    world.claims().delete("origin", &DeleteParams::default()).await.unwrap();
    let gone =
        eventually(LIMIT, || async { world.claim("origin").await.is_none().then_some(()) }).await;
    assert!(
        gone.is_some(),
        "the source stays: {:?}",
        world.claim("origin").await.map(|c| finalizers(&c))
    );
    // A clone of a source that is gone is refused, with no volume.
    world.create_clone("late-copy", "std", "1Gi", "origin").await;
    world.event("late-copy", "ProvisioningFailed", "does not exist", LIMIT).await;
    never_provisioned(&world, "late-copy").await;
}

/// Sources nobody here can honour: a claim in another namespace, a kind the cluster does not
/// serve. Each gets a ProvisioningFailed event and no volume; a kind the cluster serves is left
/// to its populator, as csi-provisioner leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_empty_volume_for_a_source_we_cannot_honour() {
    let (world, _kcm) = cluster("sources").await;
    world.create_class("std", json!({})).await;
    world
        .create_claim(
            "elsewhere",
            "std",
            "1Gi",
            json!({"spec": {"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "db",
                                               "namespace": "default"}}}),
        )
        .await;
    let stored = world.claim("elsewhere").await.unwrap();
    assert_eq!(
        stored.spec.unwrap().data_source_ref.unwrap().namespace.as_deref(),
        Some("default"),
        "the apiserver keeps the namespace (CrossNamespaceVolumeDataSource on)"
    );
    let dataset = json!({"spec": {"dataSourceRef": {
        "apiGroup": "hello.example.com", "kind": "Hello", "name": "h"}}});
    world.create_claim("unserved", "std", "1Gi", dataset).await;
    world.event("elsewhere", "ProvisioningFailed", "cross-namespace", LIMIT).await;
    world
        .event(
            "unserved",
            "ProvisioningFailed",
            "does not serve kind Hello.hello.example.com",
            LIMIT,
        )
        .await;

    // Once the kind is served, a populator may fill it: we leave the claim to it.
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "hellos.hello.example.com"},
        "spec": {"group": "hello.example.com", "scope": "Namespaced",
                 "names": {"plural": "hellos", "singular": "hello", "kind": "Hello"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(world.client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    world
        .event(
            "unserved",
            "Provisioning",
            "Assuming an external populator will provision the volume",
            LIMIT,
        )
        .await;
    for name in ["elsewhere", "unserved"] {
        never_provisioned(&world, name).await;
    }
    assert!(world.driver.state_volumes().is_empty());
}
