//! Made-up objects for the fuzz targets: claims, classes and CreateVolume answers whose every
//! user-, admin- or driver-written field comes from the fuzzer's bytes.

use std::collections::BTreeMap;

use arbitrary::Unstructured;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};
use serde_json::{Value, json};

use crate::csi::v1 as csi;

/// The driver the made-up objects belong to.
pub const DRIVER: &str = "fuzz.csi";

/// Spellings the code looks for, drawn as often as made-up text: reserved keys, templates and
/// their near misses, suffixes, separators, characters that are more than one byte.
pub const FRAGMENTS: [&str; 40] = [
    "csi.storage.k8s.io/provisioner-secret-name",
    "csi.storage.k8s.io/provisioner-secret-namespace",
    "csi.storage.k8s.io/node-stage-secret-name",
    "csi.storage.k8s.io/controller-expand-secret-namespace",
    "csi.storage.k8s.io/fstype",
    "csi.storage.k8s.io/",
    "fstype",
    "csiProvisionerSecretName",
    "${pvc.name}",
    "${pvc.namespace}",
    "${pv.name}",
    "${pvc.annotations['",
    "']}",
    "${pvc.annotations[']}",
    "${",
    "}",
    "$",
    "'",
    "Gi",
    "Ki",
    "Ei",
    "e",
    "E18",
    "m",
    ".",
    "-",
    "9223372036854775807",
    "9223372036854775808",
    "0",
    "1",
    "/",
    "topology.kubernetes.io/zone",
    "kubernetes.io/hostname",
    "é",
    "\u{1F4BE}",
    "",
    "a",
    "ns",
    "ReadWriteOnce",
    "Block",
];

/// Text from the fuzzer: a fragment, made-up text, or a few of them joined.
pub trait Draw {
    fn text(&mut self) -> arbitrary::Result<String>;
    fn map(&mut self, most: usize) -> arbitrary::Result<BTreeMap<String, String>>;
}

impl Draw for Unstructured<'_> {
    fn text(&mut self) -> arbitrary::Result<String> {
        let pieces = self.int_in_range(1..=4)?;
        let mut out = String::new();
        for _ in 0..pieces {
            if self.arbitrary::<bool>()? {
                out.push_str(FRAGMENTS[self.choose_index(FRAGMENTS.len())?]);
            } else {
                out.push_str(self.arbitrary::<&str>()?);
            }
        }
        Ok(out)
    }

    fn map(&mut self, most: usize) -> arbitrary::Result<BTreeMap<String, String>> {
        let entries = self.int_in_range(0..=most)?;
        let mut map = BTreeMap::new();
        for _ in 0..entries {
            map.insert(self.text()?, self.text()?);
        }
        Ok(map)
    }
}

/// A claim of class "gold": name, namespace, annotations, labels, size, modes, data source and
/// selector made up. None when the bytes run out or the API's types would not read it.
pub fn claim(u: &mut Unstructured<'_>) -> Option<PersistentVolumeClaim> {
    let source = match u.int_in_range(0..=3).ok()? {
        0 => Value::Null,
        1 => json!({"kind": "PersistentVolumeClaim", "name": u.text().ok()?}),
        2 => {
            json!({"kind": "VolumeSnapshot", "apiGroup": "snapshot.storage.k8s.io", "name": u.text().ok()?})
        }
        _ => json!({"kind": u.text().ok()?, "apiGroup": u.text().ok()?, "name": u.text().ok()?}),
    };
    let selector = if u.arbitrary::<bool>().ok()? {
        json!({"matchLabels": u.map(2).ok()?})
    } else {
        Value::Null
    };
    super::object(json!({
        "metadata": {
            "name": u.text().ok()?, "namespace": u.text().ok()?, "uid": u.text().ok()?,
            "annotations": u.map(6).ok()?, "labels": u.map(4).ok()?,
        },
        "spec": {
            "storageClassName": "gold",
            "accessModes": [u.text().ok()?],
            "volumeMode": u.text().ok()?,
            "resources": {"requests": {"storage": u.text().ok()?}, "limits": {"storage": u.text().ok()?}},
            "dataSource": source,
            "selector": selector,
        }
    }))
}

