//! How time and memory grow with the work: the medians of every `burst N` on log-log axes, one
//! line per stack and throttle, next to each other in one PNG.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::Results;
use crate::stack::StackKind;
use crate::stats::Spread;

const TIME: &str = "time to all Bound";
const MEMORY: &str = "peak resident memory of the sidecars";

/// One line: its label and its (claims, median) points, by claims.
type Line = (String, Vec<(f64, f64)>);

/// The lines of `metric` over burst sizes. A line needs two sizes to say anything.
pub fn lines(results: &Results, metric: &str) -> Vec<Line> {
    let mut keys: Vec<(StackKind, String)> = Vec::new();
    for f in &results.figures {
        let key = (f.stack, f.throttle.clone());
        if f.metric == metric && burst_size(&f.scenario).is_some() && !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.sort();
    let mut out = Vec::new();
    for (stack, throttle) in keys {
        let mut sizes: Vec<usize> = Vec::new();
        for f in &results.figures {
            if let Some(n) = burst_size(&f.scenario).filter(|n| !sizes.contains(n)) {
                sizes.push(n);
            }
        }
        sizes.sort_unstable();
        let points: Vec<(f64, f64)> = sizes
            .into_iter()
            .filter_map(|n| {
                let values: Vec<f64> = results
                    .figures
                    .iter()
                    .filter(|f| f.stack == stack && f.throttle == throttle && f.metric == metric)
                    .filter(|f| burst_size(&f.scenario) == Some(n))
                    .map(|f| f.value)
                    .collect();
                Some((n as f64, Spread::of(&values)?.median))
            })
            .collect();
        if points.len() >= 2 {
            out.push((format!("{stack} — {throttle}"), points));
        }
    }
    out
}

fn burst_size(scenario: &str) -> Option<usize> {
    scenario.strip_prefix("burst ")?.parse().ok()
}

/// Draws `<stem>-scale.png` in `dir` when some line has two burst sizes; None otherwise.
pub fn draw(results: &Results, dir: &Path, stem: &str) -> Result<Option<PathBuf>, String> {
    let (time, memory) = (lines(results, TIME), lines(results, MEMORY));
    if time.is_empty() {
        return Ok(None);
    }
    let path = dir.join(format!("{stem}-scale.png"));
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    {
        let root = BitMapBackend::new(&path, (1400, 660)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let setup = crate::palette::setup(results);
        let root = root.titled(&setup[0], ("sans-serif", 13)).map_err(|e| err(&e))?;
        let root = root.titled(&setup[1], ("sans-serif", 13)).map_err(|e| err(&e))?;
        let (left, right) = root.split_horizontally(700);
        let title = "claims in the burst → time to all Bound";
        panel(&left, title, "seconds", (&time, results)).map_err(|e| err(&e))?;
        let title = "claims in the burst → peak memory of the sidecars";
        panel(&right, title, "MiB", (&memory, results)).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(Some(path))
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    unit: &str,
    (lines, results): (&[Line], &Results),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let all = || lines.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, 0.0_f64, f64::MAX, 0.0_f64);
    for &(x, y) in all() {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if lines.is_empty() || y0 <= 0.0 {
        return Ok(());
    }
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((x0 * 0.8..x1 * 1.25).log_scale(), (y0 * 0.6..y1 * 1.6).log_scale())?;
    // Few whole-number labels: a log axis labels every minor step otherwise, and they overlap.
    chart
        .configure_mesh()
        .x_labels(4)
        .y_labels(6)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("claims")
        .y_desc(unit)
        .draw()?;
    for (label, points) in lines {
        let color = crate::palette::color_of(results, label);
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Better, Figure};

    fn figure(stack: StackKind, scenario: &str, run: usize, value: f64) -> Figure {
        Figure {
            scenario: scenario.into(),
            metric: TIME,
            unit: "s",
            better: Better::Lower,
            throttle: "no limit".into(),
            stack,
            run,
            value,
        }
    }

    #[test]
    fn a_line_per_stack_of_medians_by_size() {
        let mut results = Results::default();
        for (scenario, values) in [("burst 5000", [30.0, 10.0, 20.0]), ("burst 1000", [2.0; 3])] {
            for (run, v) in values.into_iter().enumerate() {
                results.figures.push(figure(StackKind::Ours, scenario, run, v));
            }
        }
        // One size only, and a scenario that is not a burst: no line.
        results.figures.push(figure(StackKind::Upstream, "burst 1000", 0, 9.0));
        results.figures.push(figure(StackKind::Upstream, "static 50 PVs, 5 claims", 0, 9.0));
        let got = lines(&results, TIME);
        assert_eq!(got, vec![("ours — no limit".to_string(), vec![(1000.0, 2.0), (5000.0, 20.0)])]);
    }
}
