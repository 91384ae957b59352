//! What to do next for one claim, decided from the claim, its class and the PV named after it.
//!
//! The life of a dynamically provisioned claim, and the action at each stage:
//!
//! | claim | PV named after it | action |
//! |---|---|---|
//! | ours, no intent finalizer, inputs valid | — | `RecordIntent` (finalizer + provisioner annotations) |
//! | intent, not deleting | absent | `Provision` (CreateVolume, record the PV, bind) |
//! | intent or unbound | bound to this claim | `Bind` (claim side of the binding, drops the intent) |
//! | intent, deleting or bound elsewhere | absent | `Abandon` (make sure no volume is left behind) |
//! | intent, deleting | bound to this claim | `DropIntent` (the PV's reclaim takes over) |

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::plan::{self, CloneSource, Features, Plan, PlanError, Settings};
use crate::names::*;

/// What the stores say about a claim's surroundings.
#[derive(Debug, Clone, Copy)]
pub struct ClaimContext<'a> {
    pub settings: &'a Settings,
    pub features: Features,
    /// The claim's StorageClass, if it exists.
    pub class: Option<&'a StorageClass>,
    /// The PV whose name is this claim's volume name, if it exists.
    pub volume: Option<&'a PersistentVolume>,
    /// An existing PV can serve the claim; the binder binds it, nothing is provisioned.
    pub served_statically: bool,
    pub clone_source: CloneSource<'a>,
}

#[derive(Debug, Clone)]
pub enum ClaimAction {
    /// Not this driver's claim, or nothing to do now.
    None,
    /// WaitForFirstConsumer: nothing until the scheduler picks a node.
    WaitForConsumer,
    /// A data source for an external populator; provisioning is left to it.
    Populator { kind: String, name: String },
    /// Cannot be provisioned as asked: warn, create nothing, keep the claim Pending.
    Reject(PlanError),
    /// Ours, and valid: make the intent durable before any CreateVolume.
    RecordIntent,
    /// Create the volume (again, idempotently), record it in a PV and bind.
    Provision(Box<Plan>),
    /// The PV exists and points at the claim: finish the claim side of the binding.
    Bind { volume: String },
    /// The intent is settled (the volume is recorded in a PV).
    DropIntent,
    /// The claim no longer wants the volume its intent may have created: find out (CreateVolume
    /// is idempotent and returns it) and delete it, or record it when the class retains volumes.
    Abandon(Box<Plan>),
    /// As Abandon, but the request cannot be rebuilt; the user must fix the input.
    CannotAbandon(PlanError),
}

impl ClaimAction {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ClaimAction::None => "none",
            ClaimAction::WaitForConsumer => "wait-for-consumer",
            ClaimAction::Populator { .. } => "populator",
            ClaimAction::Reject(_) => "reject",
            ClaimAction::RecordIntent => "record-intent",
            ClaimAction::Provision(_) => "provision",
            ClaimAction::Bind { .. } => "bind",
            ClaimAction::DropIntent => "drop-intent",
            ClaimAction::Abandon(_) => "abandon",
            ClaimAction::CannotAbandon(_) => "cannot-abandon",
        }
    }
}

/// Decides the next step for `claim`.
pub fn decide(claim: &PersistentVolumeClaim, ctx: &ClaimContext<'_>) -> ClaimAction {
    let has_intent = claim
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER_PROVISIONING));
    let deleting = claim.metadata.deletion_timestamp.is_some();
    let volume_name = plan::volume_name_for(claim, ctx.settings);
    let bound_to = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty());
    let claim_uid = claim.metadata.uid.as_deref().unwrap_or_default();
    if !is_ours(claim, ctx) {
        return ClaimAction::None;
    }
    let our_pv = ctx.volume.filter(|pv| {
        pv.metadata.name.as_deref() == Some(volume_name.as_str())
            && pv
                .spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .map(|c| c.driver.as_str())
                == Some(ctx.settings.driver.as_str())
            && pv.metadata.deletion_timestamp.is_none()
            && pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref()?.uid.as_deref())
                == Some(claim_uid)
    });

    if !has_intent {
        if deleting {
            return ClaimAction::None;
        }
        return match (bound_to, our_pv) {
            // A PV of ours points at the claim (recorded by a run that stopped before binding).
            (None, Some(_)) => ClaimAction::Bind {
                volume: volume_name,
            },
            (Some(b), Some(_)) if b == volume_name && !claim_bound(claim) => ClaimAction::Bind {
                volume: volume_name,
            },
            (Some(_), _) => ClaimAction::None,
            (None, None) => decide_new(claim, ctx),
        };
    }

    // The intent exists: a volume may exist in the driver.
    if our_pv.is_some() {
        return if deleting || bound_to.is_some_and(|b| b != volume_name) {
            ClaimAction::DropIntent
        } else {
            ClaimAction::Bind {
                volume: volume_name,
            }
        };
    }
    let abandoned = deleting || bound_to.is_some_and(|b| b != volume_name);
    let built = ctx
        .class
        .ok_or_else(|| missing_class(claim))
        .and_then(|class| plan::build(claim, class, ctx.settings, ctx.features, ctx.clone_source));
    match (abandoned, built) {
        (true, Ok(plan)) => ClaimAction::Abandon(Box::new(plan)),
        (true, Err(e)) => ClaimAction::CannotAbandon(e),
        (false, Ok(plan)) => ClaimAction::Provision(Box::new(plan)),
        (false, Err(e)) => ClaimAction::Reject(e),
    }
}

