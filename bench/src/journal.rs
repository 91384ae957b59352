//! `bench-journal`: what the intent journal costs per provisioned claim, alone in a process.
//!
//! `--in-flight` workers each record an intent, hold it for `--hold` (CreateVolume and the PV's
//! creation, in the controller) and remove it, until `--claims` intents have passed. The
//! process's CPU (user and system, getrusage) over the run, divided by the claims, is the
//! journal's CPU per claim: nothing else runs here. Each run appends to `<label>.json` in the
//! results folder, and `results.md` is redrawn from every label's file, side by side.

#[path = "common.rs"]
mod common;
#[path = "stats.rs"]
#[allow(dead_code)]
mod stats;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use csi_pv_controller::journal::Journal;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Deserialize, Serialize};

#[derive(Parser, Debug)]
#[command(name = "bench-journal", about = "the intent journal's CPU per claim")]
struct Args {
    /// What this build's journal is, as the report's row names it.
    #[arg(long)]
    label: String,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value_t = 10_000)]
    claims: usize,
    /// Intents open at once (the controller's --worker-threads).
    #[arg(long, default_value_t = 100)]
    in_flight: usize,
    /// How long each intent stays open.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    hold: Duration,
    /// Where the journal's directory is made (a fresh one per run); the results folder's disk
    /// when not given.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Where the dated results folder goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// The results folder's name (default: today's date and `-journal`).
    #[arg(long)]
    name: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
struct Run {
    /// Process CPU per claim, in milliseconds.
    user_ms: f64,
    system_ms: f64,
    /// From the first record to the last removal.
    wall_s: f64,
    /// One record's wait until its intent is durable, in milliseconds.
    record_p50_ms: f64,
    record_p99_ms: f64,
}

#[derive(Serialize, Deserialize, Debug, Default)]
struct Label {
    commit: String,
    setup: String,
    runs: Vec<Run>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let folder = args.out.join(
        args.name.clone().unwrap_or_else(|| format!("{}-journal", jiff::Zoned::now().date())),
    );
    match run(&args, &folder).await {
        Ok(()) => {
            println!("results in {}", folder.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-journal: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, folder: &Path) -> Result<(), String> {
    std::fs::create_dir_all(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    let file = folder.join(format!("{}.json", args.label));
    let mut label: Label = match std::fs::read(&file) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", file.display()))?
        }
        Err(_) => Label::default(),
    };
    label.commit = commit();
    label.setup = format!(
        "{}; {} claims, {} in flight, each held {:?}; journal on {}",
        common::machine(),
        args.claims,
        args.in_flight,
        args.hold,
        args.dir.as_deref().unwrap_or(folder).display()
    );
    for n in 1..=args.runs {
        let parent = args.dir.clone().unwrap_or_else(|| folder.to_path_buf());
        let dir =
            tempfile::tempdir_in(&parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        let one = once(args, dir.path()).await?;
        println!(
            "{} run {n}: {:.3} ms CPU per claim ({:.3} user, {:.3} system), {:.2} s, record p50 {:.2} ms p99 {:.2} ms",
            args.label,
            one.user_ms + one.system_ms,
            one.user_ms,
            one.system_ms,
            one.wall_s,
            one.record_p50_ms,
            one.record_p99_ms
        );
        label.runs.push(one);
    }
    let json = serde_json::to_vec_pretty(&label).map_err(|e| e.to_string())?;
    std::fs::write(&file, json).map_err(|e| format!("{}: {e}", file.display()))?;
    report(folder)
}

async fn once(args: &Args, dir: &Path) -> Result<Run, String> {
    let journal = Arc::new(Journal::open(dir).map_err(|e| e.to_string())?);
    let claims: Vec<PersistentVolumeClaim> = (0..args.claims).map(claim).collect();
    let before = cpu();
    let began = Instant::now();
    let waits = Arc::new(std::sync::Mutex::new(Vec::with_capacity(args.claims)));
    let hold = args.hold;
    common::each(claims, args.in_flight, |claim| {
        let (journal, waits) = (journal.clone(), waits.clone());
        async move {
            let asked = Instant::now();
            journal.record(&claim).await.map_err(|e| e.to_string())?;
            let waited = asked.elapsed().as_secs_f64() * 1e3;
            waits.lock().unwrap_or_else(|p| p.into_inner()).push(waited);
            tokio::time::sleep(hold).await;
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            journal.remove(uid).await.map_err(|e| e.to_string())
        }
    })
    .await?;
    let wall_s = began.elapsed().as_secs_f64();
    let after = cpu();
    if !journal.is_empty() {
        return Err(format!("{} intents left open", journal.len()));
    }
    let waits = std::mem::take(&mut *waits.lock().unwrap_or_else(|p| p.into_inner()));
    let per = |seconds: f64| seconds * 1e3 / args.claims as f64;
    Ok(Run {
        user_ms: per(after.0 - before.0),
        system_ms: per(after.1 - before.1),
        wall_s,
        record_p50_ms: stats::percentile(&waits, 50.0).unwrap_or(0.0),
        record_p99_ms: stats::percentile(&waits, 99.0).unwrap_or(0.0),
    })
}

/// A claim as the controller records it: handed over by kube-controller-manager's binder.
fn claim(n: usize) -> PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("data-db-{n}"),
            "namespace": "bench",
            "uid": format!("6f1c2a3e-0000-4000-8000-{n:012}"),
            "resourceVersion": format!("{}", 100_000 + n),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "db"},
            "annotations": {
                "volume.beta.kubernetes.io/storage-provisioner": "hostpath.csi.k8s.io",
                "volume.kubernetes.io/storage-provisioner": "hostpath.csi.k8s.io"
            },
            "finalizers": ["kubernetes.io/pvc-protection"]
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "csi-hostpath-sc",
            "volumeMode": "Filesystem"
        },
        "status": {"phase": "Pending"}
    }))
    .unwrap_or_default()
}

