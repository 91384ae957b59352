//! Accessibility requirements for CreateVolume, for drivers with VOLUME_ACCESSIBILITY_CONSTRAINTS,
//! as csi-provisioner works them out:
//!
//! | binding | `--strict-topology` | allowedTopologies | requisite | preferred first |
//! |---|---|---|---|---|
//! | delayed | true | any | the selected node's segment (must be allowed) | the same |
//! | delayed | false | none | every segment of the nodes with the driver's keys | the selected node's |
//! | delayed | false | set | the allowed segments | the selected node's |
//! | immediate | — | set | the allowed segments | spread by claim name |
//! | immediate | — | none | with `--immediate-topology`: every node segment; else no requirement | spread by claim name |
//!
//! "Every segment" counts only nodes whose CSINode registers the keys for the driver (a node's
//! labels alone do not make it the driver's), and with immediate binding each distinct key set
//! the driver registered is aggregated on its own, as csi-provisioner v6.4 does. Requisite
//! segments are sorted and without repeats; preferred is the same list turned so that the chosen
//! segment comes first.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::csi::v1 as csi;
pub use crate::model::topology::{Segment, driver_keys, segment_of};

/// Why no requirement could be worked out; the text tells the user what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// The Node or its CSINode is gone: the scheduler must choose again (upstream reschedules).
    #[error(
        "selected node {0} or its CSINode does not exist; asking the scheduler to choose another node"
    )]
    NodeGone(String),
    #[error(
        "selected node {node} has no CSINode entry for driver {driver}; the driver's node plugin is not registered there"
    )]
    NotRegistered { node: String, driver: String },
    #[error("selected node {node} has no label {key}, a topology key of driver {driver}")]
    MissingLabel { node: String, key: String, driver: String },
    #[error(
        "selected node {node} (topology {segment:?}) is outside the StorageClass's allowedTopologies; the driver cannot place the volume there"
    )]
    NotAllowed { node: String, segment: Segment },
    #[error(
        "StorageClass allowedTopologies term {0} uses an operator other than In or has no values"
    )]
    BadTerm(usize),
    #[error(
        "no available topology found: driver {0} has not registered topology keys on any node's CSINode yet (is its node plugin running?)"
    )]
    NoTopology(String),
    #[error(
        "no node where driver {driver} registered its topology keys {keys:?} carries them all as labels"
    )]
    KeysOnNoNode { driver: String, keys: Vec<Vec<String>> },
    #[error(
        "the selected node {node}'s topology {segment:?} is not among the topologies the volume may have; the StorageClass's allowedTopologies exclude it"
    )]
    SelectedNotRequisite { node: String, segment: Segment },
}

pub use super::settings::TopologyOptions;

/// The cluster's nodes as the stores hold them: each CSINode, and each Node's name and labels.
#[derive(Debug, Clone, Default)]
pub struct ClusterNodes<'a> {
    pub csi_nodes: Vec<&'a CSINode>,
    pub node_labels: Vec<(&'a str, &'a BTreeMap<String, String>)>,
}

/// The selected node's view: its Node (labels) and CSINode (the driver's topology keys). None
/// for a node that does not exist.
#[derive(Debug, Clone, Copy)]
pub struct SelectedNode<'a> {
    pub name: &'a str,
    pub node: Option<&'a Node>,
    pub csi_node: Option<&'a CSINode>,
}

/// The requirement for claim `claim_name` of `class`, placed on `selected` (delayed binding) or
/// anywhere (immediate).
pub fn requirement(
    class: &StorageClass,
    driver: &str,
    claim_name: &str,
    selected: Option<SelectedNode<'_>>,
    cluster: &ClusterNodes<'_>,
    options: TopologyOptions,
) -> Result<Option<csi::TopologyRequirement>, TopologyError> {
    let allowed = allowed_segments(class)?;
    let chosen = selected
        .map(|node| node_keys(node, driver).and_then(|keys| node_segment(node, driver, keys)))
        .transpose()?;
    let mut requisite = match (selected, &chosen) {
        (Some(node), Some((_, segment))) if options.strict => {
            if !allowed.is_empty() && !allowed.iter().any(|a| within(segment, a)) {
                return Err(TopologyError::NotAllowed {
                    node: node.name.to_string(),
                    segment: segment.clone(),
                });
            }
            vec![segment.clone()]
        }
        _ if !allowed.is_empty() => allowed,
        (None, _) if !options.immediate => return Ok(None),
        (_, Some((keys, _))) => aggregate(driver, std::slice::from_ref(keys), cluster)?,
        (_, None) => {
            let sets = key_sets(driver, cluster);
            if sets.is_empty() {
                return Err(TopologyError::NoTopology(driver.to_string()));
            }
            aggregate(driver, &sets, cluster)?
        }
    };
    requisite.sort_by(compare);
    requisite.dedup();
    let first = match (selected, &chosen) {
        (Some(node), Some((_, segment))) => requisite
            .iter()
            .position(|r| within(segment, r))
            .ok_or_else(|| TopologyError::SelectedNotRequisite {
                node: node.name.to_string(),
                segment: segment.clone(),
            })?,
        _ => spread(claim_name, requisite.len()),
    };
    let mut preferred = requisite.clone();
    preferred.rotate_left(first);
    let topologies = |segments: Vec<Segment>| -> Vec<csi::Topology> {
        segments
            .into_iter()
            .map(|s| csi::Topology { segments: s.into_iter().collect::<HashMap<_, _>>() })
            .collect()
    };
    Ok(Some(csi::TopologyRequirement {
        requisite: topologies(requisite),
        preferred: topologies(preferred),
    }))
}

