//! At rest. Its own test binary, so its own control plane: other tests' objects would count too.

mod support;

use std::time::Duration;

use serde_json::json;
use support::cluster::World;
use support::fake_driver::DriverConfig;
use support::sidecar::sample;

const LIMIT: Duration = Duration::from_secs(30);

/// Settled objects are not worked on at all: the periodic pass looks only at what can change with
/// time (here the Pending claim), and no decision whose action changes nothing puts its key
/// straight back in the queue (docs/binder.md §4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_controller_does_no_work_beyond_its_resync() {
    const N: usize = 10;
    let world =
        World::start("bind-rest", DriverConfig::default(), &["--pvclaimbinder-sync-period=2s"])
            .await;
    world.create_class("std", json!({})).await;
    // Bound dynamic claims, a Lost one and a Pending one that no PV fits.
    let names = world.create_claims("c", "std", N).await;
    for name in &names {
        world.bound(name, LIMIT).await;
    }
    world.create_claim("huge", "std", "3Ti", json!({})).await;
    // A periodic pass and the huge claim's first retries behind us before the window opens.
    world.sidecar.periodic_passes(1, LIMIT).await;
    world.sidecar.passed_again(&format!("claim={}/huge", world.namespace), 1, LIMIT).await;
    let adds = |text: &str, queue: &str| -> f64 {
        sample(text, &format!("workqueue_adds_total{{name=\"{queue}\"}}")).unwrap_or(0.0)
    };
    let before = world.sidecar.metrics().await;
    // The window measured: three periodic passes at the 2 s sync period.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = world.sidecar.metrics().await;
    // In 6 s, three or four periodic passes queue the huge Pending claim (plus its retries, a
    // few with a 200 ms..2 s backoff); the settled claims and PVs are not queued at all. A hot
    // loop would make thousands; the old full pass made 4 × (N + 1) claims and 4 × N PVs.
    let claims = adds(&after, "claims") - adds(&before, "claims");
    let volumes = adds(&after, "volumes") - adds(&before, "volumes");
    println!("in 6 s at rest: {claims} claim adds, {volumes} volume adds");
    assert!(claims <= 12.0, "{claims} claim adds: settled claims were queued");
    assert!(volumes <= 2.0, "{volumes} volume adds: settled PVs were queued");
    assert!(claims >= 2.0, "the periodic pass looks at the Pending claim: {claims}");

    // Per key, from the passes histogram observed at every periodic pass: no key got more than
    // 3 passes in one period (the huge claim's retries at the 2 s cap make 1 or 2).
    for queue in ["claims", "volumes"] {
        let count = format!("csi_pv_controller_passes_per_key_count{{name=\"{queue}\"}}");
        let within_3 =
            format!("csi_pv_controller_passes_per_key_bucket{{le=\"3\",name=\"{queue}\"}}");
        let delta = |series: &str| {
            sample(&after, series).unwrap_or(0.0) - sample(&before, series).unwrap_or(0.0)
        };
        let (observed, calm) = (delta(&count), delta(&within_3));
        println!("{queue}: {observed} keys observed at resyncs, {calm} with at most 3 passes");
        if queue == "claims" {
            assert!(observed >= 1.0, "{queue}: the histogram is fed: {observed}");
        }
        assert_eq!(observed, calm, "{queue}: a key worked on more than 3 times in a period");
    }
}
