//! Matching 1,000 pending claims against 10,000 PVs: our index against upstream's algorithm
//! (FindMatchingVolume over every PV of each access-mode group, per claim), in one run.
//!
//! Each claim that finds a PV takes it (its claimRef is written into the index), as binding
//! does, so later claims must skip it. Both ways must choose the same number of PVs.
//!
//! `cargo bench --bench matching` (or `make bench`) prints one line per way.

use csi_pv_controller::model::VolumeExt;
use std::time::{Duration, Instant};

use csi_pv_controller::binder::VolumeIndex;
use csi_pv_controller::binder::matching::{ClaimFacts, Verdict, verdict};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::json;

const VOLUMES: usize = 10_000;
const CLAIMS: usize = 1_000;
const CLASSES: [&str; 4] = ["gold", "silver", "bronze", "local"];
const MODES: [&[&str]; 3] =
    [&["ReadWriteOnce"], &["ReadWriteOnce", "ReadOnlyMany"], &["ReadWriteMany"]];

/// A small deterministic generator, so both ways see the same objects.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

fn volumes(rng: &mut Lcg) -> Vec<PersistentVolume> {
    (0..VOLUMES)
        .map(|i| {
            let gib = 1 + rng.next(100);
            serde_json::from_value(json!({
                "metadata": {"name": format!("pv-{i:05}"), "resourceVersion": "1",
                             "labels": {"rack": format!("r{}", rng.next(10))}},
                "spec": {"capacity": {"storage": format!("{gib}Gi")},
                         "accessModes": MODES[rng.next(MODES.len())],
                         "storageClassName": CLASSES[rng.next(CLASSES.len())],
                         "csi": {"driver": "bench.csi", "volumeHandle": format!("h-{i}")}},
                "status": {"phase": "Available"}
            }))
            .expect("valid PV")
        })
        .collect()
}

fn claims(rng: &mut Lcg) -> Vec<PersistentVolumeClaim> {
    (0..CLAIMS)
        .map(|i| {
            let mut spec = json!({
                "accessModes": MODES[rng.next(MODES.len())],
                "storageClassName": CLASSES[rng.next(CLASSES.len())],
                "resources": {"requests": {"storage": format!("{}Gi", 1 + rng.next(100))}},
            });
            if rng.next(5) == 0 {
                spec["selector"] = json!({"matchLabels": {"rack": format!("r{}", rng.next(10))}});
            }
            serde_json::from_value(json!({
                "metadata": {"name": format!("c-{i:04}"), "namespace": "bench", "uid": format!("u-{i}")},
                "spec": spec,
            }))
            .expect("valid claim")
        })
        .collect()
}

/// Writes the claimRef into `pv`, as the first write of a bind does.
fn take(pv: &PersistentVolume, claim: &ClaimFacts) -> PersistentVolume {
    let mut pv = pv.clone();
    if let Some(spec) = pv.spec.as_mut() {
        spec.claim_ref = Some(k8s_openapi::api::core::v1::ObjectReference {
            name: Some(claim.name.clone()),
            namespace: Some(claim.namespace.clone()),
            uid: Some(claim.uid.clone()),
            ..Default::default()
        });
    }
    pv.metadata.resource_version = Some("2".into());
    pv
}

fn indexed(pvs: &[PersistentVolume], claims: &[ClaimFacts]) -> (Duration, Duration, usize) {
    let start = Instant::now();
    let mut index = VolumeIndex::default();
    for pv in pvs {
        index.upsert(pv);
    }
    let built = start.elapsed();
    let start = Instant::now();
    let mut bound = 0;
    for claim in claims {
        if let Some(pv) = index.best_match(claim, false) {
            index.upsert(&take(&pv, claim));
            bound += 1;
        }
    }
    (built, start.elapsed(), bound)
}

/// Upstream's way: every claim looks at every PV. Sizes are parsed once up front, as Go's
/// Quantity is, so that the scan pays only for the comparisons.
fn full_scan(pvs: &[PersistentVolume], claims: &[ClaimFacts]) -> (Duration, usize) {
    let mut pvs: Vec<PersistentVolume> = pvs.to_vec();
    let sizes: Vec<u64> = pvs.iter().map(|pv| pv.capacity_bytes()).collect();
    let start = Instant::now();
    let mut bound = 0;
    for claim in claims {
        let mut best: Option<(usize, u64)> = None;
        for (i, pv) in pvs.iter().enumerate() {
            if sizes[i] < claim.request {
                continue;
            }
            match verdict(claim, pv, false) {
                Verdict::PreBound => {
                    best = Some((i, 0));
                    break;
                }
                Verdict::Candidate => {
                    if best.is_none_or(|(_, s)| sizes[i] < s) {
                        best = Some((i, sizes[i]));
                    }
                }
                Verdict::Rejected(_) => {}
            }
        }
        if let Some((i, _)) = best {
            pvs[i] = take(&pvs[i], claim);
            bound += 1;
        }
    }
    (start.elapsed(), bound)
}

fn main() {
    let mut rng = Lcg(42);
    let pvs = volumes(&mut rng);
    let claims: Vec<ClaimFacts> =
        claims(&mut rng).iter().map(|c| ClaimFacts::of(c).expect("valid claim")).collect();
    let (built, matched, bound_indexed) = indexed(&pvs, &claims);
    let (scanned, bound_scan) = full_scan(&pvs, &claims);
    println!("matching {CLAIMS} claims against {VOLUMES} PVs");
    println!(
        "  index (ours):          build {:>8.2} ms, match {:>8.2} ms, {:>6.1} µs/claim, {bound_indexed} bound",
        built.as_secs_f64() * 1e3,
        matched.as_secs_f64() * 1e3,
        matched.as_secs_f64() * 1e6 / CLAIMS as f64
    );
    println!(
        "  full scan (upstream):                      match {:>8.2} ms, {:>6.1} µs/claim, {bound_scan} bound",
        scanned.as_secs_f64() * 1e3,
        scanned.as_secs_f64() * 1e6 / CLAIMS as f64
    );
    if bound_indexed != bound_scan {
        eprintln!("MISMATCH: the index bound {bound_indexed}, the full scan {bound_scan}");
        std::process::exit(1);
    }
}
