//! Why a claim of ours is not Bound yet, said on the claim itself: one status condition of our
//! own type, `csi-pv-controller.storage.k8s.io/Provisioning`, whose reason names the cause.
//!
//! Events say the same, but they expire after an hour and many users never look at them. The
//! condition stays as long as the cause does. It costs a write, and every write to an unbound
//! claim makes the cluster's binder look at it once more, so:
//! - it is written only when the cause changes, never on each retry (the message records the
//!   attempt and the next retry as they stood when the cause began; Events record each one);
//! - a claim younger than `--waiting-condition-after` gets none: a claim that waits only
//!   moments, as on the happy path, is written nothing;
//! - it is removed once the claim is Bound, and not before: a cause cured leaves the claim on
//!   its way to Bound within a pass or two, and a removal then would be one more write.
//!
//! Pure: the executor brings the cause, the attempt count and the times.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use super::facts::PlanError;
use super::topology::TopologyError;
use crate::csi::failure::{ErrorClass, Failure, FailureCode};
use crate::model::ClaimExt;
use crate::model::claim::conditions_with;

/// The condition's type: ours, so that csi-resizer and kubelet, which rewrite only their own
/// resize conditions, keep it.
pub const CONDITION: &str = "csi-pv-controller.storage.k8s.io/Provisioning";

/// The longest message written (Events are cut at the same length).
const MESSAGE_LIMIT: usize = 1024;

/// Why a claim of ours waits. Each is one condition reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Beside kube-controller-manager's binder: it has not handed the claim to the driver.
    WaitingForBinder,
    /// WaitForFirstConsumer: no pod using the claim has been scheduled.
    WaitForFirstConsumer,
    /// An external volume populator fills the claim's data source.
    WaitingForPopulator,
    /// The node the scheduler chose (or its CSINode) is gone; the scheduler chooses again.
    NodeUnavailable,
    /// The chosen node gives no topology the driver and the class accept.
    TopologyUnsatisfied,
    /// The driver has no room (ResourceExhausted), on the chosen node or at all.
    NoCapacity,
    /// The data source cannot be read: unsupported, not ready, too large, in another namespace.
    DataSourceRefused,
    /// A secret the class names does not exist.
    SecretMissing,
    /// A secret the class names exists or may, but the API did not give it (down, or the read
    /// refused): retried with backoff.
    SecretUnreadable,
    /// The StorageClass is missing or its parameters, or the claim's request, are invalid.
    InvalidRequest,
    /// The driver's socket does not answer, or the driver says Unavailable.
    DriverUnreachable,
    /// CreateVolume timed out or was cut off: it may still be running, and is repeated.
    DriverTimeout,
    /// The driver refuses the request as it stands (InvalidArgument, OutOfRange, …).
    DriverRefused,
    /// Any other error from the driver; retried with backoff.
    DriverError,
    /// The driver answered with a volume that cannot be recorded; it was deleted again.
    DriverAnswerInvalid,
    /// Queued for the driver behind other claims: the driver's limit is shared in turn between
    /// namespaces, and this many of its own namespace are ahead of it.
    WaitingForDriver,
}

impl Cause {
    /// The condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Cause::WaitingForBinder => "WaitingForBinder",
            Cause::WaitForFirstConsumer => "WaitForFirstConsumer",
            Cause::WaitingForPopulator => "WaitingForPopulator",
            Cause::NodeUnavailable => "NodeUnavailable",
            Cause::TopologyUnsatisfied => "TopologyUnsatisfied",
            Cause::NoCapacity => "NoCapacity",
            Cause::DataSourceRefused => "DataSourceRefused",
            Cause::SecretMissing => "SecretMissing",
            Cause::SecretUnreadable => "SecretUnreadable",
            Cause::InvalidRequest => "InvalidRequest",
            Cause::DriverUnreachable => "DriverUnreachable",
            Cause::DriverTimeout => "DriverTimeout",
            Cause::DriverRefused => "DriverRefused",
            Cause::DriverError => "DriverError",
            Cause::DriverAnswerInvalid => "DriverAnswerInvalid",
            Cause::WaitingForDriver => "WaitingForDriver",
        }
    }

    /// Every cause, for docs and tests.
    pub const ALL: [Cause; 16] = [
        Cause::WaitingForBinder,
        Cause::WaitForFirstConsumer,
        Cause::WaitingForPopulator,
        Cause::NodeUnavailable,
        Cause::TopologyUnsatisfied,
        Cause::NoCapacity,
        Cause::DataSourceRefused,
        Cause::SecretMissing,
        Cause::SecretUnreadable,
        Cause::InvalidRequest,
        Cause::DriverUnreachable,
        Cause::DriverTimeout,
        Cause::DriverRefused,
        Cause::DriverError,
        Cause::DriverAnswerInvalid,
        Cause::WaitingForDriver,
    ];

    /// A claim the plan refuses.
    pub fn of_plan(error: &PlanError) -> Cause {
        match error {
            PlanError::CloneUnsupported(..)
            | PlanError::CloneSource { .. }
            | PlanError::SnapshotUnsupported(..)
            | PlanError::SnapshotSource { .. }
            | PlanError::CrossNamespace { .. } => Cause::DataSourceRefused,
            PlanError::Parameters(_)
            | PlanError::Template(_)
            | PlanError::Claim(_)
            | PlanError::MissingClass(_)
            | PlanError::Selector
            | PlanError::AttributesClassUnsupported(..)
            | PlanError::AttributesClassMissing(_)
            | PlanError::AttributesClassDriver(_)
            | PlanError::Migration(_) => Cause::InvalidRequest,
        }
    }

    /// A claim whose topology cannot be given.
    pub fn of_topology(error: &TopologyError) -> Cause {
        match error {
            TopologyError::NodeGone(_) => Cause::NodeUnavailable,
            TopologyError::BadTerm(_) => Cause::InvalidRequest,
            _ => Cause::TopologyUnsatisfied,
        }
    }

    /// A failed CreateVolume. `unreachable`: the call never reached the driver, or it said
    /// Unavailable.
    pub fn of_driver(failure: &Failure, unreachable: bool) -> Cause {
        if unreachable {
            return Cause::DriverUnreachable;
        }
        match (failure.code, failure.class) {
            (FailureCode::ResourceExhausted, _) => Cause::NoCapacity,
            (_, ErrorClass::InProgress) => Cause::DriverTimeout,
            (_, ErrorClass::Infeasible) => Cause::DriverRefused,
            (_, ErrorClass::Final) => Cause::DriverError,
        }
    }
}

