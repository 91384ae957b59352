//! Dynamic provisioning and deletion against the real kube-apiserver and the fake driver, with
//! the sidecar running as a separate process under deploy/ RBAC. Each test has its own driver
//! name, so the tests run in parallel without touching each other's claims. Data sources and
//! topology have a module each.

mod sources;
#[path = "../support/mod.rs"]
mod support;
mod topology;

use std::time::Duration;

use csi_pv_controller::csi::v1 as csi;
use csi_pv_controller::model::VolumeExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::{World, annotations, eventually, finalizers};
use support::fake_driver::{Call, DriverConfig, Fault};
use tonic::Code;

const BIND_LIMIT: Duration = Duration::from_secs(30);

fn create_calls(world: &World) -> Vec<csi::CreateVolumeRequest> {
    world
        .driver
        .calls_of("CreateVolume")
        .into_iter()
        .filter_map(|c| match c {
            Call::CreateVolume(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn delete_calls(world: &World) -> Vec<String> {
    world.driver.deleted_ids()
}

async fn wait_gone(world: &World, claim: &str, volume: &str) {
    let gone = eventually(BIND_LIMIT, || async {
        let claim_gone = world.claim(claim).await.is_none();
        let pv_gone = world.volumes().get_opt(volume).await.unwrap().is_none();
        (claim_gone && pv_gone && world.driver.volumes().is_empty()).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "claim {claim}, PV {volume} or the driver's volume remain: driver has {:?}\n{}",
        world.driver.volumes(),
        world.sidecar.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisions_binds_in_one_pass_and_deletes() {
    let world = World::start("prov-basic", DriverConfig::default(), &[]).await;
    world
        .create_class(
            "fast",
            json!({
                "parameters": {"tier": "gold", "csi.storage.k8s.io/fstype": "xfs"},
                "mountOptions": ["noatime"],
            }),
        )
        .await;
    let created = world
        .create_claim(
            "data",
            "fast",
            "1536Mi",
            json!({"spec": {"resources": {"limits": {"storage": "4Gi"}}}}),
        )
        .await;
    let uid = created.metadata.uid.clone().unwrap();
    let (claim, pv) = world.bound("data", BIND_LIMIT).await;
    let name = format!("pvc-{uid}");

    // The request.
    let calls = create_calls(&world);
    assert_eq!(calls.len(), 1, "one CreateVolume: {calls:?}");
    let request = &calls[0];
    assert_eq!(request.name, name);
    assert_eq!(
        request.parameters,
        [("tier".to_string(), "gold".to_string())].into(),
        "reserved keys never reach the driver"
    );
    let range = request.capacity_range.unwrap();
    assert_eq!((range.required_bytes, range.limit_bytes), (1536 << 20, 4 << 30));
    let capability = &request.volume_capabilities[0];
    match &capability.access_type {
        Some(csi::volume_capability::AccessType::Mount(m)) => {
            assert_eq!(m.fs_type, "xfs");
            assert_eq!(m.mount_flags, ["noatime"]);
        }
        other => panic!("expected a mount capability, got {other:?}"),
    }
    assert_eq!(
        capability.access_mode.unwrap().mode(),
        csi::volume_capability::access_mode::Mode::SingleNodeMultiWriter,
        "RWO with SINGLE_NODE_MULTI_WRITER"
    );

    // The PV.
    let driver_volume = &world.driver.volumes()[0];
    assert_eq!(pv.metadata.name.as_deref(), Some(name.as_str()));
    let spec = pv.spec.clone().unwrap();
    let source = spec.csi.clone().unwrap();
    assert_eq!(source.driver, world.driver_name);
    assert_eq!(source.volume_handle, driver_volume.id);
    assert_eq!(source.fs_type.as_deref(), Some("xfs"));
    let attributes = source.volume_attributes.unwrap();
    assert!(attributes.contains_key("storage.kubernetes.io/csiProvisionerIdentity"));
    assert_eq!(attributes.get("tier").map(String::as_str), Some("gold"));
    assert_eq!(spec.capacity.unwrap()["storage"].0, "1536Mi");
    assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOnce"]);
    assert_eq!(spec.mount_options.unwrap(), ["noatime"]);
    assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
    assert_eq!(spec.storage_class_name.as_deref(), Some("prov-basic-fast"));
    let claim_ref = spec.claim_ref.unwrap();
    assert_eq!(claim_ref.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(claim_ref.name.as_deref(), Some("data"));
    assert_eq!(
        pv.metadata.annotations.as_ref().unwrap()["pv.kubernetes.io/provisioned-by"],
        world.driver_name
    );
    assert_eq!(finalizers(&pv), ["external-provisioner.volume.kubernetes.io/finalizer"]);
    assert_eq!(pv.status.unwrap().phase.as_deref(), Some("Bound"));

    // The claim.
    let a = annotations(&claim);
    assert_eq!(a["pv.kubernetes.io/bind-completed"], "yes");
    assert_eq!(a["pv.kubernetes.io/bound-by-controller"], "yes");
    assert_eq!(a["volume.kubernetes.io/storage-provisioner"], world.driver_name);
    assert_eq!(a["volume.beta.kubernetes.io/storage-provisioner"], world.driver_name);
    assert!(finalizers(&claim).is_empty(), "the provisioning intent is gone once bound");
    let status = claim.status.unwrap();
    assert_eq!(status.capacity.unwrap()["storage"].0, "1536Mi");
    assert_eq!(status.access_modes.unwrap(), ["ReadWriteOnce"]);

    world
        .event(
            "data",
            "ProvisioningSucceeded",
            &format!("Successfully provisioned volume {name}"),
            BIND_LIMIT,
        )
        .await;
    world
        .event(
            "data",
            "Provisioning",
            "External provisioner is provisioning volume for claim \"prov-basic/data\"",
            BIND_LIMIT,
        )
        .await;

    // Writes: intent, event, PV create, PV status, claim, claim status, event. Upstream with
    // kube-controller-manager pays about 8.
    let writes = world.writes_for("data", &name);
    println!("API writes for one provisioned claim ({}): {writes:#?}", writes.len());
    assert!((5..=7).contains(&writes.len()), "{} writes: {writes:#?}", writes.len());
    assert!(writes.iter().any(|w| w.starts_with("create persistentvolumes/")), "{writes:#?}");

    // Deletion: claim gone → PV Released → DeleteVolume → PV gone.
    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    wait_gone(&world, "data", &name).await;
    assert_eq!(delete_calls(&world), vec![driver_volume.id.clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_keeps_the_volume_after_the_claim_is_gone() {
    let world = World::start("prov-retain", DriverConfig::default(), &[]).await;
    world.create_class("keep", json!({"reclaimPolicy": "Retain"})).await;
    world.create_claim("kept", "keep", "1Gi", json!({})).await;
    let (_, pv) = world.bound("kept", BIND_LIMIT).await;
    let name = pv.metadata.name.clone().unwrap();
    assert!(finalizers(&pv).is_empty(), "no deletion finalizer on a retained volume");
    world.claims().delete("kept", &DeleteParams::default()).await.unwrap();
    let released = eventually(BIND_LIMIT, || async {
        let pv = world.volumes().get_opt(&name).await.unwrap()?;
        (pv.status?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
    assert!(released.is_some(), "{}", world.sidecar.log_text());
    // A pass over the Released PV after it: a wrong deletion would have been made there.
    world.nudge_volume(&name, BIND_LIMIT).await;
    assert!(world.volumes().get_opt(&name).await.unwrap().is_some());
    assert_eq!(world.driver.volumes().len(), 1, "Retain: the volume stays");
    assert!(delete_calls(&world).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_warns_keeps_the_claim_pending_and_creates_nothing() {
    let world =
        World::start("prov-bad", DriverConfig { clone: false, ..DriverConfig::default() }, &[])
            .await;
    world
        .create_class("unknown-key", json!({"parameters": {"csi.storage.k8s.io/bogus": "1"}}))
        .await;
    world
        .create_class(
            "bad-template",
            json!({"parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": "${pvc.nonsense}",
                "csi.storage.k8s.io/provisioner-secret-namespace": "prov-bad",
            }}),
        )
        .await;
    world
        .create_class(
            "secret",
            json!({"parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": "creds-${pvc.name}",
                "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}",
            }}),
        )
        .await;
    world.create_class("plain", json!({})).await;

    world.create_claim("a-key", "unknown-key", "1Gi", json!({})).await;
    world.create_claim("b-template", "bad-template", "1Gi", json!({})).await;
    world.create_claim("c-secret", "secret", "1Gi", json!({})).await;
    world
        .create_claim(
            "d-limit",
            "plain",
            "2Gi",
            json!({"spec": {"resources": {"limits": {"storage": "1Gi"}}}}),
        )
        .await;
    world.create_clone("e-clone", "plain", "1Gi", "d-limit").await;
    world
        .create_claim(
            "f-selector",
            "plain",
            "1Gi",
            json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}}),
        )
        .await;

    let limit = Duration::from_secs(20);
    for (claim, text) in [
        ("a-key", "\"csi.storage.k8s.io/bogus\" is not a known key"),
        ("b-template", "${pvc.nonsense}"),
        ("c-secret", "secret prov-bad/creds-c-secret named by the StorageClass does not exist"),
        ("d-limit", "limit 1Gi is below its request 2Gi"),
        ("e-clone", "does not support cloning"),
        ("f-selector", "Selector is not supported"),
    ] {
        let note = world.event(claim, "ProvisioningFailed", text, limit).await;
        println!("{claim}: {note}");
        assert_eq!(world.phase(claim).await.as_deref(), Some("Pending"), "{claim}");
    }
    assert!(create_calls(&world).is_empty(), "nothing is created from bad input");
    assert!(world.driver.volumes().is_empty());
    // Refused before the intent: nothing holds such a claim back when it is deleted.
    for claim in ["a-key", "b-template", "c-secret", "d-limit"] {
        let claim = world.claim(claim).await.unwrap();
        assert!(
            !finalizers(&claim).contains(&"csi-pv-controller.storage.k8s.io/provisioning".into()),
            "{:?}",
            claim.metadata
        );
    }
    world.create_claim("g-secret", "secret", "1Gi", json!({})).await;
    world
        .event(
            "g-secret",
            "ProvisioningFailed",
            "creds-g-secret named by the StorageClass does not exist",
            limit,
        )
        .await;
    world.claims().delete("g-secret", &DeleteParams::default()).await.unwrap();
    assert!(world.claim("g-secret").await.is_none(), "deleted at once, as upstream");

    // The missing secret appears: the claim is provisioned with it, and its value never
    // reaches the log.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds-c-secret", "namespace": "prov-bad"},
        "stringData": {"password": "s3cr3t-value"}
    }))
    .unwrap();
    kube::Api::<Secret>::namespaced(world.client.clone(), "prov-bad")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let (_, pv) = world.bound("c-secret", BIND_LIMIT).await;
    let calls = create_calls(&world);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].secrets["password"], "s3cr3t-value");
    let annotations = pv.metadata.annotations.unwrap();
    assert_eq!(
        annotations["volume.kubernetes.io/provisioner-deletion-secret-name"],
        "creds-c-secret"
    );
    assert_eq!(
        annotations["volume.kubernetes.io/provisioner-deletion-secret-namespace"],
        "prov-bad"
    );
    assert!(!world.sidecar.log_text().contains("s3cr3t-value"));

    // Deletion reads the recorded secret too.
    world.claims().delete("c-secret", &DeleteParams::default()).await.unwrap();
    let deleted = eventually(BIND_LIMIT, || async {
        world.driver.calls_of("DeleteVolume").into_iter().find_map(|c| match c {
            Call::DeleteVolume(r) => Some(r),
            _ => None,
        })
    })
    .await
    .expect("DeleteVolume");
    assert_eq!(deleted.secrets["password"], "s3cr3t-value");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_deleted_while_create_volume_hangs_leaves_nothing() {
    let world = World::start("prov-hang", DriverConfig::default(), &["--timeout=5s"]).await;
    world.create_class("slow", json!({})).await;
    world.driver.inject("CreateVolume", Fault::Hang);
    world.create_claim("doomed", "slow", "1Gi", json!({})).await;
    let claim =
        eventually(BIND_LIMIT, || async { (!create_calls(&world).is_empty()).then_some(()) }).await;
    assert!(claim.is_some(), "CreateVolume never came");
    let pending = world.claim("doomed").await.unwrap();
    assert!(
        finalizers(&pending).contains(&"csi-pv-controller.storage.k8s.io/provisioning".to_string()),
        "the intent is recorded before CreateVolume"
    );
    let name = format!("pvc-{}", pending.metadata.uid.unwrap());

    // The user gives up while the driver is still working; then the driver finishes.
    world.claims().delete("doomed", &DeleteParams::default()).await.unwrap();
    world.driver.release();
    wait_gone(&world, "doomed", &name).await;
    assert!(!delete_calls(&world).is_empty(), "the volume the driver made was deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_errors_are_retried_with_events_and_the_same_name() {
    let world = World::start("prov-errors", DriverConfig::default(), &[]).await;
    world.create_class("flaky", json!({})).await;
    world.driver.inject("CreateVolume", Fault::Error(Code::Internal, "backend hiccup".into()));
    world
        .driver
        .inject("CreateVolume", Fault::Error(Code::InvalidArgument, "pool is read-only".into()));
    world.driver.inject("CreateVolume", Fault::CapacityBytes(1));
    world.create_claim("flaky", "flaky", "1Gi", json!({})).await;
    let (_, pv) = world.bound("flaky", BIND_LIMIT).await;
    world.event("flaky", "ProvisioningFailed", "backend hiccup", BIND_LIMIT).await;
    world
        .event(
            "flaky",
            "ProvisioningFailed",
            "Volume provisioning failed with infeasible error. Retries will be delayed.",
            BIND_LIMIT,
        )
        .await;
    world
        .event("flaky", "ProvisioningFailed", "less than the 1073741824 requested", BIND_LIMIT)
        .await;
    let names: Vec<String> = create_calls(&world).into_iter().map(|r| r.name).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.iter().all(|n| Some(n) == pv.metadata.name.as_ref()));
    assert_eq!(delete_calls(&world).len(), 1, "the too-small volume was deleted");
    assert_eq!(world.driver.volumes().len(), 1);
    assert_eq!(pv.spec.unwrap().capacity.unwrap()["storage"].0, "1Gi");
}

/// After a driver outage long enough for the backoff to grow past 10 s, the claims that failed
/// because the driver was unreachable are retried as soon as it answers Probe again, not when
/// their backoff runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_stranded_by_a_driver_outage_go_on_when_it_returns() {
    let world = World::start(
        "prov-outage",
        DriverConfig::default(),
        &["--retry-interval-start=1s", "--retry-interval-max=5m"],
    )
    .await;
    world.create_class("std", json!({})).await;
    world.driver.stop();
    let names = world.create_claims("c", "std", 5).await;
    // Failures at about 0, 1, 3, 7 and 15 s: once each claim's has backed off 16 s, its next
    // retry is due near 31 s.
    let backed_off = eventually(Duration::from_secs(60), || async {
        let log = world.sidecar.log_text();
        names
            .iter()
            .all(|n| {
                let key = format!("claim={}/{n}", world.namespace);
                log.lines().any(|l| {
                    l.contains("retry_in=\"16s\"") && l.split_whitespace().any(|w| w == key)
                })
            })
            .then_some(())
    })
    .await;
    assert!(backed_off.is_some(), "no 16 s backoff for every claim:\n{}", world.sidecar.log_text());
    assert!(world.driver.volumes().is_empty());
    world.driver.restart().await.unwrap();
    let back = std::time::Instant::now();
    for name in &names {
        world.bound(name, Duration::from_secs(60)).await;
    }
    let waited = back.elapsed();
    assert!(
        waited < Duration::from_secs(6),
        "bound {waited:?} after the driver returned; the backoff alone would wait about 11 s"
    );
    assert!(
        world.sidecar.log_text().contains("the driver answers again; retrying at once"),
        "{}",
        world.sidecar.log_text()
    );
    assert_eq!(world.driver.volumes().len(), names.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_first_consumer_waits_for_the_selected_node() {
    let world = World::start("prov-wffc", DriverConfig::default(), &[]).await;
    world.create_class("late", json!({"volumeBindingMode": "WaitForFirstConsumer"})).await;
    world.create_claim("late", "late", "1Gi", json!({})).await;
    // A pass over the claim after its creation: a CreateVolume would have been sent there.
    world.nudge_claim("late", BIND_LIMIT).await;
    assert!(create_calls(&world).is_empty(), "no node chosen yet");
    assert_eq!(world.phase("late").await.as_deref(), Some("Pending"));
    world
        .claims()
        .patch(
            "late",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "volume.kubernetes.io/selected-node": "node-1"
            }}})),
        )
        .await
        .unwrap();
    world.bound("late", BIND_LIMIT).await;
}

/// With the default `--binder=external` and no binder in the cluster (this plane runs no
/// kube-controller-manager), claims are never handed over: after the grace (four resyncs) the
/// claim says why it waits and what to change, and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_cluster_binder_the_default_mode_says_what_to_change() {
    let world = World::start(
        "prov-nobinder",
        DriverConfig::default(),
        &["--binder=external", "--pvclaimbinder-sync-period=1s", "--waiting-condition-after=0s"],
    )
    .await;
    world.create_class("std", json!({})).await;
    world.create_claim("data", "std", "1Gi", json!({})).await;
    let note = world.event("data", "WaitingForBinder", "--binder=driver", BIND_LIMIT).await;
    assert!(note.contains("persistentvolume-binder-controller"), "{note}");
    assert!(create_calls(&world).is_empty());
    assert_eq!(world.phase("data").await.as_deref(), Some("Pending"));

    // The claim says so itself, and explain (run as the operator would, with its flags' default
    // --binder=external) reads the same cause.
    let condition = "csi-pv-controller.storage.k8s.io/Provisioning";
    let claim = world
        .claim_until("data", "the WaitingForBinder condition", BIND_LIMIT, |c| {
            let conditions = c.status.as_ref().and_then(|s| s.conditions.clone());
            conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == condition && c.reason.as_deref() == Some("WaitingForBinder"))
        })
        .await;
    assert_eq!(claim.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    let text = support::sidecar::explain(&world.plane.admin_kubeconfig, None, &["--all"]);
    let line = text.lines().find(|l| l.starts_with(&format!("{}/data ", world.namespace)));
    let line = line.unwrap_or_else(|| panic!("no line for the claim: {text}"));
    assert!(line.contains(" Pending ") && line.contains("WaitingForBinder"), "{line}");
}
