//! The apiserver dies 2 s into a 500-claim burst and comes back 10 s later. The sidecar must
//! recover by itself and bind every claim, and its writes refused with 409 (our copy was stale)
//! must stay in the hundreds, a handful per object at most: a conflict waits for the watch or
//! a backoff, never a retry from the same stale copy at once. With the fake driver and our
//! binder, and in the shipped mode beside kube-controller-manager on hostpathplugin. Its own
//! test binary: each test owns a control plane, whose apiserver it kills.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::cluster::eventually;
use support::control_plane::OwnedPlane;
use support::owned_beside::OwnedBeside;

const CLAIMS: usize = 500;

#[test]
fn a_burst_survives_an_apiserver_restart_without_a_conflict_storm() {
    let mut owned = OwnedPlane::for_test(true);
    let runtime = support::control_plane::runtime();
    runtime.block_on(async {
        let kubeconfig = owned.plane.admin_kubeconfig.clone();
        let args = ["--retry-interval-start=200ms", "--retry-interval-max=5s", "--binder=all"];
        let (client, _dir, _driver, mut sidecar) =
            support::sidecar::ready_in_namespace(&kubeconfig, "burst", &args).await;

        // The burst: 500 claims from 20 concurrent creators, each retrying through the outage.
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "burst");
        let creators = creators(&claims, CLAIMS, 20);
        // Killed mid-burst: once some claims are Bound, with most still to come.
        assert!(under_way(&claims).await, "the burst did not start:\n{}", sidecar.log_text());
        owned.kill_apiserver();
        let killed = Instant::now();
        // The outage itself: ten seconds with no apiserver, every watch and request failing.
        tokio::time::sleep(Duration::from_secs(10)).await;
        owned.restart_apiserver().unwrap_or_else(|e| panic!("{e}"));
        for creator in creators {
            creator.await.unwrap();
        }
        let bound = support::cluster::all_bound(&claims, CLAIMS, Duration::from_secs(240)).await;
        let took = killed.elapsed();
        assert!(
            bound.is_some(),
            "not every claim bound 240 s after the restart:\n{}",
            sidecar.log_text()
        );
        let ours: Vec<_> = owned
            .plane
            .audited_writes()
            .into_iter()
            .filter(|w| w.user_agent.starts_with("csi-pv-controller"))
            .collect();
        assert!(ours.len() >= 2 * CLAIMS, "{} audited writes of ours for {CLAIMS} claims", ours.len());
        let mut refused: HashMap<String, usize> = HashMap::new();
        for w in ours.iter().filter(|w| w.code == 409) {
            *refused.entry(format!("{}/{}", w.resource, w.name)).or_default() += 1;
        }
        let total: usize = refused.values().sum();
        let worst = refused.iter().max_by_key(|(_, n)| **n);
        println!(
            "{CLAIMS} claims bound {:.1} s after the apiserver died; {} writes of ours, {total} refused with 409 over {} objects, at most {:?}",
            took.as_secs_f64(),
            ours.len(),
            refused.len(),
            worst
        );
        let mut kinds: HashMap<String, usize> = HashMap::new();
        for w in ours.iter().filter(|w| w.code == 409) {
            let kind = format!("{} {}{}", w.verb, w.resource, match w.subresource.as_str() {
                "" => String::new(),
                sub => format!("/{sub}"),
            });
            *kinds.entry(kind).or_default() += 1;
        }
        let log = sidecar.log_text();
        let worst_lines: String = worst
            .map(|(name, _)| name.rsplit('/').next().unwrap_or_default().to_string())
            .map(|name| {
                log.lines()
                    .filter(|l| l.contains(&name))
                    .map(|l| format!("{l}\n"))
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            total <= CLAIMS,
            "{total} refused writes: a conflict storm: {kinds:?}\n{worst_lines}"
        );
        assert!(
            worst.is_none_or(|(_, n)| *n <= 5),
            "one object refused {worst:?} times: {kinds:?}\n{worst_lines}"
        );
        assert!(
            sidecar.child.try_wait().ok().flatten().is_none(),
            "the sidecar recovered without a restart"
        );
    });
}

