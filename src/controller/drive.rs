//! The one loop that drives every pass: over a claim (provisioning, the resize, the modify, the
//! journal's sweep of claims gone) and over a PV. Decide on what is in hand, through the gate
//! (`model::gate`); read it live when the gate asks, end the pass when it holds; act on the
//! step; decide again on what the action gave; stop after the pass's number of steps. A pass is
//! a small type that borrows the controller and holds its own state between steps; it decides
//! and acts, and never loops.

use std::future::Future;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tracing::debug;

use super::{Controller, Outcome, SyncError};
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;

/// How an acted step leaves the pass.
pub(super) enum Flow<S> {
    /// Decide again, on this (the answer of a write, or a copy read).
    Next(Box<S>),
    /// Decide again on what is in hand: the step changed only the pass's own state.
    Again,
    /// The pass is over.
    End(Outcome),
}

/// A claim pass's subject: the claim, and which copy of it this is.
pub(super) struct InHand {
    pub claim: PersistentVolumeClaim,
    pub copy: ClaimCopy,
}

impl InHand {
    /// The claim as this pass's own write (or read) answered it.
    pub fn live(claim: PersistentVolumeClaim) -> Flow<InHand> {
        Flow::Next(Box::new(InHand { claim, copy: ClaimCopy::Live }))
    }
}

/// One kind of pass.
pub(super) trait Pass {
    type Step;
    /// What the pass decides on, carried from step to step.
    type Subject: Send + Sync;
    /// At most this many decisions per pass; a pass that needs more looks again at once.
    const STEPS: usize;

    /// The next step, through the gate. Pure but for reading the controller's stores and memory.
    fn decide(&mut self, subject: &Self::Subject) -> Gated<Self::Step>;

    /// A short name of `step`, for the log.
    fn name(step: &Self::Step) -> &'static str;

    /// The operation the pass's log lines carry, once it has a step that does something.
    fn op(step: &Self::Step) -> Option<&'static str>;

    /// The subject as the API has it now, for `ConfirmLive`; None ends the pass.
    fn confirm(
        &mut self,
        subject: &Self::Subject,
    ) -> impl Future<Output = Result<Option<Self::Subject>, SyncError>> + Send;

    /// Carries `step` out.
    fn act(
        &mut self,
        step: Self::Step,
        subject: &Self::Subject,
    ) -> impl Future<Output = Result<Flow<Self::Subject>, SyncError>> + Send;
}

impl Controller {
    /// Runs `pass`, starting from `subject`.
    pub(super) async fn drive<P: Pass + Send>(
        &self,
        pass: &mut P,
        subject: P::Subject,
    ) -> Result<Outcome, SyncError> {
        let mut subject = subject;
        for _ in 0..P::STEPS {
            let step = match pass.decide(&subject) {
                Gated::WaitForRetry => {
                    debug!("decided: wait for the retry");
                    return Ok(Outcome::Waiting);
                }
                Gated::ConfirmLive => {
                    debug!("decided: confirm live");
                    match Box::pin(pass.confirm(&subject)).await? {
                        Some(live) => subject = live,
                        None => return Ok(Outcome::Done),
                    }
                    continue;
                }
                Gated::Go(step) => step,
            };
            debug!(action = P::name(&step), "decided");
            if let Some(op) = P::op(&step) {
                crate::runtime::logs::record_op(op);
            }
            // On the heap: the steps' futures are large (a CreateVolume's with its PV and
            // binding), and a task's stack is not.
            match Box::pin(pass.act(step, &subject)).await? {
                Flow::Next(next) => subject = *next,
                Flow::Again => {}
                Flow::End(outcome) => return Ok(outcome),
            }
        }
        Ok(Outcome::Again)
    }

    /// A claim pass's `confirm`: the claim as the API has it, None once it is gone.
    pub(super) async fn confirm_claim(&self, held: &InHand) -> Result<Option<InHand>, SyncError> {
        let live = self.live_claim(&held.claim).await?;
        Ok(live.map(|claim| InHand { claim, copy: ClaimCopy::Live }))
    }
}
