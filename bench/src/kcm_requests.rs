//! kube-controller-manager's own requests, by HTTP method, from its client metrics
//! (`rest_client_requests_total`): the binder's share of a burst, which the apiserver's counters
//! cannot tell from the sidecars'. In a burst its other controllers (the expander, both
//! protection controllers) make none of these requests: what it sends is the binder's.

use std::collections::BTreeMap;
use std::process::Command;

/// The request kinds reported, by method: what each one is, for the binder.
pub const KINDS: [(&str, &str); 4] = [
    ("PUT", "PUT (claim and PV writes)"),
    ("POST", "POST (new events)"),
    ("PATCH", "PATCH (repeated events)"),
    ("GET", "GET"),
];

/// Requests so far by method, read from kube-controller-manager's /metrics on `port` (HTTPS
/// with its self-signed certificate; /metrics is open to anonymous reads in the bench).
/// It may still be starting up: tried for up to 30 s.
pub fn scrape(port: u16) -> Result<BTreeMap<String, f64>, String> {
    let url = format!("https://127.0.0.1:{port}/metrics");
    let mut last = String::new();
    for _ in 0..30 {
        let out = Command::new("curl")
            .args(["-sk", "--fail", "--max-time", "10", &url])
            .output()
            .map_err(|e| format!("curl {url}: {e}"))?;
        if out.status.success() {
            return Ok(by_method(&String::from_utf8_lossy(&out.stdout)));
        }
        last = out.status.to_string();
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    Err(format!("curl {url}: {last}"))
}

fn by_method(metrics: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (labels, value) in crate::stats::samples(metrics, "rest_client_requests_total") {
        let method = labels.get("method").cloned().unwrap_or_default();
        *out.entry(method).or_default() += value;
    }
    out
}

/// Requests per claim of each kind between two scrapes.
pub fn per_claim(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    claims: usize,
) -> Vec<(&'static str, f64)> {
    KINDS
        .iter()
        .map(|(method, label)| {
            let n = after.get(*method).unwrap_or(&0.0) - before.get(*method).unwrap_or(&0.0);
            (*label, n.max(0.0) / claims.max(1) as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_summed_over_codes_and_hosts() {
        let text = "# HELP rest_client_requests_total x\n\
            rest_client_requests_total{code=\"200\",host=\"127.0.0.1:1\",method=\"PUT\"} 30\n\
            rest_client_requests_total{code=\"409\",host=\"127.0.0.1:1\",method=\"PUT\"} 2\n\
            rest_client_requests_total{code=\"201\",host=\"127.0.0.1:1\",method=\"POST\"} 7\n\
            rest_client_request_duration_seconds_bucket{le=\"1\",method=\"PUT\"} 99\n";
        let m = by_method(text);
        assert_eq!(m.get("PUT"), Some(&32.0));
        assert_eq!(m.get("POST"), Some(&7.0));
        assert_eq!(m.len(), 2);
        let before = BTreeMap::from([("PUT".to_string(), 2.0)]);
        let per = per_claim(&before, &m, 10);
        assert_eq!(per[0], ("PUT (claim and PV writes)", 3.0));
        assert_eq!(per[1], ("POST (new events)", 0.7));
        assert_eq!(per[3], ("GET", 0.0));
    }
}
