//! The metrics an operator's dashboards for csi-provisioner and csi-resizer already chart, under
//! the same names and labels: the provisioner library's provision and delete series,
//! client-go's workqueue durations, client_golang's process series, and grpc-go's code names.

mod support;

use std::time::Duration;

use kube::api::DeleteParams;
use serde_json::json;
use support::cluster::World;
use support::fake_driver::DriverConfig;
use support::sidecar::sample;
use tonic::Code;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_series_after_a_provision_a_failure_and_a_deletion() {
    let world = World::start("metrics", DriverConfig::default(), &[]).await;
    world.create_class("fast", json!({})).await;
    world.driver.fail("CreateVolume", Code::Internal, 1);
    world.create_claim("data", "fast", "1Gi", json!({})).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    let name = pv.metadata.name.unwrap();
    let gone = world.volume_gone(&name, LIMIT).await;
    assert!(gone, "the PV was not deleted");

    let text = world.sidecar.metrics().await;
    let class = "class=\"metrics-fast\"";
    let value = |series: &str| sample(&text, series);
    let table = [
        (
            format!("controller_persistentvolumeclaim_provision_total{{{class},source=\"\"}}"),
            Some(1.0),
        ),
        (
            format!(
                "controller_persistentvolumeclaim_provision_failed_total{{{class},source=\"\"}}"
            ),
            Some(1.0),
        ),
        (
            format!(
                "controller_persistentvolumeclaim_provision_duration_seconds_count{{{class},source=\"\"}}"
            ),
            Some(1.0),
        ),
        (format!("controller_persistentvolume_delete_total{{{class}}}"), Some(1.0)),
        (
            format!("controller_persistentvolume_delete_duration_seconds_count{{{class}}}"),
            Some(1.0),
        ),
    ];
    for (series, expected) in table {
        assert_eq!(value(&series), expected, "{series} in\n{text}");
    }
    // The claim queue's client-go series are also csi-resizer's, under its queue name.
    let resizer = format!("workqueue_adds_total{{name=\"{}-pvc\"}}", world.driver_name);
    let claims_added = value("workqueue_adds_total{name=\"claims\"}");
    assert!(claims_added.is_some_and(|v| v >= 1.0), "the claim queue took the claim:\n{text}");
    assert_eq!(value(&resizer), claims_added, "{text}");
    // client-go's periodic gauges, and its buckets: 10 ns to 10 s by tens, then +Inf.
    for series in [
        "workqueue_unfinished_work_seconds{name=\"claims\"}",
        "workqueue_longest_running_processor_seconds{name=\"volumes\"}",
    ] {
        assert!(value(series).is_some_and(|v| v >= 0.0), "{series} in\n{text}");
    }
    let buckets = |series: &str, label: &str| {
        let prefix = format!("{series}_bucket{{");
        text.lines().filter(|l| l.starts_with(&prefix) && l.contains(label)).count()
    };
    let claims = "name=\"claims\"";
    assert_eq!(buckets("workqueue_queue_duration_seconds", claims), 11, "{text}");
    // The provisioner library's durations use Prometheus' default buckets (11, then +Inf).
    let provision = "controller_persistentvolumeclaim_provision_duration_seconds";
    assert_eq!(buckets(provision, class), 12, "{text}");
    for series in [
        "workqueue_queue_duration_seconds_count{name=\"claims\"}",
        "workqueue_work_duration_seconds_count{name=\"claims\"}",
        "workqueue_work_duration_seconds_count{name=\"volumes\"}",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
    ] {
        assert!(value(series).is_some_and(|v| v > 0.0), "{series} in\n{text}");
    }
    let failed = format!(
        "csi_sidecar_operations_seconds_count{{driver_name=\"{}\",method_name=\"/csi.v1.Controller/CreateVolume\",grpc_status_code=\"Internal\"}}",
        world.driver_name
    );
    assert_eq!(value(&failed), Some(1.0), "{failed} in\n{text}");
    assert!(!text.contains("\"Cancelled\""), "grpc-go spells it Canceled");
}
