//! The stacked-bar picture: for each scenario that starts pods and each stack, the mean pod's
//! wait from its creation to Running, split into the steps of its path.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::splits::SLICES;

/// The x axis runs past the longest bar, leaving the legend room on the right.
/// One bar: its label and the mean seconds of each slice.
pub type Bar = (String, [f64; 7]);

const COLORS: [RGBColor; 7] = [
    RGBColor(86, 119, 164),
    RGBColor(221, 132, 82),
    RGBColor(196, 78, 82),
    RGBColor(129, 114, 179),
    RGBColor(85, 168, 104),
    RGBColor(147, 120, 96),
    RGBColor(140, 140, 140),
];

pub fn draw(bars: &[Bar], title: &str, path: &Path) -> Result<PathBuf, String> {
    let height = 120 + 44 * bars.len() as u32;
    let widest = bars.iter().map(|(_, s)| s.iter().sum::<f64>()).fold(0.0, f64::max);
    let root = BitMapBackend::new(path, (1100, height)).into_drawing_area();
    let e = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(330)
        .build_cartesian_2d(0.0..(widest * 1.45).max(0.1), 0.0..bars.len() as f64)
        .map_err(|x| e(&x))?;
    let labels: Vec<String> = bars.iter().map(|(l, _)| l.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("mean seconds from the pod's creation to Running")
        .y_labels(bars.len() * 2 + 1)
        .y_label_formatter(&|y| {
            let i = (bars.len() as f64 - y - 0.5).round();
            if (bars.len() as f64 - y - 0.5 - i).abs() < 0.01 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(|x| e(&x))?;
    for (slice, name) in SLICES.iter().enumerate() {
        let color = COLORS[slice];
        let rects = bars.iter().enumerate().map(|(i, (_, s))| {
            let start: f64 = s[..slice].iter().sum();
            let y = (bars.len() - 1 - i) as f64;
            Rectangle::new([(start, y + 0.15), (start + s[slice], y + 0.85)], color.filled())
        });
        chart
            .draw_series(rects)
            .map_err(|x| e(&x))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(path.to_path_buf())
}
