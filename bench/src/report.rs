//! What a benchmark run leaves behind in bench/results/: a Markdown table (every figure of both
//! stacks, median of the runs with min and max, and the ratio ours/upstream), the raw figures as
//! JSON, and a PNG latency CDF per burst scenario.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::Serialize;

use crate::stack::StackKind;
use crate::stats::{self, Spread};

/// Whether a figure improves by going up or down; says which way the ratio reads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Better {
    Lower,
    Higher,
}

/// One measured number of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub scenario: String,
    pub metric: &'static str,
    pub unit: &'static str,
    pub better: Better,
    pub throttle: String,
    pub stack: StackKind,
    pub run: usize,
    pub value: f64,
}

/// The creation → Bound latencies of one burst run.
#[derive(Debug, Clone, Serialize)]
pub struct Latencies {
    pub scenario: String,
    pub throttle: String,
    pub stack: StackKind,
    pub run: usize,
    pub seconds: Vec<f64>,
}

#[derive(Debug, Default, Serialize)]
pub struct Results {
    pub date: String,
    pub machine: String,
    pub versions: Vec<(String, String)>,
    pub driver: String,
    pub figures: Vec<Figure>,
    pub latencies: Vec<Latencies>,
    /// The apiserver's write ceiling of each run (claim status writes/s, no stack running).
    pub ceiling: Vec<f64>,
    /// Per ceiling run, what one write cost in CPU (ms) per role: the apiserver, etcd, the
    /// writers.
    pub ceiling_cpu: Vec<Vec<(&'static str, f64)>>,
    /// Runs that did not finish, with the reason: reported, never dropped silently.
    pub failures: Vec<String>,
}

impl Results {
    pub fn add(&mut self, figure: Figure) {
        println!(
            "    {} {} [{}] {}: {:.3} {}",
            figure.stack,
            figure.scenario,
            figure.throttle,
            figure.metric,
            figure.value,
            figure.unit
        );
        self.figures.push(figure);
    }
}

fn fmt_spread(s: Option<Spread>) -> String {
    match s {
        None => "—".into(),
        Some(s) if s.runs == 1 => round(s.median),
        Some(s) => format!("{} ({}–{})", round(s.median), round(s.min), round(s.max)),
    }
}

fn round(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The Markdown report.
pub fn markdown(results: &Results) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# csi-pv-controller vs upstream, side by side\n");
    let _ = writeln!(out, "- date: {}", results.date);
    let _ = writeln!(out, "- machine: {}", results.machine);
    let _ = writeln!(out, "- CSI driver (the same process for every stack): {}", results.driver);
    for (name, version) in &results.versions {
        let _ = writeln!(out, "- {name}: {version}");
    }
    let _ = writeln!(
        out,
        "\nEach cell: median of the runs (min–max). ours: csi-pv-controller as the binder \
         (kube-controller-manager's binder off); beside: csi-pv-controller with default flags \
         beside kube-controller-manager's binder. Ratio = that stack / upstream of the medians; \
         the last column says which way is better.\n"
    );
    let _ = writeln!(
        out,
        "| scenario | figure | throttle | upstream | ours | ratio | beside | ratio | better |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    let mut keys: Vec<(&str, &str, &str, &str, Better)> = Vec::new();
    for f in &results.figures {
        let key = (f.scenario.as_str(), f.metric, f.unit, f.throttle.as_str(), f.better);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    for (scenario, metric, unit, throttle, better) in keys {
        let values = |stack: StackKind| values_of(results, stack, scenario, metric, throttle);
        let upstream = Spread::of(&values(StackKind::Upstream));
        let ours = Spread::of(&values(StackKind::Ours));
        let beside = Spread::of(&values(StackKind::Beside));
        let ratio = |stack: Option<Spread>| match (stack, upstream) {
            (Some(o), Some(u)) => {
                stats::ratio(o.median, u.median).map_or("—".into(), |r| format!("{r:.2}×"))
            }
            _ => "—".to_string(),
        };
        let better = match better {
            Better::Lower => "lower",
            Better::Higher => "higher",
        };
        let _ = writeln!(
            out,
            "| {scenario} | {metric} ({unit}) | {throttle} | {} | {} | {} | {} | {} | {better} |",
            fmt_spread(upstream),
            fmt_spread(ours),
            ratio(ours),
            fmt_spread(beside),
            ratio(beside),
        );
    }
    ceiling_section(results, &mut out);
    ceiling_cpu_section(results, &mut out);
    if !results.failures.is_empty() {
        let _ = writeln!(out, "\n## Runs that did not finish\n");
        for failure in &results.failures {
            let _ = writeln!(out, "- {}", failure.lines().next().unwrap_or_default());
        }
    }
    out
}

/// Every run's value of one figure of one stack.
fn values_of(
    results: &Results,
    stack: StackKind,
    scenario: &str,
    metric: &str,
    throttle: &str,
) -> Vec<f64> {
    let wanted = |f: &&Figure| {
        f.stack == stack && f.scenario == scenario && f.metric == metric && f.throttle == throttle
    };
    results.figures.iter().filter(wanted).map(|f| f.value).collect()
}

/// The apiserver's write ceiling, and each stack's bursts as a fraction of what the ceiling
/// allows at that stack's writes per claim, per throttle: counting the claim and PV writes only,
/// and counting every write (Events too: each is a create the apiserver stores in etcd).
fn ceiling_section(results: &Results, out: &mut String) {
    let Some(ceiling) = Spread::of(&results.ceiling) else { return };
    let _ = writeln!(
        out,
        "\n## The apiserver's write ceiling\n\nClaim status patches from many connections, no \
         stack running: {} writes/s (median of {} runs). A burst's limit is the ceiling over the \
         stack's writes per claim; the fraction is its throughput over that limit, first with \
         the claim and PV writes only, then with every write (Events too).\n",
        fmt_spread(Some(ceiling)),
        results.ceiling.len()
    );
    let _ = writeln!(
        out,
        "| stack | throttle | burst | claims/s | claim + PV writes per claim | limit | fraction \
         | all writes per claim | limit | fraction |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    let median = |stack: StackKind, scenario: &str, metric: &str, throttle: &str| {
        Spread::of(&values_of(results, stack, scenario, metric, throttle)).map(|s| s.median)
    };
    let mut throttles: Vec<&str> = Vec::new();
    for f in &results.figures {
        if !throttles.contains(&f.throttle.as_str()) {
            throttles.push(&f.throttle);
        }
    }
    let bursts: Vec<&str> = {
        let mut b: Vec<&str> = results
            .figures
            .iter()
            .filter(|f| f.scenario.starts_with("burst ") && f.metric == "throughput")
            .map(|f| f.scenario.as_str())
            .collect();
        b.sort();
        b.dedup();
        b
    };
    let writes = "API writes per provisioned claim";
    for stack in [StackKind::Upstream, StackKind::Ours, StackKind::Beside] {
        for throttle in &throttles {
            let (Some(objects), Some(all)) = (
                median(stack, writes, "claims + PVs", throttle),
                median(stack, writes, "all", throttle),
            ) else {
                continue;
            };
            for burst in &bursts {
                let Some(rate) = median(stack, burst, "throughput", throttle) else { continue };
                let cells = |writes: f64| {
                    let limit = ceiling.median / writes.max(1e-9);
                    format!("{} | {} | {:.0}%", round(writes), round(limit), rate / limit * 100.0)
                };
                let _ = writeln!(
                    out,
                    "| {stack} | {throttle} | {burst} | {} | {} | {} |",
                    round(rate),
                    cells(objects),
                    cells(all)
                );
            }
        }
    }
}

/// What one ceiling write cost the machine, and what one claim of each burst cost it, in the
/// same unit: a burst whose claims cost k ceiling writes of CPU goes no faster than ceiling ÷ k
/// once the cores are full, whatever its writes per claim.
fn ceiling_cpu_section(results: &Results, out: &mut String) {
    let mut per_write: Vec<(&str, f64)> = Vec::new();
    for metric in results.ceiling_cpu.iter().flatten().map(|(m, _)| *m) {
        if per_write.iter().any(|(m, _)| *m == metric) {
            continue;
        }
        let values: Vec<f64> = results
            .ceiling_cpu
            .iter()
            .flatten()
            .filter(|(m, _)| *m == metric)
            .map(|(_, v)| *v)
            .collect();
        if let Some(spread) = Spread::of(&values) {
            per_write.push((metric, spread.median));
        }
    }
    let write_ms: f64 = per_write.iter().map(|(_, v)| v).sum();
    if write_ms <= 0.0 {
        return;
    }
    let parts: Vec<String> = per_write
        .iter()
        .map(|(m, v)| format!("{} {}", m.trim_start_matches("CPU per write: "), round(*v)))
        .collect();
    let _ = writeln!(
        out,
        "\nOne ceiling write cost {} ms of CPU ({}). A claim's whole work (every role but the \
         competing load) in the same unit:\n",
        round(write_ms),
        parts.join(", ")
    );
    let _ = writeln!(
        out,
        "| stack | throttle | burst | CPU per claim (ms) | of it kube-apiserver | in ceiling writes |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let mut rows: Vec<(StackKind, &str, &str)> = Vec::new();
    for f in results.figures.iter().filter(|f| f.metric == "CPU per claim: kube-apiserver") {
        if f.scenario.starts_with("burst ")
            && !rows.contains(&(f.stack, f.throttle.as_str(), f.scenario.as_str()))
        {
            rows.push((f.stack, &f.throttle, &f.scenario));
        }
    }
    for (stack, throttle, burst) in rows {
        let median = |metric: &str| {
            Spread::of(&values_of(results, stack, burst, metric, throttle)).map(|s| s.median)
        };
        let mut metrics: Vec<&str> = results
            .figures
            .iter()
            .map(|f| f.metric)
            .filter(|m| {
                m.starts_with("CPU per claim: ") && *m != "CPU per claim: the competing load"
            })
            .collect();
        metrics.sort();
        metrics.dedup();
        let claim_ms: f64 = metrics.iter().filter_map(|m| median(m)).sum();
        let apiserver = median("CPU per claim: kube-apiserver").unwrap_or_default();
        let _ = writeln!(
            out,
            "| {stack} | {throttle} | {burst} | {} | {} | {} |",
            round(claim_ms),
            round(apiserver),
            round(claim_ms / write_ms)
        );
    }
}

/// A CDF of creation → Bound latency for one burst scenario: one line per stack and throttle,
/// all runs pooled. Returns the file written.
pub fn latency_cdf(
    results: &Results,
    scenario: &str,
    dir: &Path,
    stem: &str,
) -> Result<PathBuf, String> {
    let mut series: Vec<(String, Vec<f64>)> = Vec::new();
    for l in results.latencies.iter().filter(|l| l.scenario == scenario) {
        let label = format!("{} — {}", l.stack, l.throttle);
        match series.iter_mut().find(|(name, _)| *name == label) {
            Some((_, values)) => values.extend(&l.seconds),
            None => series.push((label, l.seconds.clone())),
        }
    }
    if series.is_empty() {
        return Err(format!("no latencies for {scenario}"));
    }
    let max = series.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0_f64, f64::max).max(0.001);
    let path = dir.join(format!("{stem}.png"));
    let title = format!("{scenario}: claim creation → Bound");
    let colors: Vec<RGBColor> =
        series.iter().map(|(label, _)| crate::palette::color_of(results, label)).collect();
    draw_cdf(&path, (&title, &crate::palette::setup(results)), (&series, &colors), max)?;
    Ok(path)
}

/// `titles`: the picture's title and its setup lines; `series` with their colours.
fn draw_cdf(
    path: &Path,
    titles: (&str, &[String; 2]),
    (series, colors): (&[(String, Vec<f64>)], &[RGBColor]),
    max: f64,
) -> Result<(), String> {
    let root = BitMapBackend::new(path, (1100, 680)).into_drawing_area();
    let draw = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let root = root.titled(titles.0, ("sans-serif", 24)).map_err(|e| draw(&e))?;
    let root = root.titled(&titles.1[0], ("sans-serif", 13)).map_err(|e| draw(&e))?;
    let root = root.titled(&titles.1[1], ("sans-serif", 13)).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..max * 1.05, 0.0..1.0)
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc("latency (s)")
        .y_desc("fraction of claims")
        .draw()
        .map_err(|e| draw(&e))?;
    for (i, (label, values)) in series.iter().enumerate() {
        let color = colors[i];
        let mut points = vec![(0.0, 0.0)];
        for (v, f) in stats::cdf(values) {
            // A step: the fraction jumps at each value.
            if let Some(&(_, previous)) = points.last() {
                points.push((v, previous));
            }
            points.push((v, f));
        }
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(stack: StackKind, run: usize, value: f64) -> Figure {
        Figure {
            scenario: "burst 100".into(),
            metric: "time to all Bound",
            unit: "s",
            better: Better::Lower,
            throttle: "defaults".into(),
            stack,
            run,
            value,
        }
    }

    #[test]
    fn table_has_medians_spreads_and_ratio() {
        let mut results = Results::default();
        for (run, v) in [10.0, 30.0, 20.0].into_iter().enumerate() {
            results.figures.push(figure(StackKind::Upstream, run, v));
        }
        for (run, v) in [5.0, 4.0, 6.0].into_iter().enumerate() {
            results.figures.push(figure(StackKind::Ours, run, v));
        }
        for (run, v) in [8.0, 10.0, 12.0].into_iter().enumerate() {
            results.figures.push(figure(StackKind::Beside, run, v));
        }
        results.failures.push("ours static: timed out\nlog tail".into());
        let text = markdown(&results);
        assert!(
            text.contains("| burst 100 | time to all Bound (s) | defaults | 20.0 (10.0–30.0) | 5.00 (4.00–6.00) | 0.25× | 10.0 (8.00–12.0) | 0.50× | lower |"),
            "{text}"
        );
        assert!(text.contains("- ours static: timed out\n"), "{text}");
        assert!(!text.contains("log tail"));
    }

    #[test]
    fn a_figure_only_one_stack_has_gets_no_ratio() {
        let mut results = Results::default();
        results.figures.push(figure(StackKind::Ours, 0, 0.5));
        let text = markdown(&results);
        assert!(text.contains("| — | 0.500 | — | — | — | lower |"), "{text}");
    }

    #[test]
    fn the_ceiling_gives_each_burst_its_fraction() {
        let mut results = Results { ceiling: vec![1000.0, 1200.0, 1100.0], ..Results::default() };
        let mut add = |scenario: &str, metric: &'static str, value: f64| {
            let f = Figure {
                scenario: scenario.into(),
                metric,
                throttle: "no limit".into(),
                ..figure(StackKind::Ours, 0, value)
            };
            results.figures.push(f);
        };
        add("burst 1000", "throughput", 110.0);
        add("API writes per provisioned claim", "claims + PVs", 5.0);
        add("API writes per provisioned claim", "all", 8.0);
        add("burst 1000", "CPU per claim: kube-apiserver", 9.0);
        add("burst 1000", "CPU per claim: the sidecars", 3.0);
        add("burst 1000", "CPU per claim: the competing load", 50.0);
        results.ceiling_cpu = vec![
            vec![("CPU per write: kube-apiserver", 1.5), ("CPU per write: etcd", 0.5)],
            vec![("CPU per write: kube-apiserver", 1.0), ("CPU per write: etcd", 0.5)],
        ];
        let text = markdown(&results);
        assert!(
            text.contains(
                "One ceiling write cost 1.75 ms of CPU (kube-apiserver 1.25, etcd 0.500)"
            ),
            "{text}"
        );
        assert!(text.contains("| ours | no limit | burst 1000 | 12.0 | 9.00 | 6.86 |"), "{text}");
        assert!(text.contains("1100 (1000–1200) writes/s (median of 3 runs)"), "{text}");
        assert!(
            text.contains(
                "| ours | no limit | burst 1000 | 110 | 5.00 | 220 | 50% | 8.00 | 138 | 80% |"
            ),
            "{text}"
        );
    }
}
