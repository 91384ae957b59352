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
//!
//! Beside kube-controller-manager's binder (`binds` false) a claim is ours to provision only
//! once that binder has handed it to the driver (`volume.kubernetes.io/storage-provisioner`),
//! which it does only when no existing PV matches. Once the PV we made is the one its matching
//! must take for the claim, and no other PV is pre-bound to it (`binder_takes_ours`), `Bind`
//! writes the binding exactly as that binder would, so that it finds the pair complete and
//! writes nothing (docs/binder.md §5). Otherwise the binder binds, and `Bind` only drops our
//! intent once the claim is Bound.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::plan::PlanFacts;
use super::plan::{self, Features, Plan, PlanError, Settings};
use super::snapshot::{self, Snapshot, SnapshotLookup};
use super::source::{self, Source};
use crate::model::copy::ClaimCopy;
use crate::model::gate::{Gated, StepKind, gate};
use crate::model::hold::{Hold, held};
use crate::model::names::*;
use crate::model::{ClaimExt, ClassExt, VolumeExt};

/// What the stores say about a claim's surroundings.
#[derive(Debug, Clone, Copy)]
pub struct ClaimContext<'a> {
    pub settings: &'a Settings,
    pub features: Features,
    /// The claim's StorageClass, if it exists.
    pub class: Option<&'a StorageClass>,
    /// The PV whose name is this claim's volume name, if it exists.
    pub volume: Option<&'a PersistentVolume>,
    /// The data source's claim and PV (a clone) or snapshot (a restore), the attributes class.
    pub facts: PlanFacts<'a>,
    /// This process binds (`--binder` driver or all); false beside kube-controller-manager's.
    pub binds: bool,
    /// The claim's intent is in the intent journal (`--intent-journal`) rather than a finalizer.
    pub journaled: bool,
    /// Beside the cluster's binder: its matching takes the PV named after the claim, and no
    /// other PV is pre-bound to the claim (`VolumeIndex::takes_only`).
    pub binder_takes_ours: bool,
    /// Where the pass's copy of the claim comes from.
    pub copy: ClaimCopy,
    /// The hold of the claim's last failed attempt, if any, and the time now.
    pub hold: Option<&'a Hold>,
    pub now: std::time::Instant,
}

#[derive(Debug, Clone)]
pub enum ClaimAction {
    /// Not this driver's claim, or nothing to do now.
    None,
    /// WaitForFirstConsumer: nothing until the scheduler picks a node.
    WaitForConsumer,
    /// A data source for an external populator; provisioning is left to it.
    Populator { group: String, kind: String, name: String },
    /// The claim clones another claim, which must carry the cloning-protection finalizer
    /// before any CreateVolume copies it (namespace, name).
    ProtectSource { namespace: String, name: String },
    /// The claim restores a VolumeSnapshot that must carry our restore protection before any
    /// CreateVolume reads it.
    ProtectSnapshot(Box<Snapshot>),
    /// A claim with no intent on its way out: the protection it may have put on its snapshot
    /// goes once no other claim needs it.
    ReleaseSnapshot,
    /// Cannot be provisioned as asked: warn, create nothing, keep the claim Pending.
    Reject(PlanError),
    /// Ours, and valid: make the intent durable before any CreateVolume (once the plan's
    /// secret is known to exist: a claim that cannot be provisioned gets no intent).
    RecordIntent(Box<Plan>),
    /// Create the volume (again, idempotently), record it in a PV and bind.
    Provision(Box<Plan>),
    /// The PV exists and points at the claim: write the binding (beside kube-controller-manager's
    /// binder only when `completes_binding`). `drop_intent`: beside that binder, the intent goes
    /// right after (a finalizer rides on the binding's claim write, a journal entry is removed);
    /// when we bind, the next pass finds the claim Bound and drops what is left.
    Bind { volume: String, drop_intent: bool },
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
            ClaimAction::ProtectSource { .. } => "protect-source",
            ClaimAction::ProtectSnapshot(_) => "protect-snapshot",
            ClaimAction::ReleaseSnapshot => "release-snapshot",
            ClaimAction::Reject(_) => "reject",
            ClaimAction::RecordIntent(_) => "record-intent",
            ClaimAction::Provision(_) => "provision",
            ClaimAction::Bind { .. } => "bind",
            ClaimAction::DropIntent => "drop-intent",
            ClaimAction::Abandon(_) => "abandon",
            ClaimAction::CannotAbandon(_) => "cannot-abandon",
        }
    }
}

