//! Volume expansion, decided purely: external-resizer's recovery flow (docs/expansion.md
//! §3). `Resizer::decide` is one pass over a bound claim and `Resizer::after_expand` what a
//! finished call writes (pass.rs); `target` picks the size to send (§3.3); the
//! patch builders write each transition of §3.2 as one status patch; `request` builds
//! ControllerExpandVolume; `answer` checks the reply; `in_use` tells an offline-only driver's
//! "volume in use" apart from other failed preconditions. The controller's `expansion` module
//! carries the steps out.

pub mod failure;
mod pass;
#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition, Pod,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};

use crate::csi::v1 as csi;
use crate::model::claim::conditions_with;
use crate::model::names::{ANN_NODE_EXPANSION_NOT_REQUIRED, ANN_PRE_RESIZE_CAPACITY, annotation};
use crate::model::quantity::{format_bytes, parse_bytes};
use crate::model::{ClaimExt, PodExt, VolumeExt, VolumeMode};
use csi::volume_capability::access_mode::Mode;
use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};

pub use pass::{Expanded, ResizeMemory, ResizeStep, Resizer};

/// `status.allocatedResourceStatuses["storage"]` values.
pub const CONTROLLER_IN_PROGRESS: &str = "ControllerResizeInProgress";
pub const CONTROLLER_INFEASIBLE: &str = "ControllerResizeInfeasible";
pub const NODE_PENDING: &str = "NodeResizePending";
pub const NODE_IN_PROGRESS: &str = "NodeResizeInProgress";
pub const NODE_INFEASIBLE: &str = "NodeResizeInfeasible";

/// Condition types of a resize.
pub const RESIZING: &str = "Resizing";
pub const FS_RESIZE_PENDING: &str = "FileSystemResizePending";
pub const CONTROLLER_RESIZE_ERROR: &str = "ControllerResizeError";
pub const NODE_RESIZE_ERROR: &str = "NodeResizeError";
const RESIZE_CONDITIONS: [&str; 4] =
    [RESIZING, FS_RESIZE_PENDING, CONTROLLER_RESIZE_ERROR, NODE_RESIZE_ERROR];

/// Where the driver grows volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expander {
    /// Controller EXPAND_VOLUME: ControllerExpandVolume, then maybe the node.
    Controller,
    /// Node EXPAND_VOLUME only: no call here; the PV takes the new size and kubelet grows it
    /// (external-resizer's trivial resizer).
    NodeOnly,
}

impl Expander {
    /// None: the driver cannot expand, and claims are left alone.
    pub fn of(controller: bool, node: bool) -> Option<Expander> {
        match (controller, node) {
            (true, _) => Some(Expander::Controller),
            (false, true) => Some(Expander::NodeOnly),
            (false, false) => None,
        }
    }
}

/// The claim is in use by a pod that may still run: not Succeeded or Failed, in the claim's
/// namespace, naming it in a volume (external-resizer's in-use store; generic ephemeral volumes
/// are not counted, as there).
pub fn in_use(claim: &PersistentVolumeClaim, pods: &[Pod]) -> bool {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    pods.iter().any(|pod| {
        pod.metadata.namespace == claim.metadata.namespace
            && !pod.finished()
            && pod.names_claim(name)
    })
}

/// Event notes, as external-resizer's.
pub fn resizing_note(pv: &str) -> String {
    format!("External resizer is resizing volume {pv}")
}
pub const FS_RESIZE_REQUIRED_NOTE: &str = "Require file system resize of volume on node";
pub const RESIZE_SUCCESSFUL_NOTE: &str = "Resize volume succeeded";
pub fn in_use_note(namespace: &str, claim: &str, driver: &str) -> String {
    format!(
        "Unable to expand {namespace}/{claim} because CSI driver {driver} only supports offline expansion and volume is currently in-use"
    )
}

/// The sizes and state the decision reads, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sizes<'a> {
    /// spec.resources.requests.storage (S).
    pub requested: u64,
    /// status.capacity.storage (C).
    pub capacity: u64,
    /// The PV's spec.capacity.storage (P).
    pub volume: u64,
    /// status.allocatedResources.storage (A).
    pub allocated: Option<u64>,
    /// status.allocatedResourceStatuses.storage (R).
    pub status: Option<&'a str>,
    /// A FileSystemResizePending condition is present.
    pub fs_resize_pending: bool,
}

