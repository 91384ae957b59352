//! A volume still attached to a node is never deleted: with a driver that attaches volumes
//! (PUBLISH_UNPUBLISH_VOLUME), a Released PV with policy Delete waits while a VolumeAttachment
//! names it, says why in a Normal VolumeDelete event (csi-provisioner v6.4's), and is deleted once
//! the attachment is gone:
//! on the fake driver with no kube-controller-manager, and in the shipped mode on hostpathplugin
//! with `--enable-attach`, where a failed DeleteVolume's event is checked too.

mod support;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::{World, eventually};
use support::fake_driver::DriverConfig;
use support::relayed::Beside;
use tonic::Code;

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_volume_is_deleted_only_once_detached() {
    let world = World::start(
        "attached",
        DriverConfig { publish_unpublish: true, ..DriverConfig::default() },
        &[],
    )
    .await;
    world.create_class("fast", json!({})).await;
    world.create_claim("data", "fast", "1Gi", json!({})).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let pv_name = pv.metadata.name.clone().unwrap();

    // A node has the volume attached (as the attach/detach controller would record it).
    let (attachments, attachment_name) = attach(&world, &pv_name).await;

    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    // Said twice: the volume was looked at again after the first refusal, and kept again.
    let kept = eventually(LIMIT, || async {
        said(&world, &pv_name, "VolumeDelete").await.filter(|(count, _, _)| *count >= 2)
    });
    let (_, note, kind) = kept
        .await
        .unwrap_or_else(|| panic!("no event about the attachment:\n{}", world.sidecar.log_text()));
    assert!(note.contains("still attached to node node-7, waiting for detach"), "{note}");
    assert_eq!(kind, "Normal", "postponed, not failed");
    assert!(world.driver.calls_of("DeleteVolume").is_empty(), "DeleteVolume while attached");
    assert!(world.volumes().get_opt(&pv_name).await.unwrap().is_some());

    attachments.delete(&attachment_name, &DeleteParams::default()).await.unwrap();
    let gone = world.volume_gone(&pv_name, LIMIT).await;
    assert!(gone, "not deleted once detached:\n{}", world.sidecar.log_text());
    assert_eq!(world.driver.calls_of("DeleteVolume").len(), 1);
}

/// A VolumeAttachment of the PV `pv_name` to node-7, and its name.
async fn attach<D>(world: &World<D>, pv_name: &str) -> (Api<VolumeAttachment>, String) {
    let attachments: Api<VolumeAttachment> = Api::all(world.client.clone());
    let attachment: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": format!("attached-{}", &pv_name[..12])},
        "spec": {"attacher": world.driver_name, "nodeName": "node-7",
                 "source": {"persistentVolumeName": pv_name}},
    }))
    .unwrap();
    let name = attachment.metadata.name.clone().unwrap();
    attachments.create(&PostParams::default(), &attachment).await.expect("VolumeAttachment");
    (attachments, name)
}

/// How many times the PV's `reason` event was said (its series count, folded), with its note.
/// How often `reason` was said of `pv`, its note and its type.
async fn said<D>(world: &World<D>, pv: &str, reason: &str) -> Option<(i32, String, String)> {
    let events: Api<Event> = Api::namespaced(world.client.clone(), "default");
    let list = events.list(&ListParams::default()).await.ok()?.items;
    let event = list.into_iter().find(|e| {
        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pv)
            && e.reason.as_deref() == Some(reason)
    })?;
    let count = event.series.as_ref().map(|s| s.count).or(event.deprecated_count).unwrap_or(1);
    Some((count, event.note.unwrap_or_default(), event.type_.unwrap_or_default()))
}

/// In the shipped mode (beside kube-controller-manager, hostpathplugin with `--enable-attach`
/// behind the relay): a failed DeleteVolume is said in a VolumeFailedDelete event with gRPC's
/// words and retried; a Released volume that a VolumeAttachment says is attached is not sent to
/// DeleteVolume, however often it is looked at (the event said again is the later proof), and it
/// is deleted once the attachment is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn beside_the_binder_an_attached_volume_is_kept_and_a_failed_delete_is_said() {
    let world = Beside::start("attached-beside", &["--enable-attach"], &[]).await;
    world.create_class("fast", json!({})).await;
    world.create_claim("failing", "fast", "1Gi", json!({})).await;
    world.create_claim("data", "fast", "1Gi", json!({})).await;
    let failing = world.bound("failing", LIMIT).await.1.metadata.name.unwrap();
    let pv_name = world.bound("data", LIMIT).await.1.metadata.name.unwrap();

    // DeleteVolume fails: said with the driver's code and message, and tried again.
    world.relay().fail("DeleteVolume", Code::Internal);
    world.claims().delete("failing", &DeleteParams::default()).await.unwrap();
    let retried = eventually(LIMIT, || async {
        said(&world, &failing, "VolumeFailedDelete").await.filter(|(count, _, _)| *count >= 2)
    });
    let (_, note, kind) = retried.await.unwrap_or_else(|| panic!("{}", world.sidecar.log_text()));
    assert!(note.contains("rpc error: code = Internal desc ="), "{note}");
    assert_eq!(kind, "Warning", "a failed DeleteVolume");
    assert!(world.relay().calls("DeleteVolume") >= 2, "not retried");
    world.relay().clear("DeleteVolume");
    assert!(world.volume_gone(&failing, LIMIT).await, "not deleted once the driver recovered");
    let deletes_before = world.relay().calls("DeleteVolume");

    // Attached, as the attach/detach controller records it once ControllerPublishVolume is done.
    let (attachments, attachment_name) = attach(&world, &pv_name).await;
    let status = json!({"status": {"attached": true}});
    attachments
        .patch_status(&attachment_name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();

    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    let kept = eventually(LIMIT, || async {
        said(&world, &pv_name, "VolumeDelete").await.filter(|(count, _, _)| *count >= 2)
    });
    let (_, note, kind) = kept.await.unwrap_or_else(|| panic!("{}", world.sidecar.log_text()));
    assert!(note.contains("still attached to node node-7, waiting for detach"), "{note}");
    assert_eq!(kind, "Normal", "postponed, not failed");
    assert_eq!(world.relay().calls("DeleteVolume"), deletes_before, "DeleteVolume while attached");
    assert!(world.hostpath().state_volumes().iter().any(|v| v.name == pv_name));
    assert!(world.volumes().get_opt(&pv_name).await.unwrap().is_some());

    attachments.delete(&attachment_name, &DeleteParams::default()).await.unwrap();
    let gone = world.volume_gone(&pv_name, LIMIT).await;
    assert!(gone, "not deleted once detached:\n{}", world.sidecar.log_text());
    assert_eq!(world.relay().calls("DeleteVolume"), deletes_before + 1);
    assert!(world.hostpath().state_volumes().iter().all(|v| v.name != pv_name));
}
