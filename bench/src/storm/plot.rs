//! The storm's picture: the backend's CreateVolume calls in flight and the volumes it created
//! per second, over the storm, one line per stack, with the backend's capacity drawn.

use std::path::Path;

use plotters::prelude::*;

use super::run::Outcome;

const COLORS: [RGBColor; 4] =
    [RGBColor(0, 114, 178), RGBColor(213, 94, 0), RGBColor(0, 158, 115), RGBColor(204, 121, 167)];

/// The calls in flight, the mean of the last `window` samples, at each sample: sampled once a
/// second, the raw count jumps between whole calls.
pub fn mean_in_flight(outcome: &Outcome, window: usize) -> Vec<(f64, f64)> {
    let s = &outcome.samples;
    (window.max(1)..=s.len())
        .map(|end| {
            let part = &s[end - window.max(1)..end];
            let sum: usize = part.iter().map(|x| x.in_flight).sum();
            (part[part.len() - 1].seconds, sum as f64 / part.len() as f64)
        })
        .collect()
}

/// Volumes created per second, over a window of `window` samples, at each sample.
pub fn goodput(outcome: &Outcome, window: usize) -> Vec<(f64, f64)> {
    let s = &outcome.samples;
    (window..s.len())
        .map(|i| {
            let (a, b) = (&s[i - window], &s[i]);
            let seconds = (b.seconds - a.seconds).max(1e-9);
            (b.seconds, (b.created.saturating_sub(a.created)) as f64 / seconds)
        })
        .collect()
}

pub fn draw(
    outcomes: &[Outcome],
    (capacity, knee): (f64, usize),
    title: &str,
    path: &Path,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    let root = BitMapBackend::new(path, (1400, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root.titled(title, ("sans-serif", 15)).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(700);
    let flight: Vec<(String, Vec<(f64, f64)>)> =
        outcomes.iter().map(|o| (o.label.clone(), mean_in_flight(o, 5))).collect();
    let rate: Vec<(String, Vec<(f64, f64)>)> =
        outcomes.iter().map(|o| (o.label.clone(), goodput(o, 5))).collect();
    let knee_line = ("backend's knee", knee as f64);
    let in_flight = "CreateVolume calls in flight at the backend (5 s mean)";
    panel(&left, in_flight, "calls", &flight, knee_line).map_err(|e| err(&e))?;
    let capacity_line = ("backend's capacity", capacity);
    panel(&right, "volumes created per second (5 s window)", "volumes/s", &rate, capacity_line)
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    unit: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    (mark, level): (&str, f64),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let all = || lines.iter().flat_map(|(_, p)| p.iter());
    let x1 = all().map(|p| p.0).fold(1.0, f64::max);
    let y1 = all().map(|p| p.1).fold(level, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x1 * 1.02, 0.0..y1 * 1.15)?;
    chart.configure_mesh().x_desc("seconds into the storm").y_desc(unit).draw()?;
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_series(LineSeries::new(vec![(0.0, level), (x1 * 1.02, level)], grey.stroke_width(2)))?
        .label(format!("{mark}: {level:.0}"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(2)));
    for (n, (label, points)) in lines.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        // One pixel wide: a wider line's joins spike out at every sharp turn.
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(1)))?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}

#[cfg(test)]
mod tests {
    use super::super::run::Sample;
    use super::*;

    #[test]
    fn goodput_is_volumes_per_second_over_the_window() {
        let samples = (0..8)
            .map(|i| Sample { seconds: i as f64, in_flight: 3, created: i * 10, refused: 0 })
            .collect();
        let outcome = Outcome { samples, ..Outcome::default() };
        let rates = goodput(&outcome, 5);
        assert_eq!(rates, vec![(5.0, 10.0), (6.0, 10.0), (7.0, 10.0)]);
    }

    #[test]
    fn in_flight_is_the_mean_of_the_window() {
        let samples = [1, 3, 2, 6]
            .iter()
            .enumerate()
            .map(|(i, n)| Sample { seconds: i as f64, in_flight: *n, created: 0, refused: 0 })
            .collect();
        let outcome = Outcome { samples, ..Outcome::default() };
        assert_eq!(mean_in_flight(&outcome, 2), vec![(1.0, 2.0), (2.0, 2.5), (3.0, 4.0)]);
    }
}