/// This process's CPU so far, user and system, in seconds.
fn cpu() -> (f64, f64) {
    // SAFETY: getrusage writes into the struct it is given and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `results.md` from every label's runs: medians with min and max.
fn report(folder: &Path) -> Result<(), String> {
    let mut labels = BTreeMap::new();
    for entry in std::fs::read_dir(folder).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let label: Label =
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?").to_string();
        labels.insert(name, label);
    }
    let cell = |runs: &[Run], f: fn(&Run) -> f64| {
        let values: Vec<f64> = runs.iter().map(f).collect();
        match stats::Spread::of(&values) {
            Some(s) => format!("{:.3} ({:.3}–{:.3})", s.median, s.min, s.max),
            None => "–".into(),
        }
    };
    let mut md = String::from("# The intent journal's cost per claim\n\n");
    md.push_str("Each cell: median of the runs (min–max). CPU is the whole process's (getrusage), which runs only the journal.\n\n");
    md.push_str("| journal | commit | runs | CPU per claim (ms) | user (ms) | system (ms) | record p50 (ms) | record p99 (ms) | wall (s) |\n|---|---|---|---|---|---|---|---|---|\n");
    for (name, label) in &labels {
        let r = &label.runs;
        md.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            label.commit,
            r.len(),
            cell(r, |r| r.user_ms + r.system_ms),
            cell(r, |r| r.user_ms),
            cell(r, |r| r.system_ms),
            cell(r, |r| r.record_p50_ms),
            cell(r, |r| r.record_p99_ms),
            cell(r, |r| r.wall_s),
        ));
    }
    md.push('\n');
    for (name, label) in &labels {
        md.push_str(&format!("- {name}: {}\n", label.setup));
    }
    let path = folder.join("results.md");
    std::fs::write(&path, md).map_err(|e| format!("{}: {e}", path.display()))
}
