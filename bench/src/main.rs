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

mod driver;
mod report;
mod scenario;
mod stack;
mod stats;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};

use driver::{BenchDriver, DriverKind};
use report::{Better, Figure, Latencies, Results};
use scenario::{DYNAMIC_CLASS, STATIC_CLASS};
use stack::{Stack, StackKind, Throttle};
use support::control_plane::{OwnedPlane, PlaneOptions, create_namespace};

const DRIVER: &str = "bench.csi.k8s.io";
const NAMESPACE: &str = "bench";

#[derive(Parser, Debug)]
#[command(about = "csi-pv-controller vs csi-provisioner + csi-resizer + kube-controller-manager")]
struct Args {
    /// Runs of every scenario per stack and throttle; the report gives median, min and max.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Which scenarios: burst (100 claims), lifecycle (burst of --claims, expand, delete),
    /// static (--static-volumes PVs, --claims claims), rest (--rest-pairs bound pairs), ceiling
    /// (the apiserver's own write rate, no stack; once per run).
    #[arg(long, value_delimiter = ',', default_value = "burst,lifecycle,static,rest")]
    scenarios: Vec<String>,
    /// Which throttles: defaults (each component's own), equal (all at --equal-qps/burst), off
    /// (no client-side limit in any component), budget (the same total for each stack:
    /// --equal-qps/burst per upstream role, ours the sum of the roles it takes over).
    #[arg(long, value_delimiter = ',', default_value = "defaults,equal,off")]
    throttles: Vec<String>,
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
    /// The csi-pv-controller binary (a release build).
    #[arg(long, env = "SIDECAR_BIN")]
    sidecar: PathBuf,
    /// Where the report goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

/// Where one run is: which stack, which throttle, which repetition.
#[derive(Clone, Copy)]
struct RunId {
    kind: StackKind,
    throttle: Throttle,
    run: usize,
}

struct Bench {
    args: Args,
    results: Results,
}

impl Bench {
    fn figure(
        &mut self,
        id: RunId,
        scenario: &str,
        metric: &'static str,
        unit: &'static str,
        better: Better,
        value: f64,
    ) {
        self.results.add(Figure {
            scenario: scenario.into(),
            metric,
            unit,
            better,
            throttle: throttle_label(id.throttle),
            stack: id.kind,
            run: id.run,
            value,
        });
    }

    fn burst_figures(&mut self, id: RunId, scenario: &str, burst: &scenario::Burst) {
        let n = burst.names.len() as f64;
        self.figure(id, scenario, "time to all Bound", "s", Better::Lower, burst.seconds);
        self.figure(
            id,
            scenario,
            "throughput",
            "claims/s",
            Better::Higher,
            n / burst.seconds.max(1e-9),
        );
        for (p, metric) in [(50.0, "latency p50"), (90.0, "latency p90"), (99.0, "latency p99")] {
            if let Some(v) = stats::percentile(&burst.latencies, p) {
                self.figure(id, scenario, metric, "s", Better::Lower, v);
            }
        }
        self.results.latencies.push(Latencies {
            scenario: scenario.into(),
            throttle: throttle_label(id.throttle),
            stack: id.kind,
            run: id.run,
            seconds: burst.latencies.clone(),
        });
    }

