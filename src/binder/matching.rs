//! Which PV a claim binds to: the PV controller's FindMatchingVolume, over an index so that a
//! claim looks at a handful of PVs instead of all of them.
//!
//! Upstream walks the access-mode groups that hold every mode the claim asks for, fewest modes
//! first, and in each group returns a PV pre-bound to the claim if one fits, else the smallest
//! Available PV that fits. The index keeps, per (access modes, class), the Available unclaimed
//! PVs sorted by size, and per claim name the PVs whose claimRef names it; the same `verdict`
//! that `explain` prints decides on each PV the index hands out.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::core::{Selector, SelectorExt};

use crate::model::names::*;
use crate::model::quantity::{comparable_bytes, parse_bytes};
use crate::model::{AccessMode, BindingMode, ClaimExt, ClassExt, VolumeExt, VolumePhase};

/// Why a claim cannot be matched at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    #[error("error creating internal label selector for claim: {claim}: {reason}")]
    Selector { claim: String, reason: String },
    #[error("cannot read the storage request of claim {claim}: {reason}")]
    Request { claim: String, reason: String },
    #[error("VolumeBindingMode not set for StorageClass {0:?}")]
    BindingModeUnset(String),
}

/// The facts about a claim that matching reads, worked out once.
#[derive(Debug, Clone)]
pub struct ClaimFacts {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub request: u64,
    pub class: String,
    pub volume_mode: String,
    pub attributes_class: String,
    pub modes: BTreeSet<String>,
    selector: Option<Selector>,
}

impl ClaimFacts {
    pub fn of(claim: &PersistentVolumeClaim) -> Result<ClaimFacts, MatchError> {
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let spec = claim.spec.clone().unwrap_or_default();
        let request =
            match spec.resources.as_ref().and_then(|r| r.requests.as_ref()?.get("storage")) {
                Some(q) => parse_bytes(&q.0).map_err(|e| MatchError::Request {
                    claim: format!("{namespace}/{name}"),
                    reason: e.to_string(),
                })?,
                None => 0,
            };
        let selector = match spec.selector {
            Some(s) => Some(Selector::try_from(s).map_err(|e| MatchError::Selector {
                claim: format!("{namespace}/{name}"),
                reason: e.to_string(),
            })?),
            None => None,
        };
        Ok(ClaimFacts {
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            request,
            class: claim.class().to_string(),
            volume_mode: claim.volume_mode().as_str().to_string(),
            attributes_class: spec.volume_attributes_class_name.unwrap_or_default(),
            modes: spec.access_modes.unwrap_or_default().into_iter().collect(),
            selector,
            namespace,
            name,
        })
    }
}

/// A PV's access modes as upstream's index key: deduplicated, in upstream's fixed order
/// (`AccessMode::ALL`), comma-joined; a mode the API does not know is left out.
pub fn modes_key(modes: &[String]) -> String {
    AccessMode::ALL
        .iter()
        .map(|m| m.as_str())
        .filter(|m| modes.iter().any(|x| x == m))
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn key_modes(key: &str) -> BTreeSet<&str> {
    key.split(',').filter(|m| !m.is_empty()).collect()
}

/// What matching thinks of one PV for one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Pre-bound to the claim and fits: chosen before any other PV of its group.
    PreBound,
    /// Available and fits: the smallest such PV of the first group wins.
    Candidate,
    Rejected(Rejection),
}

/// Why a PV cannot serve a claim; `describe` puts it in the words `explain` prints. Cheap to
/// make: matching makes one for every PV it passes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    ClaimedByOther,
    TooSmall,
    VolumeMode,
    AttributesClass,
    Deleting,
    /// WaitForFirstConsumer: only the scheduler binds unbound PVs.
    DelayBinding,
    Phase,
    Selector,
    Class,
    AccessModes,
}

impl Rejection {
    pub fn describe(self, claim: &ClaimFacts, pv: &PersistentVolume) -> String {
        let spec = pv.spec.clone().unwrap_or_default();
        let (p, c) = (pv, claim);
        // What the PV has, then what the claim wants.
        let asks = |has: String, wants: String| format!("{has}, the claim asks for {wants}");
        match self {
            Rejection::ClaimedByOther => {
                let r = spec.claim_ref.unwrap_or_default();
                let (namespace, name) = (r.namespace.unwrap_or_default(), r.name.unwrap_or_default());
                format!("already claimed by {namespace}/{name}")
            }
            Rejection::TooSmall => asks(format!("too small: {} bytes", p.capacity_bytes()), c.request.to_string()),
            Rejection::VolumeMode => asks(format!("volumeMode {}", p.volume_mode()), c.volume_mode.clone()),
            Rejection::AttributesClass => {
                let has = spec.volume_attributes_class_name.unwrap_or_default();
                asks(format!("volumeAttributesClassName {has:?}"), format!("{:?}", c.attributes_class))
            }
            Rejection::Deleting => "being deleted".into(),
            Rejection::DelayBinding => "the claim's class is WaitForFirstConsumer: the scheduler picks a PV together with a node".into(),
            Rejection::Phase => format!("phase is {:?}, not Available", p.phase_text()),
            Rejection::Selector => "labels do not match the claim's selector".into(),
            Rejection::Class => asks(format!("storage class {:?}", p.class()), format!("{:?}", c.class)),
            Rejection::AccessModes => {
                let has = modes_key(spec.access_modes.as_deref().unwrap_or_default());
                let wants = c.modes.iter().cloned().collect::<Vec<_>>().join(",");
                format!("access modes [{has}] do not include all of the claim's [{wants}]")
            }
        }
    }
}

