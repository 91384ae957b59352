//! A claim that says why it waits, in the mode deploy/ ships (`--binder=external` beside
//! kube-controller-manager, hostpathplugin behind a relay that makes the driver's faults): each
//! cause a Pending claim can have shows as the `csi-pv-controller.storage.k8s.io/Provisioning`
//! condition, with its reason, and as `explain`'s state line and `explain --all`'s line. The
//! condition goes once the claim is Bound; a claim bound at once never gets one. The
//! hand-over's cause (no binder in the cluster) is in `tests/provisioning/`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use csi_pv_controller::csi::v1 as csi;
use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use prost::Message;
use serde_json::json;
use tonic::Code;

use support::csi_relay::Fault;
use support::relayed::Beside;
use support::upstream::Upstream;

const LIMIT: Duration = Duration::from_secs(90);
const CONDITION: &str = "csi-pv-controller.storage.k8s.io/Provisioning";
const GI: i64 = 1 << 30;

/// The relay's answer by requested size: each size is one class of driver failure.
fn by_size(message: &[u8]) -> Option<(Code, String)> {
    let request = csi::CreateVolumeRequest::decode(message).ok()?;
    match request.capacity_range?.required_bytes / GI {
        3 => Some((Code::ResourceExhausted, "pool is full".into())),
        5 => Some((Code::Internal, "backend exploded".into())),
        7 => Some((Code::InvalidArgument, "no such tier".into())),
        9 => Some((Code::Unavailable, "backend restarting".into())),
        _ => None,
    }
}

/// The reason of our condition, if the claim has it.
fn reason(claim: &PersistentVolumeClaim) -> Option<String> {
    let conditions = claim.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == CONDITION)?.reason.clone()
}

/// The reasons claim `name` showed, polled every 50 ms until it is Bound.
async fn reasons_while_pending(world: &Beside, name: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let start = std::time::Instant::now();
    while start.elapsed() < LIMIT {
        let Some(claim) = world.claim(name).await else { break };
        if let Some(r) = reason(&claim).filter(|r| seen.last() != Some(r)) {
            seen.push(r);
        }
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("claim {name} not Bound within {LIMIT:?}; reasons seen {seen:?}");
}

/// Every reason claim `name`'s condition takes, in order, from a watch opened before the claim
/// exists: a reason that lasts for one write only still shows.
async fn watch_reasons(world: &Beside, name: &str) -> Arc<Mutex<Vec<String>>> {
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let stream = world.claims().watch(&params, "0").await.expect("cannot watch the claim");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let Ok(WatchEvent::Added(claim) | WatchEvent::Modified(claim)) = event else {
                continue;
            };
            let mut seen = sink.lock().unwrap();
            if let Some(r) = reason(&claim).filter(|r| seen.last() != Some(r)) {
                seen.push(r);
            }
        }
    });
    seen
}

/// When the sidecar sent CreateVolume for `claim`, in seconds of the day, from its klog lines
/// (`I1126 08:06:30.520101 …`).
fn create_call_times(log: &str, claim: &str) -> Vec<f64> {
    let field = format!("claim={claim} ");
    log.lines()
        .filter(|l| l.contains("\"CSI call\" method=\"CreateVolume\""))
        .filter(|l| l.contains(&field) || l.ends_with(&format!("claim={claim}")))
        .filter_map(|l| {
            let time = l.split_whitespace().nth(1)?;
            let mut parts = time.split(':');
            let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
            Some(
                h.parse::<f64>().ok()? * 3600.0
                    + m.parse::<f64>().ok()? * 60.0
                    + s.parse::<f64>().ok()?,
            )
        })
        .collect()
}

