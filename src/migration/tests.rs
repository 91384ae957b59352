//! The names and class translations as csi-translation-lib v0.36 gives them, one row per
//! plugin and shape; the PVs' are in `volume_tests.rs`.

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

use super::*;

fn class(provisioner: &str, parameters: Value, allowed: Value) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": "c"}, "provisioner": provisioner,
        "parameters": parameters, "allowedTopologies": allowed,
    }))
    .unwrap()
}

pub(super) fn pv(spec: Value, labels: Value) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": "pv-1", "labels": labels}, "spec": spec,
    }))
    .unwrap()
}

pub(super) fn json_of<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap()
}

#[test]
fn every_plugin_has_both_names_and_is_found_by_each() {
    assert_eq!(Plugin::ALL.len(), 7);
    for plugin in Plugin::ALL {
        assert_eq!(Plugin::by_in_tree_name(plugin.in_tree_name()), Some(plugin));
        assert_eq!(Plugin::by_csi_driver(plugin.csi_driver()), Some(plugin));
        assert!(plugin.in_tree_name().starts_with("kubernetes.io/"));
        let zonal = matches!(plugin, Plugin::AwsEbs | Plugin::GcePd | Plugin::AzureDisk);
        assert!(!zonal || plugin.zone_key().is_some(), "{plugin:?} names zones");
    }
    // Not ours: any other name, the in-tree name given as a driver, and the reverse.
    assert_eq!(Plugin::by_csi_driver("hostpath.csi.k8s.io"), None);
    assert_eq!(Plugin::by_csi_driver("kubernetes.io/cinder"), None);
    assert_eq!(Plugin::by_in_tree_name("cinder.csi.openstack.org"), None);
    assert_eq!(Plugin::by_in_tree_name("kubernetes.io/rbd"), None);
}

#[test]
fn classes_translate_as_the_library_does() {
    let zone_term = |key: &str, values: Value| json!([{"matchLabelExpressions": [{"key": key, "values": values}]}]);
    let ga = json!([{"matchLabelExpressions": [
        {"key": "topology.kubernetes.io/zone", "values": ["z1"]},
        {"key": "other", "values": ["x"]}]}]);
    let beta = zone_term("failure-domain.beta.kubernetes.io/zone", json!(["z1", "z2"]));
    type Row = (Plugin, Value, Value, Value, Value);
    // plugin, parameters, allowedTopologies, parameters after, allowedTopologies after
    let rows: Vec<Row> = vec![
        (
            Plugin::AwsEbs,
            json!({"type": "gp3", "FSType": "xfs"}),
            Value::Null,
            json!({"type": "gp3", "csi.storage.k8s.io/fstype": "xfs"}),
            Value::Null,
        ),
        (
            Plugin::AwsEbs,
            json!({"zone": "us-east-1a"}),
            Value::Null,
            json!({}),
            zone_term("topology.ebs.csi.aws.com/zone", json!(["us-east-1a"])),
        ),
        (
            Plugin::AwsEbs,
            json!({"Zones": "a,b"}),
            Value::Null,
            json!({}),
            zone_term("topology.ebs.csi.aws.com/zone", json!(["a", "b"])),
        ),
        (
            Plugin::AwsEbs,
            json!({"iopsPerGB": "10"}),
            Value::Null,
            json!({"iopsPerGB": "10", "allowautoiopspergbincrease": "true"}),
            Value::Null,
        ),
        (
            Plugin::AwsEbs,
            json!({}),
            ga.clone(),
            json!({}),
            json!([{"matchLabelExpressions": [
            {"key": "topology.ebs.csi.aws.com/zone", "values": ["z1"]},
            {"key": "other", "values": ["x"]}]}]),
        ),
        (
            Plugin::GcePd,
            json!({"type": "pd-ssd", "replication-type": "regional-pd", "fstype": "ext3"}),
            beta.clone(),
            json!({"type": "pd-ssd", "replication-type": "regional-pd", "csi.storage.k8s.io/fstype": "ext3"}),
            zone_term("topology.gke.io/zone", json!(["z1", "z2"])),
        ),
        (
            Plugin::GcePd,
            json!({"zones": "us-central1-a,us-central1-b"}),
            Value::Null,
            json!({}),
            zone_term("topology.gke.io/zone", json!(["us-central1-a", "us-central1-b"])),
        ),
        // Azure Disk keeps fstype for its driver, and fault domains in unzoned regions go blank.
        (
            Plugin::AzureDisk,
            json!({"skuName": "Premium_LRS", "fsType": "ext4", "zoned": "true"}),
            zone_term("topology.kubernetes.io/zone", json!(["eastus-1", "0", "1"])),
            json!({"skuName": "Premium_LRS", "fsType": "ext4", "zoned": "true"}),
            zone_term("topology.disk.csi.azure.com/zone", json!(["eastus-1", "", ""])),
        ),
        (
            Plugin::AzureDisk,
            json!({"zone": "2"}),
            Value::Null,
            json!({}),
            zone_term("topology.disk.csi.azure.com/zone", json!([""])),
        ),
        (
            Plugin::AzureFile,
            json!({"skuName": "Standard_LRS", "fstype": "x"}),
            ga.clone(),
            json!({"skuName": "Standard_LRS", "fstype": "x"}),
            ga.clone(),
        ),
        (
            Plugin::Cinder,
            json!({"availability": "nova", "fsType": "ext4"}),
            beta,
            json!({"availability": "nova", "csi.storage.k8s.io/fstype": "ext4"}),
            zone_term("topology.cinder.csi.openstack.org/zone", json!(["z1", "z2"])),
        ),
        (
            Plugin::VsphereVolume,
            json!({"storagePolicyName": "gold", "datastore": "ds1", "diskformat": "thin",
                   "hostFailuresToTolerate": "1", "iopsLimit": "100", "fstype": "ext4", "unknown": "x"}),
            ga,
            json!({"storagepolicyname": "gold", "datastore-migrationparam": "ds1",
                   "diskformat-migrationparam": "thin", "hostfailurestotolerate-migrationparam": "1",
                   "iopslimit-migrationparam": "100", "csi.storage.k8s.io/fstype": "ext4",
                   "csimigration": "true"}),
            json!([{"matchLabelExpressions": [
                {"key": "topology.csi.vmware.com/zone", "values": ["z1"]},
                {"key": "other", "values": ["x"]}]}]),
        ),
        (
            Plugin::Portworx,
            json!({"repl": "2", "openstorage.io/auth-secret-name": "px",
                                  "openstorage.io/auth-secret-namespace": "ns"}),
            Value::Null,
            json!({"repl": "2",
                "csi.storage.k8s.io/provisioner-secret-name": "px", "csi.storage.k8s.io/provisioner-secret-namespace": "ns",
                "csi.storage.k8s.io/controller-publish-secret-name": "px", "csi.storage.k8s.io/controller-publish-secret-namespace": "ns",
                "csi.storage.k8s.io/node-publish-secret-name": "px", "csi.storage.k8s.io/node-publish-secret-namespace": "ns",
                "csi.storage.k8s.io/node-stage-secret-name": "px", "csi.storage.k8s.io/node-stage-secret-namespace": "ns",
                "csi.storage.k8s.io/controller-expand-secret-name": "px", "csi.storage.k8s.io/controller-expand-secret-namespace": "ns",
                "csi.storage.k8s.io/node-expand-secret-name": "px", "csi.storage.k8s.io/node-expand-secret-namespace": "ns"}),
            Value::Null,
        ),
    ];
    for (plugin, params, allowed, want_params, want_allowed) in rows {
        let given = class(plugin.in_tree_name(), params.clone(), allowed);
        let got =
            class_to_csi(plugin, &given).unwrap_or_else(|e| panic!("{plugin:?} {params}: {e}"));
        assert_eq!(json_of(&got.parameters), want_params, "{plugin:?} {params}");
        assert_eq!(json_of(&got.allowed_topologies), want_allowed, "{plugin:?} {params}");
        let provisioner =
            if plugin == Plugin::Portworx { plugin.csi_driver() } else { plugin.in_tree_name() };
        assert_eq!(got.provisioner, provisioner);
    }
}