impl<'a> Sizes<'a> {
    pub fn of(claim: &'a PersistentVolumeClaim, pv: &PersistentVolume) -> Sizes<'a> {
        let status = claim.status.as_ref();
        let bytes = |q: Option<&Quantity>| q.and_then(|q| parse_bytes(&q.0).ok());
        Sizes {
            requested: bytes(claim.requested_storage()).unwrap_or(0),
            capacity: bytes(claim.recorded_capacity()).unwrap_or(0),
            volume: pv.capacity_bytes(),
            allocated: bytes(status.and_then(|s| s.allocated_resources.as_ref()?.get("storage"))),
            status: status
                .and_then(|s| s.allocated_resource_statuses.as_ref()?.get("storage"))
                .map(String::as_str),
            fs_resize_pending: claim.condition(FS_RESIZE_PENDING).is_some(),
        }
    }
}

/// The claim is Bound to a PV of `driver` whose claimRef names it (namespace and UID).
pub fn owns(claim: &PersistentVolumeClaim, pv: &PersistentVolume, driver: &str) -> bool {
    let bound = claim.is_bound();
    let named = claim.volume_name() == pv.metadata.name.as_deref();
    // A CSI PV of the driver, or an in-tree PV of the plugin it serves through CSI migration
    // once kube-controller-manager's expander has handed the claim to the driver, as
    // csi-resizer waits for it: growing sooner races that expander's own write of the claim.
    let ours = pv.csi_driver() == Some(driver)
        || (pv.served_by() == Some(driver)
            && annotation(&claim.metadata, crate::migration::ANN_STORAGE_RESIZER) == Some(driver));
    let refers = pv.claim_ref().is_some_and(|r| {
        r.namespace == claim.metadata.namespace && r.uid == claim.metadata.uid && r.uid.is_some()
    });
    bound && named && ours && refers
}

/// What to do about the claim's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Nothing (no resize wanted, or kubelet owns the next step).
    None,
    /// Send ControllerExpandVolume (or, node-only, hand over) for this many bytes. `restart`:
    /// a new attempt (status and conditions rewritten); otherwise the same attempt again.
    Expand { bytes: u64, restart: bool },
}

/// §3.3: the size to send. `final_error`: this process saw the last attempt end with a final
/// error, so the user's new size is honoured; `controller`: the driver expands in the controller.
pub fn target(s: &Sizes<'_>, final_error: bool, controller: bool) -> Target {
    if s.requested <= s.capacity {
        return Target::None;
    }
    let allocated_or_requested = s.allocated.unwrap_or(s.requested);
    let bytes = if s.volume < s.requested {
        match s.status {
            Some(NODE_INFEASIBLE) => allocated_or_requested,
            Some(NODE_PENDING | NODE_IN_PROGRESS) => {
                if s.volume >= allocated_or_requested {
                    return Target::None;
                }
                allocated_or_requested
            }
            Some(CONTROLLER_IN_PROGRESS) if final_error => s.requested,
            Some(CONTROLLER_IN_PROGRESS) => allocated_or_requested,
            _ => s.requested,
        }
    } else {
        match s.status {
            Some(NODE_PENDING | NODE_IN_PROGRESS) => return Target::None,
            Some(NODE_INFEASIBLE) if controller && s.allocated.is_some() => allocated_or_requested,
            Some(NODE_INFEASIBLE) => s.requested,
            Some(_) => allocated_or_requested,
            None => match s.allocated {
                Some(a) => a,
                None if s.fs_resize_pending => return Target::None,
                None => s.requested,
            },
        }
    };
    Target::Expand { bytes, restart: s.allocated != Some(bytes) }
}

/// The resize conditions after a transition: `set` replaces conditions of its types; the other
/// resize conditions stay only with `keep_old`; conditions of other kinds always stay.
fn conditions(
    claim: &PersistentVolumeClaim,
    set: &[(&str, &str)],
    keep_old: bool,
    now: &str,
) -> Value {
    let keep = |c: &PersistentVolumeClaimCondition| {
        !set.iter().any(|(t, _)| *t == c.type_)
            && (keep_old || !RESIZE_CONDITIONS.contains(&c.type_.as_str()))
    };
    let added = set.iter().map(|(kind, message)| {
        let mut c = json!({"type": kind, "status": "True", "lastTransitionTime": now});
        if !message.is_empty() {
            c["message"] = json!(message);
        }
        c
    });
    conditions_with(claim, keep, added)
}

