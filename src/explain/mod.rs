//! `explain`: where a claim stands and what the next pass would do with it, from the same pure
//! decisions the controller runs (the binder's, provisioning's, the resize's and the modify's),
//! read from the live objects. What only the running controller learns (a secret it could not
//! read, a driver's error) is read back from the claim's waiting condition
//! (`provision::waiting`), which the controller writes.
//!
//! Pure: the `explain` subcommand gathers the objects and prints what this module says.

pub mod binder;

use std::fmt::Write;
use std::time::Instant;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttributesClass;

use crate::binder::claim::{ClaimStep, ClaimView};
use crate::expand::{self, ResizeMemory, ResizeStep, Resizer};
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;
use crate::model::{ClaimExt, ClaimPhase, VolumeExt};
use crate::modify::{self, ModifyStep};
use crate::provision::claim::{self as provisioning, ClaimAction, ClaimContext};
use crate::provision::waiting::{self, Cause};

/// Everything the decisions read about one claim.
pub struct Facts<'a> {
    pub claim: &'a PersistentVolumeClaim,
    /// The binder's view: class, default class, the PVs.
    pub binder: ClaimView<'a>,
    /// Provisioning's view; its `settings.driver` is the claim's driver.
    pub provisioning: ClaimContext<'a>,
    /// The PV the claim names, if it exists.
    pub volume: Option<&'a PersistentVolume>,
    /// How the driver grows volumes (its capabilities).
    pub resizer: Resizer<'a>,
    /// VolumeAttributesClasses by name.
    pub attributes_class: &'a dyn Fn(&str) -> Option<VolumeAttributesClass>,
    /// The time now, as conditions record it.
    pub now: &'a str,
    /// The monotonic clock now, as the resize decision reads it.
    pub clock: Instant,
}

/// One claim in one line: `state`, why (a condition reason or a short word), what is next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub state: &'static str,
    pub reason: String,
    pub next: String,
}

impl Line {
    /// A claim that needs nothing: Bound, its size and class as asked.
    pub fn settled(&self) -> bool {
        self.state == "Bound"
    }
}

/// Where the claim stands and what is next.
pub fn line(facts: &Facts<'_>) -> Line {
    let claim = facts.claim;
    if claim.metadata.deletion_timestamp.is_some() {
        let next = provisioning_next(facts).1;
        return Line { state: "Deleting", reason: "-".into(), next };
    }
    match claim.phase() {
        Some(ClaimPhase::Lost) => Line {
            state: "Lost",
            reason: "ClaimLost".into(),
            next: "nothing: its PersistentVolume is gone; delete the claim or recreate the PV"
                .into(),
        },
        Some(ClaimPhase::Bound) => bound_line(facts),
        _ => pending_line(facts),
    }
}

/// A claim not Bound: the live cause when the decisions show one, else the cause the
/// controller recorded, else what is next. The binder decides first (a PV may match, or nothing
/// may provision the claim); provisioning once the binder would provision, or the claim
/// carries our intent.
fn pending_line(facts: &Facts<'_>) -> Line {
    let (live, next) = pending_next(facts);
    let recorded = waiting::recorded(facts.claim);
    let reason = match (&live, recorded) {
        (Some(live), _) => live.clone(),
        (None, Some((reason, _))) => reason.to_string(),
        (None, None) => "-".to_string(),
    };
    let next = match (&live, recorded) {
        (None, Some((_, message))) => format!("{next}; last said: {message}"),
        _ => next,
    };
    Line { state: "Pending", reason, next }
}

