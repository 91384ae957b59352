//! Topology between an in-tree PV's zone keys and a CSI driver's: the node affinity's keys
//! renamed, a zone label made into affinity (and back), a region worked out from zones.
//!
//! In-tree PVs name their zone by the well-known node labels, the GA `topology.kubernetes.io/*`
//! or the older `failure-domain.beta.kubernetes.io/*`; which of the two a PV uses is kept when it
//! is translated back, so an old PV keeps its keys.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume,
    TopologySelectorLabelRequirement, TopologySelectorTerm, VolumeNodeAffinity,
};

use super::TranslateError;

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
pub const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// How a PV's zone label lists several zones.
pub const ZONE_SEPARATOR: &str = "__";

/// Works out the one region of a list of zones, or says why it cannot.
pub type RegionOf = fn(&[String]) -> Result<String, TranslateError>;

fn terms(pv: &PersistentVolume) -> &[NodeSelectorTerm] {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default()
}

fn terms_mut(pv: &mut PersistentVolume) -> Option<&mut Vec<NodeSelectorTerm>> {
    let required = pv.spec.as_mut()?.node_affinity.as_mut()?.required.as_mut()?;
    Some(&mut required.node_selector_terms)
}

fn label<'a>(pv: &'a PersistentVolume, key: &str) -> Option<&'a str> {
    pv.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn has_key(pv: &PersistentVolume, key: &str) -> bool {
    terms(pv).iter().flat_map(|t| t.match_expressions.iter().flatten()).any(|r| r.key == key)
}

/// The zone and region keys the PV uses: those its affinity names, else those its labels name,
/// else the GA ones.
pub fn keys_of(pv: &PersistentVolume) -> (&'static str, &'static str) {
    if has_key(pv, ZONE) {
        (ZONE, REGION)
    } else if has_key(pv, BETA_ZONE) {
        (BETA_ZONE, BETA_REGION)
    } else if label(pv, ZONE).is_some() {
        (ZONE, REGION)
    } else if label(pv, BETA_ZONE).is_some() {
        (BETA_ZONE, BETA_REGION)
    } else {
        (ZONE, REGION)
    }
}

/// Every value the affinity gives `key`, sorted, each once.
pub fn values_of(pv: &PersistentVolume, key: &str) -> Vec<String> {
    let found: BTreeSet<&String> = terms(pv)
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .filter(|r| r.key == key)
        .flat_map(|r| r.values.iter().flatten())
        .collect();
    found.into_iter().cloned().collect()
}

/// Renames `from` to `to` in every requirement of the affinity.
pub fn rename_key(pv: &mut PersistentVolume, from: &str, to: &str) {
    for term in terms_mut(pv).into_iter().flatten() {
        for requirement in term.match_expressions.iter_mut().flatten() {
            if requirement.key == from {
                requirement.key = to.to_string();
            }
        }
    }
}

/// Adds `key In zones` to every term (to a new one when there is none); blank zones are
/// dropped, the rest sorted and each kept once. Nothing when no zone is left.
pub fn add_requirement(pv: &mut PersistentVolume, key: &str, zones: &[&str]) {
    let zones: BTreeSet<&str> = zones.iter().map(|z| z.trim()).filter(|z| !z.is_empty()).collect();
    if zones.is_empty() {
        return;
    }
    let requirement = NodeSelectorRequirement {
        key: key.to_string(),
        operator: "In".to_string(),
        values: Some(zones.into_iter().map(str::to_string).collect()),
    };
    let spec = pv.spec.get_or_insert_with(Default::default);
    let affinity = spec.node_affinity.get_or_insert_with(VolumeNodeAffinity::default);
    let required = affinity.required.get_or_insert_with(NodeSelector::default);
    if required.node_selector_terms.is_empty() {
        required.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_expressions.get_or_insert_with(Vec::new).push(requirement.clone());
    }
}

fn set_label_if_absent(pv: &mut PersistentVolume, key: &str, value: String) {
    pv.metadata.labels.get_or_insert_with(BTreeMap::new).entry(key.to_string()).or_insert(value);
}