/// The wait of a claim handed to `driver`, with no PV yet, that has been queued a while with
/// `ahead` claims of its namespace before it. A claim whose condition names a failed attempt
/// keeps that cause: it says more than the queue does. None for other claims.
pub fn in_queue(claim: &PersistentVolumeClaim, driver: &str, ahead: usize) -> Option<Wait> {
    if claim.named_volume().is_some() || !(claim.handed_to(driver) || claim.has_intent()) {
        return None;
    }
    let superseded =
        [Cause::WaitingForBinder, Cause::WaitForFirstConsumer, Cause::WaitingForDriver]
            .map(Cause::reason);
    if recorded(claim).is_some_and(|(reason, _)| !superseded.contains(&reason)) {
        return None;
    }
    let message = format!("waiting for the driver: {ahead} ahead in this namespace's share");
    Some(Wait::on(Cause::WaitingForDriver, message))
}

/// What a pass knows of a claim's wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub cause: Cause,
    /// What the user is told: the same words as the Event.
    pub message: String,
    /// Failed attempts so far; 0 for a wait on something else (a binder, a pod, a populator).
    pub attempts: u32,
    /// When the next attempt is due (RFC 3339), after a failed one.
    pub next_retry: Option<String>,
}

impl Wait {
    /// A wait on something other than a retry.
    pub fn on(cause: Cause, message: impl Into<String>) -> Self {
        Wait { cause, message: message.into(), attempts: 0, next_retry: None }
    }

    /// The condition's message: the cause's words, then the attempt and the next retry.
    pub fn condition_message(&self) -> String {
        let mut message = self.message.clone();
        if self.attempts > 0 {
            message.push_str(&format!(" (attempt {}", self.attempts));
            if let Some(next) = &self.next_retry {
                message.push_str(&format!("; next retry at {next}"));
            }
            message.push(')');
        }
        cut(message, MESSAGE_LIMIT)
    }
}

/// The status patch that brings the claim's condition to what the pass found, if a write is
/// due. `wait`: the claim's present cause (None: nothing holds it now); `age`: how long the
/// claim exists; `after`: `--waiting-condition-after`; `now`: the time as conditions record it.
pub fn condition_patch(
    claim: &PersistentVolumeClaim,
    wait: Option<&Wait>,
    age: Duration,
    after: Duration,
    now: &str,
) -> Option<Value> {
    let present = claim.condition(CONDITION);
    if claim.is_bound() {
        return present.map(|_| removal(claim));
    }
    let wait = wait.filter(|_| age >= after)?;
    if present.and_then(|c| c.reason.as_deref()) == Some(wait.cause.reason()) {
        return None;
    }
    let condition = json!({
        "type": CONDITION,
        "status": "True",
        "reason": wait.cause.reason(),
        "message": wait.condition_message(),
        "lastProbeTime": now,
        "lastTransitionTime": now,
    });
    let conditions = conditions_with(claim, |c| c.type_ != CONDITION, [condition]);
    Some(json!({"status": {"conditions": conditions}}))
}

/// The claim's conditions without ours.
fn removal(claim: &PersistentVolumeClaim) -> Value {
    json!({"status": {"conditions": conditions_with(claim, |c| c.type_ != CONDITION, [])}})
}

/// The claim's cause as its condition records it: reason and message.
pub fn recorded(claim: &PersistentVolumeClaim) -> Option<(&str, &str)> {
    let condition = claim.condition(CONDITION)?;
    Some((
        condition.reason.as_deref().unwrap_or_default(),
        condition.message.as_deref().unwrap_or_default(),
    ))
}

/// `text` cut to at most `limit` bytes, on a character boundary.
fn cut(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests;
