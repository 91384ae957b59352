//! `make bench-pods`: what users feel. On one real node (containerd, kubelet, kube-scheduler),
//! pods start on new volumes with upstream's stack (kube-controller-manager's binder and
//! expander, csi-provisioner, csi-resizer) and with ours beside kube-controller-manager's binder
//! as deploy/ runs it, against the limit: the same pods on claims Bound before the scale-up.
//!
//! Scenarios, each on N pods (`--pods`):
//! - `limit`: a StatefulSet scaled 0 → N on claims made and Bound beforehand;
//! - `immediate`, `wffc`: a StatefulSet with a claim template of a class that binds at once, or
//!   waits for the first consumer, scaled 0 → N, then to 0 (its claims deleted with its pods);
//! - `grow`: every claim of the Immediate set grown while its pod runs;
//! - `ephemeral`: N pods with generic ephemeral volumes, then deleted.
//!
//! Every run of every stack gets a fresh cluster. Results, with a stacked bar per throttle of
//! where each pod's wait goes, in a dated folder under `--out`.

#[path = "../../../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

#[path = "../common.rs"]
mod common;
#[path = "../font.rs"]
mod font;
#[path = "../stack.rs"]
#[allow(dead_code)]
mod stack;
#[path = "../stats.rs"]
#[allow(dead_code)]
mod stats;

mod bars;
mod cluster;
mod objects;
mod report;
mod scenarios;
mod splits;
mod timeline;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use cluster::Cluster;
use objects::{IMMEDIATE_CLASS, WFFC_CLASS};
use report::{LIMIT, Results, Row, SplitRow};
use scenarios::{Outcome, Scenarios};
use stack::{StackKind, Throttle};
use timeline::Recorder;

#[derive(Parser, Debug)]
#[command(name = "bench-pods", about = "pods on new volumes: upstream's stack and ours, one node")]
struct Args {
    /// Runs of every scenario per stack and throttle; the report gives median, min and max.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Pods per scenario.
    #[arg(long, default_value_t = 100)]
    pods: usize,
    /// Which scenarios: limit, immediate, grow (needs immediate), wffc, ephemeral.
    #[arg(long, value_delimiter = ',', default_value = "limit,immediate,grow,wffc,ephemeral")]
    scenarios: Vec<String>,
    /// Which throttles: defaults (each component's own), off (no client-side limit in the
    /// storage components), equal (all at --equal-qps/--equal-burst), budget (the same total
    /// for each stack: every upstream role at --equal-qps/--equal-burst, ours the sum of the
    /// two roles it takes over).
    #[arg(long, value_delimiter = ',', default_value = "defaults,off,budget")]
    throttles: Vec<String>,
    /// Which stacks: upstream, ours.
    #[arg(long, value_delimiter = ',', default_value = "upstream,ours")]
    stacks: Vec<String>,
    #[arg(long, default_value_t = 200)]
    equal_qps: u32,
    #[arg(long, default_value_t = 400)]
    equal_burst: u32,
    /// Longest wait for one step.
    #[arg(long, default_value = "900s", value_parser = humantime::parse_duration)]
    limit: Duration,
    /// The csi-pv-controller binary (a release build).
    #[arg(long)]
    sidecar: PathBuf,
    /// Where the dated results folder goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// The results folder's name (default: today's date and `-pods`).
    #[arg(long)]
    name: Option<String>,
    /// Run nothing: write the report again from the folder's results.json.
    #[arg(long)]
    report_only: bool,
}

fn throttle(name: &str, args: &Args) -> Result<Throttle, String> {
    match name {
        "defaults" => Ok(Throttle::Defaults),
        "off" => Ok(Throttle::Off),
        "equal" => Ok(Throttle::Equal { qps: args.equal_qps, burst: args.equal_burst }),
        "budget" => Ok(Throttle::Budget { qps: args.equal_qps, burst: args.equal_burst }),
        other => Err(format!("unknown throttle {other}: defaults, off, equal or budget")),
    }
}

fn stack_kind(name: &str) -> Result<StackKind, String> {
    match name {
        "upstream" => Ok(StackKind::Upstream),
        "ours" => Ok(StackKind::Beside),
        other => Err(format!("unknown stack {other}: upstream or ours")),
    }
}

/// The label a stack's rows carry.
fn label(kind: StackKind) -> &'static str {
    if kind == StackKind::Upstream { "upstream" } else { "ours" }
}

struct Run<'a> {
    args: &'a Args,
    kind: StackKind,
    throttle: String,
    run: usize,
}

