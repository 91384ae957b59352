//! Colours and titles shared by the bench's pictures: every series its own colour, however many
//! there are, and every picture titled with the setup it was measured on.

use plotters::style::{HSLColor, RGBColor};

use crate::report::Results;

/// Ten colours told apart by most eyes (Tableau 10); beyond ten series, hues evenly spaced.
const TEN: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// The colour of series `i` of `n`: distinct from every other of the `n`.
pub fn series_color(i: usize, n: usize) -> RGBColor {
    if n <= TEN.len() {
        let (r, g, b) = TEN[i % TEN.len()];
        return RGBColor(r, g, b);
    }
    let hue = i as f64 / n as f64;
    let lightness = if i.is_multiple_of(2) { 0.40 } else { 0.55 };
    let (r, g, b) = plotters::style::Color::rgb(&HSLColor(hue, 0.75, lightness));
    RGBColor(r, g, b)
}

/// The colour of the series `label` (`<stack> — <throttle>`): the same in every picture of a
/// report, taken from the place of the label among all the report's stack and throttle pairs.
pub fn color_of(results: &Results, label: &str) -> RGBColor {
    let mut labels: Vec<(crate::stack::StackKind, String)> =
        results.figures.iter().map(|f| (f.stack, f.throttle.clone())).collect();
    labels.extend(results.latencies.iter().map(|l| (l.stack, l.throttle.clone())));
    labels.sort();
    labels.dedup();
    let names: Vec<String> = labels.iter().map(|(s, t)| format!("{s} — {t}")).collect();
    let i = names.iter().position(|n| n == label).unwrap_or(names.len());
    series_color(i, names.len().max(i + 1))
}

/// Two lines that say what the picture was measured on: the driver and the machine, then the
/// peers' versions, ours, and how many runs.
pub fn setup(results: &Results) -> [String; 2] {
    let version = |name: &str| {
        results.versions.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap_or("?")
    };
    let ours = version("csi-pv-controller").split(" (").next().unwrap_or_default();
    let driver = results.driver.split(": ").nth(1).unwrap_or(&results.driver);
    let driver = driver.split(" (").next().unwrap_or(driver);
    let runs = results.figures.iter().map(|f| f.run + 1).max().unwrap_or(0);
    [
        format!("{driver} · {}", results.machine),
        format!(
            "Kubernetes {} · csi-provisioner {} + csi-resizer {} · csi-pv-controller {ours} · {runs} run(s), {}",
            version("kube-apiserver"),
            version("csi-provisioner"),
            version("csi-resizer"),
            results.date.get(..10).unwrap_or(&results.date),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_has_its_own_colour() {
        for n in 1..=30 {
            let mut seen: Vec<RGBColor> = (0..n).map(|i| series_color(i, n)).collect();
            seen.sort_by_key(|c| (c.0, c.1, c.2));
            seen.dedup();
            assert_eq!(seen.len(), n, "{n} series");
        }
    }

    #[test]
    fn the_setup_names_driver_machine_versions_and_runs() {
        let versions = [
            ("kube-apiserver", "v1.36.3"),
            ("csi-provisioner", "v6.3.0"),
            ("csi-resizer", "v2.2.0"),
            ("csi-pv-controller", "0.1.0 at fee0b5b (/work/target/release/x)"),
        ];
        let results = Results {
            date: "2026-11-26T07:58:04Z".into(),
            machine: "2 cores (AMD EPYC), 24 GiB".into(),
            versions: versions.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            driver: "bench.csi.k8s.io: csi-driver-host-path's hostpathplugin v1.18.0 (--disable-node-expansion), state on local disk".into(),
            ..Results::default()
        };
        assert_eq!(
            setup(&results),
            [
                "csi-driver-host-path's hostpathplugin v1.18.0 · 2 cores (AMD EPYC), 24 GiB",
                "Kubernetes v1.36.3 · csi-provisioner v6.3.0 + csi-resizer v2.2.0 · csi-pv-controller 0.1.0 at fee0b5b · 0 run(s), 2026-11-26"
            ]
        );
    }
}
