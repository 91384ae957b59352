//! `csi-pv-controller uninstall`, before moving back to csi-provisioner: our provisioning
//! finalizer goes wherever no volume can be left behind, stays (and is reported) on a claim
//! being deleted whose volume no PV records, and a replica that still holds the Lease refuses
//! the run.

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::cluster::{World, eventually, finalizers};
use support::fake_driver::{DriverConfig, Fault};

const LIMIT: Duration = Duration::from_secs(30);
const OURS: &str = "csi-pv-controller.storage.k8s.io/provisioning";

async fn ours(world: &World, name: &str) -> Option<bool> {
    let claim = world.claim(name).await?;
    Some(finalizers(&claim).iter().any(|f| f == OURS))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_removes_our_finalizer_only_where_no_volume_can_be_lost() {
    let mut world = World::start("uninstall", DriverConfig::default(), &[]).await;
    world.create_class("fast", json!({})).await;
    world.create_claim("done", "fast", "1Gi", json!({})).await;
    world.bound("done", LIMIT).await;

    // Two claims whose CreateVolume is under way when the sidecar dies.
    world.driver.inject("CreateVolume", Fault::Hang);
    world.driver.inject("CreateVolume", Fault::Hang);
    world.create_claim("inflight", "fast", "1Gi", json!({})).await;
    world.create_claim("doomed", "fast", "1Gi", json!({})).await;
    let asked = eventually(LIMIT, || async {
        (world.driver.calls_of("CreateVolume").len() == 3).then_some(())
    })
    .await;
    assert!(asked.is_some(), "CreateVolume never came:\n{}", world.sidecar.log_text());
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    world.claims().delete("doomed", &DeleteParams::default()).await.unwrap();
    assert_eq!(ours(&world, "inflight").await, Some(true));
    assert_eq!(ours(&world, "doomed").await, Some(true), "the finalizer holds it");

    // A replica that still holds the Lease refuses the run.
    let leases: Api<Lease> = Api::namespaced(world.client.clone(), &world.namespace);
    let lease_name = format!("csi-pv-controller-{}", world.driver_name.replace('.', "-"));
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": lease_name},
        "spec": {"holderIdentity": "still-running", "leaseDurationSeconds": 60,
                 "renewTime": k8s_openapi::jiff::Timestamp::now().to_string()},
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let (code, text) = world.uninstall(&[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("still-running holds the Lease"), "{text}");
    leases.delete(&lease_name, &DeleteParams::default()).await.unwrap();

    // A dry run changes nothing.
    let (_, text) = world.uninstall(&["--dry-run"]);
    assert!(text.contains("would remove  uninstall/inflight"), "{text}");
    assert_eq!(ours(&world, "inflight").await, Some(true), "dry run:\n{text}");

    // The live claim loses it (csi-provisioner goes on under the same volume name); the deleted
    // one with no PV keeps it, named in the report, and the run fails.
    let (code, text) = world.uninstall(&[]);
    println!("{text}");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("removed  uninstall/inflight"), "{text}");
    assert!(text.contains("kept     uninstall/doomed") && text.contains("--force"), "{text}");
    assert!(!text.contains("uninstall/done"), "a claim without the finalizer is not named: {text}");
    assert_eq!(ours(&world, "inflight").await, Some(false));
    assert_eq!(ours(&world, "doomed").await, Some(true));
    assert!(world.claim("done").await.is_some());

    // Having checked the driver, the operator forces it: the claim goes.
    let (code, text) = world.uninstall(&["--force"]);
    assert_eq!(code, Some(0), "{text}");
    let gone =
        eventually(LIMIT, || async { world.claim("doomed").await.is_none().then_some(()) }).await;
    assert!(gone.is_some(), "the deleted claim is gone once the finalizer is");
    world.driver.release();
}
