//! `make bench`: csi-pv-controller against the upstream stack it replaces (kube-controller-manager's
//! PV binder and expander, csi-provisioner, csi-resizer), side by side in one run, on the same
//! machine, the same etcd and kube-apiserver builds and the same CSI driver process.
//!
//! Every run gets a fresh etcd + kube-apiserver and a fresh driver: csi-driver-host-path's
//! hostpathplugin by default (`--driver hostpath`), or our fake (`--driver fake`, in memory, no
//! latency: the figures are then those of the controllers alone). Three stacks: upstream's,
//! ours as the binder (kube-controller-manager's binder off, `--bind-all`), and ours beside
//! kube-controller-manager's binder (`--binder=external`, the default), as most clusters run it.

#[path = "../../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

// The storm reads its watches by name too (`Seen::get`, `Seen::count`).
#[allow(dead_code)]
mod claims;
mod common;
mod driver;
mod font;
mod kcm_requests;
mod measure;
mod palette;
mod plan;
mod progress;
mod report;
mod runner;
mod scale_plot;
mod scenario;
mod schedule;
mod stack;
mod stats;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use driver::DriverKind;
use plan::Sizes;
use report::Results;
use runner::{Bench, throttle_label};
use schedule::{Step, schedule};
use stack::Throttle;

pub const DRIVER: &str = "bench.csi.k8s.io";
pub const NAMESPACE: &str = "bench";