/// An in-tree PV's zones as the CSI driver's `zone_key`: the affinity's zone key renamed, or,
/// with no zone in the affinity, the zone label made into a requirement; a beta region key
/// becomes the GA one.
pub fn zones_to_csi(pv: &mut PersistentVolume, zone_key: &str) {
    let (zone, region) = keys_of(pv);
    if !values_of(pv, zone).is_empty() {
        rename_key(pv, zone, zone_key);
    } else if let Some(zones) = label(pv, zone).map(str::to_string) {
        add_requirement(pv, zone_key, &zones.split(ZONE_SEPARATOR).collect::<Vec<_>>());
    }
    if region == BETA_REGION && !values_of(pv, region).is_empty() {
        rename_key(pv, region, REGION);
    }
}

/// A CSI PV's `zone_key` back to the in-tree zone key; with `region_of`, each term without a
/// region gets the one its zones lie in; the zone (and a single region) recorded as labels too,
/// where the PV has none.
pub fn zones_to_in_tree(
    pv: &mut PersistentVolume,
    zone_key: &str,
    region_of: Option<RegionOf>,
) -> Result<(), TranslateError> {
    let (zone, region) = keys_of(pv);
    rename_key(pv, zone_key, zone);
    if let Some(region_of) = region_of {
        add_regions(pv, zone, region, region_of)?;
    }
    let zones = values_of(pv, zone);
    if !zones.is_empty() {
        set_label_if_absent(pv, zone, zones.join(ZONE_SEPARATOR));
    }
    Ok(())
}

fn add_regions(
    pv: &mut PersistentVolume,
    zone: &str,
    region: &str,
    region_of: RegionOf,
) -> Result<(), TranslateError> {
    for term in terms_mut(pv).into_iter().flatten() {
        let requirements = term.match_expressions.get_or_insert_with(Vec::new);
        if requirements.iter().any(|r| r.key == region) {
            continue;
        }
        let zones: Vec<String> = requirements
            .iter()
            .filter(|r| r.key == zone)
            .flat_map(|r| r.values.iter().flatten().cloned())
            .collect();
        let value = region_of(&zones)?;
        requirements.push(NodeSelectorRequirement {
            key: region.to_string(),
            operator: "In".to_string(),
            values: Some(vec![value]),
        });
    }
    if let [one] = values_of(pv, region).as_slice() {
        set_label_if_absent(pv, region, one.clone());
    }
    Ok(())
}

/// vSphere's way: zone and region each renamed both ways, or made from their labels, and the
/// first value of each recorded as a label when going back.
pub fn vsphere_to_csi(pv: &mut PersistentVolume, zone_key: &str, region_key: &str) {
    let (zone, region) = keys_of(pv);
    for (in_tree, csi) in [(zone, zone_key), (region, region_key)] {
        if !values_of(pv, in_tree).is_empty() {
            rename_key(pv, in_tree, csi);
        } else if let Some(value) = label(pv, in_tree).filter(|v| !v.is_empty()) {
            let value = value.to_string();
            add_requirement(pv, csi, &[value.as_str()]);
        }
    }
}

pub fn vsphere_to_in_tree(pv: &mut PersistentVolume, zone_key: &str, region_key: &str) {
    let (zone, region) = keys_of(pv);
    for (csi, in_tree) in [(zone_key, zone), (region_key, region)] {
        rename_key(pv, csi, in_tree);
    }
    for key in [zone, region] {
        if let Some(first) = values_of(pv, key).into_iter().next() {
            set_label_if_absent(pv, key, first);
        }
    }
}

/// A class's `allowedTopologies` with the zone keys (GA or beta) renamed to `zone_key`.
pub fn allowed_to_csi(terms: &[TopologySelectorTerm], zone_key: &str) -> Vec<TopologySelectorTerm> {
    terms
        .iter()
        .map(|term| TopologySelectorTerm {
            match_label_expressions: term.match_label_expressions.as_ref().map(|expressions| {
                expressions
                    .iter()
                    .map(|e| TopologySelectorLabelRequirement {
                        key: if e.key == ZONE || e.key == BETA_ZONE {
                            zone_key.to_string()
                        } else {
                            e.key.clone()
                        },
                        values: e.values.clone(),
                    })
                    .collect()
            }),
        })
        .collect()
}

/// One term requiring `key` to be one of `values`: what a class's `zone`/`zones` parameter means.
pub fn allowed_from_zones(key: &str, values: Vec<String>) -> Vec<TopologySelectorTerm> {
    vec![TopologySelectorTerm {
        match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
            key: key.to_string(),
            values,
        }]),
    }]
}
