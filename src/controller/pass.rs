//! The words a pass is spoken in: the key it works on, where it ends, the controller's tunables
//! and the process-wide switches from the flags.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::reflector::ObjectRef;

use crate::journal::Journal;
use crate::runtime::queue::Backoff;

/// A claim's queue key: namespace and name.
pub type ClaimKey = ObjectRef<PersistentVolumeClaim>;

/// How a pass over one key ended, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing more to do until something changes.
    Done,
    /// Look again at once (the next step depends on a write just made).
    Again,
    /// Wait for the retry already scheduled (backoff in force, the input unchanged).
    Waiting,
}

/// Tunables of the controller.
#[derive(Debug, Clone)]
pub struct Options {
    pub workers: usize,
    pub backoff: Backoff,
    /// The periodic pass (`--pvclaimbinder-sync-period`).
    pub sync: Duration,
    /// Everything queued again (`--resync-period`).
    pub resync: Duration,
    /// The restore protection's sweep (`--snapshot-orphan-sweep-interval`); zero: none.
    pub snapshot_sweep: Duration,
}

/// Where the binder's part of a pass leaves the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// The pass is over.
    Done(Outcome),
    /// Provisioning decides the rest: the claim is ours to give a volume.
    Provision,
    /// The claim is bound: its size and attributes are next.
    Bound,
}

/// Process-wide switches from the flags.
#[derive(Debug, Clone)]
pub struct Switches {
    /// `--binder` (or `--bind-all`).
    pub binder: crate::binder::Binder,
    /// `--handle-volume-inuse-error`.
    pub handle_volume_inuse_error: bool,
    /// `--feature-gates`: `AnnotateFsResize` for the resize, and the GA gates switched off for
    /// what a plan may contain.
    pub gates: crate::config::feature_gates::FeatureGates,
    /// With `--binder=external`: how long an unbound claim of ours may wait for the cluster's
    /// binder to hand it over before we say the binder seems missing.
    pub handover_grace: Duration,
    /// `--intent-journal`, opened; None: intents are claim finalizers.
    pub journal: Option<Arc<Journal>>,
    /// `--workers`: ControllerExpandVolume calls at once.
    pub expansion_workers: usize,
    /// `--waiting-condition-after`: how long a claim waits before its condition says why.
    pub waiting_condition_after: Duration,
}
