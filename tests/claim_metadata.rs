//! Beyond upstream: a StorageClass that names key prefixes passes a claim's matching labels and
//! annotations to CreateVolume, under our reserved names (src/provision/claim_metadata.rs,
//! docs/provisioning.md). In the mode deploy/ ships, beside kube-controller-manager, on
//! hostpathplugin behind a relay that records what the driver is sent; then the refusals: a
//! class that writes into our namespace, and a claim past the size bound.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use csi_pv_controller::csi::v1 as csi;
use serde_json::json;

use support::relayed::Beside;

const LIMIT: Duration = Duration::from_secs(90);
const LABELS: &str = "csi-pv-controller.storage.k8s.io/claim-label-prefixes";
const ANNOTATIONS: &str = "csi-pv-controller.storage.k8s.io/claim-annotation-prefixes";

/// The parameters of the CreateVolume the relay saw for `volume` (the PV's name).
fn sent(world: &Beside, volume: &str) -> HashMap<String, String> {
    let requests = world.relay().requests::<csi::CreateVolumeRequest>("CreateVolume");
    let request = requests.into_iter().rev().find(|r| r.name == volume);
    request.unwrap_or_else(|| panic!("no CreateVolume for {volume}")).parameters
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_class_passes_the_claims_keys_it_names_and_refuses_what_it_must() {
    let world = Beside::start("claim-metadata", &[], &[]).await;
    let tagged = json!({"parameters": {
        LABELS: "team.example.com/",
        ANNOTATIONS: "backup.example.com/, cost.example.com/",
    }});
    world.create_class("tagged", tagged).await;
    world.create_class("plain", json!({})).await;
    let metadata = json!({"metadata": {
        "labels": {"team.example.com/owner": "storage", "app": "db"},
        "annotations": {
            "backup.example.com/policy": "daily",
            "cost.example.com/centre": "4711",
            "other.example.com/note": "not named",
        },
    }});
    world.create_claim("tagged", "tagged", "1Gi", metadata.clone()).await;
    world.create_claim("plain", "plain", "1Gi", metadata).await;
    let (_, tagged_pv) = world.bound("tagged", LIMIT).await;
    let (_, plain_pv) = world.bound("plain", LIMIT).await;

    let ours = |parameters: &HashMap<String, String>| -> Vec<(String, String)> {
        let mut keys: Vec<(String, String)> = parameters
            .iter()
            .filter(|(k, _)| k.starts_with("csi-pv-controller.storage.k8s.io/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        keys.sort();
        keys
    };
    let tagged = sent(&world, &tagged_pv.metadata.name.unwrap_or_default());
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(
        ours(&tagged),
        [
            pair(
                "csi-pv-controller.storage.k8s.io/claim-annotation/backup.example.com/policy",
                "daily"
            ),
            pair(
                "csi-pv-controller.storage.k8s.io/claim-annotation/cost.example.com/centre",
                "4711"
            ),
            pair("csi-pv-controller.storage.k8s.io/claim-label/team.example.com/owner", "storage"),
        ],
        "the options themselves and unnamed keys stay out: {tagged:?}"
    );
    let plain = sent(&world, &plain_pv.metadata.name.unwrap_or_default());
    assert_eq!(ours(&plain), [], "a class that does not opt in passes nothing: {plain:?}");

    // A class that writes into our namespace itself: refused before the driver, with an Event.
    let calls = world.relay().calls("CreateVolume");
    let posing = json!({"parameters": {
        "csi-pv-controller.storage.k8s.io/claim-label/team.example.com/owner": "forged",
    }});
    world.create_class("posing", posing).await;
    world.create_claim("posing", "posing", "1Gi", json!({})).await;
    let event = world.event("posing", "ProvisioningFailed", "reserved namespace", LIMIT).await;
    println!("{event}");

    // A claim whose passed metadata is past the bound: refused with its size, not cut.
    let notes = "n".repeat(5000);
    let big = json!({"metadata": {"annotations": {"backup.example.com/notes": notes}}});
    world.create_claim("big", "tagged", "1Gi", big).await;
    let event = world.event("big", "ProvisioningFailed", "over the 4096 allowed", LIMIT).await;
    println!("{event}");
    assert_eq!(world.relay().calls("CreateVolume"), calls, "a refused claim reached the driver");
}
