//! What the binder does with a claim: syncUnboundClaim and syncBoundClaim, row by row
//! (docs/binder.md §3.2 and §3.3). Provisioning itself is `provision`'s; here a claim is
//! only handed over to it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::index::VolumeIndex;
use super::matching::{ClaimFacts, MatchError, check_volume_satisfies_claim, delay_binding};
use crate::model::names::*;
use crate::model::reason::Reason;
use crate::model::{ClaimExt, PodExt, VolumeExt};

/// An event the binder emits, with upstream's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: Reason,
    pub message: String,
}

impl Notice {
    fn normal(reason: Reason, message: impl Into<String>) -> Self {
        Notice { warning: false, reason, message: message.into() }
    }
    fn warning(reason: Reason, message: impl Into<String>) -> Self {
        Notice { warning: true, reason, message: message.into() }
    }
}

#[derive(Debug, Clone)]
pub enum ClaimStep {
    /// Nothing to do.
    None,
    /// Bind the claim and the PV (each of the four writes skipped when already done).
    Bind(Arc<PersistentVolume>),
    /// Claim status Pending with no volume; the event, if any, is emitted on every pass.
    Pending(Option<Notice>),
    /// WaitForFirstConsumer and no node chosen: Pending, with an event that names the pods
    /// waiting to be scheduled, if any (`wait_notice`).
    WaitForConsumer,
    /// Claim status Lost, with the event, unless it is Lost already.
    Lost(Notice),
    /// Give a claim with no class the default class, and stop there.
    AssignDefaultClass(String),
    /// No PV matches and the claim has a class: dynamic provisioning by `provisioner`.
    Provision { provisioner: String },
    /// Nothing can provision the claim: its class does not exist, or names an in-tree plugin
    /// (this process has none).
    CannotProvision(Notice),
    /// Refuse with an event and fail the pass (upstream's "should never happen" row).
    Refuse(Notice, String),
    /// The claim cannot be matched (bad selector, unreadable request, class without mode).
    Fail(String),
}

impl ClaimStep {
    pub fn name(&self) -> &'static str {
        match self {
            ClaimStep::None => "none",
            ClaimStep::Bind(_) => "bind",
            ClaimStep::Pending(_) => "pending",
            ClaimStep::WaitForConsumer => "wait-for-consumer",
            ClaimStep::Lost(_) => "lost",
            ClaimStep::AssignDefaultClass(_) => "assign-default-class",
            ClaimStep::Provision { .. } => "provision",
            ClaimStep::CannotProvision(_) => "cannot-provision",
            ClaimStep::Refuse(..) => "refuse",
            ClaimStep::Fail(_) => "fail",
        }
    }
}

/// What the stores say around a claim.
pub struct ClaimView<'a> {
    /// The claim's class, if it exists.
    pub class: Option<&'a StorageClass>,
    /// The default class's name, if the cluster has one.
    pub default_class: Option<&'a str>,
    pub volumes: &'a VolumeIndex,
}

fn annotated(claim: &PersistentVolumeClaim, key: &str) -> bool {
    annotation(&claim.metadata, key).is_some()
}

fn volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim.volume_name().unwrap_or("")
}

/// syncClaim: bind-completed selects the bound table, else the unbound one.
pub fn decide(claim: &PersistentVolumeClaim, view: &ClaimView<'_>) -> ClaimStep {
    if annotated(claim, ANN_BIND_COMPLETED) {
        decide_bound(claim, view)
    } else if volume_name(claim).is_empty() {
        decide_unbound(claim, view)
    } else {
        decide_requested(claim, view)
    }
}