/// Segments with fewer keys first, then by keys and values.
fn compare(a: &Segment, b: &Segment) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.iter().cmp(b.iter()))
}

/// Every distinct set of topology keys the driver registered on some CSINode, each sorted:
/// immediate binding has no node of its own to take them from, and nodes need not all report
/// the same granularity.
fn key_sets(driver: &str, cluster: &ClusterNodes<'_>) -> Vec<Vec<String>> {
    let mut sets: Vec<Vec<String>> = cluster
        .csi_nodes
        .iter()
        .filter_map(|c| driver_keys(c, driver))
        .map(|mut keys| {
            keys.sort();
            keys.dedup();
            keys
        })
        .collect();
    sets.sort();
    sets.dedup();
    sets
}

/// For each of `sets`, the segment of every node whose CSINode registers all of its keys for
/// the driver and whose labels carry them.
fn aggregate(
    driver: &str,
    sets: &[Vec<String>],
    cluster: &ClusterNodes<'_>,
) -> Result<Vec<Segment>, TopologyError> {
    let registered: HashMap<&str, Vec<String>> = cluster
        .csi_nodes
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, driver_keys(c, driver)?)))
        .collect();
    let mut segments = Vec::new();
    for keys in sets {
        let covers = |name: &str| {
            registered.get(name).is_some_and(|own| keys.iter().all(|k| own.contains(k)))
        };
        segments.extend(
            cluster
                .node_labels
                .iter()
                .filter(|(name, _)| covers(name))
                .filter_map(|(_, labels)| segment_of(labels, keys)),
        );
    }
    if segments.is_empty() {
        return Err(TopologyError::KeysOnNoNode {
            driver: driver.to_string(),
            keys: sets.to_vec(),
        });
    }
    Ok(segments)
}

/// Where an immediate claim's preferred list starts: StatefulSet claims
/// (`<template>-<set>-<ordinal>`) of one replica hash alike, and the ordinal moves each replica
/// on by one, so that replicas spread over the segments (csi-provisioner's and the in-tree
/// heuristic, with FNV-1 over the name part).
fn spread(claim_name: &str, count: usize) -> usize {
    if count == 0 {
        return 0;
    }
    let (mut hashed, mut index) = (claim_name, 0u32);
    if let Some((rest, ordinal)) = claim_name.rsplit_once('-')
        && let Ok(n) = ordinal.parse::<u32>()
    {
        index = n;
        hashed = rest.rsplit_once('-').map_or(rest, |(_, set)| set);
    }
    let hash =
        hashed.bytes().fold(2_166_136_261u32, |h, b| h.wrapping_mul(16_777_619) ^ u32::from(b));
    usize::try_from(hash.wrapping_add(index)).unwrap_or(0) % count
}

/// The driver's topology keys on the selected node.
fn node_keys(node: SelectedNode<'_>, driver: &str) -> Result<Vec<String>, TopologyError> {
    node.csi_node.and_then(|c| driver_keys(c, driver)).ok_or_else(|| TopologyError::NotRegistered {
        node: node.name.to_string(),
        driver: driver.to_string(),
    })
}

/// The node's values for the driver's topology keys, with the keys.
fn node_segment(
    node: SelectedNode<'_>,
    driver: &str,
    keys: Vec<String>,
) -> Result<(Vec<String>, Segment), TopologyError> {
    let labels = node.node.and_then(|n| n.metadata.labels.clone()).unwrap_or_default();
    let segment = keys
        .iter()
        .map(|key| match labels.get(key) {
            Some(value) => Ok((key.clone(), value.clone())),
            None => Err(TopologyError::MissingLabel {
                node: node.name.to_string(),
                key: key.clone(),
                driver: driver.to_string(),
            }),
        })
        .collect::<Result<Segment, _>>()?;
    Ok((keys, segment))
}

/// allowedTopologies flattened: each term's value combinations become one segment each.
fn allowed_segments(class: &StorageClass) -> Result<Vec<Segment>, TopologyError> {
    let mut out = Vec::new();
    for (i, term) in class.allowed_topologies.iter().flatten().enumerate() {
        let mut combos = vec![BTreeMap::new()];
        for requirement in term.match_label_expressions.iter().flatten() {
            if requirement.values.is_empty() {
                return Err(TopologyError::BadTerm(i));
            }
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    requirement.values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.insert(requirement.key.clone(), v.clone());
                        c
                    })
                })
                .collect();
        }
        out.extend(combos.into_iter().filter(|c| !c.is_empty()));
    }
    Ok(out)
}

/// Every key the allowed segment names has the same value in `segment`.
fn within(segment: &Segment, allowed: &Segment) -> bool {
    allowed.iter().all(|(k, v)| segment.get(k) == Some(v))
}

#[cfg(test)]
mod tests;