/// Decides the next step for `claim`, through the gate (`model::gate`): an attempt that failed
/// on this version of the claim (a refusal, CreateVolume, its undo) is not made again before
/// its retry is due, and a driver call goes only on a live copy.
pub fn decide(claim: &PersistentVolumeClaim, ctx: &ClaimContext<'_>) -> Gated<ClaimAction> {
    let action = next_step(claim, ctx);
    let kind = action.kind();
    gate(action, kind, held(ctx.hold, claim, ctx.now), ctx.copy)
}

impl Gated<ClaimAction> {
    /// A short name for logs: the gate's word, or the action's.
    pub fn name(&self) -> &'static str {
        match self {
            Gated::Go(action) => action.name(),
            Gated::WaitForRetry => "wait-for-retry",
            Gated::ConfirmLive => "confirm-live",
        }
    }
}

impl ClaimAction {
    /// The step as the gate sees it.
    pub fn kind(&self) -> StepKind {
        match self {
            // A refusal, or the intent of a claim refused on this version (its secret was
            // missing): held, so that a held claim's pass reads not even the secret.
            ClaimAction::Reject(_)
            | ClaimAction::CannotAbandon(_)
            | ClaimAction::RecordIntent(_) => StepKind::HELD,
            // CreateVolume, or the idempotent CreateVolume that finds what an undo deletes.
            ClaimAction::Provision(_) | ClaimAction::Abandon(_) => StepKind::driver_call(false),
            _ => StepKind::FREE,
        }
    }
}