/// The claim belongs to this driver: its class names the driver, or, with the class gone, the
/// provisioner annotation does. Other drivers' claims are never touched, intent or not.
fn is_ours(claim: &PersistentVolumeClaim, ctx: &ClaimContext<'_>) -> bool {
    match ctx.class {
        Some(class) => class.provisioner == ctx.settings.driver,
        None => {
            annotation(claim, ANN_STORAGE_PROVISIONER)
                .or_else(|| annotation(claim, ANN_BETA_STORAGE_PROVISIONER))
                == Some(ctx.settings.driver.as_str())
        }
    }
}

/// A claim of ours without intent: can it be provisioned?
fn decide_new(claim: &PersistentVolumeClaim, ctx: &ClaimContext<'_>) -> ClaimAction {
    let Some(class) = ctx.class else {
        return if plan::class_name(claim).is_some_and(|c| !c.is_empty()) {
            ClaimAction::Reject(missing_class(claim))
        } else {
            ClaimAction::None
        };
    };
    if ctx.served_statically {
        return ClaimAction::None;
    }
    if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
        && selected_node(claim).is_none()
    {
        return ClaimAction::WaitForConsumer;
    }
    if let Some(source) = plan::populator_source(claim) {
        return ClaimAction::Populator {
            kind: source.kind,
            name: source.name,
        };
    }
    match plan::build(claim, class, ctx.settings, ctx.features, ctx.clone_source) {
        Ok(_) => ClaimAction::RecordIntent,
        Err(e) => ClaimAction::Reject(e),
    }
}

fn missing_class(claim: &PersistentVolumeClaim) -> PlanError {
    PlanError::MissingClass(plan::class_name(claim).unwrap_or_default().to_string())
}

fn annotation<'a>(claim: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The node the scheduler picked for a WaitForFirstConsumer claim.
pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(claim, ANN_SELECTED_NODE)
        .or_else(|| annotation(claim, ANN_ALPHA_SELECTED_NODE))
        .filter(|n| !n.is_empty())
}

/// Both halves of the claim side of a binding are written.
pub fn claim_bound(claim: &PersistentVolumeClaim) -> bool {
    annotation(claim, ANN_BIND_COMPLETED).is_some()
        && claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(PHASE_BOUND)
}

/// An Available (unclaimed, or pre-bound to this claim) PV of the claim's class that fits it:
/// the binder will bind it, so provisioning must not race it. A simplified FindMatchingVolume
/// (class, size, access modes, volume mode); the binder does the exact match.
pub fn served_statically<'a>(
    claim: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
) -> bool {
    let Some(class) = plan::class_name(claim) else {
        return false;
    };
    let spec = claim.spec.clone().unwrap_or_default();
    let Some(request) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref()?.get("storage"))
        .and_then(|q| crate::cluster::quantity::parse_bytes(&q.0).ok())
    else {
        return false;
    };
    let modes = spec.access_modes.unwrap_or_default();
    let mode = spec.volume_mode.unwrap_or_else(|| "Filesystem".into());
    let uid = claim.metadata.uid.as_deref();
    volumes.into_iter().any(|pv| {
        let Some(s) = pv.spec.as_ref() else {
            return false;
        };
        let free = match s.claim_ref.as_ref() {
            None => true,
            Some(r) => {
                r.name == claim.metadata.name
                    && r.namespace == claim.metadata.namespace
                    && (r.uid.as_deref().unwrap_or_default().is_empty() || r.uid.as_deref() == uid)
            }
        };
        let phase = pv.status.as_ref().and_then(|st| st.phase.as_deref());
        let size = s
            .capacity
            .as_ref()
            .and_then(|c| c.get("storage"))
            .and_then(|q| crate::cluster::quantity::parse_bytes(&q.0).ok())
            .unwrap_or(0);
        let pv_modes = s.access_modes.clone().unwrap_or_default();
        free && pv.metadata.deletion_timestamp.is_none()
            && matches!(phase, None | Some("Available") | Some("Pending"))
            && s.storage_class_name.as_deref().unwrap_or_default() == class
            && size >= request
            && modes.iter().all(|m| pv_modes.contains(m))
            && s.volume_mode.as_deref().unwrap_or("Filesystem") == mode
    })
}
