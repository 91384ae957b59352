//! The gate every claim pass puts its decided step through before acting: may the step go on
//! the copy of the claim in hand, must it wait for its retry, or must the claim be read live
//! first? One order for provisioning, the resize and the modify:
//!
//! 1. A failed attempt's hold first, on any copy: a claim waiting out its backoff costs no
//!    apiserver read, however often its periodic pass comes.
//! 2. Then a driver call decided on the watch store's copy, with no write before it whose
//!    precondition would prove that copy current: read the claim live and decide again
//!    (`model::copy`).
//! 3. Else the step goes.

use crate::model::copy::ClaimCopy;

/// What the gate lets through.
#[derive(Debug, Clone, PartialEq)]
pub enum Gated<S> {
    /// Act on the step.
    Go(S),
    /// The step is an attempt that failed on this claim and its retry is not due: the pass ends.
    WaitForRetry,
    /// The step calls the driver on the store's copy: read the claim from the API, decide again.
    ConfirmLive,
}

/// How a step touches the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// No driver call: writes, events, or nothing.
    None,
    /// A driver call with nothing written before it.
    Direct,
    /// A driver call after a write preconditioned on the copy's resourceVersion: the API
    /// refuses that write if the copy is stale, so the copy needs no confirming read.
    AfterPreconditionedWrite,
}

/// A decided step as the gate sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepKind {
    /// The step is an attempt a failure holds back until its retry.
    pub retried: bool,
    pub call: Call,
}

impl StepKind {
    /// A step no hold keeps back and that calls no driver.
    pub const FREE: StepKind = StepKind { retried: false, call: Call::None };
    /// An attempt a failure holds back, with no driver call (a refusal).
    pub const HELD: StepKind = StepKind { retried: true, call: Call::None };

    /// A driver call a failure holds back; `marked_first`: a write preconditioned on the
    /// claim's resourceVersion goes before it (an attempt's start mark).
    pub fn driver_call(marked_first: bool) -> StepKind {
        let call = if marked_first { Call::AfterPreconditionedWrite } else { Call::Direct };
        StepKind { retried: true, call }
    }
}

/// Puts `step` through the gate. `held`: a failed attempt holds the claim as it is now (its
/// version for provisioning and modify, its requested size for the resize).
pub fn gate<S>(step: S, kind: StepKind, held: bool, copy: ClaimCopy) -> Gated<S> {
    if kind.retried && held {
        Gated::WaitForRetry
    } else if kind.call == Call::Direct && copy == ClaimCopy::Cached {
        Gated::ConfirmLive
    } else {
        Gated::Go(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Call::*;
    use ClaimCopy::*;

    #[test]
    fn one_order_for_every_pass() {
        let go = || Gated::Go("step");
        // (retried, call, held, copy, expected)
        let cases = [
            // A hold comes first, whatever the copy: no live read for a held claim.
            (true, Direct, true, Cached, Gated::WaitForRetry),
            (true, Direct, true, Live, Gated::WaitForRetry),
            (true, None, true, Cached, Gated::WaitForRetry),
            (true, AfterPreconditionedWrite, true, Cached, Gated::WaitForRetry),
            // A hold keeps back only the steps a failure can hold.
            (false, None, true, Cached, go()),
            (false, Direct, true, Cached, Gated::ConfirmLive),
            // A driver call with nothing written first rests on a live copy.
            (true, Direct, false, Cached, Gated::ConfirmLive),
            (true, Direct, false, Live, go()),
            (true, Direct, false, Gone, go()),
            // A preconditioned write before the call proves the copy.
            (true, AfterPreconditionedWrite, false, Cached, go()),
            // No call: the store's copy will do (writes carry their own precondition).
            (true, None, false, Cached, go()),
            (false, None, false, Cached, go()),
        ];
        for (retried, call, held, copy, expected) in cases {
            let kind = StepKind { retried, call };
            assert_eq!(
                gate("step", kind, held, copy),
                expected,
                "retried {retried}, {call:?}, held {held}, {copy:?}"
            );
        }
    }

    #[test]
    fn a_driver_call_marked_first_needs_no_live_copy() {
        assert_eq!(gate(1, StepKind::driver_call(true), false, Cached), Gated::Go(1));
        assert_eq!(gate(1, StepKind::driver_call(false), false, Cached), Gated::ConfirmLive);
        assert_eq!(gate(1, StepKind::driver_call(true), true, Cached), Gated::WaitForRetry);
        assert_eq!(gate(1, StepKind::HELD, true, Live), Gated::WaitForRetry);
    }

    #[test]
    fn the_free_kind_always_goes() {
        for held in [false, true] {
            for copy in [Cached, Live, Gone] {
                assert_eq!(gate(1, StepKind::FREE, held, copy), Gated::Go(1));
            }
        }
    }
}
