//! The swap as a storage team makes it: csi-driver-host-path's csi-provisioner and csi-resizer
//! containers replaced by one csi-pv-controller whose args are the two lists, verbatim, one
//! after the other, each marked with `--args-of` and carrying the two flags a deployment sets
//! per sidecar (its port and its timeout). In the mode deploy/ ships, beside
//! kube-controller-manager, on hostpathplugin behind the fault relay.

mod support;

use std::time::Duration;

use serde_json::json;

use support::cluster::eventually;
use support::control_plane::{free_port, http_get, http_ok};
use support::csi_relay::Fault;
use support::relayed::Beside;

const LIMIT: Duration = Duration::from_secs(90);

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
