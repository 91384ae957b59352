//! What a storage team applies, run as they run it: deploy/swap/ with `kubectl apply -k` on
//! csi-driver-host-path's own plugin manifest, our image in the plugin pod in place of
//! csi-provisioner and csi-resizer, started by a real kubelet beside kube-controller-manager's
//! binder, reaching the apiserver with its ServiceAccount (tests/support/driver_pod.rs). A claim
//! is provisioned, used by a pod, grown and given back through that pod; and manifests that are
//! wrong in the ways users get them wrong say so in the log and in a failing probe.

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;

use support::cluster::eventually;
use support::control_plane::create_namespace;
use support::driver_pod::{DRIVER, DriverCluster, NAMESPACE, OURS, POD, Stack};
use support::node::writer;

const LIMIT: Duration = Duration::from_secs(120);

fn class(name: &str) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "provisioner": DRIVER,
        "allowVolumeExpansion": true,
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .unwrap()
}

fn claim(name: &str, class: &str, size: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "resources": {"requests": {"storage": size}},
        },
    }))
    .unwrap()
}

fn capacity(claim: &PersistentVolumeClaim) -> Option<String> {
    claim.status.as_ref()?.capacity.as_ref()?.get("storage").map(|q| q.0.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deploy_swap_in_the_driver_pod_provisions_grows_and_deletes() {
    let cluster = DriverCluster::start(Stack::Swap, |_| {}).await;
    let client = cluster.plane.client().await;

    // The pod runs our image, not the two it replaces.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let plugin = pods.get(POD).await.unwrap();
    let containers: Vec<(String, String)> = plugin
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| (c.name, c.image.unwrap_or_default()))
        .collect();
    let names: Vec<&str> = containers.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&OURS), "no {OURS} container in {names:?}");
    assert!(!names.contains(&"csi-provisioner") && !names.contains(&"csi-resizer"), "{names:?}");
    for expected in ["hostpath", "node-driver-registrar", "liveness-probe", "csi-attacher"] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }

    let namespace = "swap";
    create_namespace(&client, namespace).await;
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class("swap"))
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    claims.create(&PostParams::default(), &claim("data", "swap", "1Gi")).await.unwrap();
    let user_pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    user_pods.create(&PostParams::default(), &writer("data")).await.unwrap();

    // WaitForFirstConsumer: the scheduler picks the node, we provision there, the binder binds,
    // kubelet publishes through the driver's pod.
    let said = eventually(LIMIT, || async {
        let logs = user_pods.logs("writer", &LogParams::default()).await.ok()?;
        logs.contains("wrote /data/hello").then_some(())
    })
    .await;
    assert!(
        said.is_some(),
        "the pod never wrote into its volume: {:?}\n{}\n{}",
        claims.get_opt("data").await.ok().flatten().and_then(|c| c.status),
        cluster.describe().await,
        cluster.node.logs()
    );
    let bound = claims.get("data").await.unwrap();
    let pv_name = bound.spec.as_ref().and_then(|s| s.volume_name.clone()).expect("bound claim");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = volumes.get(&pv_name).await.unwrap();
    let handle = pv.spec.as_ref().and_then(|s| s.csi.as_ref()).map(|c| c.volume_handle.clone());
    let handle = handle.expect("a CSI volume");
    let data = Path::new(support::node::HOSTPATH_DATA).join(&handle);
    assert!(data.join("hello").is_file(), "the pod's file is not in {}", data.display());
    let annotations = pv.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("pv.kubernetes.io/provisioned-by").map(String::as_str),
        Some(DRIVER),
        "{pv_name}'s annotations"
    );
    let ours = cluster.logs(OURS, false).await;
    assert!(ours.contains("data"), "our container's log never names the claim:\n{ours}");

    // Grown while the pod runs: our ControllerExpandVolume, then kubelet's.
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    claims.patch("data", &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    let grown = eventually(LIMIT, || async {
        let claim = claims.get("data").await.ok()?;
        (capacity(&claim).as_deref() == Some("2Gi")).then_some(())
    })
    .await;
    assert!(grown.is_some(), "the claim never grew:\n{}", cluster.describe().await);

    // Given back: the pod, then the claim; the PV goes and the driver keeps nothing.
    user_pods.delete("writer", &DeleteParams::default()).await.unwrap();
    let gone = eventually(LIMIT, || async {
        user_pods.get_opt("writer").await.ok()?.is_none().then_some(())
    });
    assert!(gone.await.is_some(), "the pod was never removed:\n{}", cluster.node.logs());
    claims.delete("data", &DeleteParams::default()).await.unwrap();
    let deleted = eventually(LIMIT, || async {
        volumes.get_opt(&pv_name).await.ok()?.is_none().then_some(())
    });
    assert!(deleted.await.is_some(), "{pv_name} was never deleted:\n{}", cluster.describe().await);
    let left = eventually(LIMIT, || async { (!data.exists()).then_some(()) });
    assert!(left.await.is_some(), "the driver still holds {}", data.display());
}

