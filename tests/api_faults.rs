//! Writes that meet a newer version (HTTP 409). Its own test binary, so its own control plane:
//! the audit log then holds only this test's writes.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::cluster::{World, all_bound, eventually};
use support::fake_driver::DriverConfig;
use support::relayed::Beside;
use support::sidecar::sample;

/// How a burst of claims fared beside a client that keeps patching their labels.
struct Busy {
    bound: bool,
    took: Duration,
    patches: u64,
    refused: usize,
    metrics: String,
    log: String,
}

/// `claims` claims in a fresh namespace, provisioned and bound by a sidecar with `args` while
/// another client patches their labels about 50 times a second until all are bound (or
/// `limit` passes).
async fn beside_a_label_writer(
    namespace: &str,
    claims: usize,
    args: &[&str],
    limit: Duration,
) -> Busy {
    let world = World::start(namespace, DriverConfig::default(), args).await;
    busy_in(&world, claims, limit).await
}

/// As `beside_a_label_writer`, in a world already started.
async fn busy_in<D>(world: &World<D>, claims: usize, limit: Duration) -> Busy {
    let namespace = world.namespace.as_str();
    world.create_class(namespace, json!({})).await;
    let names = world.create_claims("busy", namespace, claims).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (api, names, stop) = (world.claims(), names.clone(), stop.clone());
        tokio::spawn(async move {
            let mut patches = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            while !stop.load(Ordering::SeqCst) {
                for name in &names {
                    tick.tick().await;
                    let patch = json!({"metadata": {"labels": {"tick": patches.to_string()}}});
                    let _ = api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await;
                    patches += 1;
                }
            }
            patches
        })
    };
    let started = Instant::now();
    let bound = all_bound(&world.claims(), claims, limit).await.is_some();
    let took = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let patches = writer.await.unwrap_or_default();
    let ours: Vec<_> =
        world.plane.audited_writes().into_iter().filter(|w| w.user == world.user).collect();
    // Each claim costs us at least its PV and the claim's binding: fewer means the log missed us.
    assert!(ours.len() >= 2 * claims, "{} audited writes of ours for {claims} claims", ours.len());
    let refused = ours.iter().filter(|w| w.code == 409).count();
    Busy {
        bound,
        took,
        patches,
        refused,
        metrics: world.sidecar.metrics().await,
        log: world.sidecar.log_text(),
    }
}

/// Another client patches the claims' labels the whole time (about 50 patches a second) while
/// the sidecar provisions and binds them: every claim is bound while the other writer goes on,
/// and the sidecar's refused writes stay few per claim (each conflict waits for the watch or a
/// backoff, never a retry from the same stale copy at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_claim_is_bound_while_another_client_keeps_writing_it() {
    const CLAIMS: usize = 20;
    let busy = beside_a_label_writer("busy-claims", CLAIMS, &[], Duration::from_secs(120)).await;
    assert!(busy.bound, "not all bound in 120 s while another client writes:\n{}", busy.log);
    println!(
        "{CLAIMS} claims bound in {:.1} s beside {} label patches: {} of our writes refused with 409",
        busy.took.as_secs_f64(),
        busy.patches,
        busy.refused
    );
    assert!(busy.refused <= CLAIMS * 5, "{} refused writes for {CLAIMS} claims", busy.refused);
    if busy.refused > 0 {
        assert!(
            sample(&busy.metrics, "csi_pv_controller_write_conflicts_total{name=\"claims\"}")
                .is_some_and(|n| n >= 1.0),
            "conflicts are counted"
        );
    }
}

/// The livelock: under a client-side limit (25 per second, bursts of 50) every write waits for
/// a token, and a write that waited with the version it was decided on arrived after the label
/// writer had changed the claim, every time. Writes now take their token first and go on the
/// newest version when only labels moved, so every claim is bound while the writer goes on: 200
/// claims as an operator reported it (each touched every 4 s), and 20 that the writer touches
/// every 0.4 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_bound_under_a_client_side_limit_beside_a_busy_writer() {
    for (namespace, claims) in [("limited-few", 20), ("limited-many", 200)] {
        let busy = beside_a_label_writer(
            namespace,
            claims,
            &["--kube-api-qps=25", "--kube-api-burst=50"],
            Duration::from_secs(180),
        )
        .await;
        println!(
            "{claims} claims under 25 QPS bound in {:.1} s beside {} label patches: {} of our writes refused with 409",
            busy.took.as_secs_f64(),
            busy.patches,
            busy.refused
        );
        assert!(
            busy.bound,
            "{claims} claims: not all bound in 180 s under a client-side limit while another client writes:\n{}",
            busy.log
        );
        assert!(busy.refused <= claims, "{} refused writes for {claims} claims", busy.refused);
    }
}

