//! Volume expansion against the real kube-apiserver and the fake driver: the claim and PV status
//! machine of docs/expansion.md §3, failures and recovery, offline drivers, restarts.
//! Each test has its own driver name and namespace, so they run side by side. What a failed or
//! odd answer leaves is in `failures.rs`.

mod failures;
#[path = "../support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use csi_pv_controller::csi::v1 as csi;
use csi_pv_controller::model::VolumeExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::{World, annotations, eventually};
use support::fake_driver::{Call, DriverConfig, Fault};
use support::sidecar::sample;
use tonic::Code;

const LIMIT: Duration = Duration::from_secs(30);
const GI: i64 = 1 << 30;

fn expand_calls(world: &World) -> Vec<csi::ControllerExpandVolumeRequest> {
    world
        .driver
        .calls_of("ControllerExpandVolume")
        .into_iter()
        .filter_map(|c| match c {
            Call::ControllerExpandVolume(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn asked(request: &csi::ControllerExpandVolumeRequest) -> i64 {
    request.capacity_range.map(|r| r.required_bytes).unwrap_or(-1)
}

/// A claim of an expandable class, provisioned and bound at `size`.
async fn bound_claim(
    world: &World,
    name: &str,
    size: &str,
) -> (PersistentVolumeClaim, PersistentVolume) {
    let class = format!("{}-grow", world.namespace);
    if Api::<k8s_openapi::api::storage::v1::StorageClass>::all(world.client.clone())
        .get_opt(&class)
        .await
        .unwrap()
        .is_none()
    {
        world
            .create_class(
                "grow",
                json!({
                    "allowVolumeExpansion": true,
                    "parameters": {"csi.storage.k8s.io/fstype": "ext4"},
                }),
            )
            .await;
    }
    world.create_claim(name, "grow", size, json!({})).await;
    world.bound(name, LIMIT).await
}

/// Sets the claim's request; the API's answer is returned, so refusals can be checked.
async fn request_size(
    world: &World,
    name: &str,
    size: &str,
) -> kube::Result<PersistentVolumeClaim> {
    world
        .claims()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": size}}}})),
        )
        .await
}

fn storage(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Option<String> {
    map?.get("storage").map(|q| q.0.clone())
}

fn capacity(claim: &PersistentVolumeClaim) -> Option<String> {
    storage(claim.status.as_ref()?.capacity.as_ref())
}

fn allocated(claim: &PersistentVolumeClaim) -> Option<String> {
    storage(claim.status.as_ref()?.allocated_resources.as_ref())
}

fn resize_status(claim: &PersistentVolumeClaim) -> Option<String> {
    claim.status.as_ref()?.allocated_resource_statuses.as_ref()?.get("storage").cloned()
}

fn conditions(claim: &PersistentVolumeClaim) -> Vec<(String, String)> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.message.unwrap_or_default()))
        .collect()
}

fn condition_types(claim: &PersistentVolumeClaim) -> Vec<String> {
    conditions(claim).into_iter().map(|(t, _)| t).collect()
}

fn pv_capacity(pv: &PersistentVolume) -> Option<String> {
    storage(pv.spec.as_ref()?.capacity.as_ref())
}

async fn volume(world: &World, name: &str) -> PersistentVolume {
    world.volumes().get(name).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_expansion_finishes_the_claim() {
    let world = World::start("grow-ctrl", DriverConfig::default(), &[]).await;
    // The expansion secret, as the provisioner records it in the PV from the class.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "expand-creds"},
        "stringData": {"token": "s3cr3t-expand"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(world.client.clone(), &world.namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    world
        .create_class(
            "grow",
            json!({
                "allowVolumeExpansion": true,
                "mountOptions": ["noatime"],
                "parameters": {
                    "csi.storage.k8s.io/fstype": "xfs",
                    "csi.storage.k8s.io/controller-expand-secret-name": "expand-creds",
                    "csi.storage.k8s.io/controller-expand-secret-namespace": "${pvc.namespace}",
                },
            }),
        )
        .await;
    let (_, pv) = bound_claim(&world, "data", "1Gi").await;
    let handle = pv.csi_handle().expect("a CSI PV").to_string();

    request_size(&world, "data", "2Gi").await.unwrap();
    let claim = world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| capacity(c).as_deref() == Some("2Gi"))
        .await;
    assert_eq!(allocated(&claim).as_deref(), Some("2Gi"), "allocatedResources stays");
    assert_eq!(resize_status(&claim), None, "no resize status once done");
    assert!(condition_types(&claim).is_empty(), "{:?}", conditions(&claim));
    assert_eq!(
        annotations(&claim)
            .get("volume.kubernetes.io/node-expansion-not-required")
            .map(String::as_str),
        Some("true")
    );
    let pv = volume(&world, &pv.metadata.name.clone().unwrap()).await;
    assert_eq!(pv_capacity(&pv).as_deref(), Some("2Gi"));
    assert!(
        !annotations_of(&pv).contains_key("volume.alpha.kubernetes.io/pre-resize-capacity"),
        "no node step, so no pre-resize capacity"
    );
    assert_eq!(world.driver.volumes()[0].capacity_bytes, 2 * GI);

    let calls = expand_calls(&world);
    assert_eq!(calls.len(), 1, "one ControllerExpandVolume: {calls:?}");
    let call = &calls[0];
    assert_eq!(call.volume_id, handle);
    assert_eq!(
        call.capacity_range.unwrap(),
        csi::CapacityRange { required_bytes: 2 * GI, limit_bytes: 0 }
    );
    assert_eq!(call.secrets.get("token").map(String::as_str), Some("s3cr3t-expand"));
    let capability = call.volume_capability.clone().unwrap();
    match capability.access_type {
        Some(csi::volume_capability::AccessType::Mount(m)) => {
            assert_eq!(m.fs_type, "xfs");
            assert_eq!(m.mount_flags, ["noatime"]);
        }
        other => panic!("expected a mount capability, got {other:?}"),
    }
    world.event("data", "Resizing", "External resizer is resizing volume", LIMIT).await;
    world.event("data", "VolumeResizeSuccessful", "Resize volume succeeded", LIMIT).await;
    assert!(
        !world.sidecar.log_text().contains("s3cr3t-expand"),
        "the expansion secret reached the log"
    );
}

fn annotations_of(pv: &PersistentVolume) -> BTreeMap<String, String> {
    pv.metadata.annotations.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_expansion_leaves_the_filesystem_to_kubelet() {
    let config = DriverConfig { node_expansion_required: true, ..DriverConfig::default() };
    // The pre-resize annotation is csi-resizer's alpha gate, off unless asked for.
    let world = World::start("grow-node", config, &["--feature-gates=AnnotateFsResize=true"]).await;
    let (_, pv) = bound_claim(&world, "data", "1Gi").await;
    let pv_name = pv.metadata.name.clone().unwrap();

    request_size(&world, "data", "3Gi").await.unwrap();
    let claim = world
        .claim_until("data", "NodeResizePending", LIMIT, |c| {
            resize_status(c).as_deref() == Some("NodeResizePending")
        })
        .await;
    assert_eq!(capacity(&claim).as_deref(), Some("1Gi"), "kubelet sets the capacity");
    assert_eq!(allocated(&claim).as_deref(), Some("3Gi"));
    let types = condition_types(&claim);
    assert!(types.contains(&"FileSystemResizePending".to_string()), "{types:?}");
    assert!(types.contains(&"Resizing".to_string()), "Resizing is kept: {types:?}");
    let pv = volume(&world, &pv_name).await;
    assert_eq!(pv_capacity(&pv).as_deref(), Some("3Gi"));
    assert_eq!(
        annotations_of(&pv)
            .get("volume.alpha.kubernetes.io/pre-resize-capacity")
            .map(String::as_str),
        Some("1Gi"),
        "the old size is kept for a re-bind before kubelet finishes"
    );
    world
        .event(
            "data",
            "FileSystemResizeRequired",
            "Require file system resize of volume on node",
            LIMIT,
        )
        .await;

    // Kubelet finishes: capacity = allocatedResources, status and conditions cleared.
    world
        .claims()
        .patch_status(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": {"storage": "3Gi"},
                "allocatedResourceStatuses": null,
                "conditions": null,
            }})),
        )
        .await
        .unwrap();
    let dropped = eventually(LIMIT, || async {
        let pv = volume(&world, &pv_name).await;
        (!annotations_of(&pv).contains_key("volume.alpha.kubernetes.io/pre-resize-capacity"))
            .then_some(())
    })
    .await;
    assert!(dropped.is_some(), "pre-resize capacity not dropped:\n{}", world.sidecar.log_text());
    assert_eq!(expand_calls(&world).len(), 1, "nothing more to expand");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_only_driver_hands_over_without_a_call() {
    let config = DriverConfig {
        controller_expansion: false,
        node_expansion_required: true,
        ..DriverConfig::default()
    };
    let world = World::start("grow-nodeonly", config, &[]).await;
    let (_, pv) = bound_claim(&world, "data", "1Gi").await;
    request_size(&world, "data", "2Gi").await.unwrap();
    let claim = world
        .claim_until("data", "NodeResizePending", LIMIT, |c| {
            resize_status(c).as_deref() == Some("NodeResizePending")
        })
        .await;
    assert_eq!(allocated(&claim).as_deref(), Some("2Gi"));
    let pv = volume(&world, &pv.metadata.name.clone().unwrap()).await;
    assert_eq!(pv_capacity(&pv).as_deref(), Some("2Gi"), "the PV takes the new size");
    assert!(expand_calls(&world).is_empty(), "no ControllerExpandVolume for a node-only driver");
    assert!(
        world.driver.calls_of("NodeGetCapabilities").len() == 1,
        "the node capability is read once, at start"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_driver_waits_while_the_claim_is_in_use() {
    let config = DriverConfig { online_expansion: Some(false), ..DriverConfig::default() };
    let world = World::start("grow-offline", config, &[]).await;
    let (_, pv) = bound_claim(&world, "data", "1Gi").await;
    let handle = pv.csi_handle().expect("a CSI PV").to_string();
    let pods = world.pod_using("user", "data").await;
    world.driver.set_published(&handle, true);

    request_size(&world, "data", "2Gi").await.unwrap();
    world
        .event(
            "data",
            "VolumeResizeFailed",
            "only supports offline expansion and volume is currently in-use",
            LIMIT,
        )
        .await;
    let claim = world.claim("data").await.unwrap();
    assert!(condition_types(&claim).contains(&"ControllerResizeError".to_string()));
    assert_eq!(resize_status(&claim).as_deref(), Some("ControllerResizeInProgress"));
    // Two later passes over the claim (its retries): the driver would have been asked there.
    let key = format!("claim={}/data", world.namespace);
    let before = world.sidecar.passes(&key);
    world.sidecar.passed_again(&key, before + 1, LIMIT).await;
    assert_eq!(expand_calls(&world).len(), 1, "the driver is not asked while a pod uses the claim");

    // The pod goes, the volume is unpublished: the next retry expands.
    pods.delete("user", &DeleteParams::default().grace_period(0)).await.unwrap();
    world.driver.set_published(&handle, false);
    let claim = world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| capacity(c).as_deref() == Some("2Gi"))
        .await;
    assert!(condition_types(&claim).is_empty(), "{:?}", conditions(&claim));
    assert_eq!(expand_calls(&world).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_below_capacity_is_refused_by_the_api_and_changes_nothing() {
    let world = World::start("grow-shrink", DriverConfig::default(), &[]).await;
    let (_, pv) = bound_claim(&world, "data", "1Gi").await;
    request_size(&world, "data", "2Gi").await.unwrap();
    let grown = world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| capacity(c).as_deref() == Some("2Gi"))
        .await;

    let refused = request_size(&world, "data", "1Gi").await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains("status.capacity"), "{}", status.message);
        }
        other => panic!("a shrink below capacity was accepted: {other:?}"),
    }
    // A pass over the PV after the refusal: a wrong change would have been made by then.
    world.nudge_volume(&pv.metadata.name.clone().unwrap(), LIMIT).await;
    let after = world.claim("data").await.unwrap();
    assert_eq!(after.metadata.resource_version, grown.metadata.resource_version, "claim untouched");
    let pv = volume(&world, &pv.metadata.name.clone().unwrap()).await;
    assert_eq!(pv_capacity(&pv).as_deref(), Some("2Gi"));
    assert_eq!(expand_calls(&world).len(), 1);
    assert_eq!(world.driver.volumes()[0].capacity_bytes, 2 * GI);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_expansion_finishes_after_restart() {
    let mut world = World::start("grow-kill", DriverConfig::default(), &[]).await;
    let (_, pv) = bound_claim(&world, "data", "1Gi").await;
    world.driver.inject("ControllerExpandVolume", Fault::Hang);
    request_size(&world, "data", "2Gi").await.unwrap();
    let started = eventually(LIMIT, || async {
        let claim = world.claim("data").await?;
        (expand_calls(&world).len() == 1
            && resize_status(&claim).as_deref() == Some("ControllerResizeInProgress"))
        .then_some(())
    })
    .await;
    assert!(started.is_some(), "expansion never started:\n{}", world.sidecar.log_text());

    world.kill_and_restart();
    world.driver.release();
    let claim = world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| capacity(c).as_deref() == Some("2Gi"))
        .await;
    assert_eq!(resize_status(&claim), None);
    let pv = volume(&world, &pv.metadata.name.clone().unwrap()).await;
    assert_eq!(pv_capacity(&pv).as_deref(), Some("2Gi"));
    let sizes: Vec<i64> = expand_calls(&world).iter().map(asked).collect();
    assert!(sizes.len() >= 2 && sizes.iter().all(|s| *s == 2 * GI), "{sizes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_that_cannot_expand_says_so_and_touches_nothing() {
    let config = DriverConfig {
        controller_expansion: false,
        node_expansion_required: false,
        ..DriverConfig::default()
    };
    let world = World::start("grow-never", config, &[]).await;
    let (_, pv) = bound_claim(&world, "data", "1Gi").await;
    request_size(&world, "data", "2Gi").await.unwrap();
    world.event("data", "VolumeResizeFailed", "cannot expand volumes", LIMIT).await;
    let claim = world.claim("data").await.unwrap();
    assert_eq!(allocated(&claim), None);
    assert_eq!(resize_status(&claim), None);
    let pv = volume(&world, &pv.metadata.name.clone().unwrap()).await;
    assert_eq!(pv_capacity(&pv).as_deref(), Some("1Gi"));
    assert!(expand_calls(&world).is_empty());
}

/// The value of the series whose line starts with `series` (name and labels, exactly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_provisioning_and_a_resize() {
    let world = World::start("grow-metrics", DriverConfig::default(), &[]).await;
    bound_claim(&world, "data", "1Gi").await;
    request_size(&world, "data", "2Gi").await.unwrap();
    world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| capacity(c).as_deref() == Some("2Gi"))
        .await;

    let text = world.sidecar.metrics().await;
    let driver = &world.driver_name;
    let csi = |method: &str| {
        sample(
            &text,
            &format!(
                "csi_sidecar_operations_seconds_count{{driver_name=\"{driver}\",method_name=\"/csi.v1.Controller/{method}\",grpc_status_code=\"OK\"}}"
            ),
        )
    };
    assert_eq!(csi("CreateVolume"), Some(1.0), "{text}");
    assert_eq!(csi("ControllerExpandVolume"), Some(1.0), "{text}");
    assert!(
        sample(&text, "workqueue_adds_total{name=\"claims\"}").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(sample(&text, "workqueue_depth{name=\"claims\"}").is_some(), "{text}");
    assert_eq!(sample(&text, "csi_pv_controller_claim_bound_seconds_count"), Some(1.0), "{text}");
    let bound = sample(&text, "csi_pv_controller_claim_bound_seconds_sum").unwrap_or(-1.0);
    assert!((0.0..30.0).contains(&bound), "claim to Bound took {bound}s?\n{text}");
    assert_eq!(sample(&text, "csi_pv_controller_resize_seconds_count"), Some(1.0), "{text}");
    assert_eq!(
        sample(
            &text,
            "csi_pv_controller_api_writes_total{resource=\"persistentvolumes\",verb=\"create\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        sample(&text, "csi_pv_controller_api_writes_total{resource=\"persistentvolumeclaims/status\",verb=\"patch\"}")
            .is_some_and(|n| n >= 3.0),
        "bind + resize start + resize done: {text}"
    );
}