/// The reason the decisions show for a claim not Bound, if any, and the next step in words.
fn pending_next(facts: &Facts<'_>) -> (Option<String>, String) {
    let claim = facts.claim;
    let from_provisioning = || {
        let (cause, next) = provisioning_next(facts);
        (cause.map(|c| c.reason().to_string()), next)
    };
    if claim.has_intent() {
        return from_provisioning();
    }
    match crate::binder::claim::decide(claim, &facts.binder) {
        ClaimStep::Provision { .. } => from_provisioning(),
        ClaimStep::WaitForConsumer => (
            Some(Cause::WaitForFirstConsumer.reason().to_string()),
            provisioning::CONSUMER_NOTE.into(),
        ),
        ClaimStep::Bind(pv) => (
            None,
            format!(
                "the binder binds it to PersistentVolume {}",
                pv.metadata.name.as_deref().unwrap_or_default()
            ),
        ),
        ClaimStep::Pending(Some(n)) | ClaimStep::CannotProvision(n) | ClaimStep::Refuse(n, _) => {
            (Some(n.reason.as_str().to_string()), n.message)
        }
        ClaimStep::Pending(None) => {
            (None, "the PersistentVolume it names does not exist (yet)".into())
        }
        ClaimStep::AssignDefaultClass(class) => {
            (None, format!("the binder gives it the default StorageClass {class:?}"))
        }
        ClaimStep::Fail(e) => (Some("FailedBinding".into()), e),
        ClaimStep::Lost(n) => (Some(n.reason.as_str().to_string()), n.message),
        ClaimStep::None => from_provisioning(),
    }
}

/// The cause provisioning's decision shows, if any, and the next step in words.
fn provisioning_next(facts: &Facts<'_>) -> (Option<Cause>, String) {
    let claim = facts.claim;
    let ctx = &facts.provisioning;
    let driver = ctx.settings.driver.as_str();
    let handed = claim.handed_to(driver) || claim.has_intent();
    if !handed && let Some(note) = provisioning::awaits_consumer(claim, ctx.class, driver) {
        // Beside the cluster's binder the claim is handed over only once a node is chosen.
        return (Some(Cause::WaitForFirstConsumer), note.into());
    }
    // Explained on a live copy: the gate's only stop is a hold.
    let action = match provisioning::decide(claim, ctx) {
        Gated::Go(action) => action,
        Gated::WaitForRetry => {
            return (None, "retry the failed attempt when its backoff ends".into());
        }
        Gated::ConfirmLive => return (None, "read the claim again, then decide".into()),
    };
    match action {
        ClaimAction::None if !ctx.binds && !handed && claim.named_volume().is_none() => (
            Some(Cause::WaitingForBinder),
            format!(
                "kube-controller-manager's binder hands the claim to {driver} once no PersistentVolume matches it"
            ),
        ),
        ClaimAction::None if claim.is_bound() && claim.named_volume().is_some() => (
            None,
            format!(
                "nothing: bound to PersistentVolume {}",
                claim.named_volume().unwrap_or_default()
            ),
        ),
        ClaimAction::None if claim.named_volume().is_some() => (
            None,
            format!(
                "the binder completes the binding to PersistentVolume {}",
                claim.named_volume().unwrap_or_default()
            ),
        ),
        ClaimAction::None => (None, "nothing for provisioning to do".into()),
        ClaimAction::WaitForConsumer => {
            (Some(Cause::WaitForFirstConsumer), provisioning::CONSUMER_NOTE.into())
        }
        ClaimAction::Populator { kind, name, .. } => (
            Some(Cause::WaitingForPopulator),
            format!("the volume populator of {kind} {name:?} fills it"),
        ),
        ClaimAction::ProtectSource { name, .. } => {
            (None, format!("protect the clone source {name:?}, then provision"))
        }
        ClaimAction::ProtectSnapshot(_) => {
            (None, "protect the VolumeSnapshot it restores, then provision".into())
        }
        ClaimAction::ReleaseSnapshot => (None, "release its VolumeSnapshot's protection".into()),
        ClaimAction::Reject(e) => (Some(Cause::of_plan(&e)), format!("refused: {e}")),
        ClaimAction::RecordIntent(plan) => {
            let secret = plan
                .provisioner_secret
                .as_ref()
                .map(|s| format!(" (after reading Secret {}/{})", s.namespace, s.name))
                .unwrap_or_default();
            (None, format!("record the intent, then CreateVolume {}{secret}", plan.volume_name))
        }
        ClaimAction::Provision(_) => {
            (None, format!("CreateVolume {}", ctx.settings.naming.for_claim(claim)))
        }
        ClaimAction::Bind { volume, .. } => {
            (None, format!("complete the binding to PersistentVolume {volume}"))
        }
        ClaimAction::DropIntent => {
            (None, "drop the intent: its volume is recorded in a PersistentVolume".into())
        }
        ClaimAction::Abandon(plan) => (
            None,
            format!("delete volume {} (if made): the claim no longer needs it", plan.volume_name),
        ),
        ClaimAction::CannotAbandon(e) => {
            (None, format!("cannot check for the volume the claim no longer needs: {e}"))
        }
    }
}

