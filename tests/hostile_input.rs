//! Hostile input in the mode deploy/ ships (`--binder=external` beside kube-controller-manager,
//! deploy/ RBAC, hostpathplugin behind a relay): classes and claims that users and admins can
//! write wrong, and a driver that answers CreateVolume with what no PV can hold. Each gets a
//! Warning that says what is wrong; no worker is lost, so good claims created after them are
//! all Bound; no volume is left behind.

mod support;

use std::time::Duration;

use csi_pv_controller::runtime::crash_point::PANIC_ENV;
use serde_json::{Value, json};

use support::cluster::eventually;
use support::relayed::Beside;

const LIMIT: Duration = Duration::from_secs(90);

/// A hostile claim: its name, its class's parameters (None: the plain class), the claim's own
/// fields, and what its Warning must say.
struct Hostile {
    name: &'static str,
    parameters: Option<Value>,
    claim: Value,
    size: &'static str,
    says: &'static str,
}

fn secret(name: &str, namespace: &str) -> Option<Value> {
    Some(json!({
        "csi.storage.k8s.io/provisioner-secret-name": name,
        "csi.storage.k8s.io/provisioner-secret-namespace": namespace,
    }))
}

fn hostile_claims() -> Vec<Hostile> {
    let plain = |name, claim, size, says| Hostile { name, parameters: None, claim, size, says };
    let class =
        |name, parameters, says| Hostile { name, parameters, claim: json!({}), size: "1Gi", says };
    vec![
        // The template whose prefix and suffix overlap (it used to panic the worker).
        class("tpl-overlap", secret("${pvc.annotations[']}", "ns"), "pvc.annotations[']"),
        class("tpl-unknown", secret("${pvc.uid}", "ns"), "${pvc.uid}"),
        class("tpl-ns-token", secret("s", "${pvc.name}"), "not allowed there"),
        class("tpl-dollar", secret("$oops", "ns"), "must start a ${...} token"),
        class("tpl-unclosed", secret("${pvc.name", "ns"), "unclosed ${"),
        class("tpl-annotation", secret("${pvc.annotations['team/key']}", "ns"), "team/key"),
        class("tpl-invalid", secret("UPPER", "ns"), "not a valid Secret name"),
        class(
            "reserved-unknown",
            Some(json!({"csi.storage.k8s.io/bogus": "x"})),
            "csi.storage.k8s.io/bogus",
        ),
        class("reserved-empty", Some(json!({"csi.storage.k8s.io/fstype": ""})), "is empty"),
        class(
            "secret-half",
            Some(json!({"csi.storage.k8s.io/provisioner-secret-name": "s"})),
            "a secret reference needs both",
        ),
        class("secret-absent", secret("nowhere", "default"), "does not exist"),
        plain(
            "with-selector",
            json!({"spec": {"selector": {"matchLabels": {"a": "b"}}}}),
            "1Gi",
            "Selector",
        ),
        plain(
            "clone-of-nothing",
            json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "absent"}}}),
            "1Gi",
            "absent",
        ),
        plain("exabyte", json!({}), "1E", "1000000000000000000"),
        // Three claims whose pass panics (a planted bug): more than --worker-threads.
        plain("panics-0", json!({}), "1Gi", "planted panic"),
        plain("panics-1", json!({}), "1Gi", "planted panic"),
        plain("panics-2", json!({}), "1Gi", "planted panic"),
    ]
}

/// With two claim workers, 17 hostile claims, then 10 good ones and one with 10,000
/// annotations: every hostile claim has a Warning that says what is wrong, every good claim is
/// Bound, the panics are counted, and the
/// driver holds exactly the good claims' volumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_claims_get_warnings_and_stop_no_worker() {
    let mut world = Beside::start("hostile", &[], &["--worker-threads=2"]).await;
    world.restart_with(&[], &[(PANIC_ENV, "panics-")]).await;
    world.create_class("plain", json!({})).await;
    let hostile = hostile_claims();
    assert!(hostile.len() >= 15);
    for h in &hostile {
        let class = match &h.parameters {
            Some(parameters) => {
                world.create_class(h.name, json!({"parameters": parameters})).await;
                h.name
            }
            None => "plain",
        };
        world.create_claim(h.name, class, h.size, h.claim.clone()).await;
    }
    // Every hostile claim is looked at (and panics, where planted) before the good ones come.
    for h in &hostile {
        let said = eventually(LIMIT, || async {
            world.warnings(h.name).await.into_iter().find(|w| w.contains(h.says))
        })
        .await;
        assert!(
            said.is_some(),
            "no Warning saying {:?} for {}: {:?}\nsidecar log:\n{}",
            h.says,
            h.name,
            world.events(h.name).await,
            world.sidecar.log_text()
        );
    }
    // A claim the API takes but nobody writes by hand: 10,000 annotations. A pass over it costs
    // what its size costs, and it is provisioned like any other.
    let crowded: serde_json::Map<String, Value> =
        (0..10_000).map(|i| (format!("example.com/a{i}"), json!("v"))).collect();
    world
        .create_claim("crowded", "plain", "1Gi", json!({"metadata": {"annotations": crowded}}))
        .await;
    let good = world.create_claims("good", "plain", 10).await;
    for name in good.iter().chain(std::iter::once(&"crowded".to_string())) {
        world.bound(name, LIMIT).await;
    }
    for h in &hostile {
        // Only the planted bugs are bugs: every other claim is refused for what it is.
        let internal =
            world.warnings(h.name).await.into_iter().find(|w| w.starts_with("InternalError"));
        assert_eq!(internal.is_some(), h.name.starts_with("panics-"), "{}: {internal:?}", h.name);
        let claim = world.claim(h.name).await.unwrap();
        let phase = claim.status.and_then(|s| s.phase);
        assert_eq!(phase.as_deref(), Some("Pending"), "{}", h.name);
    }
    let metrics = world.sidecar.metrics().await;
    let panics = metrics
        .lines()
        .find(|l| l.starts_with("csi_pv_controller_panics_total{pass=\"claim\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert!(panics.is_some_and(|n| n >= 3.0), "panics counted: {panics:?}");
    let log = world.sidecar.log_text();
    assert!(
        log.lines().any(|l| l.contains("panic") && l.contains("panics-0")),
        "the panic's log line names its claim:\n{log}"
    );
    // The driver holds the good claims' volumes and nothing else.
    let held = world.hostpath().state_volumes();
    assert_eq!(held.len(), good.len() + 1, "{held:?}");
}