/// FindMatchingVolume's checks on one PV, in upstream's order, plus the access-mode check that
/// upstream makes through the index.
pub fn verdict(claim: &ClaimFacts, pv: &PersistentVolume, delay_binding: bool) -> Verdict {
    use Rejection::*;
    let reject = Verdict::Rejected;
    let Some(spec) = pv.spec.as_ref() else {
        return reject(TooSmall);
    };
    let pv_modes = spec.access_modes.as_deref().unwrap_or_default();
    if !claim.modes.iter().all(|m| pv_modes.contains(m)) {
        return reject(AccessModes);
    }
    let prebound = pv.bound_to_claim(&claim.namespace, &claim.name, &claim.uid);
    if spec.claim_ref.is_some() && !prebound {
        return reject(ClaimedByOther);
    }
    if pv.capacity_bytes() < claim.request {
        return reject(TooSmall);
    }
    if pv.volume_mode().as_str() != claim.volume_mode {
        return reject(VolumeMode);
    }
    if spec.volume_attributes_class_name.as_deref().unwrap_or("") != claim.attributes_class {
        return reject(AttributesClass);
    }
    if pv.metadata.deletion_timestamp.is_some() {
        return reject(Deleting);
    }
    if prebound {
        return Verdict::PreBound;
    }
    if delay_binding {
        return reject(DelayBinding);
    }
    if pv.phase() != Some(VolumePhase::Available) {
        return reject(Phase);
    }
    if let Some(selector) = &claim.selector {
        let matched = match pv.metadata.labels.as_ref() {
            Some(labels) => selector.matches(labels),
            None => selector.matches(&BTreeMap::new()),
        };
        if !matched {
            return reject(Selector);
        }
    }
    if pv.class() != claim.class {
        return reject(Class);
    }
    Verdict::Candidate
}

/// checkVolumeSatisfyClaim: may a claim that names an unclaimed PV in `spec.volumeName` bind
/// it? The error text goes into upstream's VolumeMismatch event. The selector is not checked.
pub fn check_volume_satisfies_claim(
    pv: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<(), String> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    if pv.metadata.deletion_timestamp.is_some() {
        return Err(format!("the volume is marked for deletion {name:?}"));
    }
    // Compared at any size: a request past int64 must not read as 0 (kubernetes#141618).
    let request = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
        .map_or(0, |q| comparable_bytes(&q.0));
    let capacity = pv
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref()?.get("storage"))
        .map_or(0, |q| comparable_bytes(&q.0));
    if capacity < request {
        return Err("requested PV is too small".into());
    }
    if pv.class() != claim.class() {
        return Err("storageClassName does not match".into());
    }
    let spec = pv.spec.clone().unwrap_or_default();
    let claim_spec = claim.spec.clone().unwrap_or_default();
    if spec.volume_attributes_class_name.unwrap_or_default()
        != claim_spec.volume_attributes_class_name.clone().unwrap_or_default()
    {
        return Err("volumeAttributesClassName does not match".into());
    }
    if pv.volume_mode() != claim.volume_mode() {
        return Err("incompatible volumeMode".into());
    }
    let pv_modes = spec.access_modes.unwrap_or_default();
    if !claim_spec.access_modes.unwrap_or_default().iter().all(|m| pv_modes.contains(m)) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

/// IsDelayBindingMode: the claim's class waits for the first consumer. No class, or a class
/// that does not exist, does not delay.
pub fn delay_binding(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
) -> Result<bool, MatchError> {
    if claim.class().is_empty() {
        return Ok(false);
    }
    let Some(class) = class else {
        return Ok(false);
    };
    match class.binding_mode() {
        BindingMode::Unset => {
            Err(MatchError::BindingModeUnset(class.metadata.name.clone().unwrap_or_default()))
        }
        mode => Ok(mode == BindingMode::WaitForFirstConsumer),
    }
}

/// The default StorageClass: annotated default, newest first, then by name.
pub fn default_class<'a>(
    classes: impl IntoIterator<Item = &'a StorageClass>,
) -> Option<&'a StorageClass> {
    let is_default = |c: &StorageClass| {
        annotation(&c.metadata, "storageclass.kubernetes.io/is-default-class")
            .or_else(|| annotation(&c.metadata, "storageclass.beta.kubernetes.io/is-default-class"))
            == Some("true")
    };
    classes.into_iter().filter(|c| is_default(c)).min_by(|a, b| {
        let created = |c: &StorageClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
        created(b).cmp(&created(a)).then_with(|| a.metadata.name.cmp(&b.metadata.name))
    })
}
