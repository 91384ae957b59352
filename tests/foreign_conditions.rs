//! A claim's conditions written by others survive every write of ours. Kubernetes 1.37's
//! pvc-protection controller (kube-controller-manager, PersistentVolumeClaimUnusedSinceTime on by
//! default) writes `Unused` on a Bound claim, and the test writes a condition of a type nobody
//! knows; then we write ours over them: a failed expansion (ControllerResizeError, written with no
//! precondition), the controller's part of the expansion done (FileSystemResizePending), a
//! VolumeAttributesClass change (ModifyingVolume, then removed). Both foreign conditions are there after each, in the mode
//! deploy/ ships and with our binder (`--binder=driver`). On a release before 1.37 (`make range`)
//! the test writes `Unused` itself, as 1.37 would.

mod support;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tonic::Code;

use support::cluster::{World, eventually};
use support::relayed::{Beside, Relayed};

const LIMIT: Duration = Duration::from_secs(90);

/// The condition types the claim has now.
async fn types(world: &World<Relayed>) -> Vec<String> {
    let claim = world.claim("data").await.unwrap_or_default();
    let conditions = claim.status.and_then(|s| s.conditions).unwrap_or_default();
    conditions.into_iter().map(|c| c.type_).collect()
}

async fn both_foreign_kept(world: &World<Relayed>, after: &str) {
    let kept = eventually(Duration::from_secs(5), || async {
        let t = types(world).await;
        (t.iter().any(|t| t == "Unused") && t.iter().any(|t| t == "Checked")).then_some(())
    });
    assert!(
        kept.await.is_some(),
        "after {after}: {:?}\nsidecar log:\n{}",
        types(world).await,
        world.sidecar.log_text()
    );
}

async fn our_writes_keep_others_conditions(world: &World<Relayed>) {
    let ns = world.namespace.clone();
    for (name, iops) in [("fast", "3000"), ("faster", "6000")] {
        world.create_attributes_class(name, json!({"iops": iops})).await;
    }
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    let spec = json!({"spec": {"volumeAttributesClassName": format!("{ns}-fast")}});
    world.create_claim("data", "grow", "1Gi", spec).await;
    world.bound("data", LIMIT).await;

    let claims = world.claims();
    if support::cluster::kcm_writes_unused(&world.client).await {
        // 1.37's pvc-protection: no pod uses the claim.
        let unused = world
            .claim_until("data", "pvc-protection's Unused condition", LIMIT, |c| {
                let conditions = c.status.as_ref().and_then(|s| s.conditions.as_ref());
                conditions.into_iter().flatten().any(|c| c.type_ == "Unused" && c.status == "True")
            })
            .await;
        assert!(unused.status.is_some());
    } else {
        // Older releases write no Unused (the gate is alpha and off): written as 1.37 writes it.
        let unused = json!({"status": {"conditions": [{
            "type": "Unused", "status": "True", "reason": "NoPodsUsingPVC",
            "message": "No pods are currently referencing this PVC"
        }]}});
        let strategic = Patch::Strategic(unused);
        claims.patch_status("data", &PatchParams::default(), &strategic).await.unwrap();
    }
    let checked = json!({"status": {"conditions": [{
        "type": "Checked", "status": "True", "reason": "ByTheTest", "message": "a foreign writer"
    }]}});
    claims.patch_status("data", &PatchParams::default(), &Patch::Strategic(checked)).await.unwrap();
    both_foreign_kept(world, "the test's own write").await;

    // A failed expansion, recorded with no precondition, then the expansion done.
    world.relay().fail("ControllerExpandVolume", Code::Internal);
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    claims.patch("data", &PatchParams::default(), &Patch::Merge(grow)).await.unwrap();
    world
        .claim_until("data", "ControllerResizeError", LIMIT, |c| {
            let conditions = c.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions.into_iter().flatten().any(|c| c.type_ == "ControllerResizeError")
        })
        .await;
    both_foreign_kept(world, "ControllerResizeError").await;
    world.relay().clear("ControllerExpandVolume");
    world
        .claim_until("data", "the controller's part of the expansion done", LIMIT, |c| {
            // hostpathplugin grows the filesystem on the node: the claim waits for kubelet.
            let s = serde_json::to_value(&c.status).unwrap_or_default();
            s["allocatedResourceStatuses"]["storage"] == json!("NodeResizePending")
        })
        .await;
    both_foreign_kept(world, "the expansion").await;

    // A class change: ModifyingVolume while it runs, then the new class.
    let change = json!({"spec": {"volumeAttributesClassName": format!("{ns}-faster")}});
    claims.patch("data", &PatchParams::default(), &Patch::Merge(change)).await.unwrap();
    world
        .claim_until("data", "the new class", LIMIT, |c| {
            let s = serde_json::to_value(&c.status).unwrap_or_default();
            s["currentVolumeAttributesClassName"] == json!(format!("{ns}-faster"))
                && s.get("modifyVolumeStatus").is_none_or(Value::is_null)
        })
        .await;
    both_foreign_kept(world, "the class change").await;
    let t = types(world).await;
    assert!(t.iter().any(|t| t == "FileSystemResizePending"), "{t:?}");
    let done = ["ModifyingVolume", "ModifyVolumeError"];
    assert!(!t.iter().any(|t| done.contains(&t.as_str())), "ours left behind: {t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn others_conditions_survive_our_writes_beside_the_binder() {
    let world = Beside::start(
        "foreign-conditions",
        &["--enable-controller-modify-volume", "--accepted-mutable-parameter-names=iops"],
        &["--retry-interval-max=2s"],
    )
    .await;
    our_writes_keep_others_conditions(&world).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn others_conditions_survive_our_writes_with_our_binder() {
    use support::control_plane::fresh_plane;
    use support::kcm::Kcm;
    let plane = fresh_plane();
    let _kcm = Kcm::start(
        plane,
        "persistentvolume-expander-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller",
    );
    let world = World::start_relayed(
        plane,
        "foreign-ours",
        &["--enable-controller-modify-volume", "--accepted-mutable-parameter-names=iops"],
        &["--binder=driver", "--retry-interval-max=2s"],
    )
    .await;
    world.register_node().await;
    our_writes_keep_others_conditions(&world).await;
}
