//! `make bench-storm`: a burst against a backend with limits, each stack side by side. The
//! test relay stands in front of hostpathplugin as the backend: CreateVolume slower past a
//! knee of calls in flight, ResourceExhausted above a rate. Tenant A creates `--tenant-a`
//! claims at once; tenant B creates `--tenant-b`, one every `--b-every`, during it; in the
//! middle, `--deletes` bound claims are deleted and `--resizes` grown. Each stack is also run
//! calm first (B's claims, the deletion and the resize with nothing else going on), so the
//! storm's figures have their own baseline. The bench reports; it asserts nothing.
//!
//! Stacks: ours beside kube-controller-manager as deploy/ runs it (`--worker-threads=100`), ours
//! as the binder too (kube-controller-manager without its binder), csi-provisioner +
//! csi-resizer at their default 100 workers, and hand-tuned to `--tuned-workers` (10 by
//! default: the backend's rate times the second a csi-provisioner worker holds a claim here).
//!
//! The backend's default capacity, 10 volumes/s, sits just below what kube-controller-manager's
//! binder hands over at its default client limits (about 11 claims/s with 5,000 claims queued
//! on 2 cores): with a larger one the binder, not the backend, is what the burst meets.

#[path = "../../../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

#[path = "../claims.rs"]
mod claims;
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

mod plot;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use run::{Contender, Outcome, Plan};
use stack::StackKind;

#[derive(Parser, Debug)]
#[command(
    name = "bench-storm",
    about = "a burst against a backend with limits, stacks side by side"
)]
struct Args {
    #[arg(long)]
    sidecar: PathBuf,
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 5000)]
    tenant_a: usize,
    #[arg(long, default_value_t = 10)]
    tenant_b: usize,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    b_every: Duration,
    #[arg(long, default_value_t = 100)]
    deletes: usize,
    #[arg(long, default_value_t = 20)]
    resizes: usize,
    /// When the deletion and the resize start, after the burst's first claim.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    middle: Duration,
    /// The backend: calls in flight past which CreateVolume slows down...
    #[arg(long, default_value_t = 4)]
    knee: usize,
    /// ...creates a second above which it refuses...
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// ...and how long one create takes up to the knee.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// csi-provisioner's and csi-resizer's hand-tuned workers.
    #[arg(long, default_value_t = 10)]
    tuned_workers: u32,
    /// Which stacks: ours (beside kube-controller-manager's binder, as deploy/ runs it),
    /// ours-binder (kube-controller-manager without its binder, ours with --bind-all),
    /// upstream (100 workers), upstream-tuned.
    #[arg(long, value_delimiter = ',', default_value = "ours,ours-binder,upstream-tuned,upstream")]
    stacks: Vec<String>,
    /// How long one storm may take before its run reports what it finished.
    #[arg(long, default_value = "900s", value_parser = humantime::parse_duration)]
    limit: Duration,
    /// A label for the results folder (the date by default).
    #[arg(long)]
    label: Option<String>,
    /// Runs nothing: draws the picture of a run's storm.json again, beside it.
    #[arg(long)]
    replot: Option<PathBuf>,
}

/// The picture of `plan`'s outcomes, at `path`.
fn picture(outcomes: &[Outcome], plan: &Plan, path: &std::path::Path) -> Result<(), String> {
    let title = format!(
        "{} claims of tenant A at once against a backend of {:.0} volumes/s (knee {} in flight)",
        plan.tenant_a,
        plan.capacity().calls_per_second(),
        plan.capacity.0
    );
    let capacity = (plan.capacity().calls_per_second(), plan.capacity.0);
    plot::draw(outcomes, capacity, &title, path)
}

fn replot(json: &std::path::Path) -> Result<(), String> {
    font::load_font()?;
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let (plan, outcomes): (Plan, Vec<Outcome>) =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    picture(&outcomes, &plan, &json.with_file_name("storm.png"))
}