/// A Bound claim: settled, or its resize or attributes change under way or in trouble.
fn bound_line(facts: &Facts<'_>) -> Line {
    let claim = facts.claim;
    let Some(pv) = facts.volume else {
        return Line {
            state: "Bound",
            reason: "-".into(),
            next: "its PersistentVolume is not found; the binder looks again".into(),
        };
    };
    let memory = ResizeMemory::default();
    let resize =
        facts.resizer.decide((claim, ClaimCopy::Live), pv, &memory, facts.clock, facts.now);
    let resize_error = claim.condition(expand::CONTROLLER_RESIZE_ERROR);
    let node_error = claim.condition(expand::NODE_RESIZE_ERROR);
    let resize_line = match (&resize, resize_error.or(node_error)) {
        (_, Some(c)) => Some(Line {
            state: "ResizeFailed",
            reason: c.type_.clone(),
            next: format!("{}; {}", c.message.as_deref().unwrap_or_default(), resize_next(&resize)),
        }),
        (Gated::Go(ResizeStep::Expand { .. }) | Gated::WaitForRetry, None) => {
            Some(Line { state: "Resizing", reason: "-".into(), next: resize_next(&resize) })
        }
        (Gated::Go(ResizeStep::CannotExpand { .. }), None) if wants_more(claim) => Some(Line {
            state: "ResizeFailed",
            reason: "ExpansionUnsupported".into(),
            next: resize_next(&resize),
        }),
        _ if claim.condition(expand::FS_RESIZE_PENDING).is_some() => Some(Line {
            state: "Resizing",
            reason: expand::FS_RESIZE_PENDING.into(),
            next: "kubelet grows the file system when a pod mounts the volume".into(),
        }),
        _ => None,
    };
    if let Some(line) = resize_line {
        return line;
    }
    let driver = facts.provisioning.settings.driver.as_str();
    if waits_for_expander(claim, pv, driver) {
        return Line {
            state: "Resizing",
            reason: "WaitingForExpander".into(),
            next: format!(
                "kube-controller-manager's expander names {driver} in {} (CSI migration), then ControllerExpandVolume",
                crate::migration::ANN_STORAGE_RESIZER
            ),
        };
    }
    let step = modify::decide(
        claim,
        pv,
        driver,
        facts.attributes_class,
        facts.now,
        (None, facts.clock),
        ClaimCopy::Live,
    );
    let status = claim.modify_status().map(|s| s.status.clone()).unwrap_or_default();
    let error = claim.condition(modify::MODIFY_ERROR);
    match (&step, error) {
        (Gated::Go(ModifyStep::None), _) if status.is_empty() => {
            Line { state: "Bound", reason: "-".into(), next: "nothing".into() }
        }
        (_, Some(c)) => Line {
            state: "ModifyFailed",
            reason: c.reason.clone().unwrap_or_else(|| c.type_.clone()),
            next: format!("{}; {}", c.message.as_deref().unwrap_or_default(), modify_next(&step)),
        },
        (_, None) => Line {
            state: "Modifying",
            reason: if status.is_empty() { "-".into() } else { status },
            next: modify_next(&step),
        },
    }
}

/// An in-tree PV's growth waits for kube-controller-manager's expander to hand it to `driver`
/// (as csi-resizer waits).
pub fn waits_for_expander(
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    driver: &str,
) -> bool {
    let handed = crate::model::annotation(&claim.metadata, crate::migration::ANN_STORAGE_RESIZER);
    wants_more(claim)
        && pv.csi_driver().is_none()
        && pv.served_by() == Some(driver)
        && handed != Some(driver)
}