fn storage_quantity(bytes: u64) -> String {
    format_bytes(bytes)
}

/// T1: an attempt at `bytes` starts: Resizing, allocatedResources, and (on a restart)
/// ControllerResizeInProgress. Preconditioned on the claim's resourceVersion.
pub fn start(claim: &PersistentVolumeClaim, bytes: u64, restart: bool, now: &str) -> Value {
    let mut status = json!({
        "allocatedResources": {"storage": storage_quantity(bytes)},
        "conditions": conditions(claim, &[(RESIZING, "")], !restart, now),
    });
    if restart {
        status["allocatedResourceStatuses"] = json!({"storage": CONTROLLER_IN_PROGRESS});
    }
    json!({
        "metadata": {
            "resourceVersion": claim.metadata.resource_version,
            "annotations": {ANN_NODE_EXPANSION_NOT_REQUIRED: null},
        },
        "status": status,
    })
}

/// T2a/T3a: the PV's new capacity; with `annotate` (the node still has to grow the filesystem,
/// and the AnnotateFsResize gate is on), the claim's old capacity is kept in an annotation.
pub fn volume_capacity(
    pv: &PersistentVolume,
    bytes: u64,
    annotate: bool,
    old_capacity: &str,
) -> Value {
    let mut patch = json!({"spec": {"capacity": {"storage": storage_quantity(bytes)}}});
    let annotated = annotation(&pv.metadata, ANN_PRE_RESIZE_CAPACITY).is_some();
    if annotate && !annotated && !old_capacity.is_empty() {
        patch["metadata"] = json!({"annotations": {ANN_PRE_RESIZE_CAPACITY: old_capacity}});
    }
    patch
}

/// T2b: the node must grow the filesystem: FileSystemResizePending (Resizing kept),
/// NodeResizePending.
pub fn node_pending(claim: &PersistentVolumeClaim, now: &str) -> Value {
    json!({
        "metadata": {
            "resourceVersion": claim.metadata.resource_version,
            "annotations": {ANN_NODE_EXPANSION_NOT_REQUIRED: null},
        },
        "status": {
            "allocatedResourceStatuses": {"storage": NODE_PENDING},
            "conditions": conditions(
                claim,
                &[(FS_RESIZE_PENDING, "Waiting for user to (re-)start a pod to finish file system resize of volume on node.")],
                true,
                now,
            ),
        },
    })
}

/// T3b: done in the controller: capacity, no resize status or conditions, and the annotation
/// that tells kubelet not to expand on the node.
pub fn finished(claim: &PersistentVolumeClaim, bytes: u64, now: &str) -> Value {
    json!({
        "metadata": {
            "resourceVersion": claim.metadata.resource_version,
            "annotations": {ANN_NODE_EXPANSION_NOT_REQUIRED: "true"},
        },
        "status": {
            "capacity": {"storage": storage_quantity(bytes)},
            "allocatedResourceStatuses": null,
            "conditions": conditions(claim, &[], false, now),
        },
    })
}

/// T4 (`infeasible`) and T5: ControllerResizeError (Resizing kept), and for T4
/// ControllerResizeInfeasible. No resourceVersion: a failure is recorded even on a stale copy.
pub fn failed(claim: &PersistentVolumeClaim, error: &str, infeasible: bool, now: &str) -> Value {
    let message = format!("failed to expand pvc with {error}");
    let mut status = json!({
        "conditions": conditions(claim, &[(CONTROLLER_RESIZE_ERROR, &message)], true, now),
    });
    if infeasible {
        status["allocatedResourceStatuses"] = json!({"storage": CONTROLLER_INFEASIBLE});
    }
    json!({"status": status})
}