    /// One scenario on a fresh control plane, driver and stack.
    fn run(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        id: RunId,
        scenario: &str,
    ) -> Result<(), String> {
        println!(
            "==> {} / {} / run {} / {scenario}",
            id.kind,
            throttle_label(id.throttle),
            id.run + 1
        );
        let plane = OwnedPlane::start(PlaneOptions { audit: false, protection_finalizers: true })?;
        let dir = plane.plane.dir.join("run");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let args = &self.args;
        let (client, driver) = runtime.block_on(async {
            let client = plane.plane.client().await;
            create_namespace(&client, NAMESPACE).await;
            let classes: Api<StorageClass> = Api::all(client.clone());
            for name in [DYNAMIC_CLASS, STATIC_CLASS] {
                classes
                    .create(&PostParams::default(), &scenario::class(name, DRIVER))
                    .await
                    .map_err(|e| format!("class {name}: {e}"))?;
            }
            let driver = BenchDriver::start(args.driver, DRIVER, &dir).await?;
            driver.register_node(&client).await?;
            let setup = Instant::now();
            match scenario {
                "static" => {
                    scenario::create_available_volumes(&client, DRIVER, args.static_volumes).await?
                }
                _ => {
                    if let Some(pairs) = rest_pairs(scenario) {
                        scenario::create_bound_pairs(&client, NAMESPACE, DRIVER, pairs).await?
                    }
                }
            }
            if scenario == "static" || rest_pairs(scenario).is_some() {
                println!("    scene set up in {:.1}s", setup.elapsed().as_secs_f64());
            }
            Ok::<_, String>((client, driver))
        })?;
        // Processes are started from this (the main) thread: they die with it, not with a
        // runtime worker.
        let mut stack =
            Stack::start(id.kind, id.throttle, &plane.plane, driver.socket(), &args.sidecar, &dir)?;
        let outcome = runtime.block_on(self.scenario(id, scenario, &client, &driver, &stack));
        let alive = stack.check_alive();
        drop(stack);
        drop(driver);
        let outcome = outcome.and(alive);
        keep_logs(&dir, id, scenario);
        if let Err(e) = &outcome {
            let logs: Vec<String> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .map(|e| {
                    format!(
                        "--- {}\n{}",
                        e.path().display(),
                        support::control_plane::tail(&e.path())
                    )
                })
                .collect();
            eprintln!("    FAILED: {e}\n{}", logs.join("\n"));
        }
        outcome
    }

    async fn scenario(
        &mut self,
        id: RunId,
        scenario: &str,
        client: &kube::Client,
        driver: &BenchDriver,
        stack: &Stack,
    ) -> Result<(), String> {
        let limit = self.args.limit;
        let ready = Instant::now();
        scenario::warm_up(client, NAMESPACE, scenario == "lifecycle", limit).await?;
        println!("    stack up and warm in {:.1}s", ready.elapsed().as_secs_f64());
        match scenario {
            "burst" => {
                let n = self.args.small_claims;
                let burst = scenario::burst(client, NAMESPACE, DYNAMIC_CLASS, n, limit).await?;
                self.burst_figures(id, &format!("burst {n}"), &burst);
            }
            "lifecycle" => {
                let n = self.args.claims;
                let before = scenario::write_counts(client).await?;
                let burst = scenario::burst(client, NAMESPACE, DYNAMIC_CLASS, n, limit).await?;
                let after = scenario::settled_write_counts(client).await?;
                println!("    requests in the burst, {}", before.describe_since(&after));
                self.burst_figures(id, &format!("burst {n}"), &burst);
                if let Some(w) = stats::writes_per_claim(&before.writes, &after.writes, n) {
                    let name = "API writes per provisioned claim";
                    self.figure(id, name, "claims + PVs", "writes", Better::Lower, w.objects);
                    self.figure(id, name, "events", "writes", Better::Lower, w.events);
                    self.figure(id, name, "all", "writes", Better::Lower, w.objects + w.events);
                }
                let gets = |c: &scenario::Counts| -> f64 { c.gets.values().sum() };
                let name = "API GETs per provisioned claim";
                self.figure(
                    id,
                    name,
                    "all resources",
                    "GETs",
                    Better::Lower,
                    (gets(&after) - gets(&before)) / n as f64,
                );
                let grow: Vec<String> =
                    burst.names.iter().take(self.args.expand).cloned().collect();
                let seconds = scenario::expand(client, NAMESPACE, &grow, limit).await?;
                self.figure(
                    id,
                    &format!("expand {}", grow.len()),
                    "time to all expanded",
                    "s",
                    Better::Lower,
                    seconds,
                );
                let before = scenario::write_counts(client).await?;
                let seconds =
                    scenario::delete(client, NAMESPACE, &burst.names, driver, 1, limit).await?;
                let after = scenario::settled_write_counts(client).await?;
                println!("    requests in the deletion, {}", before.describe_since(&after));
                let scenario = format!("delete {n}");
                self.figure(
                    id,
                    &scenario,
                    "time to all PVs and volumes gone",
                    "s",
                    Better::Lower,
                    seconds,
                );
                // The n claim deletes are the benchmark's, as the n creates were in the burst.
                if let Some(w) = stats::writes_per_claim(&before.writes, &after.writes, n) {
                    self.figure(
                        id,
                        &scenario,
                        "API writes per claim, claims + PVs",
                        "writes",
                        Better::Lower,
                        w.objects,
                    );
                    self.figure(
                        id,
                        &scenario,
                        "API writes per claim, events",
                        "writes",
                        Better::Lower,
                        w.events,
                    );
                }
                self.figure(
                    id,
                    &scenario,
                    "API GETs per claim",
                    "GETs",
                    Better::Lower,
                    (gets(&after) - gets(&before)) / n as f64,
                );
            }
            "static" => {
                let n = self.args.claims;
                let burst = scenario::burst(client, NAMESPACE, STATIC_CLASS, n, limit).await?;
                // Only the warm-up claim was provisioned: every other one took an existing PV.
                let created = driver.volume_count().await?;
                if created != 1 {
                    return Err(format!(
                        "static binding provisioned {} volumes instead of binding",
                        created - 1
                    ));
                }
                let name = format!("static {} PVs, {n} claims", self.args.static_volumes);
                self.figure(id, &name, "time to all Bound", "s", Better::Lower, burst.seconds);
            }
            other if rest_pairs(other).is_some() => {
                let pairs = rest_pairs(other).unwrap_or_default();
                self.at_rest(id, pairs, stack).await;
            }
            other => return Err(format!("unknown scenario {other:?}")),
        }
        Ok(())
    }
}

impl Bench {
    /// The apiserver's write ceiling on a fresh plane with no stack running.
    fn ceiling(&mut self, runtime: &tokio::runtime::Runtime, run: usize) -> Result<(), String> {
        println!("==> ceiling / run {}", run + 1);
        let plane = OwnedPlane::start(PlaneOptions { audit: false, protection_finalizers: true })?;
        let (clients, in_flight, window) =
            (self.args.ceiling_clients, self.args.ceiling_in_flight, self.args.ceiling_window);
        let rate = runtime.block_on(async {
            let admin = plane.plane.client().await;
            create_namespace(&admin, NAMESPACE).await;
            let mut connections = Vec::new();
            for _ in 0..clients {
                connections.push(plane.plane.client().await);
            }
            scenario::write_ceiling(connections, NAMESPACE, in_flight, window).await
        })?;
        println!("    {rate:.1} claim status writes/s ({clients} connections × {in_flight})");
        self.results.ceiling.push(rate);
        Ok(())
    }