/// The claim asks for more than it records.
fn wants_more(claim: &PersistentVolumeClaim) -> bool {
    let bytes = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| crate::model::quantity::parse_bytes(&q.0).ok())
    };
    matches!(
        (bytes(claim.requested_storage()), bytes(claim.recorded_capacity())),
        (Some(asked), Some(had)) if asked > had
    )
}

fn resize_next(step: &Gated<ResizeStep>) -> String {
    let step = match step {
        Gated::Go(step) => step,
        Gated::WaitForRetry => return "wait out the failed size's backoff, then try again".into(),
        Gated::ConfirmLive => return "read the claim again, then decide".into(),
    };
    match step {
        ResizeStep::None => "nothing to grow".into(),
        ResizeStep::DropPreResize(_) => {
            "drop the pre-resize capacity the PersistentVolume keeps, then decide".into()
        }
        ResizeStep::CannotExpand { .. } => {
            "nothing: the driver cannot expand volumes (no EXPAND_VOLUME capability)".into()
        }
        ResizeStep::Expand { bytes, .. } => format!("ControllerExpandVolume to {bytes} bytes"),
    }
}

fn modify_next(step: &Gated<ModifyStep>) -> String {
    let step = match step {
        Gated::Go(step) => step,
        Gated::WaitForRetry => return "retry the failed modification when its backoff ends".into(),
        Gated::ConfirmLive => return "read the claim again, then decide".into(),
    };
    match step {
        ModifyStep::None => "nothing".into(),
        ModifyStep::RolledBack { .. } => "clear the change the user took back".into(),
        ModifyStep::Missing { target, .. } => {
            format!("wait for VolumeAttributesClass {target:?} to exist")
        }
        ModifyStep::Modify { class, .. } => format!(
            "ControllerModifyVolume to VolumeAttributesClass {:?}",
            class.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// The full report: the line, the binder's decision and its PV verdicts, provisioning's next
/// step, and the waiting condition as recorded.
pub fn report(facts: &Facts<'_>) -> String {
    let line = line(facts);
    let mut out = crate::explain::binder::explain(facts.claim, &facts.binder);
    let _ = writeln!(out, "state: {} ({})", line.state, line.reason);
    let _ = writeln!(out, "next: {}", line.next);
    let (_, provisioning) = provisioning_next(facts);
    let _ = writeln!(out, "provisioning ({}): {provisioning}", facts.provisioning.settings.driver);
    if let Some(migration) = migration(facts) {
        let _ = writeln!(out, "migration: {migration}");
    }
    match waiting::recorded(facts.claim) {
        Some((reason, message)) => {
            let _ = writeln!(out, "condition {}: {reason}: {message}", waiting::CONDITION);
        }
        None => {
            let _ = writeln!(out, "condition {}: none", waiting::CONDITION);
        }
    }
    out
}

/// Whether the claim is served through CSI migration: its class or its PV names an in-tree
/// plugin, and which CSI driver takes that plugin's volumes.
pub fn migration(facts: &Facts<'_>) -> Option<String> {
    use crate::migration::Plugin;
    let driver = facts.provisioning.settings.driver.as_str();
    let from_class = facts
        .binder
        .class
        .and_then(|c| Some((Plugin::by_in_tree_name(&c.provisioner)?, "StorageClass")));
    let from_volume =
        facts.volume.and_then(|pv| Some((Plugin::of_volume(pv)?, "PersistentVolume")));
    let (plugin, by) = from_volume.or(from_class)?;
    let whose = if plugin.csi_driver() == driver { "this driver" } else { "not this driver" };
    Some(format!(
        "migrated: its {by} is of in-tree plugin {}, whose volumes CSI driver {} serves ({whose})",
        plugin.in_tree_name(),
        plugin.csi_driver()
    ))
}

/// `explain --all`'s line for a claim.
pub fn one_line(facts: &Facts<'_>) -> String {
    let line = line(facts);
    format!("{:<40} {:<12} {:<24} {}", facts.claim.key(), line.state, line.reason, line.next)
}

#[cfg(test)]
mod tests;
