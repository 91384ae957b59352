//! Changing a bound volume's VolumeAttributesClass, decided purely: external-resizer's modify
//! controller. A claim whose `spec.volumeAttributesClassName` differs from
//! `status.currentVolumeAttributesClassName` gets ControllerModifyVolume with the class's
//! parameters; `status.modifyVolumeStatus` and the `ModifyingVolume` / `ModifyVolumeError`
//! conditions say where it stands. The controller's `modify` module carries the steps out.
//!
//! | claim | step |
//! |---|---|
//! | spec = current, no modify status | nothing |
//! | spec emptied, nothing in progress | roll back: drop `ModifyingVolume`, `VolumeModifyCanceled` |
//! | in progress, last error not final (or none: the call's end was never seen) | call again with the old target |
//! | target class missing | Warning, status `Pending` |
//! | otherwise | status `InProgress` for the spec's class, `VolumeModify`, call |
//!
//! After the call: success writes the PV's class first, then the claim (current class, no
//! modify status, no modify conditions); `InvalidArgument` is `Infeasible` (retried slowly);
//! other final errors stay `InProgress`, with the user's newest class tried next; errors that
//! are not final (the driver may still be working) keep pursuing the same target.

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use serde_json::{Value, json};

use crate::csi::v1 as csi;
use crate::model::claim::conditions_with;
use crate::model::copy::ClaimCopy;
use crate::model::gate::{Gated, StepKind, gate};
use crate::model::hold::{Hold, held};
use crate::model::{ClaimExt, VolumeExt};

/// Condition: the driver is changing the volume.
pub const MODIFYING: &str = "ModifyingVolume";
/// Condition: the last ControllerModifyVolume failed; its message says how.
pub const MODIFY_ERROR: &str = "ModifyVolumeError";

/// `status.modifyVolumeStatus.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModifyStatus {
    /// A call is owed or under way.
    InProgress,
    /// The driver refused the parameters; retried slowly, in case the class is fixed.
    Infeasible,
    /// The target class does not exist (yet).
    Pending,
}

impl ModifyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ModifyStatus::InProgress => "InProgress",
            ModifyStatus::Infeasible => "Infeasible",
            ModifyStatus::Pending => "Pending",
        }
    }
}

/// gRPC codes after which the driver may still be working (csi-lib-utils' non-final errors),
/// by the names the `ModifyVolumeError` condition records.
const NOT_FINAL: [&str; 5] =
    ["Canceled", "DeadlineExceeded", "Unavailable", "ResourceExhausted", "Aborted"];

/// The next step for a bound claim.
#[derive(Debug, Clone, PartialEq)]
pub enum ModifyStep {
    None,
    /// The user took the class back while nothing was in progress. `patch`: the claim status
    /// without `ModifyingVolume` (None: there is none, nothing to write or say).
    RolledBack {
        patch: Option<Value>,
    },
    /// The class to modify to does not exist. `patch`: the status to mark `Pending` (None when
    /// an old target is being pursued: upstream leaves the status then).
    Missing {
        target: String,
        patch: Option<Value>,
    },
    /// ControllerModifyVolume with `class`'s parameters. `start`: the status patch that marks
    /// the attempt `InProgress` first (with the version it was decided on), None when the old
    /// target is pursued.
    Modify {
        class: Box<VolumeAttributesClass>,
        start: Option<Value>,
    },
}

impl ModifyStep {
    /// The step as the gate sees it. The `start` patch carries the claim's resourceVersion; the
    /// pursuit of an old target writes nothing before its call.
    pub fn kind(&self) -> StepKind {
        match self {
            ModifyStep::Modify { start, .. } => StepKind::driver_call(start.is_some()),
            ModifyStep::Missing { .. } => StepKind::HELD,
            ModifyStep::None | ModifyStep::RolledBack { .. } => StepKind::FREE,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            ModifyStep::None => "none",
            ModifyStep::RolledBack { .. } => "modify-rolled-back",
            ModifyStep::Missing { .. } => "modify-class-missing",
            ModifyStep::Modify { .. } => "modify",
        }
    }
}

fn modify_status(claim: &PersistentVolumeClaim) -> Option<(&str, &str)> {
    let s = claim.modify_status()?;
    Some((s.status.as_str(), s.target_volume_attributes_class_name.as_deref().unwrap_or_default()))
}

fn has_condition(claim: &PersistentVolumeClaim, kind: &str) -> bool {
    claim.conditions().iter().any(|c| c.type_ == kind)
}