/// Whether 20 claims are Bound within a minute: the burst is under way.
async fn under_way(claims: &Api<PersistentVolumeClaim>) -> bool {
    let bound = eventually(Duration::from_secs(60), || async {
        let list = claims.list(&Default::default()).await.ok()?;
        let bound = list
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"));
        (bound.count() >= 20).then_some(())
    });
    bound.await.is_some()
}

/// `claims` of class `burst` named `claim-<n>`, made by `workers` concurrent creators, each
/// retrying through an outage.
fn creators(
    claims: &Api<PersistentVolumeClaim>,
    count: usize,
    workers: usize,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workers)
        .map(|worker| {
            let claims = claims.clone();
            tokio::spawn(async move {
                for n in (worker..count).step_by(workers) {
                    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                        "metadata": {"name": format!("claim-{n}")},
                        "spec": {"storageClassName": "burst", "accessModes": ["ReadWriteOnce"],
                                 "resources": {"requests": {"storage": "1Gi"}}},
                    }))
                    .unwrap();
                    loop {
                        match claims.create(&PostParams::default(), &claim).await {
                            Ok(_) => break,
                            Err(kube::Error::Api(s)) if s.code == 409 => break,
                            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                        }
                    }
                }
            })
        })
        .collect()
}

/// The same outage in the shipped mode: beside kube-controller-manager's binder and protection
/// controllers, on hostpathplugin, the sidecar with deploy/'s flags. Killed once 20 of 150
/// claims are Bound, the apiserver is back 10 s later; every claim ends Bound to a volume of its
/// own, the driver holds exactly those volumes, and our refused writes stay a handful per object.
#[test]
fn beside_the_binder_a_burst_survives_an_apiserver_restart() {
    const BURST: usize = 150;
    let mut owned = OwnedPlane::for_test(true);
    let runtime = support::control_plane::runtime();
    runtime.block_on(async {
        let mut beside = OwnedBeside::start(&owned.plane, "burst", "burst").await;
        let (client, hostpath) = (beside.client.clone(), &beside.hostpath);
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "burst");
        let creators = creators(&claims, BURST, 10);
        let log = || beside.sidecar.log_text();
        assert!(under_way(&claims).await, "the burst did not start:\n{}", log());
        owned.kill_apiserver();
        // The outage itself: ten seconds with no apiserver, every watch and request failing.
        tokio::time::sleep(Duration::from_secs(10)).await;
        owned.restart_apiserver().unwrap_or_else(|e| panic!("{e}"));
        for creator in creators {
            creator.await.unwrap();
        }
        let bound = support::cluster::all_bound(&claims, BURST, Duration::from_secs(240)).await;
        assert!(bound.is_some(), "not every claim bound after the restart:\n{}", log());

        // One volume per claim, and the driver holds exactly the PVs' volumes.
        let pvs = Api::<PersistentVolume>::all(client.clone()).list(&Default::default()).await;
        let handles: BTreeSet<String> = pvs
            .unwrap()
            .items
            .iter()
            .filter_map(|pv| Some(pv.spec.as_ref()?.csi.as_ref()?.volume_handle.clone()))
            .collect();
        let held: BTreeSet<String> = hostpath.state_volumes().into_iter().map(|v| v.id).collect();
        assert_eq!(handles.len(), BURST, "one PV per claim");
        assert_eq!(held, handles, "the driver holds exactly the PVs' volumes");

        let mut refused: HashMap<String, usize> = HashMap::new();
        for w in owned.plane.audited_writes().iter().filter(|w| w.code == 409) {
            if w.user_agent.starts_with("csi-pv-controller") {
                *refused.entry(format!("{}/{}", w.resource, w.name)).or_default() += 1;
            }
        }
        let total: usize = refused.values().sum();
        let worst = refused.iter().max_by_key(|(_, n)| **n);
        println!("beside the binder: {BURST} claims bound; {total} of our writes refused with 409, at most {worst:?} on one object");
        assert!(total <= BURST, "{total} refused writes: a conflict storm");
        assert!(worst.is_none_or(|(_, n)| *n <= 5), "one object refused {worst:?} times");
        let running = beside.sidecar.child.try_wait().ok().flatten().is_none();
        assert!(running, "the sidecar recovered without a restart");
    });
}
