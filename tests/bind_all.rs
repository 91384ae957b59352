//! `--bind-all`: the binder for every claim and PV of the cluster, CSI or not. Its own test
//! binary, so its own control plane: a bind-all sidecar would act on other tests' claims.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::json;
use support::cluster::{World, eventually};
use support::fake_driver::DriverConfig;

const LIMIT: Duration = Duration::from_secs(30);

/// A plain hostPath PV: no CSI driver at all.
async fn host_path_pv(world: &World, name: &str, class: &str) -> String {
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": format!("/tmp/{name}")},
        }
    }))
    .unwrap();
    world.create_volume(&pv).await;
    let available = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt(name).await.ok()??;
        (pv.status?.phase.as_deref() == Some("Available")).then_some(())
    })
    .await;
    assert!(available.is_some(), "{}", world.sidecar.log_text());
    name.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_all_binds_non_csi_volumes_and_racing_claims_get_one_volume_each() {
    let world = World::start("bindall", DriverConfig::default(), &["--bind-all"]).await;

    // A static non-CSI PV and a claim with no class: bound by us, nobody else binds here.
    let plain = host_path_pv(&world, "plain-host-path", "").await;
    world.create_claim("plain", "unused", "1Gi", json!({"spec": {"storageClassName": ""}})).await;
    let (_, pv) = world.bound("plain", LIMIT).await;
    assert_eq!(pv.metadata.name.as_deref(), Some(plain.as_str()));

    // Eight claims race for three PVs of a class nothing provisions: exactly three bind, each
    // to its own PV, and the rest stay Pending with an event saying why.
    world.create_class("local", json!({"provisioner": "kubernetes.io/no-provisioner"})).await;
    let class = format!("{}-local", world.namespace);
    let mut volumes = BTreeSet::new();
    for i in 0..3 {
        volumes.insert(host_path_pv(&world, &format!("local-{i}"), &class).await);
    }
    let names = world.create_claims("racer", "local", 8).await;
    let settled = eventually(LIMIT, || async {
        let mut bound = Vec::new();
        for name in &names {
            if world.phase(name).await.as_deref() == Some("Bound") {
                bound.push(world.claim(name).await?);
            }
        }
        (bound.len() == 3).then_some(bound)
    })
    .await;
    let bound =
        settled.unwrap_or_else(|| panic!("not exactly 3 bound\n{}", world.sidecar.log_text()));
    // Stays so: after a later pass over every racer, no second binding appears.
    for name in &names {
        world.nudge_claim(name, LIMIT).await;
    }
    let mut taken = BTreeSet::new();
    for claim in &bound {
        let volume = claim.spec.as_ref().unwrap().volume_name.clone().unwrap();
        let pv = world.volumes().get(&volume).await.unwrap();
        assert_eq!(
            pv.spec.unwrap().claim_ref.unwrap().uid,
            claim.metadata.uid,
            "PV {volume} points at its claim"
        );
        assert!(taken.insert(volume), "two claims on one PV");
    }
    assert_eq!(taken, volumes);
    let mut pending = Vec::new();
    for name in names {
        let claim = world.claim(&name).await.unwrap();
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending") {
            assert!(claim.spec.unwrap().volume_name.is_none(), "{name}");
            pending.push(name);
        }
    }
    assert_eq!(pending.len(), 5);
    world
        .event(
            &pending[0],
            "ProvisioningFailed",
            "no volume plugin matched name: kubernetes.io/no-provisioner",
            LIMIT,
        )
        .await;

    // Another provisioner's class: the claim is annotated for it and told who provisions it.
    world.create_class("theirs", json!({"provisioner": "other.example.com"})).await;
    world.create_claim("theirs", "theirs", "1Gi", json!({})).await;
    world
        .event(
            "theirs",
            "ExternalProvisioning",
            "Waiting for a volume to be created either by the external provisioner 'other.example.com'",
            LIMIT,
        )
        .await;
    let claim = world.claim("theirs").await.unwrap();
    let annotations = claim.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("volume.kubernetes.io/storage-provisioner").map(String::as_str),
        Some("other.example.com")
    );
    assert!(world.driver.calls_of("CreateVolume").is_empty());

    // A Delete PV nothing here can delete (in-tree, no provisioner named): Failed, with the
    // reason on the PV and in a Warning, as upstream's binder leaves it.
    let doomed: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "doomed-host-path"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": "/srv/doomed-host-path"},
        }
    }))
    .unwrap();
    world.create_volume(&doomed).await;
    world
        .create_claim(
            "doomed",
            "unused",
            "1Gi",
            json!({"spec": {"storageClassName": "", "volumeName": "doomed-host-path"}}),
        )
        .await;
    world.bound("doomed", LIMIT).await;
    world.claims().delete("doomed", &Default::default()).await.unwrap();
    let failed = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt("doomed-host-path").await.ok()??;
        let status = pv.status?;
        (status.phase.as_deref() == Some("Failed")).then_some(status.message)
    })
    .await;
    let message = failed
        .unwrap_or_else(|| panic!("not Failed\n{}", world.sidecar.log_text()))
        .unwrap_or_default();
    assert!(message.contains("no deletable volume plugin matched"), "{message}");
    let warned = world.volume_event("doomed-host-path", "VolumeFailedDelete", LIMIT).await;
    assert!(warned.is_some(), "no VolumeFailedDelete event");
}
