//! A rollout with work in flight loses nothing, as users run us: deploy/swap/ in
//! csi-driver-host-path's plugin pod on a real node (tests/support/driver_pod.rs), intents on
//! claim finalizers and in deploy/'s journal (a folder of the node). During a 200-claim burst,
//! and again during its deletion, the StatefulSet is restarted (`kubectl rollout restart`) and
//! its pod deleted outright (`kubectl delete pod --grace-period=0 --force`). Every claim ends
//! Bound to a volume of its own, every volume is deleted at the end, and the driver's data folder
//! holds exactly the PVs' volumes in between: 0 orphaned, lost or duplicated.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use support::control_plane::create_namespace;
use support::driver_pod::{DRIVER, DriverCluster, NAMESPACE, POD, Stack};
use support::node::HOSTPATH_DATA;

const CLAIMS: usize = 200;
/// The burst's and the deletion's limit on a 2-core machine with two pod replacements each.
const LIMIT: Duration = Duration::from_secs(600);

/// The volumes hostpathplugin holds: one folder (or block file) per volume under its data
/// folder, named by the volume's ID, beside its state file.
fn driver_volumes() -> BTreeSet<String> {
    std::fs::read_dir(HOSTPATH_DATA)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "state.json")
                .collect()
        })
        .unwrap_or_default()
}

/// The CSI volume handles of the driver's PVs.
async fn pv_handles(volumes: &Api<PersistentVolume>) -> Vec<String> {
    let list = volumes.list(&ListParams::default()).await.expect("list PVs");
    list.items
        .into_iter()
        .filter_map(|pv| pv.spec?.csi)
        .filter(|csi| csi.driver == DRIVER)
        .map(|csi| csi.volume_handle)
        .collect()
}

async fn bound_count(claims: &Api<PersistentVolumeClaim>) -> usize {
    let list = claims.list(&ListParams::default()).await.expect("list claims");
    list.items
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .count()
}

/// `count`, said on the test's output (where the disruptions are), for the story of a run.
fn said(what: &str, count: usize) -> usize {
    eprintln!("{what}: {count}");
    count
}

/// Until `done` holds, failing after `LIMIT` with `what` and the cluster's state.
async fn until<F, Fut>(cluster: &DriverCluster, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !done().await {
        if start.elapsed() > LIMIT {
            panic!("{what} not within {LIMIT:?}:\n{}", cluster.describe().await);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `kubectl rollout restart` of the driver's StatefulSet once `first` holds, then the pod
/// deleted outright once `second` holds and the restarted pod is up.
async fn disrupt<F1, F2, Fut1, Fut2>(cluster: &DriverCluster, first: F1, second: F2)
where
    F1: FnMut() -> Fut1,
    F2: FnMut() -> Fut2,
    Fut1: std::future::Future<Output = bool>,
    Fut2: std::future::Future<Output = bool>,
{
    until(cluster, "the point of the rollout", first).await;
    cluster.kubectl(&["-n", NAMESPACE, "rollout", "restart", "statefulset/csi-hostpathplugin"]);
    eprintln!("rollout restart of the driver's StatefulSet");
    until(cluster, "the point of the pod's deletion", second).await;
    cluster.kubectl(&["-n", NAMESPACE, "delete", "pod", POD, "--grace-period=0", "--force"]);
    eprintln!("{POD} deleted with --grace-period=0");
}

async fn rollout_loses_nothing(stack: Stack) {
    let cluster = DriverCluster::start(stack, |_| {}).await;
    let client = cluster.plane.client().await;
    let namespace = "burst";
    create_namespace(&client, namespace).await;
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "burst"},
        "provisioner": DRIVER,
        "volumeBindingMode": "Immediate",
    }))
    .unwrap();
    Api::<StorageClass>::all(client.clone()).create(&PostParams::default(), &class).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());

    // The burst, and the disruptions while it is under way.
    let create = async {
        for i in 0..CLAIMS {
            let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": format!("claim-{i:03}")},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "burst",
                    "resources": {"requests": {"storage": "1Mi"}},
                },
            }))
            .unwrap();
            claims.create(&PostParams::default(), &claim).await.unwrap();
        }
    };
    let disruptions = disrupt(
        &cluster,
        || async { said("Bound", bound_count(&claims).await) >= 20 },
        || async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            said("Bound", bound_count(&claims).await) < CLAIMS
        },
    );
    tokio::join!(create, disruptions);
    until(&cluster, "every claim Bound", || async { bound_count(&claims).await == CLAIMS }).await;
    cluster.wait_ready().await;

    let handles = pv_handles(&volumes).await;
    let unique: BTreeSet<String> = handles.iter().cloned().collect();
    assert_eq!(handles.len(), CLAIMS, "one PV per claim");
    assert_eq!(unique.len(), CLAIMS, "no two PVs share a volume");
    let held = driver_volumes();
    let orphaned: Vec<_> = held.difference(&unique).collect();
    let lost: Vec<_> = unique.difference(&held).collect();
    assert!(orphaned.is_empty(), "volumes no PV records (orphaned or duplicated): {orphaned:?}");
    assert!(lost.is_empty(), "PVs whose volume the driver lacks: {lost:?}");

    // The deletion, and the same disruptions while it is under way.
    let delete = async {
        for i in 0..CLAIMS {
            let name = format!("claim-{i:03}");
            claims.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    };
    let disruptions = disrupt(
        &cluster,
        || async { said("PVs left", pv_handles(&volumes).await.len()) <= CLAIMS - 20 },
        || async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            said("PVs left", pv_handles(&volumes).await.len()) > 0
        },
    );
    tokio::join!(delete, disruptions);
    until(&cluster, "every PV deleted", || async { pv_handles(&volumes).await.is_empty() }).await;
    until(&cluster, "every claim gone", || async {
        claims.list(&ListParams::default()).await.is_ok_and(|l| l.items.is_empty())
    })
    .await;
    until(&cluster, "every volume deleted in the driver", || async { driver_volumes().is_empty() })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_during_a_burst_and_its_deletion_loses_nothing_with_finalizers() {
    rollout_loses_nothing(Stack::Swap).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_during_a_burst_and_its_deletion_loses_nothing_with_the_journal() {
    rollout_loses_nothing(Stack::SwapJournal).await;
}