/// Class "gold" of the driver: parameters, mount options and allowed topologies made up.
pub fn class(u: &mut Unstructured<'_>) -> Option<StorageClass> {
    let terms: Vec<Value> = (0..u.int_in_range(0..=2).ok()?)
        .map(|_| {
            Some(json!({"matchLabelExpressions": [{"key": u.text().ok()?, "values": [u.text().ok()?]}]}))
        })
        .collect::<Option<_>>()?;
    let reclaim = ["Delete", "Retain"][u.choose_index(2).ok()?];
    super::object(json!({
        "metadata": {"name": "gold"},
        "provisioner": DRIVER,
        "parameters": u.map(8).ok()?,
        "mountOptions": [u.text().ok()?],
        "allowedTopologies": terms,
        "reclaimPolicy": reclaim,
    }))
}

/// A CreateVolume answer with every field made up.
pub fn volume(u: &mut Unstructured<'_>) -> Option<csi::Volume> {
    let volume_id = match u.int_in_range(0..=2).ok()? {
        0 => String::new(),
        1 => "v".repeat(u.int_in_range(1..=100_000).ok()?),
        _ => u.text().ok()?,
    };
    let capacity_bytes = match u.int_in_range(0..=3).ok()? {
        0 => 0,
        1 => i64::MAX,
        2 => -u.int_in_range(1..=i64::MAX).ok()?,
        _ => u.arbitrary().ok()?,
    };
    let context_size = u.int_in_range(0..=2).ok()?;
    let mut volume_context: std::collections::HashMap<String, String> =
        u.map(4).ok()?.into_iter().collect();
    if context_size == 2 {
        volume_context.insert("huge".into(), "x".repeat(1 << 20));
    }
    let accessible_topology = (0..u.int_in_range(0..=3).ok()?)
        .map(|_| Some(csi::Topology { segments: u.map(3).ok()?.into_iter().collect() }))
        .collect::<Option<_>>()?;
    Some(csi::Volume {
        capacity_bytes,
        volume_id,
        volume_context,
        content_source: None,
        accessible_topology,
    })
}

/// A bound claim of the driver's PV, the VolumeAttributesClass it asks for, and that class, each
/// with its names, status and parameters made up.
pub fn modify(
    u: &mut Unstructured<'_>,
) -> Option<(PersistentVolumeClaim, PersistentVolume, VolumeAttributesClass)> {
    let wanted = u.text().ok()?;
    let status = ["", "InProgress", "Infeasible", "Pending"][u.choose_index(4).ok()?];
    let claim = super::object(json!({
        "metadata": {"name": u.text().ok()?, "namespace": "ns", "uid": "u", "resourceVersion": "1"},
        "spec": {"volumeName": "pv", "volumeAttributesClassName": wanted,
                 "resources": {"requests": {"storage": u.text().ok()?}}},
        "status": {"phase": "Bound", "currentVolumeAttributesClassName": u.text().ok()?,
                   "modifyVolumeStatus": {"status": status, "targetVolumeAttributesClassName": u.text().ok()?},
                   "capacity": {"storage": u.text().ok()?}},
    }))?;
    let pv = super::object(json!({
        "metadata": {"name": "pv"},
        "spec": {"csi": {"driver": DRIVER, "volumeHandle": u.text().ok()?},
                 "volumeAttributesClassName": u.text().ok()?,
                 "claimRef": {"namespace": "ns", "name": claim_name(&claim), "uid": "u"}},
    }))?;
    let driver = if u.arbitrary::<bool>().ok()? { DRIVER.to_string() } else { u.text().ok()? };
    let class = super::object(json!({
        "metadata": {"name": wanted}, "driverName": driver, "parameters": u.map(6).ok()?,
    }))?;
    Some((claim, pv, class))
}

fn claim_name(claim: &PersistentVolumeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}