#[derive(Parser, Debug)]
#[command(about = "csi-pv-controller vs csi-provisioner + csi-resizer + kube-controller-manager")]
pub struct Args {
    /// Runs of every scenario per stack and throttle; the report gives median, min and max.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Which scenarios: burst (--small-claims claims), lifecycle (burst of --claims, expand,
    /// delete), static (--static-volumes PVs, --claims claims), rest (--rest-pairs bound pairs),
    /// ceiling (the apiserver's own write rate, no stack; once per run), scale (a burst of each
    /// of --scale-claims, then static binding of the largest against --scale-volumes PVs).
    /// burst@N, lifecycle@N, static@PVS:CLAIMS and rest@N give a scenario its own size.
    #[arg(long, value_delimiter = ',', default_value = "burst,lifecycle,static,rest")]
    scenarios: Vec<String>,
    /// Which throttles: defaults (each component's own), equal (all at --equal-qps/burst), off
    /// (no client-side limit in any component), budget (the same total for each stack:
    /// --equal-qps/burst per upstream role, ours the sum of the roles it takes over), busy (no
    /// limit, with --busy-cores busy-looping processes running beside the stack).
    #[arg(long, value_delimiter = ',', default_value = "defaults,equal,off")]
    throttles: Vec<String>,
    /// Busy-looping processes the busy throttle runs for the whole scenario.
    #[arg(long, default_value_t = 2)]
    busy_cores: usize,
    /// Which stacks: upstream, ours (we bind; kube-controller-manager's binder off), beside (ours
    /// with default flags beside kube-controller-manager's binder). One alone is for looking into
    /// a figure, not a report.
    #[arg(long, value_delimiter = ',', default_value = "upstream,ours,beside")]
    stacks: Vec<String>,
    /// The CSI driver: hostpath (csi-driver-host-path's hostpathplugin) or fake.
    #[arg(long, value_enum, default_value = "hostpath")]
    driver: DriverKind,
    #[arg(long, default_value_t = 200)]
    equal_qps: u32,
    #[arg(long, default_value_t = 400)]
    equal_burst: u32,
    /// Claims in the big burst, the deletion and the static scenario.
    #[arg(long, default_value_t = 1000)]
    claims: usize,
    /// Claims in the small burst.
    #[arg(long, default_value_t = 100)]
    small_claims: usize,
    /// Bound claims whose request is raised.
    #[arg(long, default_value_t = 200)]
    expand: usize,
    /// Available PVs in the static scenario.
    #[arg(long, default_value_t = 10_000)]
    static_volumes: usize,
    /// Bound pairs at rest; several (1000,10000,50000) make one rest run per count.
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    rest_pairs: Vec<usize>,
    /// The bursts of the scale scenario.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000,10000")]
    scale_claims: Vec<usize>,
    /// Available PVs the largest scale burst's claims are matched against.
    #[arg(long, default_value_t = 50_000)]
    scale_volumes: usize,
    /// The ceiling scenario: separate client connections, writers per connection, and how
    /// long they write.
    #[arg(long, default_value_t = 8)]
    ceiling_clients: usize,
    #[arg(long, default_value_t = 16)]
    ceiling_in_flight: usize,
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    ceiling_window: Duration,
    /// How long the sidecars are watched at rest, for CPU (Go-style: 60s, 1m).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    rest_window: Duration,
    /// Longest wait for one scenario step.
    #[arg(long, default_value = "2400s", value_parser = humantime::parse_duration)]
    limit: Duration,
    /// Where the beside stack keeps its intent journal. By default in the run's folder, on the
    /// disk where etcd syncs its log too: on one machine the journal's syncs slow etcd's, which
    /// in a cluster live on other nodes. A folder on another device (or /dev/shm) separates them.
    #[arg(long)]
    journal_dir: Option<PathBuf>,
    /// The csi-pv-controller binary (a release build).
    #[arg(long, env = "SIDECAR_BIN")]
    sidecar: PathBuf,
    /// Where the report goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

/// Versions from the peer cache's folder names (`<name>-<version>`), and ours from git.
fn versions(sidecar: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in
        ["etcd", "kube-apiserver", "kube-controller-manager", "csi-provisioner", "csi-resizer"]
    {
        let link = support::peers::bin_dir().join(name);
        let version = std::fs::canonicalize(&link)
            .ok()
            .and_then(|p| Some(p.parent()?.file_name()?.to_string_lossy().into_owned()))
            .and_then(|folder| folder.strip_prefix(&format!("{name}-")).map(str::to_string))
            .unwrap_or_else(|| "unknown".into());
        out.push((name.to_string(), version));
    }
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    out.push((
        "csi-pv-controller".into(),
        format!("{} at {commit} ({})", env!("CARGO_PKG_VERSION"), sidecar.display()),
    ));
    out
}

fn main() -> ExitCode {
    let args = Args::parse();
    for peer in
        ["etcd", "kube-apiserver", "kube-controller-manager", "csi-provisioner", "csi-resizer"]
    {
        if !support::peers::bin_dir().join(peer).is_file() {
            eprintln!("peer {peer} missing: run `make peers` first (or set PEERS_BIN)");
            return ExitCode::FAILURE;
        }
    }
    if !args.sidecar.is_file() {
        eprintln!("{}: no such file (build with `cargo build --release`)", args.sidecar.display());
        return ExitCode::FAILURE;
    }
    if let Err(e) = font::load_font() {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut throttles = Vec::new();
    for t in &args.throttles {
        match t.as_str() {
            "defaults" => throttles.push(Throttle::Defaults),
            "off" => throttles.push(Throttle::Off),
            "budget" => {
                throttles.push(Throttle::Budget { qps: args.equal_qps, burst: args.equal_burst })
            }
            "equal" => {
                throttles.push(Throttle::Equal { qps: args.equal_qps, burst: args.equal_burst })
            }
            "busy" => throttles.push(Throttle::Busy { cores: args.busy_cores }),
            other => {
                eprintln!("unknown throttle {other:?}: defaults, equal, off, budget or busy");
                return ExitCode::FAILURE;
            }
        }
    }
    let results = Results {
        date: jiff::Timestamp::now().to_string(),
        machine: common::machine(),
        versions: versions(&args.sidecar),
        driver: match args.driver {
            DriverKind::Hostpath => format!(
                "{DRIVER}: csi-driver-host-path's hostpathplugin v1.18.0 (--disable-node-expansion), state on local disk"
            ),
            DriverKind::Fake => {
                format!("{DRIVER}: the project's fake CSI driver (in memory, no latency)")
            }
        },
        ..Results::default()
    };
    let sizes = Sizes {
        small_claims: args.small_claims,
        claims: args.claims,
        static_volumes: args.static_volumes,
        rest_pairs: args.rest_pairs.clone(),
        scale_claims: args.scale_claims.clone(),
        scale_volumes: args.scale_volumes,
    };
    let scenarios = match plan::scenarios(&args.scenarios, &sizes) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let steps = schedule(args.runs, &scenarios, &throttles, &args.stacks);
    let kinds: Vec<progress::Kind> = steps.iter().map(Step::kind).collect();
    let mut progress = progress::Progress::default();
    let mut bench = Bench { args, results, kcm_port: None, started: std::time::Instant::now() };
    for (i, step) in steps.iter().enumerate() {
        let began = std::time::Instant::now();
        match *step {
            Step::Ceiling(run) => {
                if let Err(e) = bench.ceiling(&runtime, run) {
                    bench.results.failures.push(format!("ceiling / run {}: {e}", run + 1));
                }
            }
            Step::Run(id, scenario) => {
                if let Err(e) = bench.run(&runtime, id, scenario) {
                    bench.results.failures.push(format!(
                        "{} / {} / run {} / {scenario}: {e}",
                        id.kind,
                        throttle_label(id.throttle),
                        id.run + 1
                    ));
                }
            }
        }
        // After every run, so that a bench stopped early keeps what it measured.
        if let Err(e) = write_report(&bench.results, &bench.args) {
            eprintln!("report: {e}");
            return ExitCode::FAILURE;
        }
        progress.finished(kinds[i].clone(), began.elapsed());
        println!("{}", progress.line(steps.len(), bench.started.elapsed(), &kinds[i + 1..]));
    }
    match write_report(&bench.results, &bench.args) {
        Ok(paths) => {
            for p in paths {
                println!("wrote {}", p.display());
            }
        }
        Err(e) => {
            eprintln!("report: {e}");
            return ExitCode::FAILURE;
        }
    }
    if bench.results.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("{} run(s) did not finish; see the report", bench.results.failures.len());
        ExitCode::FAILURE
    }
}

fn write_report(results: &Results, args: &Args) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let stem = results.date.get(..10).unwrap_or("run").to_string();
    let mut written = Vec::new();
    let md = args.out.join(format!("{stem}.md"));
    std::fs::write(&md, report::markdown(results)).map_err(|e| e.to_string())?;
    written.push(md);
    let json = args.out.join(format!("{stem}.json"));
    let text = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    std::fs::write(&json, text).map_err(|e| e.to_string())?;
    written.push(json);
    let mut bursts: Vec<String> = results.latencies.iter().map(|l| l.scenario.clone()).collect();
    bursts.sort();
    bursts.dedup();
    for scenario in bursts {
        let file = format!("{stem}-{}", scenario.replace(' ', "-"));
        written.push(report::latency_cdf(results, &scenario, &args.out, &file)?);
    }
    written.extend(scale_plot::draw(results, &args.out, &stem)?);
    Ok(written)
}
