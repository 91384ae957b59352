//! No secret value reaches a log line or an Event, at the highest verbosity, on the paths that
//! carry secrets (provisioning, deletion, expansion) and on their failures. Its own binary, so
//! that the sidecar can run with every crate at trace level.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::World;
use support::fake_driver::DriverConfig;
use support::sidecar::Sidecar;
use tonic::Code;

const VALUES: [&str; 3] = ["pr0v-s3cret-value", "d3l-s3cret-value", "3xp-s3cret-value"];
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_in_any_log_line_or_event_even_on_failures() {
    let mut world = World::start("secrets", DriverConfig::default(), &[]).await;
    // The highest verbosity: our -v at its top and every crate (kube, hyper, tonic) at trace.
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    let mut args = world.args.clone();
    args.push("-v=10".into());
    world.sidecar = Sidecar::start_with_env(world.dir.path(), &args, &[("RUST_LOG", "trace")]);
    assert!(world.sidecar.wait_ready(LIMIT).await, "{}", world.sidecar.log_text());

    let secrets: Api<Secret> = Api::namespaced(world.client.clone(), &world.namespace);
    for (name, value) in ["provision", "delete", "expand"].into_iter().zip(VALUES) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-creds")},
            "stringData": {"password": value},
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &secret).await.unwrap();
    }
    let ns = "${pvc.namespace}";
    world
        .create_class(
            "secret",
            json!({
                "allowVolumeExpansion": true,
                "parameters": {
                    "csi.storage.k8s.io/provisioner-secret-name": "provision-creds",
                    "csi.storage.k8s.io/provisioner-secret-namespace": ns,
                    "csi.storage.k8s.io/controller-expand-secret-name": "expand-creds",
                    "csi.storage.k8s.io/controller-expand-secret-namespace": ns,
                },
            }),
        )
        .await;
    // Every secret-carrying call fails once first.
    world.driver.fail("CreateVolume", Code::Internal, 1);
    world.driver.fail("ControllerExpandVolume", Code::Internal, 1);
    world.driver.fail("DeleteVolume", Code::Internal, 1);
    world.create_claim("data", "secret", "1Gi", json!({})).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    world
        .claims()
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
        )
        .await
        .unwrap();
    world.event("data", "VolumeResizeSuccessful", "", LIMIT).await;
    // The deletion secret is named on the PV (as upstream records it); point it at its own
    // Secret so that its value is told apart.
    let pv_name = pv.metadata.name.clone().unwrap();
    world
        .volumes()
        .patch(
            &pv_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "volume.kubernetes.io/provisioner-deletion-secret-name": "delete-creds",
                "volume.kubernetes.io/provisioner-deletion-secret-namespace": world.namespace,
            }}})),
        )
        .await
        .unwrap();
    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    let gone = world.volume_gone(&pv_name, LIMIT).await;
    assert!(gone, "the PV was not deleted:\n{}", world.sidecar.log_text());

    // The driver got each secret, and failed each call once: every path ran.
    let calls = world.driver.calls();
    let failed = ["CreateVolume", "ControllerExpandVolume", "DeleteVolume"]
        .map(|m| calls.iter().filter(|c| c.method() == m).count());
    assert!(failed.iter().all(|n| *n >= 2), "each call retried after its failure: {failed:?}");
    let deleted = world.driver.calls_of("DeleteVolume");
    assert!(
        deleted.iter().any(|c| matches!(c, support::fake_driver::Call::DeleteVolume(r) if r.secrets.get("password").map(String::as_str) == Some(VALUES[1]))),
        "DeleteVolume carried the deletion secret"
    );

    let log = world.sidecar.log_text();
    let events = Api::<Event>::namespaced(world.client.clone(), &world.namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    let notes: Vec<String> = events
        .items
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default()
            )
        })
        .collect();
    println!(
        "{} log lines at trace level, {} events, {failed:?} calls of CreateVolume, ControllerExpandVolume, DeleteVolume",
        log.lines().count(),
        notes.len()
    );
    assert!(log.lines().count() > 1000, "the log is at trace level");
    for value in VALUES {
        let leaked: Vec<&str> = log.lines().filter(|l| l.contains(value)).collect();
        assert!(leaked.is_empty(), "{value} in the log: {leaked:?}");
        let told: Vec<&String> = notes.iter().filter(|n| n.contains(value)).collect();
        assert!(told.is_empty(), "{value} in an event: {told:?}");
    }
}