/// The next step, whatever the hold of a failed attempt.
fn next_step(claim: &PersistentVolumeClaim, ctx: &ClaimContext<'_>) -> ClaimAction {
    let finalizer = claim.has_intent();
    let has_intent = finalizer || ctx.journaled;
    let deleting = ctx.copy.deleting(claim);
    let volume_name = ctx.settings.naming.for_claim(claim);
    let bound_to = claim.named_volume();
    let claim_uid = claim.metadata.uid.as_deref().unwrap_or_default();
    if !ours_to_provision(claim, ctx.class, &ctx.settings.driver) {
        return ClaimAction::None;
    }
    let our_pv = ctx.volume.filter(|pv| {
        pv.metadata.name.as_deref() == Some(volume_name.as_str())
            && pv.served_by() == Some(ctx.settings.driver.as_str())
            && pv.metadata.deletion_timestamp.is_none()
            && pv.claim_ref_uid() == Some(claim_uid)
    });

    let completes = !ctx.binds
        && our_pv.is_some()
        && completes_binding(claim, &ctx.settings.driver, ctx.binder_takes_ours);
    if !has_intent {
        let held = matches!(ctx.facts.snapshot, Some(SnapshotLookup::Found(s)) if s.held);
        if deleting {
            return if held { ClaimAction::ReleaseSnapshot } else { ClaimAction::None };
        }
        // A restore done and bound, its snapshot still protected: the pass that bound it ended
        // before the release (a conflict on the binding's last write, with the cluster's binder
        // writing the same). The protection goes now rather than at the sweep.
        if held && our_pv.is_some() && bound_to == Some(volume_name.as_str()) && claim_bound(claim)
        {
            return ClaimAction::ReleaseSnapshot;
        }
        return match (bound_to, our_pv) {
            // The volume is recorded (a journal entry went with it), the binding is not written.
            (None, Some(_)) if completes => {
                ClaimAction::Bind { volume: volume_name, drop_intent: true }
            }
            // Bound by kube-controller-manager's binder, or not yet: either way not ours to do.
            (_, Some(_)) if !ctx.binds => ClaimAction::None,
            (None, None) if !ctx.binds && !claim.handed_to(&ctx.settings.driver) => {
                ClaimAction::None
            }
            // A PV of ours points at the claim (recorded by a run that stopped before binding).
            (None, Some(_)) => ClaimAction::Bind { volume: volume_name, drop_intent: false },
            (Some(b), Some(_)) if b == volume_name && !claim_bound(claim) => {
                ClaimAction::Bind { volume: volume_name, drop_intent: false }
            }
            (Some(_), _) => ClaimAction::None,
            (None, None) => decide_new(claim, ctx),
        };
    }

    // The intent exists: a volume may exist in the driver.
    if our_pv.is_some() {
        return if deleting || bound_to.is_some_and(|b| b != volume_name) {
            ClaimAction::DropIntent
        } else if completes {
            // The binding's claim write takes the finalizer with it; the journal entry goes after.
            ClaimAction::Bind { volume: volume_name, drop_intent: true }
        } else if !ctx.binds && !finalizer {
            // A journal entry goes at once: no claim write to conflict with the binder's.
            ClaimAction::DropIntent
        } else if !ctx.binds && !claim_bound(claim) {
            // The cluster's binder is binding it; our claim write then would conflict with
            // its own. The intent goes once the claim is Bound.
            ClaimAction::None
        } else if !ctx.binds {
            // The cluster's binder bound it: the finalizer goes.
            ClaimAction::DropIntent
        } else {
            ClaimAction::Bind { volume: volume_name, drop_intent: false }
        };
    }
    let abandoned = deleting || bound_to.is_some_and(|b| b != volume_name);
    // The scheduler took its node choice back: wait for the next one rather than create a
    // volume with no placement.
    let delayed = ctx.class.is_some_and(ClassExt::waits_for_consumer);
    if !abandoned && delayed && selected_node(claim).is_none() {
        return ClaimAction::WaitForConsumer;
    }
    // The intent is there: a copy of a clone source may be under way.
    let facts = PlanFacts { in_flight: true, probe: abandoned, ..ctx.facts };
    let built = ctx
        .class
        .ok_or_else(|| missing_class(claim))
        .and_then(|class| plan::build(claim, class, ctx.settings, ctx.features, facts));
    // A CreateVolume that reads a source needs it protected first; a probe that leaves out a
    // source it cannot read reads nothing.
    let reads_source = built.as_ref().is_ok_and(|p| p.request.volume_content_source.is_some());
    // A CreateVolume may copy the source claim: it must not go before the copy is made.
    if reads_source && let Some(unprotected) = source::unprotected_clone_source(&facts) {
        return ClaimAction::ProtectSource {
            namespace: unprotected.metadata.namespace.clone().unwrap_or_default(),
            name: unprotected.metadata.name.clone().unwrap_or_default(),
        };
    }
    if reads_source && let Some(snapshot) = snapshot::unprotected(&facts) {
        return ClaimAction::ProtectSnapshot(Box::new(snapshot));
    }
    match (abandoned, built) {
        (true, Ok(plan)) => ClaimAction::Abandon(Box::new(plan)),
        (true, Err(e)) => ClaimAction::CannotAbandon(e),
        (false, Ok(plan)) => ClaimAction::Provision(Box::new(plan)),
        (false, Err(e)) => ClaimAction::Reject(e),
    }
}

/// Beside the cluster's binder, whether we write the binding of the claim and the PV we made
/// for it: the binder handed the claim to our driver, the claim names no volume, it is not
/// being deleted, and the binder's matching can take only our PV (`binder_takes_ours`). The
/// binder's own pass then finds the pair bound and writes nothing; were it to bind at the same
/// instant, both write the same pair and one write meets a conflict.
pub fn completes_binding(
    claim: &PersistentVolumeClaim,
    driver: &str,
    binder_takes_ours: bool,
) -> bool {
    binder_takes_ours
        && claim.named_volume().is_none()
        && claim.handed_to(driver)
        && claim.metadata.deletion_timestamp.is_none()
}

/// Whether `driver` makes the claim's volume. Which claims a pass looks at at all is
/// `binder::Scope::has_claim` (a claim of the driver's class, handed to it, carrying our intent
/// or naming its PV; with `--binder=all`, every claim); this adds what provisioning needs: the
/// claim's class names the driver, or, with the class gone, the hand-over annotation does.
/// Other drivers' claims are never provisioned, intent or not. The binder's pass asks the same
/// before it hands a claim to provisioning.
pub fn ours_to_provision(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    driver: &str,
) -> bool {
    match class {
        Some(class) => class.served_by(driver),
        None => claim.handed_to(driver),
    }
}

