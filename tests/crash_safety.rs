//! kill -9 of the sidecar at random instants during a burst of claims: in the end every claim
//! has exactly one volume, and after the claims are deleted the driver holds none.

mod support;

use csi_pv_controller::model::VolumeExt;
use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::join_all;
use kube::api::DeleteParams;
use serde_json::json;
use support::cluster::{INTENT_JOURNAL, World, eventually, finalizers, journal_entries};
use support::fake_driver::{DriverConfig, Fault};

const CLAIMS: usize = 50;
const KILLS: usize = 4;

/// A small deterministic generator, seeded from the clock and printed so a failure can be replayed.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Waits until `count` claims of the world are Bound and returns them all.
async fn all_bound(
    world: &World,
    count: usize,
    limit: Duration,
) -> Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim> {
    let found = support::cluster::all_bound(&world.claims(), count, limit).await;
    found.unwrap_or_else(|| panic!("not all bound:\n{}", world.sidecar.log_text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_burst_leaves_no_orphan_and_no_duplicate() {
    let seed = std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos(),
        )
    });
    println!("CRASH_SEED={seed}");
    let mut random = Lcg(seed);
    let mut world = World::start(
        "crash-burst",
        DriverConfig::default(),
        &["--kube-api-qps=50", "--kube-api-burst=100"],
    )
    .await;
    world.create_class("burst", json!({})).await;
    // A slower backend, so that kills land while CreateVolume and DeleteVolume are in flight.
    for _ in 0..CLAIMS * 2 {
        world.driver.inject("CreateVolume", Fault::Delay(Duration::from_millis(150)));
        world.driver.inject("DeleteVolume", Fault::Delay(Duration::from_millis(150)));
    }

    let names = world.create_claims("burst", "burst", CLAIMS).await;
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(200 + random.below(1500))).await;
        world.kill_and_restart();
    }

    let claims = all_bound(&world, CLAIMS, Duration::from_secs(180)).await;

    let pvs = world.driver_volumes_in_api().await;
    let volumes = world.driver.volumes();
    println!(
        "after {KILLS} kills: {} claims bound, {} PVs, {} driver volumes, {} CreateVolume calls",
        claims.len(),
        pvs.len(),
        volumes.len(),
        world.driver.calls_of("CreateVolume").len()
    );
    assert_eq!(volumes.len(), CLAIMS, "one driver volume per claim");
    assert_eq!(pvs.len(), CLAIMS, "one PV per claim");
    let expected: BTreeSet<String> =
        claims.iter().map(|c| format!("pvc-{}", c.metadata.uid.as_deref().unwrap())).collect();
    let bound_to: BTreeSet<String> =
        claims.iter().filter_map(|c| c.spec.as_ref()?.volume_name.clone()).collect();
    let driver_names: BTreeSet<String> = volumes.iter().map(|v| v.name.clone()).collect();
    let handles: BTreeSet<String> = volumes.iter().map(|v| v.id.clone()).collect();
    let pv_handles: BTreeSet<String> =
        pvs.iter().filter_map(|pv| pv.csi_handle().map(str::to_string)).collect();
    assert_eq!(bound_to, expected);
    assert_eq!(driver_names, expected);
    assert_eq!(pv_handles, handles, "every PV records a live volume");
    for claim in &claims {
        assert!(finalizers(claim).is_empty(), "intent left on {:?}", claim.metadata.name);
    }

    // Delete everything, with one more kill on the way.
    join_all(
        names.iter().map(|n| async { world.claims().delete(n, &DeleteParams::default()).await }),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200 + random.below(1000))).await;
    world.kill_and_restart();
    let empty = eventually(Duration::from_secs(180), || async {
        let pvs = world.driver_volumes_in_api().await;
        (pvs.is_empty() && world.driver.volumes().is_empty()).then_some(())
    })
    .await;
    assert!(
        empty.is_some(),
        "left behind: {} PVs, {} driver volumes\n{}",
        world.driver_volumes_in_api().await.len(),
        world.driver.volumes().len(),
        world.sidecar.log_text()
    );
    assert!(world.claims().list(&Default::default()).await.unwrap().items.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_exits_cleanly_and_a_restart_finishes_the_work() {
    const CLAIMS: usize = 20;
    let mut world = World::start("graceful", DriverConfig::default(), &["--timeout=5s"]).await;
    world.create_class("busy", json!({})).await;
    for _ in 0..CLAIMS {
        world.driver.inject("CreateVolume", Fault::Delay(Duration::from_millis(300)));
    }
    world.create_claims("busy", "busy", CLAIMS).await;
    let busy = eventually(Duration::from_secs(30), || async {
        (!world.driver.calls_of("CreateVolume").is_empty()).then_some(())
    })
    .await;
    assert!(busy.is_some(), "no CreateVolume:\n{}", world.sidecar.log_text());

    // SIGTERM in the middle: in-flight calls end (or time out) and the process exits 0 within
    // --timeout plus a few seconds.
    let started = std::time::Instant::now();
    let code = world.sidecar.terminate(Duration::from_secs(15)).await;
    assert_eq!(code, Some(0), "{}", world.sidecar.log_text());
    assert!(started.elapsed() < Duration::from_secs(11), "took {:?}", started.elapsed());

    world.sidecar = support::sidecar::Sidecar::start(world.dir.path(), &world.args);
    let claims = all_bound(&world, CLAIMS, Duration::from_secs(120)).await;
    assert_eq!(world.driver.volumes().len(), CLAIMS, "one driver volume per claim");
    assert_eq!(world.driver_volumes_in_api().await.len(), CLAIMS, "one PV per claim");
    for claim in &claims {
        assert!(finalizers(claim).is_empty(), "intent left on {:?}", claim.metadata.name);
    }
}

/// With the intent journal (`--intent-journal`, beside a binder that hands claims over): the
/// driver made the volume but its answer was lost (it crashed before answering), the sidecar
/// was killed before it could ask again, and the claim was deleted for good meanwhile; nothing
/// holds the claim back, so only the journal remembers. The restarted sidecar finds that volume
/// and deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_gone_between_create_volume_and_its_pv_leaves_no_volume_with_the_journal() {
    let mut world = World::start(
        "journal-orphan",
        DriverConfig::default(),
        &["--binder=external", INTENT_JOURNAL, "--pvclaimbinder-sync-period=2s"],
    )
    .await;
    world.create_class("journaled", json!({})).await;
    // The volume is made, and the driver dies before answering; it stays down until restarted
    // below, so no retry of the sidecar's can succeed and record it.
    world.driver.inject("CreateVolume", Fault::CrashAfter);
    let claim = world
        .create_claim(
            "orphan",
            "journaled",
            "1Gi",
            // What kube-controller-manager's binder writes when no PV matches: the hand-over.
            json!({"metadata": {"annotations": {
                "volume.kubernetes.io/storage-provisioner": world.driver_name.clone()
            }}}),
        )
        .await;
    let uid = claim.metadata.uid.clone().unwrap();
    let made = eventually(Duration::from_secs(30), || async {
        (world.driver.volume_count() == 1).then_some(())
    })
    .await;
    assert!(made.is_some(), "{}", world.sidecar.log_text());
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    assert_eq!(
        journal_entries(world.dir.path()),
        vec![uid.clone()],
        "the intent was on disk before CreateVolume, and nothing settled it"
    );
    let live = world.claims().get("orphan").await.unwrap();
    assert!(finalizers(&live).is_empty(), "no claim write for the intent");
    assert!(world.driver_volumes_in_api().await.is_empty(), "no PV yet");
    world.claims().delete("orphan", &DeleteParams::default()).await.unwrap();
    world
        .claims()
        .patch(
            "orphan",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .ok();
    let gone = eventually(Duration::from_secs(10), || async {
        world.claims().get_opt("orphan").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(gone.is_some(), "the claim is gone");
    world.driver.restart().await.unwrap();
    world.kill_and_restart();

    let cleaned = eventually(Duration::from_secs(60), || async {
        (world.driver.volume_count() == 0 && journal_entries(world.dir.path()).is_empty())
            .then_some(())
    })
    .await;
    assert!(
        cleaned.is_some(),
        "volumes {:?}, journal {:?}, PVs {}:\n{}",
        world.driver.volumes(),
        journal_entries(world.dir.path()),
        world.driver_volumes_in_api().await.len(),
        world.sidecar.log_text()
    );
    assert_eq!(world.driver.deleted_ids().len(), 1);
    assert!(world.driver_volumes_in_api().await.is_empty(), "no PV");
    assert_eq!(
        world.driver.calls_of("CreateVolume").len(),
        2,
        "the lost call and the restarted sidecar's, no retry in between"
    );
}
