//! The swap as a storage team makes it: csi-driver-host-path's csi-provisioner and csi-resizer
//! containers replaced by one csi-pv-controller whose args are the two lists, verbatim, one
//! after the other, each marked with `--args-of` and carrying the two flags a deployment sets
//! per sidecar (its port and its timeout). In the mode deploy/ ships, beside
//! kube-controller-manager, on hostpathplugin behind the fault relay.

mod support;

use std::time::Duration;

use serde_json::json;

use support::cluster::eventually;
use support::control_plane::{free_port, http_get, http_get_with, http_ok};
use support::csi_relay::Fault;
use support::prometheus;
use support::relayed::Beside;

const LIMIT: Duration = Duration::from_secs(90);
/// Prometheus 3's default scrape `Accept`: OpenMetrics first.
const PROMETHEUS_3: &str = "Accept: application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.7,application/openmetrics-text;version=0.0.1;q=0.6,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.3\r\n";

/// Every port either list names answers each path; each sidecar's timeout bounds its own calls
/// (a driver 4 s late: within csi-provisioner's 30 s, past csi-resizer's 2 s); a flag the lists
/// give twice with different values is said in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_sidecars_args_in_one_container_lose_no_port_timeout_or_flag() {
    let (provisioner_port, resizer_port) = (free_port(), free_port());
    let socket = "{dir}/relay.sock";
    let list = |name: &str, own: &[String]| -> Vec<String> {
        let (args, _) = support::hostpath::container_args(name);
        let args = args.iter().map(|a| a.replace("/csi/csi.sock", socket));
        std::iter::once(format!("--args-of={name}"))
            .chain(args)
            .chain(own.iter().cloned())
            .collect()
    };
    let mut args = list(
        "csi-provisioner",
        &[
            "--timeout=30s".into(),
            format!("--http-endpoint=127.0.0.1:{provisioner_port}"),
            "--retry-interval-max=3s".into(),
        ],
    );
    args.extend(list(
        "csi-resizer",
        &["--timeout=2s".into(), format!("--metrics-address=localhost:{resizer_port}")],
    ));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let world = Beside::start("merged-args", &["--disable-node-expansion"], &args).await;

    // Each port: health, readiness, leadership and the metrics.
    for port in [provisioner_port, resizer_port, world.sidecar.http_port] {
        for path in ["/healthz", "/readyz", "/healthz/leader-election"] {
            assert!(http_ok(port, path), "port {port} does not answer {path}");
        }
        let metrics = tokio::task::spawn_blocking(move || http_get(port, "/metrics"))
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(metrics.contains("csi_sidecar_operations_seconds"), "port {port}: {metrics}");
    }

    // The world's own --retry-interval-max=2s, then the provisioner list's 3s: said, not lost.
    let said = "--retry-interval-max is given 2 times: 2s, 3s (csi-provisioner); the last, 3s";
    assert!(world.sidecar.log_text().contains(said), "{}", world.sidecar.log_text());

    let relay = world.relay();
    relay.inject("CreateVolume", Fault::AnswerLate(Duration::from_secs(4)));
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    world.create_claim("data", "grow", "1Gi", json!({})).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let volume = pv.metadata.name.unwrap_or_default();
    assert_eq!(relay.calls("CreateVolume"), 1, "CreateVolume answered within its 30 s");

    relay.inject("ControllerExpandVolume", Fault::AnswerLate(Duration::from_secs(4)));
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    world
        .claims()
        .patch("data", &Default::default(), &kube::api::Patch::Merge(patch))
        .await
        .unwrap();
    world.event("data", "VolumeResizeFailed", "DeadlineExceeded", LIMIT).await;
    let grown = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt(&volume).await.ok()??;
        let capacity = pv.spec?.capacity?.get("storage")?.0.clone();
        (capacity == "2Gi").then_some(())
    })
    .await;
    assert!(grown.is_some(), "not grown after the late answer:\n{}", world.sidecar.log_text());
    let expansions = relay.calls("ControllerExpandVolume");
    assert!(expansions >= 2, "the 2 s deadline passed before the 4 s answer: {expansions} calls");
    let events = world.events("data").await;
    assert!(
        !events.iter().any(|(_, reason, message)| reason == "ProvisioningFailed"
            && message.contains("DeadlineExceeded")),
        "csi-resizer's 2 s applied to CreateVolume: {events:?}"
    );
}

