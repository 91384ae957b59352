//! A backend with limits, in the mode deploy/ ships (beside kube-controller-manager, default
//! flags but a smaller --worker-threads): the relay in front of hostpathplugin answers
//! CreateVolume slower past a knee of calls in flight and refuses above a rate. The sidecar's
//! calls in flight fall on the refusals and climb again once they stop; its metrics say so.

mod support;

use std::time::{Duration, SystemTime};

use serde_json::json;

use support::cluster::{World, eventually};
use support::csi_relay::Capacity;
use support::relayed::{Beside, Relayed};

const LIMIT: Duration = Duration::from_secs(180);
const CEILING: usize = 16;

/// Every budget's current limit, as `/metrics` shows it.
async fn limits(world: &World<Relayed>) -> Vec<(String, f64)> {
    let text = world.sidecar.metrics().await;
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("csi_pv_controller_driver_concurrency_limit{budget=\"")?;
            let (budget, value) = rest.split_once("\"} ")?;
            Some((budget.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The limit of the budget creates are held to: the tightest.
async fn create_limit(world: &World<Relayed>) -> f64 {
    limits(world).await.iter().map(|(_, v)| *v).fold(f64::INFINITY, f64::min)
}

/// The most CreateVolume calls in flight when one arrived at or after `from` (the driver's
/// answered calls, from the relay's record of them).
fn in_flight_since(world: &World<Relayed>, from: SystemTime) -> usize {
    let spans: Vec<_> =
        world.relay().spans().into_iter().filter(|s| s.method == "CreateVolume").collect();
    spans
        .iter()
        .filter(|s| s.arrived >= from)
        .map(|s| spans.iter().filter(|o| o.arrived <= s.arrived && o.answered > s.arrived).count())
        .max()
        .unwrap_or(0)
}

async fn all_bound(world: &World<Relayed>, names: &[String]) {
    let done = eventually(LIMIT, || async {
        for name in names {
            if world.phase(name).await.as_deref() != Some("Bound") {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(done.is_some(), "claims not all Bound\nsidecar log:\n{}", world.sidecar.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_in_flight_fall_on_resource_exhausted_and_recover_after_it() {
    let ceiling = format!("--worker-threads={CEILING}");
    let world = Beside::start("limits", &[], &[&ceiling, "--retry-interval-max=2s"]).await;
    world.create_class("std", json!({})).await;
    let relay = world.relay();
    // 10 creates a second at most; each takes 200 ms up to 4 in flight, longer past that.
    let tight = Capacity { knee: 4, per_second: 10.0, latency: Duration::from_millis(200) };
    relay.limit("CreateVolume", tight);

    let started = SystemTime::now();
    let first = world.create_claims("burst", "std", 40).await;
    all_bound(&world, &first).await;
    let refused_at = relay.refused("CreateVolume");
    let Some(first_refusal) = refused_at.first().copied() else {
        panic!("the backend never refused\nsidecar log:\n{}", world.sidecar.log_text());
    };
    // The first calls went at the ceiling and met the rate; a second after the first refusal,
    // the limit had fallen.
    let opening = in_flight_since(&world, started);
    let settled = in_flight_since(&world, first_refusal + Duration::from_secs(1));
    let low = create_limit(&world).await;
    let refusals = relay.refused("CreateVolume").len();
    let metrics = world.sidecar.metrics().await;
    assert!(opening >= 8, "the first calls went {opening} at once");
    assert!(low <= 4.0, "the limit after the refusals: {low} ({:?})", limits(&world).await);
    assert!(settled <= 5 && settled < opening, "in flight once settled: {settled}");
    assert!(
        metrics.contains("csi_pv_controller_driver_refusals_total{budget=")
            && metrics.contains("grpc_status_code=\"ResourceExhausted\""),
        "refusals not counted:\n{metrics}"
    );
    // Each refused create is retried: every claim has its volume, none twice.
    assert_eq!(world.hostpath().state_volumes().len(), 40);

    // The backend takes more now: answers keep their latency, nothing is refused.
    let roomy = Capacity { knee: 100, per_second: 1e6, latency: Duration::from_millis(200) };
    relay.limit("CreateVolume", roomy);
    let lifted = SystemTime::now();
    let second = world.create_claims("after", "std", 80).await;
    all_bound(&world, &second).await;
    let recovered = create_limit(&world).await;
    let wider = in_flight_since(&world, lifted);
    assert!(recovered >= low + 1.0, "the limit stayed at {recovered} (from {low})");
    assert!(wider > settled, "in flight once the refusals stopped: {wider} (before: {settled})");
    assert_eq!(relay.refused("CreateVolume").len(), refusals, "refused with room to spare");
    eprintln!(
        "opening {opening} in flight; settled {settled} (limit {low:.2}) after {refusals} refusals; \
         recovered to {wider} in flight (limit {recovered:.2})"
    );
}
