//! The one loop that drives every claim pass (provisioning, the resize, the modify): decide on
//! the copy of the claim in hand, through the gate (`model::gate`); read the claim live when the
//! gate asks, end the pass when it holds; act on the step; decide again on what the action
//! gave; stop after the pass's number of steps. A pass is a small type that borrows the
//! controller and holds its own state between steps; it decides and acts, and never loops.

use std::future::Future;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tracing::debug;

use super::{Controller, Outcome, SyncError};
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;

/// How an acted step leaves the pass.
pub(super) enum Flow {
    /// Decide again, on this copy of the claim (the answer of a write, or the same one).
    Next(Box<PersistentVolumeClaim>, ClaimCopy),
    /// Decide again on the claim in hand: the step changed only the pass's own state.
    Again,
    /// The pass is over.
    End(Outcome),
}

/// One kind of pass over a claim.
pub(super) trait ClaimPass {
    type Step;
    /// At most this many decisions per pass; a pass that needs more looks again at once.
    const STEPS: usize;

    /// The next step for `claim`, the `copy` it is, through the gate. Pure but for reading the
    /// controller's stores and memory.
    fn decide(&mut self, claim: &PersistentVolumeClaim, copy: ClaimCopy) -> Gated<Self::Step>;

    /// A short name of `step`, for the log.
    fn name(step: &Self::Step) -> &'static str;

    /// The operation the pass's log lines carry, once it has a step that does something.
    fn op(step: &Self::Step) -> Option<&'static str>;

    /// Carries `step` out.
    fn act(
        &mut self,
        step: Self::Step,
        claim: &PersistentVolumeClaim,
        copy: ClaimCopy,
    ) -> impl Future<Output = Result<Flow, SyncError>> + Send;
}

impl Controller {
    /// Runs `pass` over `claim`, starting from the `copy` it is (the store's, or a journal
    /// entry's whose claim is gone).
    pub(super) async fn drive<P: ClaimPass + Send>(
        &self,
        pass: &mut P,
        claim: PersistentVolumeClaim,
        copy: ClaimCopy,
    ) -> Result<Outcome, SyncError> {
        let (mut claim, mut copy) = (claim, copy);
        for _ in 0..P::STEPS {
            let step = match pass.decide(&claim, copy) {
                Gated::WaitForRetry => {
                    debug!(?copy, "decided: wait for the retry");
                    return Ok(Outcome::Waiting);
                }
                Gated::ConfirmLive => {
                    debug!(?copy, "decided: confirm live");
                    match self.live_claim(&claim).await? {
                        Some(live) => (claim, copy) = (live, ClaimCopy::Live),
                        None => return Ok(Outcome::Done),
                    }
                    continue;
                }
                Gated::Go(step) => step,
            };
            debug!(action = P::name(&step), ?copy, "decided");
            if let Some(op) = P::op(&step) {
                crate::runtime::logs::record_op(op);
            }
            // On the heap: the steps' futures are large (a CreateVolume's with its PV and
            // binding), and a task's stack is not.
            match Box::pin(pass.act(step, &claim, copy)).await? {
                Flow::Next(next, next_copy) => (claim, copy) = (*next, next_copy),
                Flow::Again => {}
                Flow::End(outcome) => return Ok(outcome),
            }
        }
        Ok(Outcome::Again)
    }
}