/// T13: the claim has caught up with the PV: the pre-resize capacity is no longer needed.
pub fn drop_pre_resize(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> Option<Value> {
    let annotated = annotation(&pv.metadata, ANN_PRE_RESIZE_CAPACITY).is_some();
    let s = Sizes::of(claim, pv);
    (annotated && s.capacity >= s.volume)
        .then(|| json!({"metadata": {"annotations": {ANN_PRE_RESIZE_CAPACITY: null}}}))
}

/// The CSI access mode for expansion (csi-lib-utils ToCSIAccessMode): one mode for the PV.
pub fn access_mode(modes: &[String], single_node_multi_writer: bool) -> Result<Mode, String> {
    let has = |m: &str| modes.iter().any(|x| x == m);
    if has("ReadWriteOncePod") && modes.len() > 1 {
        return Err("ReadWriteOncePod may not be combined with other access modes".into());
    }
    if has("ReadOnlyMany") && has("ReadWriteOnce") && !has("ReadWriteMany") {
        return Err("ReadOnlyMany and ReadWriteOnce together have no CSI access mode".into());
    }
    Ok(if has("ReadWriteMany") {
        Mode::MultiNodeMultiWriter
    } else if has("ReadOnlyMany") {
        Mode::MultiNodeReaderOnly
    } else if has("ReadWriteOncePod") {
        if single_node_multi_writer { Mode::SingleNodeSingleWriter } else { Mode::SingleNodeWriter }
    } else if has("ReadWriteOnce") {
        if single_node_multi_writer { Mode::SingleNodeMultiWriter } else { Mode::SingleNodeWriter }
    } else {
        return Err("the PersistentVolume has no access modes".into());
    })
}

/// The secret ControllerExpandVolume carries: the PV's `controllerExpandSecretRef`, read from
/// its CSI form for an in-tree PV (Portworx names one there).
pub fn expansion_secret(
    pv: &PersistentVolume,
) -> Option<k8s_openapi::api::core::v1::SecretReference> {
    match crate::migration::csi_form(pv)? {
        Ok(form) => form.expand_secret().cloned(),
        Err(_) => None,
    }
}

/// ControllerExpandVolume for `pv` at `bytes`; secrets are added by the caller.
pub fn request(
    pv: &PersistentVolume,
    bytes: u64,
    single_node_multi_writer: bool,
) -> Result<csi::ControllerExpandVolumeRequest, String> {
    // An in-tree PV is grown through its CSI form (handle, fsType); one that does not translate
    // is never grown by a guessed handle.
    let form = match crate::migration::csi_form(pv) {
        Some(Ok(form)) => form,
        Some(Err(e)) => return Err(e.to_string()),
        None => return Err("empty volume handle".into()),
    };
    let spec = form.spec.clone().unwrap_or_default();
    let source = spec.csi.clone().unwrap_or_default();
    if source.volume_handle.is_empty() {
        return Err("empty volume handle".into());
    }
    let mode = access_mode(&spec.access_modes.unwrap_or_default(), single_node_multi_writer)?;
    let access_type = if VolumeMode::from_field(spec.volume_mode.as_deref()) == VolumeMode::Block {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume {
            fs_type: source.fs_type.unwrap_or_default(),
            mount_flags: spec.mount_options.unwrap_or_default(),
            volume_mount_group: String::new(),
        })
    };
    Ok(csi::ControllerExpandVolumeRequest {
        volume_id: source.volume_handle,
        capacity_range: Some(csi::CapacityRange {
            required_bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
            limit_bytes: 0,
        }),
        secrets: Default::default(),
        volume_capability: Some(csi::VolumeCapability {
            access_type: Some(access_type),
            access_mode: Some(AccessMode { mode: mode as i32 }),
        }),
    })
}

/// A reply that cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "the driver reported {got} bytes after expanding to {asked}; the volume is smaller than requested"
    )]
    TooSmall { got: i64, asked: u64 },
}

/// The PV's new size from the reply. 0 means the driver did not say: the requested size is
/// recorded (upstream writes 0 and fails forever, external-resizer#226). Less than asked is
/// refused, as a final error.
pub fn answer(asked: u64, capacity_bytes: i64) -> Result<u64, AnswerError> {
    match u64::try_from(capacity_bytes) {
        Ok(0) => Ok(asked),
        Ok(got) if got >= asked => Ok(got),
        _ => Err(AnswerError::TooSmall { got: capacity_bytes, asked }),
    }
}