impl Run<'_> {
    fn record(&self, results: &mut Results, scenario: &str, stack: &str, outcome: &Outcome) {
        for f in &outcome.figures {
            results.rows.push(Row {
                scenario: scenario.into(),
                stack: stack.into(),
                throttle: self.throttle.clone(),
                run: self.run,
                metric: f.metric.into(),
                unit: f.unit.into(),
                value: f.value,
            });
            println!("    {scenario} — {stack}: {} = {:.2} {}", f.metric, f.value, f.unit);
        }
        if let Some(mean) = splits::mean(&outcome.splits) {
            results.splits.push(SplitRow {
                scenario: scenario.into(),
                stack: stack.into(),
                throttle: self.throttle.clone(),
                run: self.run,
                pods: outcome.splits.len(),
                mean,
            });
        }
    }

    /// Every chosen scenario on one cluster, in order.
    async fn scenarios(&self, s: &Scenarios<'_>, results: &mut Results) -> Result<(), String> {
        let n = self.args.pods;
        let chosen = |name: &str| self.args.scenarios.iter().any(|c| c == name);
        let me = label(self.kind);
        if chosen("limit") {
            let started = s.start_set("limit", IMMEDIATE_CLASS, n, true).await?;
            self.record(results, &format!("statefulset@{n} Bound beforehand"), LIMIT, &started);
            s.scale_down("limit", n).await?;
        }
        if chosen("immediate") {
            let started = s.start_set("now", IMMEDIATE_CLASS, n, false).await?;
            self.record(results, &format!("statefulset@{n} Immediate"), me, &started);
            if chosen("grow") {
                let grown = s.grow("now", n).await?;
                self.record(results, &format!("grow@{n}"), me, &grown);
            }
            let emptied = s.scale_down("now", n).await?;
            self.record(results, &format!("scale-down@{n} Immediate"), me, &emptied);
        }
        if chosen("wffc") {
            let started = s.start_set("later", WFFC_CLASS, n, false).await?;
            self.record(results, &format!("statefulset@{n} WaitForFirstConsumer"), me, &started);
            let emptied = s.scale_down("later", n).await?;
            self.record(results, &format!("scale-down@{n} WaitForFirstConsumer"), me, &emptied);
        }
        if chosen("ephemeral") {
            let (started, gone) = s.ephemeral(WFFC_CLASS, n).await?;
            self.record(results, &format!("ephemeral@{n}"), me, &started);
            self.record(results, &format!("ephemeral@{n} deleted"), me, &gone);
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = support::control_plane::runtime();
    let name = args.name.clone().unwrap_or_else(|| format!("{}-pods", jiff::Zoned::now().date()));
    let out = args.out.join(name);
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("{}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    if let Err(e) = font::load_font() {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    if args.report_only {
        let read = std::fs::read_to_string(out.join("results.json")).map_err(|e| e.to_string());
        let written = read
            .and_then(|text| serde_json::from_str::<Results>(&text).map_err(|e| e.to_string()))
            .and_then(|results| report::write(&results, &out, args.pods));
        return match written {
            Ok(table) => {
                println!("{table}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("report: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // A folder that has results already gets more runs: an interrupted command is continued.
    let earlier = std::fs::read_to_string(out.join("results.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Results>(&text).ok());
    let first_run =
        earlier.as_ref().map_or(0, |r| r.rows.iter().map(|r| r.run + 1).max().unwrap_or(0));
    let mut results = Results {
        setup: vec![
            format!("machine: {}", common::machine()),
            format!(
                "{} pods per scenario; each cell is the median (min–max) of the runs, \
                 counted under each throttle's heading",
                args.pods
            ),
            "one node: kubelet, containerd (runc), kube-scheduler at their defaults; \
             hostpathplugin behind a relay that times each CSI call; csi-attacher; \
             every claim 1Mi, grown to 2Mi"
                .into(),
            "upstream: kube-controller-manager's binder and expander, csi-provisioner \
             (--worker-threads=100), csi-resizer (--workers=100); ours: csi-pv-controller as \
             deploy/ runs it, beside kube-controller-manager's binder, --worker-threads=100"
                .into(),
            "the limit: the same StatefulSet on claims made and Bound before the scale-up, \
             measured in both stacks' clusters"
                .into(),
            "the throttle applies to kube-controller-manager, the sidecars and csi-attacher".into(),
        ],
        ..earlier.unwrap_or_default()
    };
    let started = Instant::now();
    let mut failed = false;
    // Throttle by throttle, so that an interrupted run has every run of the first ones.
    for throttle_name in &args.throttles {
        for run in first_run..first_run + args.runs {
            for stack_name in &args.stacks {
                let (throttle, kind) =
                    match (throttle(throttle_name, &args), stack_kind(stack_name)) {
                        (Ok(t), Ok(k)) => (t, k),
                        (Err(e), _) | (_, Err(e)) => {
                            eprintln!("{e}");
                            return ExitCode::FAILURE;
                        }
                    };
                println!(
                    "==> {} / {throttle} / run {} of {} ({:.0} s since the start)",
                    label(kind),
                    run + 1 - first_run,
                    args.runs,
                    started.elapsed().as_secs_f64()
                );
                let one = Run { args: &args, kind, throttle: throttle.to_string(), run };
                let outcome =
                    Cluster::start(&runtime, kind, throttle, &args.sidecar).and_then(|cluster| {
                        runtime
                            .block_on(async {
                                let recorder = Recorder::start(&cluster.client, cluster::NAMESPACE);
                                let s = Scenarios {
                                    cluster: &cluster,
                                    recorder: &recorder,
                                    limit: args.limit,
                                };
                                one.scenarios(&s, &mut results).await
                            })
                            .map_err(|e| format!("{e}\n{}", cluster.logs()))
                    });
                if let Err(e) = outcome {
                    eprintln!("    FAILED: {e}");
                    failed = true;
                }
                if let Err(e) = report::write(&results, &out, args.pods) {
                    eprintln!("report: {e}");
                }
            }
        }
    }
    match report::write(&results, &out, args.pods) {
        Ok(table) => println!("{table}\nresults in {}", out.display()),
        Err(e) => {
            eprintln!("report: {e}");
            failed = true;
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