/// The last attempt ended with an error after which the driver may still be working, or its
/// end was never seen (InProgress with no error recorded: the process stopped mid-call).
fn uncertain(claim: &PersistentVolumeClaim) -> bool {
    let error = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == MODIFY_ERROR));
    match error {
        None => true,
        Some(c) => c.reason.as_deref().is_some_and(|r| !is_final(r)),
    }
}

/// One step of a pass over a Bound claim (the `copy` it is) of `driver`'s PV, through the gate
/// (`model::gate`): held off while a failed attempt on this version of the claim waits for its
/// retry (`hold` at `clock`). `class`: a VolumeAttributesClass by name, asked only when the step
/// needs one.
pub fn decide(
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    driver: &str,
    class: impl Fn(&str) -> Option<VolumeAttributesClass>,
    now: &str,
    (hold, clock): (Option<&Hold>, std::time::Instant),
    copy: ClaimCopy,
) -> Gated<ModifyStep> {
    let step = next_step(claim, pv, driver, class, now);
    let kind = step.kind();
    gate(step, kind, held(hold, claim, clock), copy)
}

/// The step, whatever the hold of a failed attempt.
fn next_step(
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    driver: &str,
    class: impl Fn(&str) -> Option<VolumeAttributesClass>,
    now: &str,
) -> ModifyStep {
    let ours = pv.csi_driver() == Some(driver);
    let bound = claim.is_bound();
    if !ours || !bound {
        return ModifyStep::None;
    }
    let wanted = claim.wanted_attributes_class().unwrap_or_default();
    let current = claim.current_attributes_class().unwrap_or_default();
    let status = modify_status(claim);
    if status.is_none() && wanted == current {
        return ModifyStep::None;
    }
    let in_progress = status.is_some_and(|(s, _)| s == ModifyStatus::InProgress.as_str());
    if wanted.is_empty() && !in_progress {
        let patch = has_condition(claim, MODIFYING).then(|| {
            json!({
                "metadata": {"resourceVersion": claim.metadata.resource_version},
                "status": {"conditions": conditions(claim, &[MODIFYING], &[])},
            })
        });
        return ModifyStep::RolledBack { patch };
    }
    if in_progress && (uncertain(claim) || wanted.is_empty()) {
        let target = status.map(|(_, t)| t).unwrap_or_default();
        return match class(target) {
            Some(c) => ModifyStep::Modify { class: Box::new(c), start: None },
            None => ModifyStep::Missing { target: target.to_string(), patch: None },
        };
    }
    match class(wanted) {
        None => ModifyStep::Missing {
            target: wanted.to_string(),
            patch: Some(mark(claim, ModifyStatus::Pending, None, &[], now)),
        },
        Some(c) => {
            let message = format!("Modifying volume to {wanted:?} is in progress.");
            let start = mark(
                claim,
                ModifyStatus::InProgress,
                Some(wanted),
                &[(MODIFYING, "", &message)],
                now,
            );
            ModifyStep::Modify { class: Box::new(c), start: Some(start) }
        }
    }
}

/// The claim's conditions without `drop`'s types and with `set` (type, reason, message) added.
fn conditions(claim: &PersistentVolumeClaim, drop: &[&str], set: &[(&str, &str, &str)]) -> Value {
    conditions_at(claim, drop, set, "")
}

fn conditions_at(
    claim: &PersistentVolumeClaim,
    drop: &[&str],
    set: &[(&str, &str, &str)],
    now: &str,
) -> Value {
    let keep = |c: &PersistentVolumeClaimCondition| {
        !drop.contains(&c.type_.as_str()) && !set.iter().any(|(t, _, _)| *t == c.type_)
    };
    let added = set.iter().map(|(kind, reason, message)| {
        let mut c = json!({"type": kind, "status": "True", "message": message});
        if !reason.is_empty() {
            c["reason"] = json!(reason);
        }
        if !now.is_empty() {
            c["lastProbeTime"] = json!(now);
        }
        c
    });
    conditions_with(claim, keep, added)
}

/// The status patch for `state`, preconditioned on the claim's version: the target when
/// given (else the recorded one stays), and for anything but Pending the conditions `set`.
fn mark(
    claim: &PersistentVolumeClaim,
    state: ModifyStatus,
    target: Option<&str>,
    set: &[(&str, &str, &str)],
    now: &str,
) -> Value {
    let recorded = modify_status(claim).map(|(_, t)| t).unwrap_or_default();
    let target = target.unwrap_or(recorded);
    let mut status = json!({"modifyVolumeStatus": {"status": state.as_str()}});
    if !target.is_empty() {
        status["modifyVolumeStatus"]["targetVolumeAttributesClassName"] = json!(target);
    }
    if state != ModifyStatus::Pending {
        status["conditions"] = conditions_at(claim, &[MODIFY_ERROR], set, now);
    }
    json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": status,
    })
}

