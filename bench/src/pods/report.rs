//! The pod scenarios' report: every run's figures as JSON, a table of medians (min–max) per
//! throttle with the ratios the headline quotes, and one stacked-bar picture per throttle.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::bars::{self, Bar};
use crate::scenarios::{GROWN_RATE, RUNNING_RATE};
use crate::stats::Spread;

/// The stack label of the limit's rows: claims Bound before the scale-up, measured in both
/// stacks' clusters.
pub const LIMIT: &str = "limit";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub scenario: String,
    pub stack: String,
    pub throttle: String,
    pub run: usize,
    pub metric: String,
    pub unit: String,
    pub value: f64,
}

/// The mean pod's split in one run of one scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SplitRow {
    pub scenario: String,
    pub stack: String,
    pub throttle: String,
    pub run: usize,
    pub pods: usize,
    pub mean: [f64; 7],
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Results {
    pub setup: Vec<String>,
    pub rows: Vec<Row>,
    pub splits: Vec<SplitRow>,
}

impl Results {
    fn spread(&self, scenario: &str, stack: &str, throttle: &str, metric: &str) -> Option<Spread> {
        let values: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| r.scenario == scenario && r.throttle == throttle && r.metric == metric)
            .filter(|r| r.stack == stack)
            .map(|r| r.value)
            .collect();
        Spread::of(&values)
    }

    /// Every run's mean split of (scenario, stack, throttle), averaged over the runs.
    fn mean_split(&self, scenario: &str, stack: &str, throttle: &str) -> Option<[f64; 7]> {
        let runs: Vec<[f64; 7]> = self
            .splits
            .iter()
            .filter(|s| s.scenario == scenario && s.stack == stack && s.throttle == throttle)
            .map(|s| s.mean)
            .collect();
        crate::splits::mean(&runs)
    }
}

fn cell(spread: Option<Spread>) -> String {
    match spread {
        Some(s) if s.runs > 1 => format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max),
        Some(s) => format!("{:.2}", s.median),
        None => "–".into(),
    }
}

fn ratio(a: Option<Spread>, b: Option<Spread>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.median > 0.0 => format!("{:.2}", a.median / b.median),
        _ => "–".into(),
    }
}

/// The ratios the headline quotes, per throttle: each stack's pods-Running rate against the
/// limit's and ours against upstream's, per binding mode; and grow's rate ratio.
pub fn headline(results: &Results, throttle: &str, n: usize) -> String {
    let mut out = String::new();
    let limit =
        results.spread(&format!("statefulset@{n} Bound beforehand"), LIMIT, throttle, RUNNING_RATE);
    for mode in ["Immediate", "WaitForFirstConsumer"] {
        let scenario = format!("statefulset@{n} {mode}");
        let ours = results.spread(&scenario, "ours", throttle, RUNNING_RATE);
        let upstream = results.spread(&scenario, "upstream", throttle, RUNNING_RATE);
        let _ = writeln!(
            out,
            "- {scenario}: ours {} of the limit, upstream {} of the limit, ours/upstream {}",
            ratio(ours, limit),
            ratio(upstream, limit),
            ratio(ours, upstream)
        );
    }
    let grow = format!("grow@{n}");
    let _ = writeln!(
        out,
        "- {grow}: ours/upstream {} (pods seeing the new size per second)",
        ratio(
            results.spread(&grow, "ours", throttle, GROWN_RATE),
            results.spread(&grow, "upstream", throttle, GROWN_RATE)
        )
    );
    out
}

