//! What a scrape gets, as the Go sidecars answer it: Prometheus' text format 0.0.4 whatever the
//! scraper's `Accept` prefers (their handlers never offer OpenMetrics, which Prometheus 2 and 3
//! ask for first), every value and `le` as Go writes a float, and on a role's own
//! `--http-endpoint` only that role's series, so that a scrape of both old ports does not count
//! a series twice.
//!
//! prometheus-client encodes OpenMetrics; this module rewrites it line by line.

/// Which series an address serves: the role whose args named it, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    All,
    Provisioner,
    Resizer,
}

/// Whose series a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Provisioner,
    Resizer,
    /// Each Go sidecar exports one (process, leader election, build and CSI identity calls).
    Both,
}

impl Scope {
    fn serves(self, owner: Owner) -> bool {
        match (self, owner) {
            (Scope::All, _) | (_, Owner::Both) => true,
            (Scope::Provisioner, owner) => owner == Owner::Provisioner,
            (Scope::Resizer, owner) => owner == Owner::Resizer,
        }
    }
}

/// The CSI methods only csi-resizer calls.
const RESIZER_METHODS: [&str; 2] = ["ControllerExpandVolume", "ControllerModifyVolume"];
/// The methods every sidecar calls at start.
const SHARED_METHODS: [&str; 4] =
    ["Probe", "GetPluginInfo", "GetPluginCapabilities", "ControllerGetCapabilities"];

/// The role a sample of `family` (the family's name, a counter's without `_total`) with
/// `labels` belongs to. The work queues' `name` (and our per-queue series' `queue`) tells:
/// csi-resizer's queue is `<driver>-pvc`.
pub fn owner(family: &str, labels: &[(String, String)]) -> Owner {
    let label = |key: &str| labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let by_queue = |queue: Option<&str>| match queue {
        Some(q) if q.ends_with("-pvc") => Owner::Resizer,
        _ => Owner::Provisioner,
    };
    if family.starts_with("process_")
        || family.starts_with("leader_election_")
        || family.ends_with("build_info")
    {
        return Owner::Both;
    }
    if family == "csi_sidecar_operations_seconds" {
        let method = label("method_name").unwrap_or("");
        let method = method.rsplit('/').next().unwrap_or(method);
        return match method {
            m if RESIZER_METHODS.contains(&m) => Owner::Resizer,
            m if SHARED_METHODS.contains(&m) => Owner::Both,
            _ => Owner::Provisioner,
        };
    }
    if family.starts_with("workqueue_")
        || family == "csi_pv_controller_passes_per_key"
        || family == "csi_pv_controller_write_conflicts"
    {
        return by_queue(label("name"));
    }
    if family == "csi_pv_controller_sync_failures" {
        return by_queue(label("queue"));
    }
    if family == "csi_pv_controller_resize_seconds" {
        return Owner::Resizer;
    }
    Owner::Provisioner
}

/// Content type of Prometheus' text format as client_golang writes it, before the escaping
/// parameter.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The escaping schemes client_golang takes from an `Accept` parameter.
const ESCAPINGS: [&str; 4] = ["allow-utf-8", "underscores", "dots", "values"];

/// The Content-Type client_golang answers `accept` with when OpenMetrics is not enabled (the
/// Go sidecars' case): the text format, with the last known `escaping=` parameter among the
/// ranges read up to the first text 0.0.4 range (underscores when none). Every name we export
/// is a legacy one, which each scheme leaves as it is.
pub fn content_type(accept: Option<&str>) -> String {
    let mut escaping = "underscores";
    for range in accept.unwrap_or("").split(',') {
        let mut parts = range.split(';').map(str::trim);
        let kind = parts.next().unwrap_or("");
        let params: Vec<(&str, &str)> =
            parts.filter_map(|p| p.split_once('=')).map(|(k, v)| (k.trim(), v.trim())).collect();
        let param = |key: &str| params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        if let Some(e) = param("escaping").and_then(|e| ESCAPINGS.iter().find(|s| **s == e)) {
            escaping = e;
        }
        if kind == "text/plain" && matches!(param("version"), None | Some("0.0.4")) {
            break;
        }
    }
    format!("{PROMETHEUS_TEXT}; escaping={escaping}")
}

