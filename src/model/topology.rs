//! Topology segments, as nodes carry them: what provisioning and the capacity publisher both read.

use std::collections::BTreeMap;

use k8s_openapi::api::storage::v1::CSINode;

/// One topology segment: key → value, ordered by key.
pub type Segment = BTreeMap<String, String>;

/// The topology keys `driver` registered in `csi_node`, if it registered any.
pub fn driver_keys(csi_node: &CSINode, driver: &str) -> Option<Vec<String>> {
    csi_node
        .spec
        .drivers
        .iter()
        .find(|d| d.name == driver)?
        .topology_keys
        .clone()
        .filter(|k| !k.is_empty())
}

/// The segment `labels` give for `keys`; None when a key is missing.
pub fn segment_of(labels: &BTreeMap<String, String>, keys: &[String]) -> Option<Segment> {
    keys.iter().map(|k| Some((k.clone(), labels.get(k)?.clone()))).collect()
}