fn contenders(args: &Args) -> Result<Vec<Contender>, String> {
    let tuned = args.tuned_workers.max(1);
    args.stacks
        .iter()
        .map(|name| match name.as_str() {
            "ours" => Ok(Contender {
                label: "ours (100 workers)".into(),
                kind: StackKind::Beside,
                workers: 100,
            }),
            "ours-binder" => Ok(Contender {
                label: "ours as the binder too (100 workers)".into(),
                kind: StackKind::Ours,
                workers: 100,
            }),
            "upstream" => Ok(Contender {
                label: "upstream (100 workers)".into(),
                kind: StackKind::Upstream,
                workers: 100,
            }),
            "upstream-tuned" => Ok(Contender {
                label: format!("upstream ({tuned} workers, tuned)"),
                kind: StackKind::Upstream,
                workers: tuned,
            }),
            other => Err(format!(
                "unknown stack {other:?}: ours, ours-binder, upstream or upstream-tuned"
            )),
        })
        .collect()
}

/// The report's rows for one stack: (figure, value, goal).
fn rows(o: &Outcome, plan: &Plan) -> Vec<(String, String, &'static str)> {
    let capacity = plan.capacity().calls_per_second();
    let p99 = |v: &[f64]| stats::percentile(v, 99.0);
    let ratio = |storm: Option<f64>, calm: Option<f64>| match (storm, calm) {
        (Some(s), Some(c)) if c > 0.0 => format!("{s:.1} s / {c:.1} s = {:.2}×", s / c),
        (None, Some(c)) => format!("not done within the limit / {c:.1} s"),
        _ => "—".into(),
    };
    let all_bound = match o.a_all_bound {
        Some(s) => format!("{s:.0} s"),
        None => {
            format!("{} of {} within {:.0} s", o.a_bound, plan.tenant_a, plan.limit.as_secs_f64())
        }
    };
    let refused = 100.0 * o.refused as f64 / o.created.max(1) as f64;
    vec![
        ("tenant A's claims all Bound".into(), all_bound, ""),
        (
            "goodput (volumes created / s)".into(),
            format!("{:.1} = {:.2} of {capacity:.0}", o.goodput, o.goodput / capacity),
            "≥ 0.95 of capacity",
        ),
        (
            "refused calls per 100 volumes".into(),
            format!("{refused:.1} ({} refused, {} created)", o.refused, o.created),
            "≤ 1",
        ),
        (
            "tenant B's p99, creation to Bound: storm / calm".into(),
            ratio(p99(&o.b_storm), p99(&o.b_calm))
                + &format!(" ({} of {} Bound)", o.b_storm.len(), plan.tenant_b),
            "≤ 1.5×",
        ),
        (
            "of which creation to the binder's hand-over: storm / calm".into(),
            ratio(p99(&o.b_storm_handed), p99(&o.b_calm_handed)),
            "",
        ),
        (
            "deletion of the bound claims: storm / calm".into(),
            ratio(o.deletes_storm, o.deletes_calm),
            "≤ 2×",
        ),
        ("resize: storm / calm".into(), ratio(o.resizes_storm, o.resizes_calm), "≤ 2×"),
    ]
}

fn report(outcomes: &[Outcome], plan: &Plan, args: &Args) -> String {
    let cap = plan.capacity();
    let mut md = format!(
        "# Storm against a backend with limits\n\nBackend (the test relay in front of hostpathplugin): CreateVolume takes {:?} up to {} \
         calls in flight and longer in proportion past that; above {} creates/s it answers ResourceExhausted. Capacity {:.0} volumes/s.\n\n\
         Tenant A: {} claims at once. Tenant B: {} claims, one every {:?}, from 5 s in. In the middle ({:?} in): {} bound claims deleted and {} grown. \
         Calm baseline: the same deletion and resize, and B's claims one a second, with nothing else going on. \
         Command: `make bench-storm` (`bench-storm --tenant-a {} --knee {} --rate {} --latency {:?}`). Machine: {}.\n\n",
        cap.latency,
        cap.knee,
        cap.per_second,
        cap.calls_per_second(),
        plan.tenant_a,
        plan.tenant_b,
        plan.b_every,
        plan.middle,
        plan.deletes,
        plan.resizes,
        plan.tenant_a,
        args.knee,
        args.rate,
        args.latency,
        common::machine(),
    );
    for o in outcomes {
        md.push_str(&format!("## {}\n\n| figure | value | goal |\n|---|---|---|\n", o.label));
        for (figure, value, goal) in rows(o, plan) {
            md.push_str(&format!("| {figure} | {value} | {goal} |\n"));
        }
        md.push('\n');
    }
    md
}

