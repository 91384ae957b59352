//! The CSI migration translations on made-up classes and PVs (`crate::migration`).

use arbitrary::Unstructured;
use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::{Value, json};

use super::inputs::{self, Draw};
use crate::migration::{Plugin, class_to_csi, pv_to_csi, pv_to_in_tree};

/// Spellings the translators look for.
const WORDS: [&str; 24] = [
    "aws://",
    "vol-",
    "/",
    "#",
    "__",
    "-",
    "zone",
    "zones",
    "fstype",
    "iopsPerGB",
    "partition",
    "projects/UNSPECIFIED/zones/",
    "/disks/",
    "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/",
    "https://a/vhds/",
    "azure-storage-account-",
    "-secret",
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "us-east-1a",
    "us-central1-b",
    "openstorage.io/auth-secret-name",
    "Managed",
];

fn word(u: &mut Unstructured<'_>) -> Option<String> {
    if u.arbitrary::<bool>().ok()? {
        let mut out = String::new();
        for _ in 0..u.int_in_range(1..=3).ok()? {
            out.push_str(WORDS[u.choose_index(WORDS.len()).ok()?]);
        }
        Some(out)
    } else {
        u.text().ok()
    }
}

fn affinity(u: &mut Unstructured<'_>, plugin: Plugin) -> Option<Value> {
    let keys = [
        plugin.zone_key().unwrap_or("x"),
        "topology.kubernetes.io/zone",
        "topology.hostpath.csi/node",
    ];
    let terms: Vec<Value> = (0..u.int_in_range(0..=2).ok()?)
        .map(|_| {
            let key = match u.int_in_range(0..=3).ok()? {
                3 => word(u)?,
                i => keys[i].to_string(),
            };
            Some(
                json!({"matchExpressions": [{"key": key, "operator": "In", "values": [word(u)?]}]}),
            )
        })
        .collect::<Option<_>>()?;
    Some(json!({"required": {"nodeSelectorTerms": terms}}))
}

fn in_tree_source(u: &mut Unstructured<'_>, plugin: Plugin) -> Option<(&'static str, Value)> {
    let id = word(u)?;
    Some(match plugin {
        Plugin::AwsEbs => (
            "awsElasticBlockStore",
            json!({"volumeID": id, "partition": u.int_in_range(0..=3).ok()?}),
        ),
        Plugin::GcePd => ("gcePersistentDisk", json!({"pdName": id})),
        Plugin::AzureDisk => {
            ("azureDisk", json!({"diskName": "d", "diskURI": id, "kind": word(u)?}))
        }
        Plugin::AzureFile => ("azureFile", json!({"secretName": id, "shareName": word(u)?})),
        Plugin::Cinder => ("cinder", json!({"volumeID": id})),
        Plugin::VsphereVolume => ("vsphereVolume", json!({"volumePath": id})),
        Plugin::Portworx => ("portworxVolume", json!({"volumeID": id})),
    })
}

/// Made-up in-tree classes and PVs of every plugin, and CSI PVs for each to be written in-tree:
/// never a panic; a translated PV names the plugin's driver and keeps no in-tree source; where
/// the plugin's ID survives the trip (Cinder, Portworx, Azure Disk, EBS IDs that are not URLs),
/// the in-tree form of a CSI PV translates back to the same handle.
pub fn migration(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(index) = u.choose_index(Plugin::ALL.len()) else { return };
    let plugin = Plugin::ALL[index];
    if let Some(mut class) = inputs::class(&mut u) {
        class.provisioner = plugin.in_tree_name().to_string();
        if let Ok(translated) = class_to_csi(plugin, &class) {
            assert_eq!(translated.metadata.name, class.metadata.name);
        }
    }
    let Some(labels) = u.map(3).ok() else { return };
    let Some((key, source)) = in_tree_source(&mut u, plugin) else { return };
    let Some(node_affinity) = affinity(&mut u, plugin) else { return };
    let in_tree: Option<PersistentVolume> = super::object(json!({
        "metadata": {"name": "pv", "labels": labels},
        "spec": {key: source, "nodeAffinity": node_affinity, "claimRef": {"namespace": "ns"}},
    }));
    if let Some(in_tree) = in_tree
        && let Ok(csi) = pv_to_csi(&in_tree)
    {
        let source = csi.spec.as_ref().and_then(|s| s.csi.as_ref());
        assert_eq!(source.map(|s| s.driver.as_str()), Some(plugin.csi_driver()));
        assert_eq!(Plugin::of_volume(&csi), None);
    }
    let Some(handle) = word(&mut u) else { return };
    let Some(node_affinity) = affinity(&mut u, plugin) else { return };
    let made: Option<PersistentVolume> = super::object(json!({
        "metadata": {"name": "pv"},
        "spec": {"csi": {"driver": plugin.csi_driver(), "volumeHandle": handle, "fsType": "ext4"},
                 "nodeAffinity": node_affinity},
    }));
    let Some(made) = made else { return };
    let Ok(written) = pv_to_in_tree(plugin, &made) else { return };
    assert_eq!(Plugin::of_volume(&written), Some(plugin));
    let lossless = match plugin {
        Plugin::Cinder | Plugin::Portworx | Plugin::AzureDisk => true,
        Plugin::AwsEbs => !handle.starts_with("aws://"),
        _ => false,
    };
    if lossless {
        let back = pv_to_csi(&written);
        let source = back.as_ref().ok().and_then(|b| b.spec.as_ref()?.csi.clone());
        assert_eq!(source.map(|s| s.volume_handle), Some(handle), "{plugin:?}: {back:?}");
    }
}