/// Writes results.json, results.md and the pictures into `dir`; returns the table.
pub fn write(results: &Results, dir: &Path, n: usize) -> Result<String, String> {
    let json = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("results.json"), json).map_err(|e| e.to_string())?;
    let mut md = String::from("# Pods on new volumes: upstream's stack and ours, on one node\n\n");
    for line in &results.setup {
        let _ = writeln!(md, "- {line}");
    }
    let mut throttles: Vec<String> = Vec::new();
    for r in &results.rows {
        if !throttles.contains(&r.throttle) {
            throttles.push(r.throttle.clone());
        }
    }
    for throttle in &throttles {
        let runs = |stack: &str| {
            let runs: std::collections::BTreeSet<usize> = results
                .rows
                .iter()
                .filter(|r| &r.throttle == throttle && r.stack == stack && r.metric == RUNNING_RATE)
                .filter(|r| r.scenario.ends_with("Immediate"))
                .map(|r| r.run)
                .collect();
            runs.len()
        };
        let _ = writeln!(
            md,
            "\n## {throttle}\n\nRuns: upstream {}, ours {}.\n\n{}",
            runs("upstream"),
            runs("ours"),
            headline(results, throttle, n)
        );
        md.push_str("| scenario | figure | upstream | ours | ours/upstream | limit |\n");
        md.push_str("|---|---|---|---|---|---|\n");
        let mut keys: BTreeMap<(String, String), String> = BTreeMap::new();
        for r in results.rows.iter().filter(|r| &r.throttle == throttle) {
            keys.entry((r.scenario.clone(), r.metric.clone())).or_insert(r.unit.clone());
        }
        for ((scenario, metric), unit) in &keys {
            let of = |stack: &str| results.spread(scenario, stack, throttle, metric);
            let _ = writeln!(
                md,
                "| {scenario} | {metric} ({unit}) | {} | {} | {} | {} |",
                cell(of("upstream")),
                cell(of("ours")),
                ratio(of("ours"), of("upstream")),
                cell(of(LIMIT))
            );
        }
        let mut bars_of: Vec<Bar> = Vec::new();
        let mut scenarios: Vec<String> = Vec::new();
        for s in results.splits.iter().filter(|s| &s.throttle == throttle) {
            if !scenarios.contains(&s.scenario) {
                scenarios.push(s.scenario.clone());
            }
        }
        for scenario in &scenarios {
            for stack in ["upstream", "ours", LIMIT] {
                if let Some(mean) = results.mean_split(scenario, stack, throttle) {
                    bars_of.push((format!("{scenario} — {stack}"), mean));
                }
            }
        }
        if !bars_of.is_empty() {
            let file = format!("splits-{}.png", slug(throttle));
            bars::draw(
                &bars_of,
                &format!("Where a pod's wait goes — {throttle}"),
                &dir.join(&file),
            )?;
            let _ = writeln!(md, "\n![where the time goes]({file})\n");
            md.push_str("| scenario — stack | ");
            md.push_str(&crate::splits::SLICES.join(" | "));
            md.push_str(" | total |\n|---|");
            md.push_str(&"---|".repeat(crate::splits::SLICES.len() + 1));
            md.push('\n');
            for (label, mean) in &bars_of {
                let cells: Vec<String> = mean.iter().map(|s| format!("{s:.2}")).collect();
                let total: f64 = mean.iter().sum();
                let _ = writeln!(md, "| {label} | {} | {total:.2} |", cells.join(" | "));
            }
        }
    }
    std::fs::write(dir.join("results.md"), &md).map_err(|e| e.to_string())?;
    Ok(md)
}

fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, stack: &str, metric: &str, value: f64) -> Row {
        Row {
            scenario: scenario.into(),
            stack: stack.into(),
            throttle: "defaults".into(),
            run: 0,
            metric: metric.into(),
            unit: "pods/s".into(),
            value,
        }
    }

    #[test]
    fn the_headline_sets_each_stack_against_the_limit_and_each_other() {
        let results = Results {
            rows: vec![
                row("statefulset@10 Bound beforehand", LIMIT, RUNNING_RATE, 4.0),
                row("statefulset@10 Bound beforehand", LIMIT, RUNNING_RATE, 6.0),
                row("statefulset@10 Immediate", "ours", RUNNING_RATE, 4.5),
                row("statefulset@10 Immediate", "upstream", RUNNING_RATE, 1.5),
                row("grow@10", "ours", GROWN_RATE, 3.0),
                row("grow@10", "upstream", GROWN_RATE, 1.0),
            ],
            ..Results::default()
        };
        let text = headline(&results, "defaults", 10);
        assert!(
            text.contains("statefulset@10 Immediate: ours 0.90 of the limit, upstream 0.30"),
            "{text}"
        );
        assert!(text.contains("ours/upstream 3.00"), "{text}");
        assert!(text.contains("WaitForFirstConsumer: ours – of the limit"), "{text}");
        assert!(text.contains("grow@10: ours/upstream 3.00"), "{text}");
        assert_eq!(
            slug("each component's default QPS/burst"),
            "each-component-s-default-qps-burst"
        );
    }
}
