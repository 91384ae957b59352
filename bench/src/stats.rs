//! The arithmetic of the report, kept pure so that it can be checked by tables: percentiles of a
//! latency sample, the spread of repeated runs, ratios, and the apiserver's write counter.

use std::collections::BTreeMap;

/// The `p`-th percentile (0–100) of `values` by the nearest-rank method: the smallest value
/// with at least p % of the sample at or below it. None for an empty sample.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(sorted.len() - 1)])
}

/// Repeated runs of one figure: reported as the median with min and max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Spread {
    /// None for no runs. With an even count the median is the mean of the middle two.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median =
            if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        Some(Spread { median, min: sorted[0], max: sorted[n - 1], runs: n })
    }
}

/// ours / upstream; None when upstream's figure is zero (nothing to compare with).
pub fn ratio(ours: f64, upstream: f64) -> Option<f64> {
    (upstream != 0.0).then(|| ours / upstream)
}

/// The points of an empirical CDF: (value, fraction of the sample at or below it).
pub fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as f64;
    sorted.into_iter().enumerate().map(|(i, v)| (v, (i + 1) as f64 / n)).collect()
}

/// Writes the apiserver counted, summed by resource, from its Prometheus text
/// (`apiserver_request_total`). Reads are left out. Every answered write counts, conflicts
/// included: each one cost the apiserver a round trip.
pub fn writes_by_resource(metrics_text: &str) -> BTreeMap<String, f64> {
    requests_by_resource(
        metrics_text,
        &["POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"],
    )
}

/// Single-object reads (GET) by resource: what a controller asks the API instead of its cache.
pub fn gets_by_resource(metrics_text: &str) -> BTreeMap<String, f64> {
    requests_by_resource(metrics_text, &["GET"])
}

fn requests_by_resource(metrics_text: &str, verbs: &[&str]) -> BTreeMap<String, f64> {
    let mut sums = BTreeMap::new();
    for (labels, value) in samples(metrics_text, "apiserver_request_total") {
        let verb = labels.get("verb").map(String::as_str).unwrap_or_default();
        if !verbs.contains(&verb) {
            continue;
        }
        let resource = labels.get("resource").cloned().unwrap_or_default();
        *sums.entry(resource).or_insert(0.0) += value;
    }
    sums
}

/// Every sample of the series `name` in Prometheus text: its labels and value.
pub fn samples<'a>(
    metrics_text: &'a str,
    name: &'a str,
) -> impl Iterator<Item = (BTreeMap<String, String>, f64)> + 'a {
    metrics_text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (labels, value) = rest.rsplit_once("} ")?;
        Some((parse_labels(labels), value.trim().parse::<f64>().ok()?))
    })
}

/// `a="x",b="y"` → {a: x, b: y}. Label values here never hold quotes or commas.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect()
}

/// What one stack wrote per provisioned claim, from two snapshots of the counter around a burst
/// of `claims` claims that the benchmark itself created (those creates are not the stack's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WritesPerClaim {
    /// Claims and PVs (creates, updates, status patches, deletes).
    pub objects: f64,
    /// Events (creates and the patches that fold repeats into a series).
    pub events: f64,
}

pub fn writes_per_claim(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    claims: usize,
) -> Option<WritesPerClaim> {
    if claims == 0 {
        return None;
    }
    let delta =
        |r: &str| after.get(r).copied().unwrap_or(0.0) - before.get(r).copied().unwrap_or(0.0);
    let n = claims as f64;
    let objects = delta("persistentvolumeclaims") + delta("persistentvolumes") - n;
    Some(WritesPerClaim { objects: objects / n, events: delta("events") / n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let sample: Vec<f64> = (1..=100).map(f64::from).collect();
        let cases =
            [(50.0, 50.0), (90.0, 90.0), (99.0, 99.0), (100.0, 100.0), (0.0, 1.0), (0.5, 1.0)];
        for (p, want) in cases {
            assert_eq!(percentile(&sample, p), Some(want), "p{p}");
        }
        // Order of the input does not matter.
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[1.0], 101.0), None);
    }

    /// median, min, max
    type Expected = Option<(f64, f64, f64)>;

    #[test]
    fn spread_of_runs() {
        let cases: [(&[f64], Expected); 4] = [
            (&[], None),
            (&[4.0], Some((4.0, 4.0, 4.0))),
            (&[9.0, 1.0, 5.0], Some((5.0, 1.0, 9.0))),
            (&[1.0, 2.0, 4.0, 10.0], Some((3.0, 1.0, 10.0))),
        ];
        for (values, want) in cases {
            let got = Spread::of(values).map(|s| (s.median, s.min, s.max));
            assert_eq!(got, want, "{values:?}");
        }
    }

    #[test]
    fn ratio_and_cdf() {
        assert_eq!(ratio(2.0, 8.0), Some(0.25));
        assert_eq!(ratio(2.0, 0.0), None);
        assert_eq!(
            cdf(&[3.0, 1.0, 2.0, 2.0]),
            vec![(1.0, 0.25), (2.0, 0.5), (2.0, 0.75), (3.0, 1.0)]
        );
        assert!(cdf(&[]).is_empty());
    }

    const METRICS: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="persistentvolumeclaims",scope="resource",subresource="",verb="POST",version="v1"} 1010
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="persistentvolumeclaims",scope="resource",subresource="status",verb="PATCH",version="v1"} 1000
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="persistentvolumeclaims",scope="resource",subresource="",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="persistentvolumeclaims",scope="namespace",subresource="",verb="LIST",version="v1"} 77
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="persistentvolumes",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 2000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="persistentvolumes",scope="resource",subresource="",verb="WATCH",version="v1"} 4
"#;

    #[test]
    fn counts_writes_by_resource() {
        let sums = writes_by_resource(METRICS);
        assert_eq!(sums.get("persistentvolumeclaims"), Some(&2013.0));
        assert_eq!(sums.get("persistentvolumes"), Some(&1000.0));
        assert_eq!(sums.get("events"), Some(&2000.0));
        assert_eq!(sums.get("leases"), Some(&12.0));
        // LIST and WATCH are neither.
        assert_eq!(gets_by_resource(METRICS), BTreeMap::new());
        assert_eq!(
            writes_by_resource("garbage\napiserver_request_total{verb=\"POST\"} x"),
            BTreeMap::new()
        );
    }

    #[test]
    fn writes_per_claim_leave_out_the_benchmarks_creates() {
        let before: BTreeMap<String, f64> = [("persistentvolumeclaims".to_string(), 10.0)].into();
        let after = writes_by_resource(METRICS);
        // 2013 - 10 claim writes, of which 1000 are the benchmark's creates; 1000 PV creates.
        let got = writes_per_claim(&before, &after, 1000).unwrap();
        assert!((got.objects - 2.003).abs() < 1e-9, "{got:?}");
        assert_eq!(got.events, 2.0);
        assert_eq!(writes_per_claim(&before, &after, 0), None);
    }
}
