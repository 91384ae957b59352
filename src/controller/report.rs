//! Telling the user and the log how a step went: a Warning event and a backoff for a step that
//! cannot go on now, the success of a provisioning, a binder's notice, and a driver that could
//! not be reached (its keys wait for the driver's return, `stranded`). The passes call these
//! verbs; none of them decides anything.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tracing::{info, warn};

use super::{ClaimKey, Controller, Outcome, reference};
use crate::binder::claim::Notice;
use crate::csi::CsiError;
use crate::model::reason::Reason;

impl Controller {
    /// A step that cannot go on now: back off, log, and tell the user in a Warning event.
    pub(super) async fn failed(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        reason: Reason,
        note: String,
        slow: bool,
    ) -> Outcome {
        let delay = self.back_off(key, claim, slow);
        warn!(retry_in = ?delay, "{note}");
        self.events.warning(&reference(claim), reason, note).await;
        Outcome::Waiting
    }

    pub(super) async fn succeeded(&self, claim: &PersistentVolumeClaim, volume: &str) {
        info!(%volume, "provisioned");
        self.events
            .normal(
                &reference(claim),
                Reason::ProvisioningSucceeded,
                format!("Successfully provisioned volume {volume}"),
            )
            .await;
    }

    /// A binder's notice, as an event of its kind.
    pub(super) async fn notify(
        &self,
        object: &k8s_openapi::api::core::v1::ObjectReference,
        notice: &Notice,
    ) {
        let note = notice.message.clone();
        if notice.warning {
            self.events.warning(object, notice.reason, note).await;
        } else {
            self.events.normal(object, notice.reason, note).await;
        }
    }

    /// Remembers a claim whose pass failed on an unreachable driver.
    pub(super) fn strand_claim(&self, key: &ClaimKey, error: &CsiError) {
        if error.unreachable() {
            self.memory.claims.update(key, |m| m.stranded = true);
        }
    }

    /// Remembers a PV whose pass failed on an unreachable driver.
    pub(super) fn strand_volume(&self, name: &str, error: &CsiError) {
        if error.unreachable() {
            self.memory.volumes.update(&name.to_string(), |m| m.stranded = true);
        }
    }
}