    /// Memory and CPU of a settled stack holding `pairs` bound pairs: the sidecars
    /// (csi-provisioner + csi-resizer, or ours) and kube-controller-manager, whose binder is part
    /// of the upstream stack's work at rest.
    async fn at_rest(&mut self, id: RunId, pairs: usize, stack: &Stack) {
        // Let start-up work (lists, the first resync) finish, then watch a quiet window.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let sum = |procs: &[&stack::Proc]| {
            procs.iter().filter_map(|p| stack::usage(p.pid())).fold(
                stack::Usage::default(),
                |a, u| stack::Usage {
                    rss_bytes: a.rss_bytes + u.rss_bytes,
                    cpu_seconds: a.cpu_seconds + u.cpu_seconds,
                },
            )
        };
        let sidecars: Vec<&stack::Proc> = stack.sidecars().collect();
        let kcm: Vec<&stack::Proc> = stack.kube_controller_manager().collect();
        let start = (sum(&sidecars), sum(&kcm));
        tokio::time::sleep(self.args.rest_window).await;
        let end = (sum(&sidecars), sum(&kcm));
        let name = format!("at rest, {pairs} bound pairs");
        let mib = end.0.rss_bytes as f64 / (1024.0 * 1024.0);
        self.figure(id, &name, "resident memory of the sidecars", "MiB", Better::Lower, mib);
        let per_pair = end.0.rss_bytes as f64 / pairs.max(1) as f64;
        self.figure(id, &name, "sidecars' memory per pair", "bytes", Better::Lower, per_pair);
        let window = self.args.rest_window.as_secs_f64();
        let cpu = |from: &stack::Usage, to: &stack::Usage| {
            (to.cpu_seconds - from.cpu_seconds) / window * 100.0
        };
        let (sidecar_cpu, kcm_cpu) = (cpu(&start.0, &end.0), cpu(&start.1, &end.1));
        self.figure(id, &name, "CPU of the sidecars", "% of a core", Better::Lower, sidecar_cpu);
        let (figure, unit) = ("CPU of kube-controller-manager", "% of a core");
        self.figure(id, &name, figure, unit, Better::Lower, kcm_cpu);
        let total = sidecar_cpu + kcm_cpu;
        let figure = "CPU of the sidecars and kube-controller-manager";
        self.figure(id, &name, figure, unit, Better::Lower, total);
    }
}

