//! One pass over a bound claim's size, decided purely: what was remembered of earlier attempts
//! and the time go in; the step, and after a finished call the writes and the event, come out.

use std::time::Instant;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::{
    ANN_NODE_EXPANSION_NOT_REQUIRED, Expander, FS_RESIZE_REQUIRED_NOTE, RESIZE_SUCCESSFUL_NOTE,
    RESIZING, Sizes, Target, drop_pre_resize, finished, node_pending, owns, start, target,
    volume_capacity,
};
use crate::model::ClaimExt;
use crate::model::copy::ClaimCopy;
use crate::model::gate::{Gated, StepKind, gate};
use crate::model::names::annotation;
use crate::model::reason::Reason;

/// What is remembered of a claim's resize between passes (upstream keeps the same in memory;
/// after a restart an attempt counts as uncertain until it fails again).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResizeMemory {
    /// The last attempt ended with a final error, so the user's new size is honoured.
    pub final_error: bool,
    /// The driver refused because the volume is in use (offline expansion only).
    pub in_use: bool,
    /// Passes with this requested size (bytes) wait until then: backoff, or the slow set.
    /// A new size from the user is looked at at once.
    pub wait: Option<(u64, Instant)>,
    /// The requested size last reported as impossible because the driver cannot expand.
    pub announced: Option<u64>,
}

/// How this process resizes: the settings every pass reads.
#[derive(Debug, Clone, Copy)]
pub struct Resizer<'a> {
    pub driver: &'a str,
    /// How the driver grows volumes; None: it cannot.
    pub expander: Option<Expander>,
    /// `--handle-volume-inuse-error`: after an "in use" refusal, wait until no pod uses it.
    pub handle_in_use: bool,
    /// `--feature-gates=AnnotateFsResize=true`: keep the old capacity while the node grows.
    pub annotate_fs_resize: bool,
}

/// One step of a pass over a bound claim's size. An attempt at a size that failed and whose
/// retry is not due, and a call on the store's copy with nothing to write first, are the gate's
/// (`model::gate`): `WaitForRetry` and `ConfirmLive`.
#[derive(Debug, Clone, PartialEq)]
pub enum ResizeStep {
    /// Not ours, or no resize wanted, or kubelet's turn: what was remembered goes.
    None,
    /// T13: the PV patch that drops the pre-resize capacity, once the claim caught up; then
    /// decide again on the patched PV.
    DropPreResize(Value),
    /// The driver cannot expand. `announce`: a larger size nobody was told of yet.
    CannotExpand { announce: Option<u64> },
    /// Grow the volume to `bytes`. `start` is the T1 patch; None when the claim already
    /// records this attempt (a repeat after a retry or a restart), so no write is needed.
    /// `check_in_use`: the driver refused while the volume was in use; look at the pods first.
    Expand { bytes: u64, start: Option<Value>, check_in_use: bool },
}

impl ResizeStep {
    /// The step as the gate sees it. The T1 patch that starts an attempt carries the claim's
    /// resourceVersion; an attempt the claim records already writes nothing before its call.
    pub fn kind(&self) -> StepKind {
        match self {
            ResizeStep::Expand { start, .. } => StepKind::driver_call(start.is_some()),
            _ => StepKind::FREE,
        }
    }

    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ResizeStep::None => "none",
            ResizeStep::DropPreResize(_) => "drop-pre-resize",
            ResizeStep::CannotExpand { .. } => "cannot-expand",
            ResizeStep::Expand { .. } => "expand",
        }
    }
}

/// What a finished ControllerExpandVolume (or a node-only resize) writes: the PV first, then the
/// claim (kubelet and the next pass cope with a crash between), then the event.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    pub volume: Value,
    pub claim: Value,
    pub reason: Reason,
    pub note: &'static str,
    /// When the attempt began (the Resizing condition), for the duration metric.
    pub started: Option<Time>,
}

impl Resizer<'_> {
    /// One step of a pass over `claim` (the `copy` it is), bound to `pv`, at `now`, through
    /// the gate; `timestamp` is `now` as conditions record it.
    pub fn decide(
        &self,
        (claim, copy): (&PersistentVolumeClaim, ClaimCopy),
        pv: &PersistentVolume,
        memory: &ResizeMemory,
        now: Instant,
        timestamp: &str,
    ) -> Gated<ResizeStep> {
        let step = self.next_step(claim, pv, memory, timestamp);
        let requested = Sizes::of(claim, pv).requested;
        // The resize's hold is on the size that failed: a new size is looked at at once.
        let held = memory.wait.is_some_and(|(size, until)| size == requested && now < until);
        let kind = step.kind();
        gate(step, kind, held, copy)
    }

    /// The step, whatever the hold and the copy.
    fn next_step(
        &self,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        memory: &ResizeMemory,
        timestamp: &str,
    ) -> ResizeStep {
        let Some(expander) = self.expander else {
            return ResizeStep::CannotExpand { announce: self.unannounced(claim, pv, memory) };
        };
        if !owns(claim, pv, self.driver) {
            return ResizeStep::None;
        }
        if let Some(patch) = drop_pre_resize(claim, pv) {
            return ResizeStep::DropPreResize(patch);
        }
        let sizes = Sizes::of(claim, pv);
        match target(&sizes, memory.final_error, expander == Expander::Controller) {
            Target::None => ResizeStep::None,
            Target::Expand { bytes, restart } => {
                let recorded = !restart
                    && claim.condition(RESIZING).is_some_and(|c| c.status == "True")
                    && annotation(&claim.metadata, ANN_NODE_EXPANSION_NOT_REQUIRED).is_none();
                ResizeStep::Expand {
                    bytes,
                    start: (!recorded).then(|| start(claim, bytes, restart, timestamp)),
                    check_in_use: memory.in_use && self.handle_in_use,
                }
            }
        }
    }

    /// A larger size asked of a driver that cannot expand, not yet said: said once per size, as
    /// nothing will ever happen (upstream stays silent).
    fn unannounced(
        &self,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        memory: &ResizeMemory,
    ) -> Option<u64> {
        let sizes = Sizes::of(claim, pv);
        let owed = owns(claim, pv, self.driver) && sizes.requested > sizes.capacity;
        (owed && memory.announced != Some(sizes.requested)).then_some(sizes.requested)
    }

    /// The event's text when the driver cannot expand.
    pub fn cannot_expand_note(&self) -> String {
        format!(
            "CSI driver {} cannot expand volumes (no EXPAND_VOLUME capability in its controller or node service); the claim keeps its size",
            self.driver
        )
    }

    /// The writes and event once the volume has `capacity` bytes; `node_required`: kubelet
    /// still grows the filesystem.
    pub fn after_expand(
        &self,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        capacity: u64,
        node_required: bool,
        timestamp: &str,
    ) -> Expanded {
        let old = claim.recorded_capacity().map(|q| q.0.as_str()).unwrap_or_default();
        let annotate = node_required && self.annotate_fs_resize;
        let (patch, reason, note) = if node_required {
            (
                node_pending(claim, timestamp),
                Reason::FileSystemResizeRequired,
                FS_RESIZE_REQUIRED_NOTE,
            )
        } else {
            (
                finished(claim, capacity, timestamp),
                Reason::VolumeResizeSuccessful,
                RESIZE_SUCCESSFUL_NOTE,
            )
        };
        Expanded {
            volume: volume_capacity(pv, capacity, annotate, old),
            claim: patch,
            reason,
            note,
            started: claim.condition(RESIZING).and_then(|c| c.last_transition_time.clone()),
        }
    }
}
