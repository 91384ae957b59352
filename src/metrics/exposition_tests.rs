use super::*;

/// Prometheus 2.55's and 3.x's default scrape `Accept` headers (scrape.acceptHeader over the
/// default protocols).
pub const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
pub const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.7,application/openmetrics-text;version=0.0.1;q=0.6,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.3";

#[test]
fn floats_as_go_writes_them() {
    let rows = [
        (10.0, "10"),
        (0.005, "0.005"),
        (2.5, "2.5"),
        (1800.0, "1800"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (23068672.0, "2.3068672e+07"),
        (1.7e9, "1.7e+09"),
        (1e-5, "1e-05"),
        (9.999999999999999e-06, "9.999999999999999e-06"),
        (0.0001, "0.0001"),
        (0.00012, "0.00012"),
        (1e21, "1e+21"),
        (1e100, "1e+100"),
        (-1.5, "-1.5"),
        (-2e6, "-2e+06"),
        (0.0, "0"),
        (f64::INFINITY, "+Inf"),
        (f64::NEG_INFINITY, "-Inf"),
        (f64::NAN, "NaN"),
    ];
    for (v, want) in rows {
        assert_eq!(go_float(v), want, "{v:e}");
    }
}

#[test]
fn client_go_workqueue_buckets_are_computed_as_go_computes_them() {
    let les: Vec<String> =
        go_exponential_buckets(10e-9, 10.0, 10).into_iter().map(go_float).collect();
    let want = [
        "1e-08",
        "1e-07",
        "1e-06",
        "9.999999999999999e-06",
        "9.999999999999999e-05",
        "0.001",
        "0.01",
        "0.1",
        "1",
        "10",
    ];
    assert_eq!(les, want);
}

#[test]
fn every_accept_a_prometheus_sends_gets_text_with_client_golangs_escaping() {
    let text = |escaping: &str| format!("{PROMETHEUS_TEXT}; escaping={escaping}");
    let rows = [
        (None, text("underscores")),
        (Some(""), text("underscores")),
        (Some(PROMETHEUS_2), text("underscores")),
        (Some(PROMETHEUS_3), text("allow-utf-8")),
        (Some("application/openmetrics-text;version=1.0.0,*/*;q=0.1"), text("underscores")),
        // A scheme given after the first text 0.0.4 range is not read, nor an unknown one.
        (Some("text/plain;version=0.0.4,text/plain;escaping=dots"), text("underscores")),
        (Some("text/plain;escaping=nonsense"), text("underscores")),
        (Some("text/plain;version=1.0.0;escaping=values,*/*"), text("values")),
    ];
    for (accept, want) in rows {
        assert_eq!(content_type(accept), want, "{accept:?}");
    }
}

#[test]
fn each_series_belongs_to_the_role_whose_sidecar_exported_it() {
    let l = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let method = |m: &str| l(&[("driver_name", "d"), ("method_name", m)]);
    let rows = [
        (
            "csi_sidecar_operations_seconds",
            method("/csi.v1.Controller/CreateVolume"),
            Owner::Provisioner,
        ),
        (
            "csi_sidecar_operations_seconds",
            method("/csi.v1.Controller/ControllerExpandVolume"),
            Owner::Resizer,
        ),
        (
            "csi_sidecar_operations_seconds",
            method("/csi.v1.Controller/ControllerModifyVolume"),
            Owner::Resizer,
        ),
        ("csi_sidecar_operations_seconds", method("/csi.v1.Identity/Probe"), Owner::Both),
        ("workqueue_adds", l(&[("name", "claims")]), Owner::Provisioner),
        ("workqueue_depth", l(&[("name", "hostpath.csi.k8s.io-pvc")]), Owner::Resizer),
        (
            "csi_pv_controller_sync_failures",
            l(&[("queue", "d-pvc"), ("class", "final")]),
            Owner::Resizer,
        ),
        (
            "csi_pv_controller_sync_failures",
            l(&[("queue", "volumes"), ("class", "final")]),
            Owner::Provisioner,
        ),
        (
            "controller_persistentvolumeclaim_provision",
            l(&[("class", "x-pvc")]),
            Owner::Provisioner,
        ),
        ("csistoragecapacities_desired_goal", l(&[]), Owner::Provisioner),
        ("csi_pv_controller_resize_seconds", l(&[]), Owner::Resizer),
        ("process_resident_memory_bytes", l(&[]), Owner::Both),
        ("leader_election_master_status", l(&[("name", "")]), Owner::Both),
        ("csi_pv_controller_build_info", l(&[("version", "v1")]), Owner::Both),
    ];
    for (family, labels, want) in rows {
        assert_eq!(owner(family, &labels), want, "{family} {labels:?}");
    }
}

const OPENMETRICS: &str = "# HELP workqueue_adds Jobs done.
# TYPE workqueue_adds counter
workqueue_adds_total{name=\"claims\"} 3
workqueue_adds_total{name=\"d-pvc\"} 1000000
# HELP wait Waiting.
# TYPE wait histogram
# UNIT wait seconds
wait_sum{name=\"claims\"} 1.5
wait_count{name=\"claims\"} 2
wait_bucket{name=\"claims\",le=\"9.999999999999999e-6\"} 0
wait_bucket{name=\"claims\",le=\"10.0\"} 2
wait_bucket{name=\"claims\",le=\"+Inf\"} 2
# HELP empty No children yet.
# TYPE empty counter
# HELP process_resident_memory_bytes Resident memory.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 23068672.0
# HELP odd A label value with a quote, a comma and a brace.
# TYPE odd gauge
odd{class=\"a\\\"b,c}\",handle=\"1.0\"} 1
# EOF
";

#[test]
fn openmetrics_becomes_the_text_of_the_scraped_role() {
    let all = "# HELP workqueue_adds_total Jobs done.
# TYPE workqueue_adds_total counter
workqueue_adds_total{name=\"claims\"} 3
workqueue_adds_total{name=\"d-pvc\"} 1e+06
# HELP wait Waiting.
# TYPE wait histogram
wait_sum{name=\"claims\"} 1.5
wait_count{name=\"claims\"} 2
wait_bucket{name=\"claims\",le=\"9.999999999999999e-06\"} 0
wait_bucket{name=\"claims\",le=\"10\"} 2
wait_bucket{name=\"claims\",le=\"+Inf\"} 2
# HELP process_resident_memory_bytes Resident memory.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.3068672e+07
# HELP odd A label value with a quote, a comma and a brace.
# TYPE odd gauge
odd{class=\"a\\\"b,c}\",handle=\"1.0\"} 1
";
    assert_eq!(to_prometheus_text(OPENMETRICS, Scope::All), all);

    let resizer = to_prometheus_text(OPENMETRICS, Scope::Resizer);
    let want = "# HELP workqueue_adds_total Jobs done.
# TYPE workqueue_adds_total counter
workqueue_adds_total{name=\"d-pvc\"} 1e+06
# HELP process_resident_memory_bytes Resident memory.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.3068672e+07
";
    assert_eq!(resizer, want);
    let provisioner = to_prometheus_text(OPENMETRICS, Scope::Provisioner);
    assert!(provisioner.contains("workqueue_adds_total{name=\"claims\"} 3\n"), "{provisioner}");
    assert!(!provisioner.contains("d-pvc"), "{provisioner}");
    assert!(provisioner.contains("wait_bucket{name=\"claims\",le=\"10\"} 2\n"), "{provisioner}");
    assert!(provisioner.contains("process_resident_memory_bytes"), "{provisioner}");
}
