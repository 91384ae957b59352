//! The PV translations as csi-translation-lib v0.36 gives them: in-tree to CSI, CSI to in-tree,
//! and the round trip of what the migrated provisioner writes.

use serde_json::{Value, json};

use super::tests::{json_of, pv};
use super::*;

#[test]
fn in_tree_pvs_in_their_csi_form() {
    let affinity = |key: &str, values: Value| {
        json!({"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}})
    };
    type Row = (Value, Value, Value, Value);
    // spec, labels, spec.csi after, nodeAffinity after
    let rows: Vec<Row> = vec![
        (
            json!({"cinder": {"volumeID": "a1b2", "fsType": "ext4", "readOnly": true}}),
            json!({"topology.kubernetes.io/zone": "nova"}),
            json!({"driver": "cinder.csi.openstack.org", "volumeHandle": "a1b2", "fsType": "ext4",
                   "readOnly": true, "volumeAttributes": {}}),
            affinity("topology.cinder.csi.openstack.org/zone", json!(["nova"])),
        ),
        (
            json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-9", "fsType": "xfs"},
                "nodeAffinity": affinity("failure-domain.beta.kubernetes.io/zone", json!(["us-east-1a"]))}),
            json!({}),
            json!({"driver": "ebs.csi.aws.com", "volumeHandle": "vol-9", "fsType": "xfs",
                   "volumeAttributes": {"partition": "0"}}),
            affinity("topology.ebs.csi.aws.com/zone", json!(["us-east-1a"])),
        ),
        (
            json!({"gcePersistentDisk": {"pdName": "disk-1", "partition": 2}, "accessModes": ["ReadWriteMany"]}),
            json!({"topology.kubernetes.io/zone": "us-central1-a"}),
            json!({"driver": "pd.csi.storage.gke.io",
                   "volumeHandle": "projects/UNSPECIFIED/zones/us-central1-a/disks/disk-1",
                   "volumeAttributes": {"partition": "2"}}),
            affinity("topology.gke.io/zone", json!(["us-central1-a"])),
        ),
        (
            json!({"gcePersistentDisk": {"pdName": "disk-2"}}),
            json!({"failure-domain.beta.kubernetes.io/zone": "us-central1-a__us-central1-b"}),
            json!({"driver": "pd.csi.storage.gke.io",
                   "volumeHandle": "projects/UNSPECIFIED/regions/us-central1/disks/disk-2",
                   "volumeAttributes": {"partition": ""}}),
            affinity("topology.gke.io/zone", json!(["us-central1-a", "us-central1-b"])),
        ),
        (
            json!({"gcePersistentDisk": {"pdName": "disk-3"}}),
            json!({}),
            json!({"driver": "pd.csi.storage.gke.io",
                   "volumeHandle": "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-3",
                   "volumeAttributes": {"partition": ""}}),
            Value::Null,
        ),
        (
            json!({"azureDisk": {"diskName": "d", "diskURI": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/d",
                "cachingMode": "ReadOnly", "fsType": "ext4", "kind": "Managed"}}),
            json!({"topology.kubernetes.io/zone": "eastus-1"}),
            json!({"driver": "disk.csi.azure.com",
                   "volumeHandle": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/d",
                   "fsType": "ext4",
                   "volumeAttributes": {"cachingmode": "ReadOnly", "fstype": "ext4", "kind": "Managed"}}),
            Value::Null,
        ),
        (
            json!({"azureFile": {"secretName": "azure-storage-account-acct-secret", "shareName": "share"},
                "claimRef": {"namespace": "team", "name": "c"}}),
            json!({}),
            json!({"driver": "file.csi.azure.com", "volumeHandle": "#acct#share#pv-1#team",
                   "nodeStageSecretRef": {"name": "azure-storage-account-acct-secret", "namespace": "team"},
                   "volumeAttributes": {"sharename": "share"}}),
            Value::Null,
        ),
        (
            json!({"vsphereVolume": {"volumePath": "[ds] kubevols/v.vmdk", "fsType": "ext4", "storagePolicyName": "gold"}}),
            json!({"topology.kubernetes.io/zone": "z", "topology.kubernetes.io/region": "r"}),
            json!({"driver": "csi.vsphere.vmware.com", "volumeHandle": "[ds] kubevols/v.vmdk",
                   "fsType": "ext4", "volumeAttributes": {"storagepolicyname": "gold"}}),
            json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.csi.vmware.com/zone", "operator": "In", "values": ["z"]},
                {"key": "topology.csi.vmware.com/region", "operator": "In", "values": ["r"]}]}]}}),
        ),
        (
            json!({"portworxVolume": {"volumeID": "px-1", "fsType": "ext4"}}),
            json!({}),
            json!({"driver": "pxd.portworx.com", "volumeHandle": "px-1", "fsType": "ext4", "volumeAttributes": {}}),
            Value::Null,
        ),
    ];
    for (spec, labels, want_csi, want_affinity) in rows {
        let given = pv(spec.clone(), labels);
        let got = pv_to_csi(&given).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let got_spec = got.spec.as_ref().unwrap();
        assert_eq!(json_of(&got_spec.csi), want_csi, "{spec}");
        assert_eq!(json_of(&got_spec.node_affinity), want_affinity, "{spec}");
        assert_eq!(Plugin::of_volume(&got), None, "{spec}: the in-tree source is gone");
        assert!(csi_form(&given).is_some_and(|r| r.is_ok()));
    }
}