/// csi-resizer v2.3's own deadlines, `--resize-timeout` and `--modify-timeout` with no
/// `--timeout`: a driver 4 s late fails ControllerExpandVolume and ControllerModifyVolume at 2 s
/// (DeadlineExceeded, retried until the answer comes in time), while CreateVolume keeps the
/// sidecars' 10 s and answers at the first call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn csi_resizer_v2_3_deadlines_bound_its_own_calls_only() {
    let late = Fault::AnswerLate(Duration::from_secs(4));
    let world = Beside::start(
        "resizer-deadlines",
        &["--enable-controller-modify-volume", "--accepted-mutable-parameter-names=iops"],
        &["--resize-timeout=2s", "--modify-timeout=2s", "--retry-interval-max=2s"],
    )
    .await;
    let ns = world.namespace.clone();
    for (name, iops) in [("fast", "3000"), ("faster", "6000")] {
        world.create_attributes_class(name, json!({"iops": iops})).await;
    }
    let relay = world.relay();
    relay.inject("CreateVolume", late.clone());
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    let spec = json!({"spec": {"volumeAttributesClassName": format!("{ns}-fast")}});
    world.create_claim("data", "grow", "1Gi", spec).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let volume = pv.metadata.name.unwrap_or_default();
    assert_eq!(relay.calls("CreateVolume"), 1, "CreateVolume answered within the default 10 s");

    relay.inject("ControllerExpandVolume", late.clone());
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    let claims = world.claims();
    claims.patch("data", &Default::default(), &kube::api::Patch::Merge(patch)).await.unwrap();
    world.event("data", "VolumeResizeFailed", "DeadlineExceeded", LIMIT).await;
    let grown = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt(&volume).await.ok()??;
        let capacity = pv.spec?.capacity?.get("storage")?.0.clone();
        (capacity == "2Gi").then_some(())
    })
    .await;
    assert!(grown.is_some(), "not grown after the late answer:\n{}", world.sidecar.log_text());
    assert!(relay.calls("ControllerExpandVolume") >= 2, "the 2 s deadline passed first");

    relay.inject("ControllerModifyVolume", late);
    let patch = json!({"spec": {"volumeAttributesClassName": format!("{ns}-faster")}});
    claims.patch("data", &Default::default(), &kube::api::Patch::Merge(patch)).await.unwrap();
    world.event("data", "VolumeModifyFailed", "DeadlineExceeded", LIMIT).await;
    let modified = eventually(LIMIT, || async {
        let status = serde_json::to_value(world.claim("data").await?.status).ok()?;
        (status["currentVolumeAttributesClassName"] == json!(format!("{ns}-faster"))).then_some(())
    })
    .await;
    assert!(
        modified.is_some(),
        "not modified after the late answer:\n{}",
        world.sidecar.log_text()
    );
    assert!(relay.calls("ControllerModifyVolume") >= 2, "the 2 s deadline passed first");
}

