//! Saying on the claim why it waits (`provision::waiting` decides when): the condition after a
//! refused or failed provisioning step, after a wait on something else, and its removal once
//! the claim is Bound. A condition that cannot be written is only logged: the Event has said
//! the same, and the next pass tries again. Its removal, though, fails the pass.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::{ClaimKey, Controller, Outcome, Part, SyncError};
use crate::model::reason::Reason;
use crate::provision::waiting::{self, Cause, Wait};

impl Controller {
    /// A provisioning step that cannot go on now: back off, log, a Warning event, and the
    /// claim's condition when its cause is news.
    pub(super) async fn refused(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        cause: Cause,
        note: String,
        slow: bool,
    ) -> Outcome {
        // Every failed attempt counts, as the provisioner library counts it: a refusal before
        // the driver (secrets, topology, parameters) as much as a failed CreateVolume.
        let class = crate::provision::plan::class_name(claim).unwrap_or_default();
        let source = crate::provision::source::of(claim);
        crate::metrics::metrics().provision_failed_attempt(class, source.kind());
        let outcome = self.failed(key, claim, Reason::ProvisioningFailed, note.clone(), slow).await;
        let next_retry = self
            .memory
            .claims
            .get(key)
            .not_before
            .map(|(_, until)| wall_clock_at(until.saturating_duration_since(Instant::now())));
        let attempts = self.intake.claims.failures(key).max(1);
        self.tell_wait(claim, Wait { cause, message: note, attempts, next_retry }).await;
        outcome
    }

    /// A Bound claim's waiting condition goes; whether it was there. A failed write fails the
    /// pass, which the queue then retries.
    pub(super) async fn clear_wait(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<bool, SyncError> {
        let after = self.switches.waiting_condition_after;
        let Some(patch) =
            waiting::condition_patch(claim, None, super::age(claim), after, &super::now())
        else {
            return Ok(false);
        };
        self.patch_claim(Part::Status, claim, patch, "remove the claim's waiting condition")
            .await?;
        Ok(true)
    }

    /// Says on the claim that it waits for `wait`, if that is news (a log line if the write
    /// fails: an unbound claim has its periodic pass, which tries again).
    pub(super) async fn tell_wait(&self, claim: &PersistentVolumeClaim, wait: Wait) {
        let age = super::age(claim);
        let after = self.switches.waiting_condition_after;
        let Some(patch) = waiting::condition_patch(claim, Some(&wait), age, after, &super::now())
        else {
            return;
        };
        let action = format!("say on the claim why it waits ({})", wait.cause.reason());
        match self.patch_claim(Part::Status, claim, patch, &action).await {
            Ok(written) => {
                debug!("{action}: written");
                self.backoff_follows(claim, &written);
            }
            Err(error) => warn!(%error, "cannot {action}; the next pass tries again"),
        }
    }

    /// Says on the claims queued longest (at most `QUEUE_WRITES` a pass) that they wait for the
    /// driver, and how many of their namespace are ahead, once each has waited
    /// `--waiting-condition-after` in the queue (5 s at least). Called by the periodic pass; a claim says it
    /// once (the cause-change rule), so a storm of creates costs one write per claim that
    /// waits long, not one per pass.
    pub(super) async fn tell_queue_waits(&self) {
        let after = self.switches.waiting_condition_after;
        let queued = after.max(QUEUED_AT_LEAST);
        for (key, _, ahead) in self.intake.claims.waiting_longer_than(queued, QUEUE_WRITES) {
            let Some(claim) = self.stores.claims.get(&key) else { continue };
            if super::age(&claim) < after {
                continue;
            }
            if let Some(wait) = waiting::in_queue(&claim, &self.settings.driver, ahead) {
                self.tell_wait(&claim, wait).await;
            }
        }
    }

    /// A backoff held against `before` holds against `after`, our own condition write: only a
    /// change by someone else lifts it early.
    fn backoff_follows(&self, before: &PersistentVolumeClaim, after: &PersistentVolumeClaim) {
        let (Some(old), Some(new)) =
            (before.metadata.resource_version.as_deref(), after.metadata.resource_version.clone())
        else {
            return;
        };
        let key = ObjectRef::from_obj(before);
        self.memory.claims.update_if_known(&key, |m| {
            if let Some((rv, _)) = m.not_before.as_mut().filter(|(rv, _)| rv == old) {
                *rv = new;
            }
        });
    }
}

/// The most claims one periodic pass tells that they are queued: their writes share the API
/// with the work itself.
const QUEUE_WRITES: usize = 50;

/// The least time in the queue that counts as waiting for the driver, whatever
/// `--waiting-condition-after` says: the periodic pass queues claims itself, and one it has
/// just queued waits for nothing yet.
const QUEUED_AT_LEAST: std::time::Duration = std::time::Duration::from_secs(5);

/// The wall-clock time `delay` from now, as conditions record it.
fn wall_clock_at(delay: std::time::Duration) -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    let span = k8s_openapi::jiff::SignedDuration::try_from(delay).unwrap_or_default();
    crate::model::condition_time(now.checked_add(span).unwrap_or(now))
}