#[test]
fn a_pd_volume_keeps_one_access_mode() {
    let cases = [
        (json!(["ReadWriteOnce", "ReadOnlyMany"]), json!(["ReadWriteOnce"])),
        (json!(["ReadOnlyMany"]), json!(["ReadOnlyMany"])),
        (json!(["ReadWriteOncePod"]), json!(["ReadWriteOnce"])),
        (json!([]), json!(["ReadWriteOnce"])),
    ];
    for (modes, want) in cases {
        let given =
            pv(json!({"gcePersistentDisk": {"pdName": "d"}, "accessModes": modes}), json!({}));
        let got = pv_to_csi(&given).unwrap();
        assert_eq!(json_of(&got.spec.unwrap().access_modes), want);
    }
}

#[test]
fn untranslatable_in_tree_pvs_say_why() {
    let rows = [
        json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/bad"}}),
        json!({"azureDisk": {"diskName": "d", "diskURI": "u", "kind": "Dedicated"}}),
        json!({"azureFile": {"secretName": "s", "shareName": "x"}}),
        json!({"gcePersistentDisk": {"pdName": "d"}}),
    ];
    let labels =
        [json!({}), json!({}), json!({}), json!({"topology.kubernetes.io/zone": "a-b-c__d-e-f"})];
    for (spec, labels) in rows.into_iter().zip(labels) {
        let given = pv(spec.clone(), labels);
        assert!(pv_to_csi(&given).is_err(), "{spec}");
        assert!(csi_form(&given).is_some_and(|r| r.is_err()), "{spec}");
    }
    // Not an in-tree PV of a migrated plugin: nothing to translate.
    let nfs = pv(json!({"nfs": {"server": "s", "path": "/"}}), json!({}));
    assert_eq!(pv_to_csi(&nfs), Err(TranslateError::NoSource("in-tree")));
    assert!(csi_form(&nfs).is_none());
}