/// `explain` with `args`, with the admin kubeconfig and the driver behind the relay.
fn explain(world: &Beside, args: &[&str]) -> String {
    let endpoint = world.relay().endpoint();
    support::sidecar::explain(&world.plane.admin_kubeconfig, Some(&endpoint), args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_pending_cause_is_a_condition_and_an_explain_line() {
    let args = ["--waiting-condition-after=0s", "--timeout=2s"];
    let world = Beside::start("waiting", &[], &args).await;
    let ns = world.namespace.clone();
    world.create_class("std", json!({})).await;
    world.create_class("late", json!({"volumeBindingMode": "WaitForFirstConsumer"})).await;
    let secret = json!({"parameters": {
        "csi.storage.k8s.io/provisioner-secret-name": "absent",
        "csi.storage.k8s.io/provisioner-secret-namespace": ns,
    }});
    world.create_class("locked", secret).await;
    // A node whose CSINode registers another driver only: no topology for ours there.
    let elsewhere = format!("elsewhere-{ns}");
    support::hostpath::register_node_as(&world.client, "other.csi.test", &elsewhere, "x")
        .await
        .expect("cannot register the other node");
    world.relay().always("CreateVolume", Fault::Check(by_size));

    // Alone first, so that no other claim's call takes the hang: CreateVolume hangs past
    // --timeout once, and the retry succeeds. The condition says so while it lasts, and goes
    // once the claim is Bound.
    world.relay().inject("CreateVolume", Fault::Hang);
    world.create_claim("slow", "std", "1Gi", json!({})).await;
    let seen = reasons_while_pending(&world, "slow").await;
    assert!(seen.iter().any(|r| r == "DriverTimeout"), "reasons seen: {seen:?}");
    world.claim_until("slow", "the condition's removal", LIMIT, |c| reason(c).is_none()).await;

    let selected = |node: &str| json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": node}}});
    let clone_of_nothing = json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim",
        "name": "missing"}}});
    let cases = [
        ("consumer", "late", "1Gi", json!({}), "WaitForFirstConsumer"),
        ("elsewhere", "late", "1Gi", selected(&elsewhere), "TopologyUnsatisfied"),
        ("full", "std", "3Gi", json!({}), "NoCapacity"),
        ("broken", "std", "5Gi", json!({}), "DriverError"),
        ("refused", "std", "7Gi", json!({}), "DriverRefused"),
        ("unreachable", "std", "9Gi", json!({}), "DriverUnreachable"),
        ("clone", "std", "1Gi", clone_of_nothing, "DataSourceRefused"),
        ("locked", "locked", "1Gi", json!({}), "SecretMissing"),
    ];
    for (name, class, size, extra, _) in &cases {
        world.create_claim(name, class, size, extra.clone()).await;
    }
    // A selected node that does not exist: the claim goes back to the scheduler, and says why
    // for as long as that takes (a moment: then it waits for its consumer again).
    let ghost = format!("ghost-{ns}");
    let ghost_reasons = watch_reasons(&world, "ghost").await;
    world.create_claim("ghost", "late", "1Gi", selected(&ghost)).await;
    world.create_claim("fine", "std", "1Gi", json!({})).await;
    // A bound claim whose resize the driver refuses: explain's ResizeFailed.
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    world.create_claim("stuck", "grow", "1Gi", json!({})).await;

    for (name, _, _, _, want) in &cases {
        let claim = world
            .claim_until(name, &format!("condition {want}"), LIMIT, |c| {
                reason(c).as_deref() == Some(*want)
            })
            .await;
        assert_eq!(claim.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Pending"));
        let report = explain(&world, &[&format!("{ns}/{name}")]);
        assert!(report.contains(&format!("state: Pending ({want})")), "{name}:\n{report}");
        assert!(report.contains(&format!("condition {CONDITION}: {want}: ")), "{name}:\n{report}");
    }
    let back = support::cluster::eventually(LIMIT, || async {
        let seen = ghost_reasons.lock().unwrap().clone();
        let gone = seen.iter().position(|r| r == "NodeUnavailable")?;
        seen[gone..].iter().any(|r| r == "WaitForFirstConsumer").then_some(seen)
    });
    let seen = back.await;
    assert!(seen.is_some(), "ghost's reasons: {:?}", ghost_reasons.lock().unwrap());
    println!("ghost's reasons: {seen:?}");
    let annotations =
        support::cluster::annotations(&world.claim("ghost").await.expect("claim ghost"));
    assert!(!annotations.contains_key("volume.kubernetes.io/selected-node"), "{annotations:?}");
    let note = world.event("ghost", "ProvisioningFailed", &ghost, LIMIT).await;
    assert!(note.contains("does not exist"), "{note}");
    let report = explain(&world, &[&format!("{ns}/ghost")]);
    assert!(report.contains("state: Pending (WaitForFirstConsumer)"), "ghost:\n{report}");

    // Retries with the same cause write nothing more to the claim.
    let broken = world.claim("broken").await.expect("claim broken");
    let attempts = || {
        let requests = world.relay().requests::<csi::CreateVolumeRequest>("CreateVolume");
        requests
            .iter()
            .filter(|r| r.capacity_range.map(|c| c.required_bytes) == Some(5 * GI))
            .count()
    };
    let before = attempts();
    let retried =
        support::cluster::eventually(LIMIT, || async { (attempts() >= before + 2).then_some(()) });
    assert!(retried.await.is_some(), "no retries of broken's CreateVolume");
    let now = world.claim("broken").await.expect("claim broken");
    assert_eq!(
        now.metadata.resource_version, broken.metadata.resource_version,
        "a retry with the same cause wrote the claim: {:?}",
        now.status
    );
    // The condition's own write does not lift the backoff: the refused request's second
    // attempt waits out the delay (--retry-interval-max, 2s here) from the first.
    let calls = create_call_times(&world.sidecar.log_text(), &format!("{ns}/refused"));
    assert!(calls.len() >= 2, "refused was tried {} times", calls.len());
    assert!(calls[1] - calls[0] >= 1.5, "the retry came after {:.2}s", calls[1] - calls[0]);
    let (fine, _) = world.bound("fine", LIMIT).await;
    assert_eq!(reason(&fine), None, "a claim bound at once is written no condition");

    world.bound("stuck", LIMIT).await;
    let refuse = Fault::Fail(Code::OutOfRange, "the pool cannot grow".into());
    world.relay().always("ControllerExpandVolume", refuse);
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    world.claims().patch("stuck", &PatchParams::default(), &Patch::Merge(grow)).await.unwrap();
    world
        .claim_until("stuck", "ControllerResizeError", LIMIT, |c| {
            let conditions = c.status.as_ref().and_then(|s| s.conditions.clone());
            conditions.unwrap_or_default().iter().any(|c| c.type_ == "ControllerResizeError")
        })
        .await;
    let report = explain(&world, &[&format!("{ns}/stuck")]);
    assert!(report.contains("state: ResizeFailed (ControllerResizeError)"), "{report}");
    assert!(report.contains("the pool cannot grow"), "{report}");

    let all = explain(&world, &["--all"]);
    for (name, _, _, _, want) in &cases {
        let line = all.lines().find(|l| l.starts_with(&format!("{ns}/{name} ")));
        let line = line.unwrap_or_else(|| panic!("no line for {name}:\n{all}"));
        assert!(line.contains(" Pending ") && line.contains(want), "{line}");
    }
    assert!(!all.contains(&format!("{ns}/fine ")), "a Bound claim is settled:\n{all}");
    let stuck = all.lines().find(|l| l.starts_with(&format!("{ns}/stuck ")));
    assert!(stuck.is_some_and(|l| l.contains(" ResizeFailed ")), "{all}");
    println!("explain --all:\n{all}");

    // The scheduler picks the driver's node: the claim is provisioned and bound, and the
    // condition goes.
    let node = world.hostpath().config.node_id.clone();
    world
        .claims()
        .patch("consumer", &PatchParams::default(), &Patch::Merge(selected(&node)))
        .await
        .expect("cannot select the node");
    world.bound("consumer", LIMIT).await;
    world.claim_until("consumer", "the condition's removal", LIMIT, |c| reason(c).is_none()).await;
}

