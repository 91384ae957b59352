//! The binder against kube-controller-manager's, as ground truth: the same initial states (claims
//! and PVs in every phase, claimRefs with matching and wrong UIDs, pre-bound names, classes,
//! selectors, access modes, sizes, reclaim policies) are loaded into two fresh control planes;
//! kube-controller-manager with only its PV binder runs on one, csi-pv-controller `--bind-all`
//! on the other; once both have settled, the end states are compared field by field.
//!
//! `BINDER_DIFF_STATES` generated states (default 40) plus the hand-written ones, from the seed
//! `BINDER_DIFF_SEED` (printed); `make fuzz-binder` runs 500.

#[path = "differential/model.rs"]
mod model;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::control_plane::{OwnedPlane, PlaneOptions};
use support::fake_driver::{DriverConfig, FakeDriver};
use support::kcm::Kcm;
use support::sidecar::Sidecar;

use model::{Lcg, State, Summary};

/// States per pair of planes: each state lives in its own namespace, with its own classes.
const BATCH: usize = 50;
/// Both sides unchanged for this long: settled.
const QUIET: Duration = Duration::from_secs(6);
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binder_ends_where_kube_controller_managers_ends() {
    let seed = env_number(
        "BINDER_DIFF_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64,
    );
    let count = env_number("BINDER_DIFF_STATES", 40) as usize;
    println!("BINDER_DIFF_SEED={seed} BINDER_DIFF_STATES={count}");
    let mut random = Lcg(seed);
    let mut states: Vec<State> = model::hand_written();
    let written = states.len();
    for _ in 0..count {
        states.push(State::generate(&mut random));
    }
    let started = Instant::now();
    let mut differences = Vec::new();
    let mut base = 0;
    for batch in states.chunks(BATCH) {
        differences.extend(run_batch(base, batch).await);
        base += batch.len();
    }
    println!(
        "binder differential: {} states ({written} hand-written, {count} generated, seed {seed}) compared in {:.0} s: {} differed",
        states.len(),
        started.elapsed().as_secs_f64(),
        differences.len()
    );
    assert!(
        differences.is_empty(),
        "differences from kube-controller-manager:\n{}",
        differences.join("\n\n")
    );
}

/// One pair of planes for `batch` (states numbered from `base`): load, run, settle, compare.
async fn run_batch(base: usize, batch: &[State]) -> Vec<String> {
    let options = PlaneOptions {
        audit: false,
        protection_finalizers: false,
    };
    let upstream = OwnedPlane::start(options).unwrap_or_else(|e| panic!("{e}"));
    let ours = OwnedPlane::start(options).unwrap_or_else(|e| panic!("{e}"));
    let upstream_client = upstream.plane.client().await;
    let our_client = ours.plane.client().await;
    for (i, state) in batch.iter().enumerate() {
        let id = format!("s{}", base + i);
        state.load(&upstream_client, &id).await;
        state.load(&our_client, &id).await;
    }
    let kcm = Kcm::start_with(
        &upstream.plane,
        "persistentvolume-binder-controller",
        &["--pvclaimbinder-sync-period=1s"],
    );
    let dir = tempfile::tempdir().unwrap();
    let driver = FakeDriver::start(
        &dir.path().join("csi.sock"),
        DriverConfig {
            name: "differential.csi.test".into(),
            ..DriverConfig::default()
        },
    )
    .await
    .unwrap();
    let sidecar = Sidecar::start(
        dir.path(),
        &[
            format!("--csi-address={}", driver.endpoint()),
            format!("--kubeconfig={}", ours.plane.admin_kubeconfig.display()),
            "--bind-all".into(),
            "--resync-period=1s".into(),
        ],
    );
    let ids: Vec<String> = (0..batch.len()).map(|i| format!("s{}", base + i)).collect();
    let theirs = settle(&upstream_client, &ids).await;
    let mine = settle(&our_client, &ids).await;
    let mut differences = Vec::new();
    for (i, state) in batch.iter().enumerate() {
        let id = &ids[i];
        let (a, b) = (&theirs[id], &mine[id]);
        if a != b {
            differences.push(format!(
                "state {id} ({}):\n{}\nkube-controller-manager vs ours:\n{}",
                state.label,
                state.describe(),
                model::diff(a, b)
            ));
        }
    }
    if !differences.is_empty() {
        println!(
            "--- sidecar log (last lines):\n{}",
            tail(&sidecar.log_text(), 40)
        );
    }
    drop(kcm);
    drop(sidecar);
    differences
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Summaries of every state once they stopped changing for `QUIET`.
async fn settle(client: &kube::Client, ids: &[String]) -> BTreeMap<String, Summary> {
    let started = Instant::now();
    let mut last = model::summarize(client, ids).await;
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = model::summarize(client, ids).await;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= QUIET {
            return last;
        }
        assert!(
            started.elapsed() < SETTLE_LIMIT,
            "did not settle in {SETTLE_LIMIT:?}"
        );
    }
}