/// What a claim pass does beside kube-controller-manager's binder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handover {
    /// Nothing: the binder has not handed the claim to us, or is binding it.
    None,
    /// Handed to our driver, or carrying our intent: provisioning decides the rest.
    Provision,
    /// Bound: its size and attributes are next.
    Bound,
}

/// The claim pass beside kube-controller-manager's binder. `journaled`: its intent is in the
/// intent journal.
pub fn handover(claim: &PersistentVolumeClaim, driver: &str, journaled: bool) -> Handover {
    let volume = claim.named_volume();
    if claim.has_intent() || journaled {
        Handover::Provision
    } else if volume.is_some() {
        if claim_bound(claim) { Handover::Bound } else { Handover::None }
    } else if claim.handed_to(driver) {
        Handover::Provision
    } else {
        Handover::None
    }
}

/// An unbound claim of the driver's class that no binder has handed over within `grace` of its
/// creation (`age`): with `--binder=external` that is the cluster's binder missing, as the binder
/// hands a claim over at once when no PV matches. WaitForFirstConsumer claims wait for the
/// scheduler first, and are not counted until it chose a node.
pub fn awaits_handover(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    driver: &str,
    age: std::time::Duration,
    grace: std::time::Duration,
) -> bool {
    let Some(class) = class.filter(|c| c.served_by(driver)) else {
        return false;
    };
    let unbound = claim.named_volume().is_none();
    let waits_for_node = class.waits_for_consumer() && selected_node(claim).is_none();
    age >= grace
        && unbound
        && !waits_for_node
        && !claim.handed_to(driver)
        && !claim.has_intent()
        && claim.metadata.deletion_timestamp.is_none()
}

/// An unbound claim of the driver's WaitForFirstConsumer class for which the scheduler has
/// chosen no node yet: what it is told.
pub fn awaits_consumer(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    driver: &str,
) -> Option<&'static str> {
    class.filter(|c| c.served_by(driver) && c.waits_for_consumer())?;
    let waits = claim.named_volume().is_none()
        && selected_node(claim).is_none()
        && claim.metadata.deletion_timestamp.is_none();
    waits.then_some(CONSUMER_NOTE)
}

/// What a claim waiting for its first consumer is told.
pub const CONSUMER_NOTE: &str = "waiting for a pod that uses the claim to be scheduled (volumeBindingMode WaitForFirstConsumer)";

/// What a claim that `awaits_handover` is told.
pub fn handover_missing_note(driver: &str, age: std::time::Duration) -> String {
    format!(
        "no PersistentVolume binder has handed this claim to {driver} in {}s: kube-controller-manager's persistentvolume-binder-controller does so at once when no PersistentVolume matches (annotation volume.kubernetes.io/storage-provisioner). If this cluster runs without that controller, start csi-pv-controller with --binder=driver or --bind-all",
        age.as_secs()
    )
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
    if class.waits_for_consumer() && selected_node(claim).is_none() {
        return ClaimAction::WaitForConsumer;
    }
    if let Source::Populator { group, kind, name } = source::of(claim) {
        return ClaimAction::Populator { group, kind, name };
    }
    match plan::build(claim, class, ctx.settings, ctx.features, ctx.facts) {
        // Protected before the intent: were we killed between the two, the sweep takes an
        // unneeded protection off, whereas an intent whose snapshot went while we were down
        // could not be undone.
        Ok(plan) => match snapshot::unprotected(&ctx.facts) {
            Some(snapshot) => ClaimAction::ProtectSnapshot(Box::new(snapshot)),
            None => ClaimAction::RecordIntent(Box::new(plan)),
        },
        Err(e) => ClaimAction::Reject(e),
    }
}

fn missing_class(claim: &PersistentVolumeClaim) -> PlanError {
    PlanError::MissingClass(plan::class_name(claim).unwrap_or_default().to_string())
}

/// The node the scheduler picked for a WaitForFirstConsumer claim.
pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(&claim.metadata, ANN_SELECTED_NODE)
        .or_else(|| annotation(&claim.metadata, ANN_ALPHA_SELECTED_NODE))
        .filter(|n| !n.is_empty())
}

/// Both halves of the claim side of a binding are written.
pub fn claim_bound(claim: &PersistentVolumeClaim) -> bool {
    annotation(&claim.metadata, ANN_BIND_COMPLETED).is_some() && claim.is_bound()
}

#[cfg(test)]
mod tests;
