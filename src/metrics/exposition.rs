//! The two text formats a scrape may ask for. client_golang, which the Go sidecars serve with,
//! answers Prometheus' text format (0.0.4) unless the scraper's `Accept` names OpenMetrics.
//! Series names and `le` values differ between the two (a counter's `# TYPE` line, `10` against
//! `10.0`), and Prometheus 2.x keeps `le` as written: a dashboard's histogram query would split
//! in two if the format changed under it.

/// Content type of Prometheus' text format, as client_golang writes it.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of OpenMetrics 1.0.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics (client_golang's negotiation: any mention).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// OpenMetrics text (prometheus-client's encoding) in Prometheus' text format: no `# EOF` or
/// `# UNIT`, a counter's family named with its `_total`, and `le` as Go formats a float.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let line = match line.strip_prefix("# HELP ").or_else(|| line.strip_prefix("# TYPE ")) {
            Some(rest) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let kind = &line[..7];
                match counters.contains(&name) {
                    true => format!("{kind}{name}_total {tail}"),
                    false => line.to_string(),
                }
            }
            None => go_le(line),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A sample line with its `le="…"` value written as Go writes a float. `le` is found as a whole
/// label name only (after `{` or `,`), never as the end of another (`handle="…"`).
fn go_le(line: &str) -> String {
    let label = ["{le=\"", ",le=\""].iter().find_map(|l| line.find(l).map(|i| i + l.len()));
    let Some(start) = label else {
        return line.to_string();
    };
    let Some(len) = line[start..].find('"') else {
        return line.to_string();
    };
    let value = &line[start..start + len];
    match value.parse::<f64>() {
        Ok(v) => format!("{}{}{}", &line[..start], go_float(v), &line[start + len..]),
        Err(_) => line.to_string(),
    }
}

/// strconv.FormatFloat(v, 'g', -1, 64): the shortest form, in exponent form below 1e-4 or
/// from 1e21, `+Inf` for infinity.
pub fn go_float(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v.is_nan() {
        return "NaN".into();
    }
    let exponent = if v == 0.0 { 0 } else { v.abs().log10().floor() as i32 };
    if v != 0.0 && !(-4..21).contains(&exponent) {
        // Rust writes 1e-5 and 1e21; Go writes 1e-05 and 1e+21.
        let text = format!("{v:e}");
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{v}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_go_writes_them() {
        let rows = [
            (10.0, "10"),
            (0.005, "0.005"),
            (2.5, "2.5"),
            (1800.0, "1800"),
            (1e6, "1000000"),
            (1e-5, "1e-05"),
            (1e21, "1e+21"),
            (0.0001, "0.0001"),
            (0.0, "0"),
            (f64::INFINITY, "+Inf"),
        ];
        for (v, want) in rows {
            assert_eq!(go_float(v), want, "{v}");
        }
    }

    #[test]
    fn openmetrics_becomes_prometheus_text() {
        // A label ending in "le" is not `le`.
        let handle = "up{handle=\"1.0\"} 1\n# EOF\n";
        assert_eq!(to_prometheus_text(handle), "up{handle=\"1.0\"} 1\n");
        let om = "# HELP jobs Jobs done.\n# TYPE jobs counter\njobs_total{queue=\"a\"} 3\n# HELP wait Waiting.\n# TYPE wait histogram\n# UNIT wait seconds\nwait_sum 1.5\nwait_count 2\nwait_bucket{le=\"10.0\"} 2\nwait_bucket{name=\"x\",le=\"+Inf\"} 2\n# TYPE up gauge\nup 1\n# EOF\n";
        let want = "# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\njobs_total{queue=\"a\"} 3\n# HELP wait Waiting.\n# TYPE wait histogram\nwait_sum 1.5\nwait_count 2\nwait_bucket{le=\"10\"} 2\nwait_bucket{name=\"x\",le=\"+Inf\"} 2\n# TYPE up gauge\nup 1\n";
        assert_eq!(to_prometheus_text(om), want);
        assert!(wants_openmetrics(Some("application/openmetrics-text;version=1.0.0,*/*;q=0.1")));
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1")));
        assert!(!wants_openmetrics(None));
    }
}
