//! Rolling back to the upstream stack, end to end, in the mode deploy/ ships: the sidecar beside
//! kube-controller-manager with `--intent-journal`, on hostpathplugin, is killed with work under
//! way (a CreateVolume the driver carried out but whose answer never came back, an expansion
//! the same), `uninstall` runs, and csi-provisioner and csi-resizer
//! (the versions `make peers` builds) start on the same cluster and driver. They must finish
//! what we left, grow and delete volumes, and leave nothing behind.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use support::cluster::{INTENT_JOURNAL, World, eventually};
use support::csi_relay::Fault;
use support::relayed::{Beside, Relayed};
use support::upstream::Upstream;

const LIMIT: Duration = Duration::from_secs(120);
const GI: i64 = 1 << 30;

fn capacity(claim: &PersistentVolumeClaim) -> Option<String> {
    let status = claim.status.as_ref()?;
    status.capacity.as_ref()?.get("storage").map(|q| q.0.clone())
}

fn driver_size(world: &World<Relayed>, name: &str) -> Option<i64> {
    world.hostpath().state_volumes().into_iter().find(|v| v.name == name).map(|v| v.size)
}

async fn grow_to_2gi(world: &World<Relayed>, claim: &str) {
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    world.claims().patch(claim, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn csi_provisioner_and_csi_resizer_finish_what_we_left_and_leave_nothing() {
    let mut world =
        Beside::start("uninstall-up", &["--disable-node-expansion"], &[INTENT_JOURNAL]).await;
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    world.create_claim("kept", "grow", "1Gi", json!({})).await;
    world.create_claim("later", "grow", "1Gi", json!({})).await;
    world.create_claim("growing", "grow", "1Gi", json!({})).await;
    let (_, kept_pv) = world.bound("kept", LIMIT).await;
    let (_, later_pv) = world.bound("later", LIMIT).await;
    let (_, growing_pv) = world.bound("growing", LIMIT).await;
    let kept_pv = kept_pv.metadata.name.unwrap();
    let later_pv = later_pv.metadata.name.unwrap();
    let growing_pv = growing_pv.metadata.name.unwrap();

    // Mid-flight when we go: the driver made the volume and grew the other, neither answer came.
    world.relay().inject("CreateVolume", Fault::AnswerLate(Duration::from_secs(600)));
    world.relay().inject("ControllerExpandVolume", Fault::AnswerLate(Duration::from_secs(600)));
    let created = world.create_claim("inflight", "grow", "1Gi", json!({})).await;
    let inflight_pv = format!("pvc-{}", created.metadata.uid.unwrap());
    grow_to_2gi(&world, "growing").await;
    let acted = eventually(LIMIT, || async {
        let made = driver_size(&world, &inflight_pv).is_some();
        let grown = driver_size(&world, &growing_pv) == Some(2 * GI);
        (made && grown).then_some(())
    })
    .await;
    assert!(acted.is_some(), "the driver never acted:\n{}", world.sidecar.log_text());
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;

    let (code, text) = world.uninstall(&[]);
    assert_eq!(code, Some(0), "{text}");

    let socket = world.hostpath().socket.clone();
    let upstream = Upstream::start(
        &world.plane.admin_kubeconfig,
        &socket,
        world.dir.path(),
        "uninstall",
        &["--leader-election=false"],
    );
    let why = |world: &World<Relayed>| {
        format!("driver {:?}\n{}", world.hostpath().state_volumes(), upstream.log_text())
    };

    // The claim we left is provisioned under the same name: the volume we made, not a second.
    let (_, pv) = world.bound("inflight", LIMIT).await;
    assert_eq!(pv.metadata.name.as_deref(), Some(inflight_pv.as_str()), "{}", why(&world));
    let same_name =
        world.hostpath().state_volumes().iter().filter(|v| v.name == inflight_pv).count();
    assert_eq!(same_name, 1, "{}", why(&world));

    // The expansion we left is finished; a new one is made.
    grow_to_2gi(&world, "later").await;
    for (claim, pv) in [("growing", &growing_pv), ("later", &later_pv)] {
        let grown = world
            .claim_until(claim, "capacity 2Gi", LIMIT, |c| capacity(c).as_deref() == Some("2Gi"))
            .await;
        assert_eq!(capacity(&grown).as_deref(), Some("2Gi"));
        assert_eq!(driver_size(&world, pv), Some(2 * GI), "{claim}: {}", why(&world));
    }

    // Deletion of a volume we made, then of everything: nothing left in the driver or the API.
    world.claims().delete("kept", &DeleteParams::default()).await.unwrap();
    assert!(world.volume_gone(&kept_pv, LIMIT).await, "{}", why(&world));
    assert_eq!(driver_size(&world, &kept_pv), None, "{}", why(&world));
    for claim in ["inflight", "growing", "later"] {
        world.claims().delete(claim, &DeleteParams::default()).await.unwrap();
    }
    let empty = eventually(LIMIT, || async {
        let driver_empty = world.hostpath().state_volumes().is_empty();
        let api_empty = world.driver_volumes_in_api().await.is_empty();
        let claims_gone = world.claims_left().await.is_empty();
        (driver_empty && api_empty && claims_gone).then_some(())
    })
    .await;
    assert!(empty.is_some(), "left: claims {:?}\n{}", world.claims_left().await, why(&world));
}