fn main() -> ExitCode {
    let args = Args::parse();
    let plan = Plan {
        tenant_a: args.tenant_a,
        tenant_b: args.tenant_b,
        b_every: args.b_every,
        deletes: args.deletes,
        resizes: args.resizes,
        middle: args.middle,
        capacity: (args.knee, args.rate, args.latency),
        limit: args.limit,
    };
    let outcome = (|| -> Result<(), String> {
        if let Some(json) = &args.replot {
            return replot(json);
        }
        font::load_font()?;
        let contenders = contenders(&args)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let label = args
            .label
            .clone()
            .unwrap_or_else(|| jiff::Zoned::now().strftime("%Y-%m-%d").to_string());
        let dir = args.out.join(format!("{label}-storm"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut outcomes = Vec::new();
        for who in &contenders {
            println!("==> {}", who.label);
            let outcome = run::run(&runtime, who, &plan, &args.sidecar)?;
            for (figure, value, _) in rows(&outcome, &plan) {
                println!("    {figure}: {value}");
            }
            outcomes.push(outcome);
            let json =
                serde_json::to_string_pretty(&(&plan, &outcomes)).map_err(|e| e.to_string())?;
            std::fs::write(dir.join("storm.json"), json).map_err(|e| e.to_string())?;
        }
        std::fs::write(dir.join("storm.md"), report(&outcomes, &plan, &args))
            .map_err(|e| e.to_string())?;
        picture(&outcomes, &plan, &dir.join("storm.png"))?;
        println!("results in {}", dir.display());
        Ok(())
    })();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-storm: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            tenant_a: 100,
            tenant_b: 2,
            b_every: Duration::from_secs(10),
            deletes: 10,
            resizes: 2,
            middle: Duration::from_secs(30),
            capacity: (8, 25.0, Duration::from_millis(200)),
            limit: Duration::from_secs(900),
        }
    }

    #[test]
    fn figures_against_their_goals() {
        let o = Outcome {
            label: "x".into(),
            a_all_bound: Some(5.0),
            a_bound: 100,
            created: 100,
            goodput: 20.0,
            refused: 3,
            b_calm: vec![1.0, 2.0],
            b_storm: vec![3.0, 1.0],
            deletes_calm: Some(4.0),
            deletes_storm: Some(6.0),
            resizes_calm: Some(1.0),
            resizes_storm: None,
            ..Outcome::default()
        };
        let got: Vec<String> = rows(&o, &plan()).into_iter().map(|(_, v, _)| v).collect();
        assert_eq!(
            got,
            [
                "5 s",
                "20.0 = 0.80 of 25",
                "3.0 (3 refused, 100 created)",
                "3.0 s / 2.0 s = 1.50× (2 of 2 Bound)",
                "—",
                "6.0 s / 4.0 s = 1.50×",
                "not done within the limit / 1.0 s",
            ]
        );
    }

    #[test]
    fn stacks_by_name() {
        let args = Args::parse_from(["bench-storm", "--sidecar", "s", "--out", "o"]);
        let got: Vec<(String, u32)> =
            contenders(&args).unwrap().into_iter().map(|c| (c.label, c.workers)).collect();
        assert_eq!(got[2], ("upstream (10 workers, tuned)".to_string(), 10));
        let bad =
            Args::parse_from(["bench-storm", "--sidecar", "s", "--out", "o", "--stacks", "x"]);
        assert!(contenders(&bad).is_err());
    }
}
