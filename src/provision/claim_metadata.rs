//! Beyond upstream: a claim's labels and annotations, by key prefix, in CreateVolume's
//! parameters, for a backend's tags, cost centres or backup policies. A StorageClass opts in
//! by naming the prefixes:
//!
//! - `csi-pv-controller.storage.k8s.io/claim-label-prefixes: "team.example.com/,cost-center"`
//! - `csi-pv-controller.storage.k8s.io/claim-annotation-prefixes: "backup.example.com/"`
//!
//! Each key that starts with a named prefix goes to the driver as
//! `csi-pv-controller.storage.k8s.io/claim-label/<key>` (or `…/claim-annotation/<key>`): a
//! class cannot write a parameter there itself (the prefix is ours, see `parameters`), so the
//! claim's keys never collide with the class's. Never passed, whatever the prefixes: keys under
//! `csi.storage.k8s.io/` (the sidecar's own), kubectl's last-applied copy of the object, and an
//! annotation the class's secret templates read (it names where a credential lives). Past
//! `MAX_BYTES` the claim is refused with an Event naming the size, rather than provisioned
//! with part of what its class promised the backend.

use std::collections::BTreeMap;

use super::parameters::SecretTemplate;

/// Our parameter namespace: the two options below, and the passed keys.
pub const PREFIX: &str = "csi-pv-controller.storage.k8s.io/";
pub const LABEL_PREFIXES: &str = "csi-pv-controller.storage.k8s.io/claim-label-prefixes";
pub const ANNOTATION_PREFIXES: &str = "csi-pv-controller.storage.k8s.io/claim-annotation-prefixes";
/// Where a passed label goes: this, then its key.
pub const LABEL_PARAMETER: &str = "csi-pv-controller.storage.k8s.io/claim-label/";
pub const ANNOTATION_PARAMETER: &str = "csi-pv-controller.storage.k8s.io/claim-annotation/";
/// The most text (keys and values, as passed) a claim may add to CreateVolume.
pub const MAX_BYTES: usize = 4096;

/// Keys never passed, whatever the prefixes say.
const NEVER_PREFIX: &str = "csi.storage.k8s.io/";
const NEVER_KEYS: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

/// What a class's options name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataOption {
    pub label_prefixes: Vec<String>,
    pub annotation_prefixes: Vec<String>,
}

/// Why a class's options or a claim's metadata are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error(
        "StorageClass parameter {0:?} is in csi-pv-controller's reserved namespace {PREFIX} but is none of its keys ({LABEL_PREFIXES}, {ANNOTATION_PREFIXES}); remove or correct it"
    )]
    UnknownKey(String),
    #[error(
        "StorageClass parameter {0:?} names no key prefix; give a comma-separated list of prefixes, such as \"team.example.com/\""
    )]
    NoPrefix(String),
    #[error(
        "the claim's labels and annotations that its StorageClass passes to the driver hold {bytes} bytes, over the {limit} allowed; shorten them, or narrow the class's {LABEL_PREFIXES} / {ANNOTATION_PREFIXES}"
    )]
    TooLarge { bytes: usize, limit: usize },
}

/// The options a class's parameters hold (None: the class does not opt in). Keys under
/// `PREFIX` other than the two options are refused, so that none can pose as a passed key.
pub fn option(
    parameters: &BTreeMap<String, String>,
) -> Result<Option<MetadataOption>, MetadataError> {
    let mut out = MetadataOption::default();
    let mut named = false;
    for (key, value) in parameters.iter().filter(|(k, _)| k.starts_with(PREFIX)) {
        let list = match key.as_str() {
            LABEL_PREFIXES => &mut out.label_prefixes,
            ANNOTATION_PREFIXES => &mut out.annotation_prefixes,
            _ => return Err(MetadataError::UnknownKey(key.clone())),
        };
        *list =
            value.split(',').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect();
        if list.is_empty() {
            return Err(MetadataError::NoPrefix(key.clone()));
        }
        named = true;
    }
    Ok(named.then_some(out))
}

/// The parameters `option` passes from a claim with `labels` and `annotations`; `secrets`
/// are the class's secret templates, whose annotations stay out.
pub fn parameters(
    option: &MetadataOption,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    secrets: &[&SecretTemplate],
) -> Result<BTreeMap<String, String>, MetadataError> {
    let read_by_secrets: Vec<String> = secrets
        .iter()
        .flat_map(|t| [t.name.as_str(), t.namespace.as_str()])
        .flat_map(super::secrets::annotation_keys)
        .collect();
    let passes = |key: &str, prefixes: &[String]| {
        prefixes.iter().any(|p| key.starts_with(p.as_str()))
            && !key.starts_with(NEVER_PREFIX)
            && !NEVER_KEYS.contains(&key)
    };
    let mut out = BTreeMap::new();
    for (key, value) in labels {
        if passes(key, &option.label_prefixes) {
            out.insert(format!("{LABEL_PARAMETER}{key}"), value.clone());
        }
    }
    for (key, value) in annotations {
        if passes(key, &option.annotation_prefixes) && !read_by_secrets.contains(key) {
            out.insert(format!("{ANNOTATION_PARAMETER}{key}"), value.clone());
        }
    }
    let bytes: usize = out.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_BYTES {
        return Err(MetadataError::TooLarge { bytes, limit: MAX_BYTES });
    }
    Ok(out)
}

#[cfg(test)]
#[path = "claim_metadata_tests.rs"]
mod tests;
