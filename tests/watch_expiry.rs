//! A watch resumed from a resourceVersion etcd has compacted away is answered 410 Gone; the
//! sidecar must list again and act on everything it missed: with the fake driver and our
//! binder, and in the shipped mode beside kube-controller-manager on hostpathplugin. Its own test
//! binary: each test owns a control plane, whose apiserver it restarts and whose etcd it compacts.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::cluster::eventually;
use support::control_plane::{OwnedPlane, client_from_kubeconfig};
use support::owned_beside::OwnedBeside;
use support::signal;

async fn create_claims(claims: &Api<PersistentVolumeClaim>, prefix: &str, count: usize) {
    for n in 0..count {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": format!("{prefix}-{n}")},
            "spec": {"storageClassName": "expiry", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap();
        claims
            .create(&PostParams::default(), &claim)
            .await
            .unwrap_or_else(|e| panic!("cannot create {prefix}-{n}: {e}"));
    }
}

async fn all_bound(claims: &Api<PersistentVolumeClaim>, count: usize) -> bool {
    support::cluster::all_bound(claims, count, Duration::from_secs(60)).await.is_some()
}

/// The sidecar is frozen while the apiserver restarts (its watches break), claims are made and
/// etcd is compacted: when it runs again its watches resume from versions that are gone, get
/// 410, list again, and every claim made meanwhile is bound.
#[test]
fn an_expired_watch_lists_again_and_misses_nothing() {
    let mut owned = OwnedPlane::for_test(false);
    let runtime = support::control_plane::runtime();
    runtime.block_on(async {
        let kubeconfig = owned.plane.admin_kubeconfig.clone();
        let (client, _dir, _driver, mut sidecar) =
            support::sidecar::ready_in_namespace(&kubeconfig, "expiry", &["--binder=all"]).await;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "expiry");
        create_claims(&claims, "before", 5).await;
        assert!(all_bound(&claims, 5).await, "{}", sidecar.log_text());

        let pid = sidecar.child.id().expect("running");
        // SAFETY: signals to our own child process.
        signal(pid, libc::SIGSTOP);
        owned.restart_apiserver().unwrap_or_else(|e| panic!("{e}"));
        let fresh = client_from_kubeconfig(&kubeconfig).await;
        let back = eventually(Duration::from_secs(60), || async {
            Api::<PersistentVolumeClaim>::namespaced(fresh.clone(), "expiry")
                .list(&Default::default())
                .await
                .ok()
        })
        .await;
        assert!(back.is_some(), "the apiserver did not come back");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(fresh.clone(), "expiry");
        create_claims(&claims, "missed", 20).await;
        let revision = owned.compact_etcd().unwrap_or_else(|e| panic!("{e}"));
        signal(pid, libc::SIGCONT);

        assert!(
            all_bound(&claims, 25).await,
            "claims made while the watch was gone were missed:\n{}",
            sidecar.log_text()
        );
        let log = sidecar.log_text();
        let expired: Vec<&str> = log
            .lines()
            .filter(|l| expiry(l))
            .collect();
        println!(
            "etcd compacted at revision {revision}; {} watch expiries logged; all 25 claims bound; first: {:?}",
            expired.len(),
            expired.first()
        );
        assert!(
            !expired.is_empty(),
            "no watch was answered 410 (the scenario did not happen):\n{log}"
        );
        assert!(
            sidecar.child.try_wait().ok().flatten().is_none(),
            "the sidecar recovered without a restart"
        );
    });
}

/// The same in the shipped mode: beside kube-controller-manager's binder on hostpathplugin, the
/// sidecar with deploy/'s flags is frozen while the apiserver restarts, kube-controller-manager
/// hands over 20 claims made meanwhile and etcd is compacted; resumed, the sidecar's watches get
/// 410, it lists again, and every claim gets its volume and is Bound.
#[test]
fn beside_the_binder_an_expired_watch_lists_again_and_misses_nothing() {
    let mut owned = OwnedPlane::for_test(false);
    let runtime = support::control_plane::runtime();
    runtime.block_on(async {
        let mut beside = OwnedBeside::start(&owned.plane, "expiry-beside", "expiry").await;
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(beside.client.clone(), "expiry-beside");
        create_claims(&claims, "before", 5).await;
        assert!(all_bound(&claims, 5).await, "{}", beside.sidecar.log_text());

        let pid = beside.sidecar.child.id().expect("running");
        // SAFETY: signals to our own child process.
        signal(pid, libc::SIGSTOP);
        owned.restart_apiserver().unwrap_or_else(|e| panic!("{e}"));
        let fresh = client_from_kubeconfig(&owned.plane.admin_kubeconfig).await;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(fresh, "expiry-beside");
        let back = eventually(Duration::from_secs(60), || async {
            claims.list(&Default::default()).await.ok()
        });
        assert!(back.await.is_some(), "the apiserver did not come back");
        create_claims(&claims, "missed", 20).await;
        // kube-controller-manager hands the new claims over while we are frozen.
        let handed = eventually(Duration::from_secs(60), || async {
            let list = claims.list(&Default::default()).await.ok()?;
            let key = "volume.kubernetes.io/storage-provisioner";
            let handed = list
                .items
                .iter()
                .filter(|c| c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(key)));
            (handed.count() == 25).then_some(())
        });
        assert!(handed.await.is_some(), "kube-controller-manager did not hand the claims over");
        owned.compact_etcd().unwrap_or_else(|e| panic!("{e}"));
        signal(pid, libc::SIGCONT);

        let log = || beside.sidecar.log_text();
        assert!(all_bound(&claims, 25).await, "claims made while the watch was gone:\n{}", log());
        let held = beside.hostpath.state_volumes().len();
        assert_eq!(held, 25, "one volume per claim");
        let expired = log().lines().filter(|l| expiry(l)).count();
        assert!(expired > 0, "no watch was answered 410 (the scenario did not happen):\n{}", log());
        let running = beside.sidecar.child.try_wait().ok().flatten().is_none();
        assert!(running, "the sidecar recovered without a restart");
    });
}

/// A log line of a watch answered 410 Gone.
fn expiry(line: &str) -> bool {
    line.contains("watch failed")
        && (line.contains("410") || line.contains("Expired") || line.contains("too old"))
}