#[test]
fn a_class_with_zones_and_allowed_topologies_is_refused() {
    let allowed = json!([{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["a"]}]}]);
    for plugin in [Plugin::AwsEbs, Plugin::GcePd, Plugin::AzureDisk] {
        let given = class(plugin.in_tree_name(), json!({"zone": "a"}), allowed.clone());
        assert_eq!(class_to_csi(plugin, &given), Err(TranslateError::ZonesAndAllowedTopologies));
    }
    // Cinder reads no zone parameter: its `availability` passes through beside the topologies.
    let given = class("kubernetes.io/cinder", json!({"availability": "a"}), allowed);
    assert!(class_to_csi(Plugin::Cinder, &given).is_ok());
}

#[test]
fn ebs_volume_ids_of_every_form() {
    let rows = [
        ("vol-0123", Ok("vol-0123")),
        ("aws://us-east-1a/vol-0123", Ok("vol-0123")),
        ("aws:///vol-0123", Ok("vol-0123")),
        ("something-else", Ok("something-else")),
        ("aws://us-east-1a/not-a-volume", Err(())),
        ("aws://vol-0123", Err(())),
        ("aws://us-east-1a/a/vol-0123", Err(())),
    ];
    for (id, want) in rows {
        let got = to_csi::ebs_volume_id(id);
        assert_eq!(got.as_deref().map_err(|_| ()), want, "{id}");
    }
}

#[test]
fn region_of_zones() {
    let s = |v: &[&str]| v.iter().map(|z| z.to_string()).collect::<Vec<_>>();
    assert_eq!(
        to_in_tree::aws_region(&s(&["us-east-1a", "us-east-1b"])).ok().as_deref(),
        Some("us-east-1")
    );
    assert_eq!(
        to_in_tree::aws_region(&s(&["us-gov-west-1a"])).ok().as_deref(),
        Some("us-gov-west-1")
    );
    assert_eq!(
        to_in_tree::aws_region(&s(&["us-west-2-lax-1a"])).ok().as_deref(),
        Some("us-west-2")
    );
    assert_eq!(
        to_in_tree::aws_region(&s(&["us-east-1-wl1-bos-wlz-1"])).ok().as_deref(),
        Some("us-east-1")
    );
    assert!(to_in_tree::aws_region(&s(&["us-east-1a", "eu-west-1a"])).is_err());
    assert!(to_in_tree::aws_region(&[]).is_err());
    assert!(to_in_tree::aws_region(&s(&["node-1"])).is_err());
    assert_eq!(
        to_in_tree::gce_region(&s(&["us-central1-a", "us-central1-c"])).ok().as_deref(),
        Some("us-central1")
    );
    assert!(to_in_tree::gce_region(&s(&["us-central1-a", "europe-west1-b"])).is_err());
    assert!(to_in_tree::gce_region(&s(&["zone"])).is_err());
}
