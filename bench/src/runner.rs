//! One scenario of one stack on a fresh control plane and driver, and the figures it gives.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};

use crate::driver::BenchDriver;
use crate::measure::{self, Load, Roles};
use crate::plan::Scenario;
use crate::report::{Better, Figure, Latencies, Results};
use crate::scenario::{self, DYNAMIC_CLASS, STATIC_CLASS};
use crate::stack::{Placement, Stack, StackKind, Throttle};
use crate::support::control_plane::{OwnedPlane, PlaneOptions, create_namespace, tail};
use crate::{Args, DRIVER, NAMESPACE, stats};

/// Where one run is: which stack, which throttle, which repetition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunId {
    pub kind: StackKind,
    pub throttle: Throttle,
    pub run: usize,
}

pub struct Bench {
    pub args: Args,
    pub results: Results,
    /// kube-controller-manager's metrics port in the running stack.
    pub kcm_port: Option<u16>,
    /// When the bench began, for the progress lines.
    pub started: Instant,
}

const MIB: f64 = 1024.0 * 1024.0;

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
        let rate = n / burst.seconds.max(1e-9);
        self.figure(id, scenario, "throughput", "claims/s", Better::Higher, rate);
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

    /// What the work cost each role: CPU per claim between two samples, and the peak memory of
    /// the sidecars and of kube-controller-manager (whose binder is upstream's).
    fn cost_figures(
        &mut self,
        id: RunId,
        scenario: &str,
        claims: usize,
        before: &[(&'static str, measure::Usage)],
        after: &[(&'static str, measure::Usage)],
    ) {
        for (role, seconds) in measure::cpu_between(before, after) {
            let ms = seconds * 1000.0 / claims.max(1) as f64;
            self.figure(id, scenario, cpu_metric(role), "ms", Better::Lower, ms);
        }
        for (role, usage) in after {
            let metric = match *role {
                "sidecars" => "peak resident memory of the sidecars",
                "kube-controller-manager" => "peak resident memory of kube-controller-manager",
                _ => continue,
            };
            let mib = usage.peak_rss_bytes as f64 / MIB;
            self.figure(id, scenario, metric, "MiB", Better::Lower, mib);
        }
    }

    /// One scenario on a fresh control plane, driver and stack.
    pub fn run(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        id: RunId,
        scenario: Scenario,
    ) -> Result<(), String> {
        println!(
            "==> {} / {} / run {} of {} / {scenario} ({:.0} s since the start)",
            id.kind,
            throttle_label(id.throttle),
            id.run + 1,
            self.args.runs,
            self.started.elapsed().as_secs_f64()
        );
        let plane = OwnedPlane::start(PlaneOptions {
            audit: false,
            protection_finalizers: true,
            service_accounts: false,
        })?;
        let dir = plane.plane.dir.join("run");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let args = &self.args;
        let (client, driver) = runtime.block_on(async {
            let client = plane.plane.client().await;
            create_namespace(&client, NAMESPACE).await;
            let classes: Api<StorageClass> = Api::all(client.clone());
            for name in [DYNAMIC_CLASS, STATIC_CLASS] {
                classes
                    .create(&PostParams::default(), &crate::claims::class(name, DRIVER))
                    .await
                    .map_err(|e| format!("class {name}: {e}"))?;
            }
            let driver = BenchDriver::start(args.driver, DRIVER, &dir).await?;
            driver.register_node(&client).await?;
            let setup = Instant::now();
            match scenario {
                Scenario::Static { volumes, .. } => {
                    scenario::create_available_volumes(&client, DRIVER, volumes).await?
                }
                Scenario::Rest(pairs) => {
                    scenario::create_bound_pairs(&client, NAMESPACE, DRIVER, pairs).await?
                }
                _ => {}
            }
            if matches!(scenario, Scenario::Static { .. } | Scenario::Rest(_)) {
                println!("    scene set up in {:.1}s", setup.elapsed().as_secs_f64());
            }
            Ok::<_, String>((client, driver))
        })?;
        // Processes are started from this (the main) thread: they die with it, not with a
        // runtime worker.
        let placement = Placement {
            socket: driver.socket(),
            dir: &dir,
            journal_root: args.journal_dir.as_deref(),
            extra_controllers: &[],
            workers: None,
        };
        let mut stack =
            Stack::start(id.kind, id.throttle, &plane.plane, &args.sidecar, &placement)?;
        // At rest the stack is measured alone, whatever the throttle.
        let load = match (id.throttle, scenario) {
            (_, Scenario::Rest(_)) => None,
            (Throttle::Busy { cores }, _) => Some(Load::start(cores, &dir)?),
            _ => None,
        };
        let mut roles = Roles::default();
        let plane_pids = [plane.apiserver_pid(), plane.etcd_pid()];
        for (role, pid) in ["kube-apiserver", "etcd"].into_iter().zip(plane_pids) {
            pid.into_iter().for_each(|pid| roles.add(role, pid));
        }
        stack.sidecars().for_each(|p| roles.add("sidecars", p.pid()));
        stack.kube_controller_manager().for_each(|p| roles.add("kube-controller-manager", p.pid()));
        driver.pid().into_iter().for_each(|pid| roles.add("driver", pid));
        roles.add("benchmark", std::process::id());
        load.iter().flat_map(Load::pids).for_each(|pid| roles.add("competing load", pid));
        self.kcm_port = Some(stack.kcm_port);
        let outcome = runtime.block_on(self.scenario(id, scenario, &client, &driver, &roles));
        drop(load);
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
                .map(|e| format!("--- {}\n{}", e.path().display(), tail(&e.path())))
                .collect();
            eprintln!("    FAILED: {e}\n{}", logs.join("\n"));
        }
        outcome
    }

    async fn scenario(
        &mut self,
        id: RunId,
        scenario: Scenario,
        client: &kube::Client,
        driver: &BenchDriver,
        roles: &Roles,
    ) -> Result<(), String> {
        let limit = self.args.limit;
        let ready = Instant::now();
        let lifecycle = matches!(scenario, Scenario::Lifecycle(_));
        scenario::warm_up(client, NAMESPACE, lifecycle, limit).await?;
        println!("    stack up and warm in {:.1}s", ready.elapsed().as_secs_f64());
        match scenario {
            Scenario::Burst(n) => {
                self.measured_burst(id, n, client, roles).await?;
            }
            Scenario::Lifecycle(n) => self.lifecycle(id, n, client, driver, roles).await?,
            Scenario::Static { volumes, claims } => {
                let before = roles.sample();
                let burst = scenario::burst(client, NAMESPACE, STATIC_CLASS, claims, limit).await?;
                let after = roles.sample();
                // Only the warm-up claim was provisioned: every other one took an existing PV.
                let created = driver.volume_count().await?;
                if created != 1 {
                    return Err(format!(
                        "static binding provisioned {} volumes instead of binding",
                        created - 1
                    ));
                }
                let name = format!("static {volumes} PVs, {claims} claims");
                self.figure(id, &name, "time to all Bound", "s", Better::Lower, burst.seconds);
                self.cost_figures(id, &name, claims, &before, &after);
            }
            Scenario::Rest(pairs) => self.at_rest(id, pairs, roles).await,
            Scenario::Ceiling => return Err("the ceiling runs without a stack".into()),
        }
        Ok(())
    }

    /// A burst of `n` provisioned claims: its time and latencies, what it cost each process,
    /// and the API writes and GETs per claim.
    async fn measured_burst(
        &mut self,
        id: RunId,
        n: usize,
        client: &kube::Client,
        roles: &Roles,
    ) -> Result<scenario::Burst, String> {
        let before = scenario::write_counts(client).await?;
        let binder_before = self.kcm_port.map(crate::kcm_requests::scrape).transpose()?;
        let cost_before = roles.sample();
        let burst = scenario::burst(client, NAMESPACE, DYNAMIC_CLASS, n, self.args.limit).await?;
        let cost_after = roles.sample();
        let after = scenario::settled_write_counts(client).await?;
        let binder_after = self.kcm_port.map(crate::kcm_requests::scrape).transpose()?;
        if let (Some(b), Some(a)) = (binder_before, binder_after) {
            let name = "kube-controller-manager's requests per provisioned claim";
            for (kind, per_claim) in crate::kcm_requests::per_claim(&b, &a, n) {
                self.figure(id, name, kind, "requests", Better::Lower, per_claim);
            }
        }
        println!("    requests in the burst, {}", before.describe_since(&after));
        let name = format!("burst {n}");
        self.burst_figures(id, &name, &burst);
        self.cost_figures(id, &name, n, &cost_before, &cost_after);
        if let Some(w) = stats::writes_per_claim(&before.writes, &after.writes, n) {
            let name = "API writes per provisioned claim";
            self.figure(id, name, "claims + PVs", "writes", Better::Lower, w.objects);
            self.figure(id, name, "events", "writes", Better::Lower, w.events);
            self.figure(id, name, "all", "writes", Better::Lower, w.objects + w.events);
        }
        let per_claim = (gets(&after) - gets(&before)) / n as f64;
        let name = "API GETs per provisioned claim";
        self.figure(id, name, "all resources", "GETs", Better::Lower, per_claim);
        Ok(burst)
    }

    /// A burst of `n`, then --expand of them grown, then all deleted: time, writes and GETs of
    /// each step.
    async fn lifecycle(
        &mut self,
        id: RunId,
        n: usize,
        client: &kube::Client,
        driver: &BenchDriver,
        roles: &Roles,
    ) -> Result<(), String> {
        let limit = self.args.limit;
        let burst = self.measured_burst(id, n, client, roles).await?;
        let grow: Vec<String> = burst.names.iter().take(self.args.expand).cloned().collect();
        let seconds = scenario::expand(client, NAMESPACE, &grow, limit).await?;
        let name = format!("expand {}", grow.len());
        self.figure(id, &name, "time to all expanded", "s", Better::Lower, seconds);
        let before = scenario::write_counts(client).await?;
        let seconds = scenario::delete(client, NAMESPACE, &burst.names, driver, 1, limit).await?;
        let after = scenario::settled_write_counts(client).await?;
        println!("    requests in the deletion, {}", before.describe_since(&after));
        let name = format!("delete {n}");
        let gone = "time to all PVs and volumes gone";
        self.figure(id, &name, gone, "s", Better::Lower, seconds);
        // The n claim deletes are the benchmark's, as the n creates were in the burst.
        if let Some(w) = stats::writes_per_claim(&before.writes, &after.writes, n) {
            let (objects, events) =
                ("API writes per claim, claims + PVs", "API writes per claim, events");
            self.figure(id, &name, objects, "writes", Better::Lower, w.objects);
            self.figure(id, &name, events, "writes", Better::Lower, w.events);
        }
        let per_claim = (gets(&after) - gets(&before)) / n as f64;
        self.figure(id, &name, "API GETs per claim", "GETs", Better::Lower, per_claim);
        Ok(())
    }

    /// The apiserver's write ceiling on a fresh plane with no stack running.
    pub fn ceiling(&mut self, runtime: &tokio::runtime::Runtime, run: usize) -> Result<(), String> {
        println!(
            "==> ceiling / run {} of {} ({:.0} s since the start)",
            run + 1,
            self.args.runs,
            self.started.elapsed().as_secs_f64()
        );
        let plane = OwnedPlane::start(PlaneOptions {
            audit: false,
            protection_finalizers: true,
            service_accounts: false,
        })?;
        let (clients, in_flight, window) =
            (self.args.ceiling_clients, self.args.ceiling_in_flight, self.args.ceiling_window);
        let mut roles = Roles::default();
        let plane_pids = [plane.apiserver_pid(), plane.etcd_pid()];
        for (role, pid) in ["kube-apiserver", "etcd"].into_iter().zip(plane_pids) {
            pid.into_iter().for_each(|pid| roles.add(role, pid));
        }
        roles.add("benchmark", std::process::id());
        let (ceiling, before, after) = runtime.block_on(async {
            let admin = plane.plane.client().await;
            create_namespace(&admin, NAMESPACE).await;
            let mut connections = Vec::new();
            for _ in 0..clients {
                connections.push(plane.plane.client().await);
            }
            let before = roles.sample();
            let ceiling = scenario::write_ceiling(connections, NAMESPACE, in_flight, window).await;
            (ceiling, before, roles.sample())
        });
        let ceiling = ceiling?;
        let rate = ceiling.writes as f64 / ceiling.seconds.max(1e-9);
        println!("    {rate:.1} claim status writes/s ({clients} connections × {in_flight})");
        // What one write cost the machine, to set beside what one claim of a burst costs it.
        let mut per_write = Vec::new();
        for (role, seconds) in measure::cpu_between(&before, &after) {
            let ms = seconds * 1000.0 / ceiling.writes.max(1) as f64;
            println!("    {}: {ms:.3} ms", ceiling_cpu_metric(role));
            per_write.push((ceiling_cpu_metric(role), ms));
        }
        self.results.ceiling.push(rate);
        self.results.ceiling_cpu.push(per_write);
        Ok(())
    }

    /// Memory and CPU of a settled stack holding `pairs` bound pairs: the sidecars
    /// (csi-provisioner + csi-resizer, or ours) and kube-controller-manager, whose binder is part
    /// of the upstream stack's work at rest.
    async fn at_rest(&mut self, id: RunId, pairs: usize, roles: &Roles) {
        // Let start-up work (lists, the first resync) finish, then watch a quiet window.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let start = roles.sample();
        tokio::time::sleep(self.args.rest_window).await;
        let end = roles.sample();
        let of = |role: &str| end.iter().find(|(r, _)| *r == role).map(|(_, u)| *u);
        let name = format!("at rest, {pairs} bound pairs");
        let sidecars = of("sidecars").unwrap_or_default();
        let mib = sidecars.rss_bytes as f64 / MIB;
        self.figure(id, &name, "resident memory of the sidecars", "MiB", Better::Lower, mib);
        let per_pair = sidecars.rss_bytes as f64 / pairs.max(1) as f64;
        self.figure(id, &name, "sidecars' memory per pair", "bytes", Better::Lower, per_pair);
        let window = self.args.rest_window.as_secs_f64();
        let cpu: Vec<(&str, f64)> = measure::cpu_between(&start, &end)
            .into_iter()
            .map(|(role, seconds)| (role, seconds / window * 100.0))
            .collect();
        let share = |role: &str| cpu.iter().find(|(r, _)| *r == role).map_or(0.0, |(_, c)| *c);
        let (sidecar_cpu, kcm_cpu) = (share("sidecars"), share("kube-controller-manager"));
        let unit = "% of a core";
        self.figure(id, &name, "CPU of the sidecars", unit, Better::Lower, sidecar_cpu);
        self.figure(id, &name, "CPU of kube-controller-manager", unit, Better::Lower, kcm_cpu);
        let figure = "CPU of the sidecars and kube-controller-manager";
        self.figure(id, &name, figure, unit, Better::Lower, sidecar_cpu + kcm_cpu);
    }
}

/// Every GET the apiserver answered.
fn gets(counts: &scenario::Counts) -> f64 {
    counts.gets.values().sum()
}

/// The figure name of a role's CPU per ceiling write.
fn ceiling_cpu_metric(role: &str) -> &'static str {
    match role {
        "kube-apiserver" => "CPU per write: kube-apiserver",
        "etcd" => "CPU per write: etcd",
        _ => "CPU per write: the writers",
    }
}

/// The figure name of a role's CPU per claim.
fn cpu_metric(role: &str) -> &'static str {
    match role {
        "kube-apiserver" => "CPU per claim: kube-apiserver",
        "etcd" => "CPU per claim: etcd",
        "sidecars" => "CPU per claim: the sidecars",
        "kube-controller-manager" => "CPU per claim: kube-controller-manager",
        "driver" => "CPU per claim: the driver",
        "benchmark" => "CPU per claim: the benchmark's client",
        _ => "CPU per claim: the competing load",
    }
}

/// With BENCH_KEEP_LOGS=<folder>, the run's process logs are copied there before the run's
/// folder goes, as `<stack>-<throttle>-<run>-<scenario>-<process>.log`.
fn keep_logs(dir: &Path, id: RunId, scenario: Scenario) {
    let Some(keep) = std::env::var_os("BENCH_KEEP_LOGS").map(PathBuf::from) else {
        return;
    };
    if let Err(e) = std::fs::create_dir_all(&keep) {
        eprintln!("    BENCH_KEEP_LOGS {}: {e}", keep.display());
        return;
    }
    let prefix = format!(
        "{}-{}-{}-{}",
        id.kind,
        throttle_label(id.throttle).replace([' ', '/', ','], "_"),
        id.run + 1,
        scenario.to_string().replace([':'], "_")
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

pub fn throttle_label(t: Throttle) -> String {
    match t {
        Throttle::Defaults => "defaults".into(),
        Throttle::Equal { qps, burst } => format!("all {qps}/{burst}"),
        Throttle::Off => "no limit".into(),
        Throttle::Budget { qps, burst } => format!("equal total {qps}/{burst} per role"),
        Throttle::Busy { cores } => format!("no limit, {cores} cores busy"),
    }
}
