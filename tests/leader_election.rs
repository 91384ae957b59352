//! Two replicas under `--leader-election` against the real kube-apiserver: only the holder of the
//! Lease acts; when it is killed the standby takes over and finishes a provision the leader left
//! half done; on SIGTERM the Lease is given up.

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::cluster::{World, eventually};
use support::fake_driver::{DriverConfig, Fault};
use support::sidecar::{Sidecar, sample};

const NAMESPACE: &str = "leader";
const LIMIT: Duration = Duration::from_secs(45);

/// Log lines in which a replica acted: a decision about a claim or a volume-changing call.
fn actions(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            l.contains("binder decided")
                || l.contains("method=\"CreateVolume\"")
                || l.contains("method=\"DeleteVolume\"")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_from_a_killed_leader_and_finishes_its_work() {
    let mut world = World::start(
        NAMESPACE,
        DriverConfig::default(),
        &[
            "--leader-election",
            &format!("--leader-election-namespace={NAMESPACE}"),
            "--leader-election-lease-duration=4s",
            "--leader-election-renew-deadline=3s",
            "--leader-election-retry-period=1s",
        ],
    )
    .await;
    let first = eventually(LIMIT, || world.lease_holder()).await;
    let first = first.unwrap_or_else(|| panic!("nobody leads:\n{}", world.sidecar.log_text()));
    assert_ne!(first, "replica-b");

    let mut standby =
        Sidecar::start_with_env(world.dir.path(), &world.args, &[("HOSTNAME", "replica-b")]);
    assert!(
        standby.wait_ready(LIMIT).await,
        "a standby is ready once its caches are warm:\n{}",
        standby.log_text()
    );

    world.create_class("fast", json!({})).await;
    world.create_claim("one", "fast", "1Gi", json!({})).await;
    world.bound("one", LIMIT).await;
    assert_eq!(world.lease_holder().await.as_deref(), Some(first.as_str()));

    // The leader renews on the Lease as it last wrote it, with no read (client-go's fast
    // path); a change by someone else sends a renewal through a read first (the slow path).
    let lease = format!("csi-pv-controller-{}", world.driver_name.replace('.', "-"));
    let slowpath = format!("leader_election_slowpath_total{{name=\"{lease}\"}}");
    let text = world.sidecar.metrics().await;
    // One series, named as csi-lib-utils leaves it, though we also hold the Go sidecars' Leases.
    let status = "leader_election_master_status{name=\"\"}";
    assert_eq!(sample(&text, status), Some(1.0), "{text}");
    let series = text.lines().filter(|l| l.starts_with("leader_election_master_status")).count();
    assert_eq!(series, 1, "{text}");
    assert_eq!(sample(&text, &slowpath).unwrap_or(0.0), 0.0, "{text}");
    let leases: Api<Lease> = Api::namespaced(world.client.clone(), NAMESPACE);
    let touch = json!({"metadata": {"labels": {"touched-by": "test"}}});
    leases.patch(&lease, &PatchParams::default(), &Patch::Merge(&touch)).await.unwrap();
    let slow = eventually(LIMIT, || async {
        let text = world.sidecar.metrics().await;
        (sample(&text, &slowpath)? >= 1.0).then_some(())
    })
    .await;
    assert!(
        slow.is_some(),
        "no slow-path renewal after the Lease changed:\n{}",
        world.sidecar.log_text()
    );
    assert_eq!(world.lease_holder().await.as_deref(), Some(first.as_str()), "still the leader");

    // The leader starts CreateVolume for a second claim and dies before it answers.
    world.driver.inject("CreateVolume", Fault::Hang);
    world.create_claim("two", "fast", "1Gi", json!({})).await;
    let asked = eventually(LIMIT, || async {
        (world.driver.calls_of("CreateVolume").len() == 2).then_some(())
    })
    .await;
    assert!(asked.is_some(), "second CreateVolume never came:\n{}", world.sidecar.log_text());
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    world.driver.release();

    let found = eventually(LIMIT, || async {
        let claim = world.claim("two").await?;
        (claim.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;
    assert!(found.is_some(), "the standby did not finish the claim:\n{}", standby.log_text());
    assert_eq!(world.lease_holder().await.as_deref(), Some("replica-b"));
    assert_eq!(
        world.driver.volumes().len(),
        2,
        "one volume per claim: {:?}",
        world.driver.volumes()
    );

    // The standby did nothing before it led.
    let log = standby.log_text();
    let became = log.find("became leader").unwrap_or_else(|| panic!("standby never led:\n{log}"));
    let before = actions(&log[..became]);
    assert!(before.is_empty(), "the standby acted before leading: {before:?}");
    assert!(!actions(&log[became..]).is_empty(), "the new leader did the work");

    // SIGTERM: exit 0 and the Lease is given up at once, not left to expire.
    assert_eq!(standby.terminate(Duration::from_secs(20)).await, Some(0));
    assert_eq!(world.lease_holder().await, None, "lease still held after a clean exit");
}
