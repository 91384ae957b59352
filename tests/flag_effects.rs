//! The flags that size and pace the process, each shown taking effect in the shipped mode
//! (beside kube-controller-manager, hostpathplugin behind the test relay): the relay counts the
//! driver calls held at once and when each came, and the audit log says when each of our writes
//! reached the apiserver. `--worker-threads` and `--workers` bound the CreateVolume and
//! ControllerExpandVolume calls in flight; `--retry-interval-start` and `--retry-interval-max`
//! shape the retries of a failing call; `--kube-api-qps` and `--kube-api-burst` bound our writes;
//! `--capacity-threads`, `--capacity-poll-interval`, `--kube-api-capacity-qps` and
//! `--kube-api-capacity-burst` do the same for storage capacity.

mod support;

use std::time::{Duration, SystemTime};

use kube::api::{Patch, PatchParams};
use serde_json::json;
use tonic::Code;

use support::cluster::{World, eventually};
use support::csi_relay::Fault;
use support::relayed::{Beside, Relayed};

const LIMIT: Duration = Duration::from_secs(90);
/// How long the relay holds each answer, so that calls overlap when they may.
const HELD: Duration = Duration::from_millis(1500);

async fn all_bound(world: &World<Relayed>, names: &[String]) {
    for name in names {
        world.bound(name, LIMIT).await;
    }
}

/// Starts the world's sidecar again with its flags and `extra`, with `env`, and waits until
/// it is ready.
async fn restart(world: &mut World<Relayed>, extra: &[&str], env: &[(&str, &str)]) {
    world.restart_with(extra, env).await;
    assert!(world.sidecar.wait_ready(LIMIT).await, "{}", world.sidecar.log_text());
}

/// Seconds since the epoch of each of our writes to `resource` (all resources when `None`),
/// in order.
fn our_writes(world: &World<Relayed>, resource: Option<&str>) -> Vec<f64> {
    let mut at: Vec<f64> = world
        .plane
        .audited_writes()
        .into_iter()
        .filter(|w| w.user == world.user && resource.is_none_or(|r| w.resource == r))
        .filter_map(|w| w.received)
        .map(|t| t.as_millisecond() as f64 / 1000.0)
        .collect();
    at.sort_by(f64::total_cmp);
    at
}

/// The first window of requests that a token bucket of `qps` and `burst` could not have let
/// through: more than `burst + qps × span + slack` of them between two instants.
fn over_budget(at: &[f64], qps: f64, burst: f64, slack: f64) -> Option<(usize, f64)> {
    for i in 0..at.len() {
        for j in i..at.len() {
            let (count, span) = ((j - i + 1) as f64, at[j] - at[i]);
            if count > burst + qps * span + slack {
                return Some((j - i + 1, span));
            }
        }
    }
    None
}

/// `--worker-threads`: CreateVolume calls in flight never exceed it, and reach it when more
/// claims wait. Six claims with every answer held 1.5 s: two at once with `--worker-threads=2`,
/// then, restarted with `--worker-threads=4`, four at once for six more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_threads_bounds_the_volumes_made_at_once() {
    let mut world = Beside::start("eff-workers", &[], &["--worker-threads=2"]).await;
    world.create_class("std", json!({})).await;
    world.relay().always("CreateVolume", Fault::AnswerLate(HELD));
    let first = world.create_claims("a", "std", 6).await;
    all_bound(&world, &first).await;
    assert_eq!(world.relay().peak_in_flight("CreateVolume"), 2, "--worker-threads=2");

    // The same flag given again, later, wins, as with Go's flag package.
    restart(&mut world, &["--worker-threads=4"], &[]).await;
    world.relay().reset_peak("CreateVolume");
    let second = world.create_claims("b", "std", 6).await;
    all_bound(&world, &second).await;
    assert_eq!(world.relay().peak_in_flight("CreateVolume"), 4, "--worker-threads=4");
    assert_eq!(world.hostpath().state_volumes().len(), 12);
}

/// `--workers`: csi-resizer's bound on ControllerExpandVolume calls at once, separate from
/// `--worker-threads`. Four claims grown together with every answer held 1.5 s: two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_bounds_the_expansions_at_once() {
    let world = Beside::start("eff-resize", &["--disable-node-expansion"], &["--workers=2"]).await;
    world.create_class("std", json!({"allowVolumeExpansion": true})).await;
    let names = world.create_claims("c", "std", 4).await;
    all_bound(&world, &names).await;
    world.relay().always("ControllerExpandVolume", Fault::AnswerLate(HELD));
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    for name in &names {
        world.claims().patch(name, &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    }
    for name in &names {
        world
            .claim_until(name, "capacity 2Gi", LIMIT, |c| {
                let capacity = c.status.as_ref().and_then(|s| s.capacity.as_ref());
                capacity.and_then(|m| m.get("storage")).is_some_and(|q| q.0 == "2Gi")
            })
            .await;
    }
    assert_eq!(world.relay().peak_in_flight("ControllerExpandVolume"), 2, "--workers=2");
}