/// §3.2 A: a claim that names no PV.
fn decide_unbound(claim: &PersistentVolumeClaim, view: &ClaimView<'_>) -> ClaimStep {
    let delay = match delay_binding(claim, view.class) {
        Ok(d) => d,
        Err(e) => return ClaimStep::Fail(e.to_string()),
    };
    let facts = match ClaimFacts::of(claim) {
        Ok(f) => f,
        Err(e @ (MatchError::Selector { .. } | MatchError::Request { .. })) => {
            return ClaimStep::Fail(format!("error finding PV for claim {:?}: {e}", claim.key()));
        }
        Err(e) => return ClaimStep::Fail(e.to_string()),
    };
    if let Some(pv) = view.volumes.best_match(&facts, delay) {
        return ClaimStep::Bind(pv);
    }
    if claim.names_no_class()
        && let Some(default) = view.default_class
    {
        return ClaimStep::AssignDefaultClass(default.to_string());
    }
    let selected = annotated(claim, ANN_SELECTED_NODE);
    if delay && !selected {
        return ClaimStep::WaitForConsumer;
    }
    let class = claim.class();
    if class.is_empty() {
        return ClaimStep::Pending(Some(Notice::normal(
            Reason::FailedBinding,
            "no persistent volumes available for this claim and no storage class is set",
        )));
    }
    match view.class {
        // A migrated in-tree plugin: handed over to its CSI driver by that name, as
        // kube-controller-manager's binder does (every plugin that migrates has migrated).
        Some(c) if let Some(plugin) = crate::migration::Plugin::by_in_tree_name(&c.provisioner) => {
            ClaimStep::Provision { provisioner: plugin.csi_driver().to_string() }
        }
        Some(c) if c.provisioner.starts_with("kubernetes.io/") => {
            ClaimStep::CannotProvision(Notice::warning(
                Reason::ProvisioningFailed,
                format!("no volume plugin matched name: {}", c.provisioner),
            ))
        }
        Some(c) => ClaimStep::Provision { provisioner: c.provisioner.clone() },
        None => ClaimStep::CannotProvision(Notice::warning(
            Reason::ProvisioningFailed,
            format!("storageclass.storage.k8s.io {class:?} not found"),
        )),
    }
}

/// The event of a WaitForFirstConsumer claim: the unscheduled pods that use it, if any.
pub fn wait_notice(unscheduled_pods: &[String]) -> Notice {
    match unscheduled_pods {
        [] => Notice::normal(
            Reason::WaitForFirstConsumer,
            "waiting for first consumer to be created before binding",
        ),
        [one] => Notice::normal(
            Reason::WaitForPodScheduled,
            format!("waiting for pod {one} to be scheduled"),
        ),
        many => Notice::normal(
            Reason::WaitForPodScheduled,
            format!("waiting for pods {} to be scheduled", many.join(",")),
        ),
    }
}

/// The pod uses the claim (directly, or as its generic ephemeral volume), is not finished, and
/// has no node yet.
pub fn waits_for_claim(pod: &k8s_openapi::api::core::v1::Pod, claim: &str) -> bool {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let unscheduled = spec.node_name.as_deref().is_none_or(str::is_empty);
    let ephemeral = spec
        .volumes
        .iter()
        .flatten()
        .any(|v| v.ephemeral.is_some() && format!("{pod_name}-{}", v.name) == claim);
    !pod.finished() && unscheduled && (pod.names_claim(claim) || ephemeral)
}

/// §3.2 B: a claim that names a PV in spec.volumeName but is not bound yet.
fn decide_requested(claim: &PersistentVolumeClaim, view: &ClaimView<'_>) -> ClaimStep {
    let requested = volume_name(claim);
    let Some(pv) = view.volumes.get(requested) else {
        return ClaimStep::Pending(None);
    };
    let claim_ref = pv.claim_ref();
    match claim_ref {
        None => match check_volume_satisfies_claim(&pv, claim) {
            Ok(()) => ClaimStep::Bind(pv),
            Err(reason) => ClaimStep::Pending(Some(Notice::warning(
                Reason::VolumeMismatch,
                format!("Cannot bind to requested volume {requested:?}: {reason}"),
            ))),
        },
        Some(_) if pv.bound_to(claim) => ClaimStep::Bind(pv),
        Some(r) => {
            let notice = Notice::warning(
                Reason::FailedBinding,
                format!("volume {requested:?} already bound to a different claim."),
            );
            if annotated(claim, ANN_BOUND_BY_CONTROLLER) {
                let other = format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or_default(),
                    r.name.as_deref().unwrap_or_default()
                );
                ClaimStep::Refuse(
                    notice,
                    format!(
                        "invalid binding of claim {:?} to volume {requested:?}: volume already claimed by {other:?}",
                        claim.key()
                    ),
                )
            } else {
                ClaimStep::Pending(Some(notice))
            }
        }
    }
}

/// §3.3: a claim that completed binding once.
fn decide_bound(claim: &PersistentVolumeClaim, view: &ClaimView<'_>) -> ClaimStep {
    let requested = volume_name(claim);
    if requested.is_empty() {
        return ClaimStep::Lost(Notice::warning(
            Reason::ClaimLost,
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
        ));
    }
    let Some(pv) = view.volumes.get(requested) else {
        return ClaimStep::Lost(Notice::warning(
            Reason::ClaimLost,
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
        ));
    };
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    match pv.claim_ref() {
        None => ClaimStep::Bind(pv),
        Some(r) if !uid.is_empty() && r.uid.as_deref() == Some(uid) => ClaimStep::Bind(pv),
        Some(_) => ClaimStep::Lost(Notice::warning(
            Reason::ClaimMisbound,
            "Two claims are bound to the same volume, this one is bound incorrectly",
        )),
    }
}
