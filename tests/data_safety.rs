//! A volume still attached to a node is never deleted: with a driver that attaches volumes
//! (PUBLISH_UNPUBLISH_VOLUME), a Released PV with policy Delete waits while a VolumeAttachment
//! names it, says why in a VolumeFailedDelete event, and is deleted once the attachment is gone.

mod support;

use std::time::Duration;

use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::cluster::World;
use support::fake_driver::DriverConfig;

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
    let attachments: Api<VolumeAttachment> = Api::all(world.client.clone());
    let attachment: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": format!("attached-{}", &pv_name[..12])},
        "spec": {"attacher": world.driver_name, "nodeName": "node-7",
                 "source": {"persistentVolumeName": pv_name}},
    }))
    .unwrap();
    let attachment_name = attachment.metadata.name.clone().unwrap();
    attachments.create(&PostParams::default(), &attachment).await.expect("VolumeAttachment");

    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    let note = world
        .volume_event(&pv_name, "VolumeFailedDelete", LIMIT)
        .await
        .unwrap_or_else(|| panic!("no event about the attachment:\n{}", world.sidecar.log_text()));
    assert!(note.contains("still attached to node node-7"), "{note}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(world.driver.calls_of("DeleteVolume").is_empty(), "DeleteVolume while attached");
    assert!(world.volumes().get_opt(&pv_name).await.unwrap().is_some());

    attachments.delete(&attachment_name, &DeleteParams::default()).await.unwrap();
    let gone = world.volume_gone(&pv_name, LIMIT).await;
    assert!(gone, "not deleted once detached:\n{}", world.sidecar.log_text());
    assert_eq!(world.driver.calls_of("DeleteVolume").len(), 1);
}