/// The pair count of a rest run (`rest@10000`).
fn rest_pairs(scenario: &str) -> Option<usize> {
    scenario.strip_prefix("rest@")?.parse().ok()
}

/// With BENCH_KEEP_LOGS=<folder>, the run's process logs are copied there before the run's
/// folder goes, as `<stack>-<throttle>-<run>-<scenario>-<process>.log`.
fn keep_logs(dir: &Path, id: RunId, scenario: &str) {
    let Some(keep) = std::env::var_os("BENCH_KEEP_LOGS").map(PathBuf::from) else {
        return;
    };
    if let Err(e) = std::fs::create_dir_all(&keep) {
        eprintln!("    BENCH_KEEP_LOGS {}: {e}", keep.display());
        return;
    }
    let prefix = format!(
        "{}-{}-{}-{scenario}",
        id.kind,
        throttle_label(id.throttle).replace([' ', '/'], "_"),
        id.run + 1
    );
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "log") {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Err(e) = std::fs::copy(&path, keep.join(format!("{prefix}-{name}"))) {
                eprintln!("    keep {}: {e}", path.display());
            }
        }
    }
}

fn throttle_label(t: Throttle) -> String {
    match t {
        Throttle::Defaults => "defaults".into(),
        Throttle::Equal { qps, burst } => format!("all {qps}/{burst}"),
        Throttle::Off => "no limit".into(),
        Throttle::Budget { qps, burst } => format!("equal total {qps}/{burst} per role"),
    }
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / (1024.0 * 1024.0));
    format!("{cores} cores ({model}), {mem_gib:.0} GiB")
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
            eprintln!("peer {peer} missing: run `make peers-bench` first (or set PEERS_BIN)");
            return ExitCode::FAILURE;
        }
    }
    if !args.sidecar.is_file() {
        eprintln!("{}: no such file (build with `cargo build --release`)", args.sidecar.display());
        return ExitCode::FAILURE;
    }
    if let Err(e) = report::load_font() {
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
            other => {
                eprintln!("unknown throttle {other:?}: defaults, equal, off or budget");
                return ExitCode::FAILURE;
            }
        }
    }
    let results = Results {
        date: jiff::Timestamp::now().to_string(),
        machine: machine(),
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
    // One rest run per pair count.
    let scenarios: Vec<String> = args
        .scenarios
        .iter()
        .flat_map(|s| match s.as_str() {
            "rest" => args.rest_pairs.iter().map(|n| format!("rest@{n}")).collect(),
            _ => vec![s.clone()],
        })
        .collect();
    let runs = args.runs;
    let mut bench = Bench { args, results };
    for run in 0..runs {
        for scenario in &scenarios {
            if scenario == "ceiling" {
                if let Err(e) = bench.ceiling(&runtime, run) {
                    bench.results.failures.push(format!("ceiling / run {}: {e}", run + 1));
                }
                continue;
            }
            for &throttle in &throttles {
                // Alternate which stack goes first, so neither always gets the cooler machine.
                let order = if run % 2 == 0 {
                    [StackKind::Upstream, StackKind::Ours, StackKind::Beside]
                } else {
                    [StackKind::Beside, StackKind::Ours, StackKind::Upstream]
                };
                for kind in order {
                    if !bench.args.stacks.contains(&kind.to_string()) {
                        continue;
                    }
                    // At rest nothing is written, so the throttle cannot matter: measured once.
                    if rest_pairs(scenario).is_some() && throttle != throttles[0] {
                        continue;
                    }
                    let id = RunId { kind, throttle, run };
                    if let Err(e) = bench.run(&runtime, id, scenario) {
                        bench.results.failures.push(format!(
                            "{kind} / {} / run {} / {scenario}: {e}",
                            throttle_label(throttle),
                            run + 1
                        ));
                    }
                    // After every run, so that a bench stopped early keeps what it measured.
                    if let Err(e) = write_report(&bench.results, &bench.args) {
                        eprintln!("report: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
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
    Ok(written)
}