/// csi-resizer rewrites only its own resize conditions: a claim that carries ours keeps it
/// through a whole resize by the real csi-resizer (kubelet's file-system step merges the same
/// way, keeping every condition type it does not own; this plane runs no kubelet).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn csi_resizer_keeps_our_condition() {
    let mut world = Beside::start("waiting-resizer", &[], &[]).await;
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    // The upstream stack alone: our sidecar goes before it has anything to do.
    assert_eq!(world.sidecar.terminate(Duration::from_secs(20)).await, Some(0));
    let socket = world.hostpath().socket.clone();
    let upstream =
        Upstream::start(&world.plane.admin_kubeconfig, &socket, world.dir.path(), "up", &[]);
    world.create_claim("a", "grow", "1Gi", json!({})).await;
    world.bound("a", LIMIT).await;
    let ours = json!({"status": {"conditions": [{"type": CONDITION, "status": "True",
        "reason": "WaitingForBinder", "message": "written by the test"}]}});
    world
        .claims()
        .patch_status("a", &PatchParams::default(), &Patch::Merge(ours))
        .await
        .expect("cannot write the condition");
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    world.claims().patch("a", &PatchParams::default(), &Patch::Merge(grow)).await.unwrap();

    // hostpath grows on the node too: csi-resizer ends at FileSystemResizePending.
    let resized = world
        .claim_until("a", "csi-resizer's FileSystemResizePending", LIMIT, |c| {
            let conditions = c.status.as_ref().and_then(|s| s.conditions.clone());
            conditions.unwrap_or_default().iter().any(|c| c.type_ == "FileSystemResizePending")
        })
        .await;
    assert_eq!(
        reason(&resized).as_deref(),
        Some("WaitingForBinder"),
        "our condition was dropped: {:?}\n{}",
        resized.status,
        upstream.log_text()
    );
    assert!(upstream.calls("ControllerExpandVolume") >= 1, "{}", upstream.log_text());
}