/// `--retry-interval-start` and `--retry-interval-max`: a claim whose CreateVolume always fails
/// is asked again after the start interval, then after twice that, up to the cap and no further.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_intervals_shape_the_retries() {
    let args = ["--retry-interval-start=250ms", "--retry-interval-max=1s"];
    let world = Beside::start("eff-retry", &[], &args).await;
    world.create_class("std", json!({})).await;
    world.relay().fail("CreateVolume", Code::Internal);
    world.create_claim("data", "std", "1Gi", json!({})).await;
    let calls = || -> Vec<SystemTime> {
        let callers = world.relay().callers().into_iter();
        callers.filter(|(_, _, m)| m == "CreateVolume").map(|(at, _, _)| at).collect()
    };
    let nine = eventually(LIMIT, || async { (calls().len() >= 9).then_some(()) }).await;
    assert!(nine.is_some(), "{} calls:\n{}", calls().len(), world.sidecar.log_text());
    let at = calls();
    let gaps: Vec<f64> = at
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).unwrap_or_default().as_secs_f64())
        .collect();
    println!("gaps between CreateVolume calls: {gaps:.2?}");
    // 0.25, 0.5, 1, 1, …: the first retry well before the cap, the later ones at the cap.
    // Bounds wide enough for a loaded machine; the defaults (1 s, 5 m) fail both.
    assert!(gaps[0] < 0.75, "first retry after {:.2} s: {gaps:.2?}", gaps[0]);
    for gap in &gaps[3..8] {
        assert!((0.8..2.5).contains(gap), "a later retry after {gap:.2} s: {gaps:.2?}");
    }
    // The harness's own default cap is 2 s: the middle later gap tells 1 s from it, where a
    // single gap on a loaded machine might not.
    let mut later = gaps[3..8].to_vec();
    later.sort_by(f64::total_cmp);
    assert!(later[2] < 1.5, "the middle later retry after {:.2} s, not 1 s: {gaps:.2?}", later[2]);
    assert!(world.hostpath().state_volumes().is_empty());
}

/// `--kube-api-qps` and `--kube-api-burst`: a token bucket of 4 per second, bursts of 4, under
/// which twelve claims are provisioned. No window of our writes (as the apiserver received them)
/// holds more than the bucket lets through (one write of slack for the network's jitter).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kube_api_qps_and_burst_bound_our_writes() {
    let world = Beside::start("eff-qps", &[], &["--kube-api-qps=4", "--kube-api-burst=4"]).await;
    world.create_class("std", json!({})).await;
    let names = world.create_claims("q", "std", 12).await;
    all_bound(&world, &names).await;
    let at = our_writes(&world, None);
    assert!(at.len() >= 20, "{} writes for 12 claims: the bucket was never tested", at.len());
    let over = over_budget(&at, 4.0, 4.0, 1.0);
    assert_eq!(over, None, "(writes, seconds) over 4 QPS, burst 4, of {} writes", at.len());
}

/// Storage capacity's own flags. Four classes (four kinds of hostpath storage), every
/// GetCapacity answer held 1 s: `--capacity-threads=2` asks two at once; with
/// `--capacity-poll-interval=2s` the driver is asked again, round after round, with nothing
/// changing; `--kube-api-capacity-qps=1 --kube-api-capacity-burst=1` spaces the objects' writes
/// a second apart; `--capacity-ownerref-level=-1` gives them no owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capacity_flags_pace_the_driver_and_the_writes() {
    let kinds =
        ["--capacity=a=10Gi", "--capacity=b=20Gi", "--capacity=c=30Gi", "--capacity=d=40Gi"];
    let mut world = Beside::start("eff-capacity", &kinds, &[]).await;
    for kind in ["a", "b", "c", "d"] {
        let class =
            json!({"volumeBindingMode": "WaitForFirstConsumer", "parameters": {"kind": kind}});
        world.create_class(kind, class).await;
    }
    world.relay().always("GetCapacity", Fault::AnswerLate(Duration::from_secs(1)));
    let ns = world.namespace.clone();
    let flags = [
        "--enable-capacity",
        "--capacity-ownerref-level=-1",
        "--capacity-threads=2",
        "--capacity-poll-interval=2s",
        "--kube-api-capacity-qps=1",
        "--kube-api-capacity-burst=1",
    ];
    restart(&mut world, &flags, &[("NAMESPACE", ns.as_str())]).await;

    use k8s_openapi::api::storage::v1::CSIStorageCapacity;
    let api: kube::Api<CSIStorageCapacity> = kube::Api::namespaced(world.client.clone(), &ns);
    let four = eventually(LIMIT, || async {
        let list = api.list(&Default::default()).await.ok()?.items;
        (list.len() == 4).then_some(list)
    })
    .await;
    let Some(published) = four else {
        panic!("four objects never published:\n{}", world.sidecar.log_text());
    };
    for object in &published {
        assert_eq!(object.metadata.owner_references, None, "--capacity-ownerref-level=-1");
    }
    // Two more rounds of four calls, with no volume, class or node changing.
    let asked = world.relay().calls("GetCapacity");
    let again = eventually(Duration::from_secs(40), || async {
        (world.relay().calls("GetCapacity") >= asked + 8).then_some(())
    });
    assert!(again.await.is_some(), "no polling after {asked} calls:\n{}", world.sidecar.log_text());
    assert_eq!(world.relay().peak_in_flight("GetCapacity"), 2, "--capacity-threads=2");
    let writes = our_writes(&world, Some("csistoragecapacities"));
    assert!(writes.len() >= 4, "{writes:?}");
    // Most of a write of slack for the network's jitter: two writes at once still fail.
    let over = over_budget(&writes, 1.0, 1.0, 0.9);
    assert_eq!(over, None, "(writes, seconds) over 1 QPS, burst 1: {writes:?}");
}