/// The ControllerModifyVolume request: the class's parameters (with `--extra-modify-metadata`,
/// the claim's and PV's names too). Secrets are the executor's to add.
pub fn request(
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    class: &VolumeAttributesClass,
    extra_metadata: bool,
) -> csi::ControllerModifyVolumeRequest {
    let mut parameters: HashMap<String, String> =
        class.parameters.clone().unwrap_or_default().into_iter().collect();
    if extra_metadata {
        let name = |o: &Option<String>| o.clone().unwrap_or_default();
        parameters.insert("csi.storage.k8s.io/pvc/name".into(), name(&claim.metadata.name));
        parameters
            .insert("csi.storage.k8s.io/pvc/namespace".into(), name(&claim.metadata.namespace));
        parameters.insert("csi.storage.k8s.io/pv/name".into(), name(&pv.metadata.name));
    }
    csi::ControllerModifyVolumeRequest {
        volume_id: pv.csi_handle().unwrap_or_default().to_string(),
        secrets: HashMap::new(),
        mutable_parameters: parameters,
    }
}

/// The PV patch after a successful call: its class first, so that a crash before the claim's
/// patch is found again (the claim still differs, the call is repeated, idempotently).
pub fn volume_done(target: &str) -> Value {
    json!({"spec": {"volumeAttributesClassName": target}})
}

/// The claim patch after a successful call.
pub fn claim_done(claim: &PersistentVolumeClaim, target: &str) -> Value {
    json!({"status": {
        "currentVolumeAttributesClassName": target,
        "modifyVolumeStatus": null,
        "conditions": conditions(claim, &[MODIFYING, MODIFY_ERROR], &[]),
    }})
}

/// The claim patch after a failed call with gRPC code `code` (its name as grpc-go spells it)
/// and `message`: `Infeasible` for InvalidArgument, else `InProgress`; the progress message
/// says whether the driver is done with the attempt.
pub fn failed(
    claim: &PersistentVolumeClaim,
    target: &str,
    code: &str,
    message: &str,
    now: &str,
) -> Value {
    let state = if infeasible(code) { ModifyStatus::Infeasible } else { ModifyStatus::InProgress };
    let progress = if is_final(code) {
        format!("Modifying volume to {target:?} failed. Waiting for retry.")
    } else {
        format!("Modifying volume to {target:?} is still in progress.")
    };
    let mut patch = mark(
        claim,
        state,
        Some(target),
        &[(MODIFYING, "", &progress), (MODIFY_ERROR, code, message)],
        now,
    );
    // The call's answer is the newest word on this claim, whatever its version now.
    patch["metadata"] = json!({});
    patch
}

/// Whether the driver is done with the attempt after `code` (else it may still be working).
pub fn is_final(code: &str) -> bool {
    !NOT_FINAL.contains(&code)
}

/// Whether `code` says the class cannot be applied as it is (retried slowly).
pub fn infeasible(code: &str) -> bool {
    code == "InvalidArgument"
}

/// The secret ControllerModifyVolume carries, as (namespace, name): the one the PV's
/// modify-secret annotations name, else its expansion secret (external-resizer's order).
pub fn secret_ref(pv: &PersistentVolume) -> Option<(String, String)> {
    use crate::model::names::{ANN_MODIFY_SECRET_NAME, ANN_MODIFY_SECRET_NAMESPACE, annotation};
    annotation(&pv.metadata, ANN_MODIFY_SECRET_NAME)
        .zip(annotation(&pv.metadata, ANN_MODIFY_SECRET_NAMESPACE))
        .map(|(name, namespace)| (namespace.to_string(), name.to_string()))
        .or_else(|| {
            let r = pv.expand_secret()?;
            Some((r.namespace.clone()?, r.name.clone()?))
        })
}

/// Why a claim's class cannot be applied at provisioning or modification: checked on the class.
pub fn class_error(class: &VolumeAttributesClass, driver: &str) -> Option<String> {
    (class.driver_name != driver).then(|| {
        format!(
            "VolumeAttributesClass {} is for driver {}, not {driver}",
            class.metadata.name.as_deref().unwrap_or_default(),
            class.driver_name
        )
    })
}

pub fn modifying_note(claim: &str, class: &str) -> String {
    format!("external resizer is modifying volume {claim} with vac {class}")
}

pub fn modified_note(claim: &str, class: &str) -> String {
    format!("external resizer modified volume {claim} with vac {class} successfully")
}

pub fn missing_note(class: &str) -> String {
    format!("VAC {class:?} does not exist.")
}

pub const CANCELED_NOTE: &str = "Cancelled modify.";