/// The series a Prometheus server stores from a scrape, read by a real parser: Prometheus' text
/// format even when the scraper prefers OpenMetrics (Prometheus 3's own `Accept`), Go's `le` values, one leader series named as
/// csi-lib-utils names it, client_golang's process series, and a provisioning refused before
/// the driver (a missing secret) counted as a failed attempt, as the provisioner library counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scrape_reads_as_the_go_sidecars_series_whatever_accept_prefers() {
    let name = "merged-scrape";
    let args = ["--leader-election", &format!("--leader-election-namespace={name}")];
    let world = Beside::start(name, &[], &args).await;
    world.create_class("std", json!({})).await;
    let secret = json!({"parameters": {
        "csi.storage.k8s.io/provisioner-secret-name": "absent",
        "csi.storage.k8s.io/provisioner-secret-namespace": name,
    }});
    world.create_class("locked", secret).await;
    world.create_claim("data", "std", "1Gi", json!({})).await;
    world.create_claim("locked", "locked", "1Gi", json!({})).await;
    world.bound("data", LIMIT).await;
    world.event("locked", "ProvisioningFailed", "absent", LIMIT).await;

    let port = world.sidecar.http_port;
    let scrape = |accept: &'static str| async move {
        tokio::task::spawn_blocking(move || http_get_with(port, "/metrics", accept))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no scrape with {accept:?}"))
    };
    let (headers, text) = scrape("").await;
    assert!(headers.contains("text/plain; version=0.0.4"), "{headers}");
    let samples = prometheus::parse(&text, false).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let (om_headers, om_text) = scrape(PROMETHEUS_3).await;
    assert!(om_headers.contains("text/plain; version=0.0.4"), "{om_headers}");
    let om = prometheus::parse(&om_text, false).unwrap_or_else(|e| panic!("{e}\n{om_text}"));

    let named = |samples: &[prometheus::Sample], name: &str| -> Vec<prometheus::Sample> {
        samples.iter().filter(|s| s.name == name).cloned().collect()
    };
    // csi-lib-utils' histogram, its buckets written as Go writes them.
    let les = |samples: &[prometheus::Sample]| -> Vec<String> {
        named(samples, "csi_sidecar_operations_seconds_bucket")
            .iter()
            .filter(|s| {
                s.labels.get("method_name").map(String::as_str)
                    == Some("/csi.v1.Controller/CreateVolume")
            })
            .filter_map(|s| s.labels.get("le").cloned())
            .collect()
    };
    let go = ["0.1", "0.25", "0.5", "1", "2.5", "5", "10", "15", "25", "50", "120", "300", "600"];
    let mut want: Vec<String> = go.iter().map(|s| s.to_string()).collect();
    want.push("+Inf".into());
    assert_eq!(les(&samples), want, "{text}");
    assert_eq!(les(&om), want, "{om_text}");

    // One leader series, name="", though the Go sidecars' Leases are held too.
    let leader = named(&samples, "leader_election_master_status");
    assert_eq!(leader.len(), 1, "{leader:?}");
    assert_eq!(
        (leader[0].labels.get("name").map(String::as_str), leader[0].value),
        (Some(""), 1.0)
    );

    for series in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_virtual_memory_max_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
        "process_network_receive_bytes_total",
        "process_network_transmit_bytes_total",
    ] {
        assert_eq!(named(&samples, series).len(), 1, "{series} in\n{text}");
        assert_eq!(named(&om, series).len(), 1, "{series} in\n{om_text}");
    }

    let failed = |class: &str| {
        named(&samples, "controller_persistentvolumeclaim_provision_failed_total")
            .iter()
            .filter(|s| s.labels.get("class").map(String::as_str) == Some(class))
            .map(|s| s.value)
            .sum::<f64>()
    };
    assert!(failed(&format!("{name}-locked")) >= 1.0, "a refusal before the driver:\n{text}");
    assert_eq!(failed(&format!("{name}-std")), 0.0, "{text}");
    let provisioned = named(&samples, "controller_persistentvolumeclaim_provision_total");
    assert_eq!(provisioned.iter().map(|s| s.value).sum::<f64>(), 1.0, "{text}");
    assert_eq!(world.relay().calls("CreateVolume"), 1, "the refused claim never reached it");
}

/// csi-driver-host-path's two lists, each marked, as a storage team merges them, with what each
/// sidecar of theirs may add: a gate in each list and an API budget in each. Both gates apply
/// (csi-provisioner's Topology and csi-resizer's AnnotateFsResize), and the budgets add up;
/// each is said at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_manifests_lists_keep_each_sidecars_gates_and_budget() {
    let socket = "{dir}/relay.sock";
    let list = |name: &str, own: &[&str]| -> Vec<String> {
        let (args, _) = support::hostpath::container_args(name);
        let args = args.iter().map(|a| a.replace("/csi/csi.sock", socket));
        std::iter::once(format!("--args-of={name}"))
            .chain(args)
            .chain(own.iter().map(|a| a.to_string()))
            .collect()
    };
    let mut args = list("csi-provisioner", &["--kube-api-qps=5", "--kube-api-burst=10"]);
    args.extend(list(
        "csi-resizer",
        &["--feature-gates=AnnotateFsResize=true", "--kube-api-qps=5", "--kube-api-burst=10"],
    ));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let world = Beside::start("merged-gates", &[], &args).await;
    let log = world.sidecar.log_text();
    for said in [
        "--feature-gates is given 2 times: merged into Topology=true,AnnotateFsResize=true",
        "--kube-api-qps: csi-provisioner's 5 and csi-resizer's 5 add up to 10",
        "--kube-api-burst: csi-provisioner's 10 and csi-resizer's 10 add up to 20",
    ] {
        assert!(log.contains(said), "not said: {said}\n{log}");
    }
    assert!(
        !log.contains("is given 2 times: Topology"),
        "a merged gate list is not a warning:\n{log}"
    );
    // The merged process works as both: a claim is provisioned with topology.
    world.create_class("std", json!({})).await;
    world.create_claim("data", "std", "1Gi", json!({})).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let affinity = pv.spec.and_then(|s| s.node_affinity);
    assert!(affinity.is_some(), "Topology=true from csi-provisioner's list was lost");
}