/// The same livelock in the shipped mode: 20 claims beside kube-controller-manager's binder on
/// hostpathplugin, the sidecar at 25 QPS, the label writer touching each claim every 0.4 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_the_binder_claims_are_bound_under_a_client_side_limit_beside_a_busy_writer() {
    const CLAIMS: usize = 20;
    let args = ["--kube-api-qps=25", "--kube-api-burst=50"];
    let world = Beside::start("limited-beside", &[], &args).await;
    let busy = busy_in(&world, CLAIMS, Duration::from_secs(180)).await;
    println!(
        "beside the binder: {CLAIMS} claims under 25 QPS bound in {:.1} s beside {} label patches: {} of our writes refused with 409",
        busy.took.as_secs_f64(),
        busy.patches,
        busy.refused
    );
    assert!(busy.bound, "not all bound in 180 s under a client-side limit:\n{}", busy.log);
    // The binding race with the binder costs one or two refused writes per claim
    // (tests/writes_pinned.rs); the label writer at most one more.
    assert!(busy.refused <= 3 * CLAIMS, "{} refused writes for {CLAIMS} claims", busy.refused);
}

/// A write the API refuses as such (403: the RBAC lacks it) gets the same answer every time:
/// it is logged as refused and tried again after the longest backoff, not hammered. Here the
/// sidecar's ClusterRole loses `create` on PVs after start; CreateVolume succeeds, the PV
/// cannot be recorded, and in 8 s the whole pass (CreateVolume included) runs at most twice
/// instead of the five or six times an exponential backoff from 200 ms would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_is_not_hammered() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use support::fake_driver::Call;

    let world =
        World::start("refused", DriverConfig::default(), &["--retry-interval-max=30s"]).await;
    world.create_class("std", json!({})).await;
    let roles: kube::Api<ClusterRole> = kube::Api::all(world.client.clone());
    let name = "csi-pv-controller-runner-refused";
    let mut role = roles.get(name).await.unwrap();
    for rule in role.rules.iter_mut().flatten() {
        if rule.resources.iter().flatten().any(|r| r == "persistentvolumes") {
            rule.verbs.retain(|v| v != "create");
        }
    }
    roles.replace(name, &Default::default(), &role).await.unwrap();
    // RBAC changes apply at once in the apiserver's authorizer (no cache to wait for).
    world.create_claim("data", "std", "1Gi", json!({})).await;
    let creates = || {
        world
            .driver
            .calls_of("CreateVolume")
            .into_iter()
            .filter(|c| matches!(c, Call::CreateVolume(_)))
            .count()
    };
    let first =
        eventually(Duration::from_secs(30), || async { (creates() > 0).then_some(()) }).await;
    assert!(first.is_some(), "{}", world.sidecar.log_text());
    // The window measured: a hot loop would make hundreds of calls in it, a backoff a few.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let log = world.sidecar.log_text();
    assert!(creates() <= 2, "{} CreateVolume calls in 8 s:\n{log}", creates());
    assert!(log.contains("refused; nothing changes until"), "the refusal is said:\n{log}");
    let metrics = world.sidecar.metrics().await;
    let counted = "csi_pv_controller_sync_failures_total{queue=\"claims\",class=\"refused\"}";
    assert!(sample(&metrics, counted).is_some_and(|n| n >= 1.0), "counted by class:\n{metrics}");
    assert!(
        world
            .volumes()
            .get_opt(&format!("pvc-{}", world.claim("data").await.unwrap().metadata.uid.unwrap()))
            .await
            .unwrap()
            .is_none()
    );
}