#[test]
fn csi_pvs_in_their_in_tree_form() {
    let zone = |key: &str, value: &str| {
        json!({"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}})
    };
    type Row = (Plugin, Value, Value, Value, Value);
    // plugin, spec.csi, node affinity; the in-tree source after (keyed), labels after
    let rows: Vec<Row> = vec![
        (
            Plugin::Cinder,
            json!({"volumeHandle": "a1", "fsType": "ext4", "volumeAttributes": {"x": "y"}}),
            zone("topology.cinder.csi.openstack.org/zone", "nova"),
            json!({"cinder": {"volumeID": "a1", "fsType": "ext4"}}),
            json!({"topology.kubernetes.io/zone": "nova"}),
        ),
        (
            Plugin::Cinder,
            json!({"volumeHandle": "a1"}),
            zone("topology.hostpath.csi/node", "n1"),
            json!({"cinder": {"volumeID": "a1"}}),
            Value::Null,
        ),
        (
            Plugin::AwsEbs,
            json!({"volumeHandle": "vol-1", "volumeAttributes": {"partition": "1"}}),
            zone("topology.ebs.csi.aws.com/zone", "us-east-1a"),
            json!({"awsElasticBlockStore": {"volumeID": "vol-1", "partition": 1}}),
            json!({"topology.kubernetes.io/zone": "us-east-1a", "topology.kubernetes.io/region": "us-east-1"}),
        ),
        (
            Plugin::GcePd,
            json!({"volumeHandle": "projects/p/zones/us-central1-a/disks/d1", "volumeAttributes": {"partition": ""}}),
            zone("topology.gke.io/zone", "us-central1-a"),
            json!({"gcePersistentDisk": {"pdName": "d1"}}),
            json!({"topology.kubernetes.io/zone": "us-central1-a", "topology.kubernetes.io/region": "us-central1"}),
        ),
        (
            Plugin::AzureDisk,
            json!({"volumeHandle": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/d1",
                "volumeAttributes": {"cachingMode": "None"}}),
            Value::Null,
            json!({"azureDisk": {"diskName": "d1", "diskURI": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/d1",
                "cachingMode": "None", "fsType": "", "readOnly": false, "kind": "Managed"}}),
            Value::Null,
        ),
        (
            Plugin::AzureDisk,
            json!({"volumeHandle": "https://acct.blob.core.windows.net/vhds/d2.vhd"}),
            Value::Null,
            json!({"azureDisk": {"diskName": "d2.vhd", "diskURI": "https://acct.blob.core.windows.net/vhds/d2.vhd",
                "fsType": "", "readOnly": false, "kind": "Managed"}}),
            Value::Null,
        ),
        (
            Plugin::AzureFile,
            json!({"volumeHandle": "rg#acct#share#pv#ns"}),
            Value::Null,
            json!({"azureFile": {"secretName": "azure-storage-account-acct-secret", "shareName": "share", "secretNamespace": "default"}}),
            Value::Null,
        ),
        (
            Plugin::VsphereVolume,
            json!({"volumeHandle": "uuid", "volumeAttributes": {"initialvolumefilepath": "[ds] v.vmdk"}}),
            zone("topology.csi.vmware.com/zone", "z"),
            json!({"vsphereVolume": {"volumePath": "[ds] v.vmdk"}}),
            json!({"topology.kubernetes.io/zone": "z"}),
        ),
        (
            Plugin::Portworx,
            json!({"volumeHandle": "px", "readOnly": true}),
            Value::Null,
            json!({"portworxVolume": {"volumeID": "px", "readOnly": true}}),
            Value::Null,
        ),
    ];
    for (plugin, mut csi, affinity, want_source, want_labels) in rows {
        csi["driver"] = json!(plugin.csi_driver());
        let given = pv(json!({"csi": csi, "nodeAffinity": affinity}), Value::Null);
        let got = pv_to_in_tree(plugin, &given).unwrap_or_else(|e| panic!("{plugin:?}: {e}"));
        let spec = json_of(got.spec.as_ref().unwrap());
        let (key, want) = want_source.as_object().unwrap().iter().next().unwrap();
        assert_eq!(&spec[key], want, "{plugin:?}");
        assert_eq!(spec.get("csi"), None, "{plugin:?}");
        assert_eq!(Plugin::of_volume(&got), Some(plugin));
        assert_eq!(json_of(&got.metadata.labels), want_labels, "{plugin:?}");
    }
}

#[test]
fn csi_pvs_that_cannot_be_written_in_tree_say_why() {
    let rows = [
        (Plugin::GcePd, json!({"volumeHandle": "disk"}), Value::Null),
        (Plugin::AzureDisk, json!({"volumeHandle": "just-a-name"}), Value::Null),
        (Plugin::AzureFile, json!({"volumeHandle": "no-hashes"}), Value::Null),
        (
            Plugin::AwsEbs,
            json!({"volumeHandle": "vol-1", "volumeAttributes": {"partition": "p"}}),
            Value::Null,
        ),
        // A zone that names no AWS region, and a term with no zone at all (a node's own key).
        (
            Plugin::AwsEbs,
            json!({"volumeHandle": "vol-1"}),
            json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["zone"]}]}]}}),
        ),
        (
            Plugin::AwsEbs,
            json!({"volumeHandle": "vol-1"}),
            json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.hostpath.csi/node", "operator": "In", "values": ["n1"]}]}]}}),
        ),
    ];
    for (plugin, mut csi, affinity) in rows {
        csi["driver"] = json!(plugin.csi_driver());
        let given = pv(json!({"csi": csi, "nodeAffinity": affinity}), Value::Null);
        assert!(pv_to_in_tree(plugin, &given).is_err(), "{plugin:?} {csi}");
    }
    let in_tree = pv(json!({"cinder": {"volumeID": "a"}}), Value::Null);
    assert_eq!(pv_to_in_tree(Plugin::Cinder, &in_tree), Err(TranslateError::NoSource("CSI")));
}

/// What the migrated provisioner writes translates back to the handle it was made with: the
/// round trip DeleteVolume and ControllerExpandVolume depend on.
#[test]
fn provisioned_volumes_come_back_with_their_handle() {
    let handles = [
        (Plugin::AwsEbs, "vol-0abc"),
        (Plugin::Cinder, "6f1c5a8e-3c1a-4d2e-9b8f-0d7e6c5b4a39"),
        (Plugin::Portworx, "1122334455"),
        (Plugin::GcePd, "projects/UNSPECIFIED/zones/us-central1-a/disks/pvc-1"),
        (
            Plugin::AzureDisk,
            "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/pvc-1",
        ),
    ];
    for (plugin, handle) in handles {
        let mut spec = json!({"csi": {"driver": plugin.csi_driver(), "volumeHandle": handle, "fsType": "ext4"},
            "claimRef": {"namespace": "ns", "name": "c"}});
        if let Some(key) = plugin.zone_key() {
            spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": key, "operator": "In", "values": ["us-central1-a"]}]}]}});
        }
        if plugin == Plugin::AwsEbs {
            spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] =
                json!(["us-east-1a"]);
        }
        let made = pv(spec, Value::Null);
        let in_tree = pv_to_in_tree(plugin, &made).unwrap_or_else(|e| panic!("{plugin:?}: {e}"));
        let back = pv_to_csi(&in_tree).unwrap_or_else(|e| panic!("{plugin:?}: {e}"));
        let csi = back.spec.as_ref().and_then(|s| s.csi.as_ref()).unwrap();
        assert_eq!(
            (csi.driver.as_str(), csi.volume_handle.as_str()),
            (plugin.csi_driver(), handle)
        );
        assert_eq!(csi.fs_type.as_deref(), Some("ext4"), "{plugin:?}");
        let made_affinity = json_of(&made.spec.as_ref().unwrap().node_affinity);
        let back_affinity = &json_of(&back.spec.as_ref().unwrap().node_affinity);
        let zone_back = &back_affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0];
        assert_eq!(
            zone_back, &made_affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0],
            "{plugin:?}"
        );
    }
}