/// What a wrong manifest must show: `needle` in our container's log (this instance's or the
/// previous one's), the container not ready, and a failed readiness probe (kubelet's
/// `Unhealthy` Event) or, for a process that cannot start, restarts. Never a silent stall.
async fn says_so(cluster: &DriverCluster, needle: &str, restarts: bool) {
    let client = cluster.plane.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, NAMESPACE);
    let last = std::sync::Mutex::new(String::new());
    let shown = eventually(Duration::from_secs(180), || {
        let (pods, events) = (pods.clone(), events.clone());
        let last = &last;
        async move {
            let pod = pods.get(POD).await.ok()?;
            let status = pod.status?.container_statuses?.into_iter().find(|s| s.name == OURS)?;
            let logged = cluster.logs(OURS, false).await + &cluster.logs(OURS, true).await;
            let probed = events.list(&Default::default()).await.ok()?.items.iter().any(|e| {
                e.reason.as_deref() == Some("Unhealthy")
                    && e.involved_object.field_path.as_deref()
                        == Some(&format!("spec.containers{{{OURS}}}"))
                    && e.message.as_deref().is_some_and(|m| m.starts_with("Readiness probe failed"))
            });
            *last.lock().unwrap() = format!(
                "ready {}, restarts {}, probe failed {probed}, log:\n{logged}",
                status.ready, status.restart_count
            );
            let shown = if restarts { status.restart_count > 0 } else { probed };
            (logged.contains(needle) && !status.ready && shown).then_some(())
        }
    })
    .await;
    let last = last.lock().unwrap().clone();
    assert!(shown.is_some(), "our container does not say {needle:?} with a failing probe: {last}");
    let line = last.lines().find(|l| l.contains(needle)).unwrap_or_default();
    eprintln!("{needle:?} said, with a failing probe: {line}");
}

/// Replaces `from` by `to` in deploy/swap/containers.yaml (or another file under deploy/);
/// panics if `from` is not there.
fn edit(deploy: &Path, file: &str, from: &str, to: &str) {
    let path = deploy.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_csi_address_is_logged_and_fails_the_readiness_probe() {
    let cluster = DriverCluster::start_unready(Stack::Swap, |deploy| {
        edit(
            deploy,
            "swap/containers.yaml",
            "csi-address=/csi/csi.sock",
            "csi-address=/csi/nothing.sock",
        );
    })
    .await;
    says_so(&cluster, "/csi/nothing.sock", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_removed_rbac_verb_is_logged_and_fails_the_readiness_probe() {
    let cluster = DriverCluster::start_unready(Stack::Swap, |deploy| {
        edit(
            deploy,
            "rbac/rbac.yaml",
            "resources: [\"persistentvolumeclaims\"]\n    verbs: [\"get\", \"list\", \"watch\", \"patch\"]",
            "resources: [\"persistentvolumeclaims\"]\n    verbs: [\"get\", \"list\", \"patch\"]",
        );
    })
    .await;
    says_so(&cluster, "forbidden", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_only_root_where_the_journal_goes_is_logged_and_restarts() {
    let cluster = DriverCluster::start_unready(Stack::Swap, |deploy| {
        edit(
            deploy,
            "swap/containers.yaml",
            "            - --http-endpoint=:8080\n",
            "            - --http-endpoint=:8080\n            - --intent-journal=/var/lib/csi-pv-controller/intents\n",
        );
        edit(
            deploy,
            "swap/containers.yaml",
            "            privileged: true\n",
            "            privileged: true\n            readOnlyRootFilesystem: true\n",
        );
    })
    .await;
    says_so(&cluster, "Read-only file system", true).await;
}
