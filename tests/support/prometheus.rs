//! A scrape read by a real Prometheus parser: the Python client's (Debian's
//! python3-prometheus-client, installed by `make peers`), for Prometheus' text format and for
//! OpenMetrics, so that a test sees the series a Prometheus server would store, not what a
//! string search finds.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// One sample as the parser read it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Sample {
    /// Its family's type: counter, gauge, histogram…
    pub kind: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

const PARSER: &str = r#"
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families as prometheus
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
parse = openmetrics if sys.argv[1] == "openmetrics" else prometheus
out = []
for family in parse(sys.stdin.read()):
    for s in family.samples:
        v = s.value
        out.append({"kind": family.type, "name": s.name, "labels": s.labels,
                    "value": v if math.isfinite(v) else 0.0})
print(json.dumps(out))
"#;

/// Every sample of `text` in the format named (`openmetrics`, else Prometheus' text); Err with
/// the parser's words when it refuses the text. A missing parser fails the test.
pub fn parse(text: &str, openmetrics: bool) -> Result<Vec<Sample>, String> {
    let format = if openmetrics { "openmetrics" } else { "prometheus" };
    // Debian's own python3, where the package puts the module.
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", PARSER, format])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("python3 (the Prometheus parser's peer): {e}"));
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("python3's stdin"));
    stdin.write_all(text.as_bytes()).unwrap_or_else(|e| panic!("to python3: {e}"));
    drop(stdin);
    let output = child.wait_with_output().unwrap_or_else(|e| panic!("python3: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named 'prometheus_client'"),
        "the Prometheus parser is missing (python3-prometheus-client, which make peers installs)"
    );
    if !output.status.success() {
        return Err(stderr.into_owned());
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("parser output: {e}"))
}
