//! Storage capacity tracking, as csi-provisioner's `--enable-capacity` does it: one
//! CSIStorageCapacity per (topology segment × StorageClass of the driver), in the sidecar's
//! namespace, saying what GetCapacity answered for that class's parameters in that segment, so
//! that the scheduler places WaitForFirstConsumer claims where they fit. Decided here purely;
//! `publisher` asks the driver and writes the objects.
//!
//! Objects are recognised by their labels (`csi.storage.k8s.io/drivername`,
//! `csi.storage.k8s.io/managed-by: external-provisioner`, upstream's, so that either can take
//! over the other's objects) and matched to what is wanted by class and `nodeTopology`. A
//! wanted pair without an object gets one; one whose answer changed is updated; objects nothing
//! wants any more, and second objects for one pair, are deleted. A pair whose GetCapacity
//! failed keeps its object as it is.

pub mod publisher;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use k8s_openapi::api::storage::v1::{CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

use crate::model::ClassExt;
use crate::model::quantity::format_bytes;
use crate::model::topology::{driver_keys, segment_of};

pub const DRIVER_LABEL: &str = "csi.storage.k8s.io/drivername";
pub const MANAGED_BY_LABEL: &str = "csi.storage.k8s.io/managed-by";
/// The manager name csi-provisioner writes in its central (non-node) deployment.
pub const MANAGED_BY: &str = "external-provisioner";

/// Topology key → value: the nodes one object speaks for.
pub use crate::model::topology::Segment;

/// One object's worth: a class in a segment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Item {
    pub class: String,
    pub segment: Segment,
}

/// What GetCapacity answered for an item, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub available: i64,
    pub maximum_volume_size: Option<i64>,
}

/// The segments the driver's nodes form: for each CSINode that registers the driver, its Node's
/// values for the driver's topology keys. A driver without topology has one segment, empty,
/// whose selector matches every node.
pub fn segments(
    driver: &str,
    topology: bool,
    csi_nodes: &[&CSINode],
    nodes: &[&ObjectMeta],
) -> Vec<Segment> {
    if !topology {
        return vec![Segment::new()];
    }
    let mut out: Vec<Segment> = csi_nodes
        .iter()
        .filter_map(|csi_node| {
            let keys = driver_keys(csi_node, driver)?;
            let labels =
                nodes.iter().find(|n| n.name == csi_node.metadata.name)?.labels.as_ref()?;
            segment_of(labels, &keys)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The items wanted: every class of the driver with WaitForFirstConsumer (Immediate ones too
/// with `--capacity-for-immediate-binding`), in every segment.
pub fn wanted(
    classes: &[&StorageClass],
    driver: &str,
    segments: &[Segment],
    immediate: bool,
) -> Vec<Item> {
    let mut out: Vec<Item> = classes
        .iter()
        .filter(|c| c.provisioner == driver)
        .filter(|c| immediate || c.waits_for_consumer())
        .filter_map(|c| c.metadata.name.clone())
        .flat_map(|class| {
            segments.iter().map(move |s| Item { class: class.clone(), segment: s.clone() })
        })
        .collect();
    out.sort();
    out
}

/// A write to bring the objects in line.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Create(Box<CSIStorageCapacity>),
    /// Object `name` at `version`: new capacity, maximum size, and our owner if it lacks it.
    Update {
        name: String,
        version: Option<String>,
        answer: Answer,
        owner: Option<OwnerReference>,
    },
    Delete {
        name: String,
    },
}

/// The item an object speaks for, if its selector is a plain segment.
fn item_of(object: &CSIStorageCapacity) -> Option<Item> {
    let selector = object.node_topology.clone().unwrap_or_default();
    if selector.match_expressions.as_ref().is_some_and(|e| !e.is_empty()) {
        return None;
    }
    Some(Item {
        class: object.storage_class_name.clone(),
        segment: selector.match_labels.unwrap_or_default(),
    })
}

fn bytes(q: &Option<Quantity>) -> Option<i64> {
    let q = q.as_ref()?;
    crate::model::quantity::parse_bytes(&q.0).ok().and_then(|b| i64::try_from(b).ok())
}

fn quantity(value: i64) -> Quantity {
    Quantity(format_bytes(u64::try_from(value).unwrap_or(0)))
}

fn owned_by(object: &CSIStorageCapacity, owner: &OwnerReference) -> bool {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == owner.uid && o.controller == Some(true))
}

/// The writes that make `existing` (our labelled objects) say `answers`. Items without an
/// answer (GetCapacity failed) keep their object untouched.
pub fn reconcile(
    answers: &[(Item, Option<Answer>)],
    existing: &[&CSIStorageCapacity],
    driver: &str,
    owner: Option<&OwnerReference>,
) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut objects: Vec<&CSIStorageCapacity> = existing.to_vec();
    // The oldest (by name, as good as any stable order) of several for one item is kept.
    objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut claimed: Vec<&Item> = Vec::new();
    for object in objects {
        let name = object.metadata.name.clone().unwrap_or_default();
        let wanted = item_of(object)
            .and_then(|item| answers.iter().find(|(i, _)| *i == item && !claimed.contains(&i)));
        let Some((item, answer)) = wanted else {
            changes.push(Change::Delete { name });
            continue;
        };
        claimed.push(item);
        let Some(answer) = answer else { continue };
        let same = bytes(&object.capacity) == Some(answer.available)
            && bytes(&object.maximum_volume_size) == answer.maximum_volume_size;
        let missing_owner = owner.filter(|o| !owned_by(object, o)).cloned();
        if !same || missing_owner.is_some() {
            changes.push(Change::Update {
                name,
                version: object.metadata.resource_version.clone(),
                answer: *answer,
                owner: missing_owner,
            });
        }
    }
    for (item, answer) in answers {
        if let (false, Some(answer)) = (claimed.contains(&item), answer) {
            changes.push(Change::Create(Box::new(object(item, *answer, driver, owner))));
        }
    }
    changes
}

/// A new object for `item` (its name generated by the API).
pub fn object(
    item: &Item,
    answer: Answer,
    driver: &str,
    owner: Option<&OwnerReference>,
) -> CSIStorageCapacity {
    CSIStorageCapacity {
        metadata: ObjectMeta {
            generate_name: Some("csisc-".into()),
            labels: Some(BTreeMap::from([
                (DRIVER_LABEL.to_string(), driver.to_string()),
                (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
            ])),
            owner_references: owner.map(|o| vec![o.clone()]),
            ..Default::default()
        },
        storage_class_name: item.class.clone(),
        node_topology: Some(LabelSelector {
            match_labels: Some(item.segment.clone()),
            match_expressions: None,
        }),
        capacity: Some(quantity(answer.available)),
        maximum_volume_size: answer.maximum_volume_size.map(quantity),
    }
}

/// The merge patch of an Update.
pub fn update_patch(
    version: Option<&str>,
    answer: Answer,
    owners: Option<Vec<OwnerReference>>,
) -> serde_json::Value {
    let mut patch = serde_json::json!({
        "metadata": {"resourceVersion": version},
        "capacity": quantity(answer.available),
        "maximumVolumeSize": answer.maximum_volume_size.map(quantity),
    });
    if let Some(owners) = owners {
        patch["metadata"]["ownerReferences"] = serde_json::json!(owners);
    }
    patch
}

/// The label selector that lists our objects.
pub fn selector(driver: &str) -> String {
    format!("{DRIVER_LABEL}={driver},{MANAGED_BY_LABEL}={MANAGED_BY}")
}
