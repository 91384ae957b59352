//! A watch resumed from a resourceVersion etcd has compacted away is answered 410 Gone; the
//! sidecar must list again and act on everything it missed. Its own test binary: it owns a
//! control plane, whose apiserver it restarts and whose etcd it compacts.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::cluster::eventually;
use support::control_plane::{OwnedPlane, client_from_kubeconfig};
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
            .filter(|l| {
                l.contains("watch failed")
                    && (l.contains("410") || l.contains("Expired") || l.contains("too old"))
            })
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