/// OpenMetrics text (prometheus-client's encoding) in Prometheus' text format, with the
/// samples `scope` serves: no `# EOF` or `# UNIT`, a counter's family named with its `_total`,
/// values and `le` as Go formats a float, and no family left without a sample (client_golang
/// writes none for a vector with no children).
pub fn to_prometheus_text(openmetrics: &str, scope: Scope) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut family = Family::default();
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            family.flush(&mut out);
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            family.name = name.to_string();
            family.help = Some(help.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if name != family.name {
                family.flush(&mut out);
                family.name = name.to_string();
            }
            family.kind = kind.to_string();
        } else if let Some(sample) = Sample::parse(line) {
            if scope.serves(owner(&family.name, &sample.labels)) {
                family.samples.push(sample.to_go_text());
            }
        } else if !line.is_empty() {
            family.samples.push(line.to_string());
        }
    }
    family.flush(&mut out);
    out
}

/// One family's lines, held until its last sample is read.
#[derive(Default)]
struct Family {
    name: String,
    help: Option<String>,
    kind: String,
    samples: Vec<String>,
}

impl Family {
    /// Writes the family if any sample of it is served, and starts afresh.
    fn flush(&mut self, out: &mut String) {
        let family = std::mem::take(self);
        if family.samples.is_empty() {
            return;
        }
        let name = match family.kind.as_str() {
            "counter" => format!("{}_total", family.name),
            _ => family.name,
        };
        if let Some(help) = family.help {
            out.push_str(&format!("# HELP {name} {help}\n"));
        }
        if !family.kind.is_empty() {
            out.push_str(&format!("# TYPE {name} {}\n", family.kind));
        }
        for sample in family.samples {
            out.push_str(&sample);
            out.push('\n');
        }
    }
}

/// A sample line: `name{labels} value`, labels in order, values still escaped.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: String,
}

impl Sample {
    fn parse(line: &str) -> Option<Sample> {
        let name_end = line.find(['{', ' '])?;
        let name = line[..name_end].to_string();
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices();
            let mut key = String::new();
            loop {
                let (i, c) = chars.next()?;
                match c {
                    '}' => {
                        rest = &inner[i + 1..];
                        break;
                    }
                    ',' => {}
                    '=' => {
                        let (_, '"') = chars.next()? else { return None };
                        let mut value = String::new();
                        loop {
                            let (_, c) = chars.next()?;
                            match c {
                                '\\' => {
                                    value.push(c);
                                    value.push(chars.next()?.1);
                                }
                                '"' => break,
                                c => value.push(c),
                            }
                        }
                        labels.push((std::mem::take(&mut key), value));
                    }
                    c => key.push(c),
                }
            }
        }
        let value = rest.trim().split(' ').next()?.to_string();
        Some(Sample { name, labels, value })
    }

    fn to_go_text(&self) -> String {
        let mut text = self.name.clone();
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| match (k.as_str(), v.parse::<f64>()) {
                    ("le" | "quantile", Ok(number)) => format!("{k}=\"{}\"", go_float(number)),
                    _ => format!("{k}=\"{v}\""),
                })
                .collect();
            text.push_str(&format!("{{{}}}", labels.join(",")));
        }
        let value = self.value.parse::<f64>().map_or_else(|_| self.value.clone(), go_float);
        text.push(' ');
        text.push_str(&value);
        text
    }
}

/// strconv.FormatFloat(v, 'g', -1, 64), which client_golang writes every float with: the
/// shortest digits that read back as `v`, in exponent form (two exponent digits at least)
/// when the decimal exponent is below -4 or from 6 on, `+Inf`, `-Inf`, `NaN`.
pub fn go_float(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v.is_nan() {
        return "NaN".into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // Rust's `{:e}` gives the same shortest digits; its exponent decides the form.
    let text = format!("{v:e}");
    let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{v}")
}

/// client_golang's ExponentialBuckets: `count` bounds from `start`, each the last times
/// `factor`, by repeated multiplication as Go computes them (1e-05 comes out as
/// 9.999999999999999e-06, a different `le` from a power's).
pub fn go_exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut bounds = Vec::with_capacity(count);
    let mut bound = start;
    for _ in 0..count {
        bounds.push(bound);
        bound *= factor;
    }
    bounds
}

#[cfg(test)]
#[path = "exposition_tests.rs"]
mod tests;
