//! Writes that meet a newer version (HTTP 409). Its own test binary, so its own control plane:
//! the audit log then holds only this test's writes.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::cluster::{World, eventually};
use support::fake_driver::DriverConfig;
use support::sidecar::sample;

const CLAIMS: usize = 20;

/// Another client patches the claims' labels the whole time (about 50 patches a second) while
/// the sidecar provisions and binds them: every claim is bound while the other writer goes on,
/// and the sidecar's refused writes stay few per claim (each conflict waits for the watch or a
/// backoff, never a retry from the same stale copy at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_claim_is_bound_while_another_client_keeps_writing_it() {
    let world = World::start("busy-claims", DriverConfig::default(), &[]).await;
    world.create_class("busy", json!({})).await;
    let names = world.create_claims("busy", "busy", CLAIMS).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (claims, names, stop) = (world.claims(), names.clone(), stop.clone());
        tokio::spawn(async move {
            let mut patches = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            while !stop.load(Ordering::SeqCst) {
                for name in &names {
                    tick.tick().await;
                    let patch = json!({"metadata": {"labels": {"tick": patches.to_string()}}});
                    let _ = claims
                        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                        .await;
                    patches += 1;
                }
            }
            patches
        })
    };
    let started = Instant::now();
    let bound = eventually(Duration::from_secs(120), || async {
        let list = world.claims().list(&Default::default()).await.ok()?;
        let bound = list
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .count();
        (bound == CLAIMS).then_some(())
    })
    .await;
    let took = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let patches = writer.await.unwrap_or_default();
    assert!(
        bound.is_some(),
        "not all bound in 120 s while another client writes:\n{}",
        world.sidecar.log_text()
    );
    let refused = world
        .plane
        .audited_writes()
        .into_iter()
        .filter(|w| w.user == world.user && w.code == 409)
        .count();
    let metrics = world.sidecar.metrics().await;
    println!(
        "{CLAIMS} claims bound in {:.1} s beside {patches} label patches: {refused} of our writes refused with 409",
        took.as_secs_f64()
    );
    assert!(
        refused <= CLAIMS * 5,
        "{refused} refused writes for {CLAIMS} claims"
    );
    if refused > 0 {
        assert!(
            sample(
                &metrics,
                "csi_pv_controller_write_conflicts_total{name=\"claims\"}"
            )
            .is_some_and(|n| n >= 1.0),
            "conflicts are counted"
        );
    }
}
