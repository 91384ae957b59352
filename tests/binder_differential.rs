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
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Plain `#[test]`: the planes start outside any runtime (their launcher runs one of its own), on
/// this thread, which outlives them.
#[test]
fn the_binder_ends_where_kube_controller_managers_ends() {
    let seed = env_number(
        "BINDER_DIFF_SEED",
        u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos(),
        ),
    );
    let count = env_number("BINDER_DIFF_STATES", 40) as usize;
    println!("BINDER_DIFF_SEED={seed} BINDER_DIFF_STATES={count}");
    let mut random = Lcg(seed);
    let mut states: Vec<State> = model::hand_written();
    let written = states.len();
    for _ in 0..count {
        states.push(State::generate(&mut random));
    }
    // Every state keeps its number; `BINDER_DIFF_ONLY=s80,s91` replays just those.
    let only: Vec<String> = std::env::var("BINDER_DIFF_ONLY")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let states: Vec<(String, State)> = states
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("s{i}"), s))
        .filter(|(id, _)| only.is_empty() || only.contains(id))
        .collect();
    let started = Instant::now();
    let mut differences = Vec::new();
    let (mut bound_both, mut acted_both) = (0, 0);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let options =
        PlaneOptions { audit: false, protection_finalizers: false, service_accounts: false };
    let batches = states.len().div_ceil(BATCH);
    for (i, batch) in states.chunks(BATCH).enumerate() {
        // make fuzz-binder runs for minutes: say where it is.
        println!(
            "batch {} of {batches}: states {} to {} ({:.0} s since the start)",
            i + 1,
            batch.first().map_or("-", |(id, _)| id.as_str()),
            batch.last().map_or("-", |(id, _)| id.as_str()),
            started.elapsed().as_secs_f64()
        );
        let upstream = OwnedPlane::start(options).unwrap_or_else(|e| panic!("{e}"));
        let ours = OwnedPlane::start(options).unwrap_or_else(|e| panic!("{e}"));
        let (found, counts) = runtime.block_on(run_batch(&upstream, &ours, batch));
        differences.extend(found);
        bound_both += counts.bound;
        acted_both += counts.acted;
    }
    println!(
        "binder differential: {} states ({written} hand-written, {count} generated, seed {seed}) compared in {:.0} s: {} differed",
        states.len(),
        started.elapsed().as_secs_f64(),
        differences.len()
    );
    println!(
        "{acted_both} of {n} states changed by both binders, {bound_both} of {n} ending with a claim Bound on both sides",
        n = states.len()
    );
    assert!(
        differences.is_empty(),
        "differences from kube-controller-manager:\n{}",
        differences.join("\n\n")
    );
    // Two binders that both did nothing would agree too: the states must change under both,
    // and some end bound (a replay of a few states by BINDER_DIFF_ONLY is held to the shares).
    let n = states.len();
    assert!(
        acted_both * 100 >= n * ACTED_PERCENT,
        "only {acted_both} of {n} states changed on both sides"
    );
    assert!(
        bound_both * 100 >= n * BOUND_PERCENT,
        "only {bound_both} of {n} states end with a claim Bound on both sides"
    );
}

/// The shares of states, in percent, that both binders must change, and that must end with a
/// claim Bound on both sides (seed 1 in `make test`: 55 and 6 of 59; with neither binder running, 0 and 0).
const ACTED_PERCENT: usize = 80;
const BOUND_PERCENT: usize = 5;

/// What the binders did to a batch's states.
struct Counts {
    /// States whose end differs from their start on both sides.
    acted: usize,
    /// States that end with a claim Bound on both sides, having started with none.
    bound: usize,
}

/// Whether the state has at least one claim Bound.
fn binds(summary: &Summary) -> bool {
    summary.iter().any(|(k, v)| k.starts_with("claim ") && k.ends_with(" phase") && v == "Bound")
}

/// One pair of planes for `batch`: load, run, settle, compare.
async fn run_batch(
    upstream: &OwnedPlane,
    ours: &OwnedPlane,
    batch: &[(String, State)],
) -> (Vec<String>, Counts) {
    let upstream_client = upstream.plane.client().await;
    let our_client = ours.plane.client().await;
    for (id, state) in batch {
        state.load(&upstream_client, id).await;
        state.load(&our_client, id).await;
    }
    // The states as loaded, before either binder runs.
    let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
    let loaded_theirs = model::summarize(&upstream_client, &ids).await;
    let loaded_mine = model::summarize(&our_client, &ids).await;
    let kcm = Kcm::start_with(
        &upstream.plane,
        "persistentvolume-binder-controller",
        // Its default 20 QPS holds its events back for seconds behind 50 states' writes: the
        // end state would be read before its last events arrive.
        &["--pvclaimbinder-sync-period=1s", "--kube-api-qps=1000", "--kube-api-burst=2000"],
    );
    let dir = tempfile::tempdir().unwrap();
    let driver = FakeDriver::start(
        &dir.path().join("csi.sock"),
        DriverConfig { name: "differential.csi.test".into(), ..DriverConfig::default() },
    )
    .await
    .unwrap();
    let sidecar = Sidecar::start(
        dir.path(),
        &[
            format!("--csi-address={}", driver.endpoint()),
            format!("--kubeconfig={}", ours.plane.admin_kubeconfig.display()),
            "--bind-all".into(),
            "--pvclaimbinder-sync-period=1s".into(),
        ],
    );
    let theirs = settle(&upstream_client, &ids).await;
    let mine = settle(&our_client, &ids).await;
    let mut differences = Vec::new();
    // Bound by the binders: a claim loaded Bound does not count.
    let bound = batch
        .iter()
        .filter(|(id, _)| {
            let bound_by = |end: &Summary, start: &Summary| binds(end) && !binds(start);
            bound_by(&theirs[id], &loaded_theirs[id]) && bound_by(&mine[id], &loaded_mine[id])
        })
        .count();
    let acted = batch
        .iter()
        .filter(|(id, _)| theirs[id] != loaded_theirs[id] && mine[id] != loaded_mine[id])
        .count();
    for (id, state) in batch {
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
        // Both binders' logs, kept past the planes' removal.
        let keep = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("binder-differential");
        let _ = std::fs::create_dir_all(&keep);
        let first = &batch[0].0;
        let _ = std::fs::copy(&kcm.log, keep.join(format!("{first}-kube-controller-manager.log")));
        let _ = std::fs::copy(&sidecar.log, keep.join(format!("{first}-csi-pv-controller.log")));
        println!("logs of the batch from {first} kept in {}", keep.display());
    }
    drop(kcm);
    drop(sidecar);
    (differences, Counts { acted, bound })
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
        assert!(started.elapsed() < SETTLE_LIMIT, "did not settle in {SETTLE_LIMIT:?}");
    }
}
