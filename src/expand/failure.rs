//! What a failed resize attempt leaves behind, as external-resizer decides it: on the claim's
//! status, in the memory the next pass reads, and in the event.

use crate::csi::{ErrorClass, Failure, FailureCode};

/// How a ControllerExpandVolume attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResizeFailure {
    /// The driver finished and refused; `infeasible`: never as asked; `in_use`: it refused
    /// because the volume is in use (FailedPrecondition).
    Final { message: String, infeasible: bool, in_use: bool },
    /// The driver may still be working, or was never reached.
    Uncertain(String),
}

impl ResizeFailure {
    /// A failed driver call.
    pub fn of_call(failure: &Failure) -> Self {
        match failure.class {
            ErrorClass::InProgress => ResizeFailure::Uncertain(failure.text.clone()),
            class => ResizeFailure::Final {
                message: failure.text.clone(),
                infeasible: class == ErrorClass::Infeasible,
                in_use: failure.code == FailureCode::FailedPrecondition,
            },
        }
    }

    /// No call could be made as asked, or its answer makes no sense: the attempt is over.
    pub fn unusable(message: String) -> Self {
        ResizeFailure::Final { message, infeasible: false, in_use: false }
    }
}

/// What the executor does after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterFailure {
    /// Record ControllerResizeError with this message on the claim (`expand::failed`).
    pub record: Option<String>,
    /// ControllerResizeInfeasible too, and the retry waits the slow delay.
    pub infeasible: bool,
    /// Remembered: the user's new size is honoured at once (only after a final error).
    pub final_error: bool,
    /// Remembered: the next attempt waits until no pod uses the claim.
    pub in_use: bool,
    /// The event's and the log line's text.
    pub note: String,
}

pub fn after_failure(failure: ResizeFailure) -> AfterFailure {
    match failure {
        ResizeFailure::Uncertain(note) => AfterFailure {
            record: None,
            infeasible: false,
            final_error: false,
            in_use: false,
            note,
        },
        ResizeFailure::Final { message, infeasible, in_use } => AfterFailure {
            note: if in_use {
                format!("{message} (the volume is in use; retried once no pod uses the claim)")
            } else {
                message.clone()
            },
            record: Some(message),
            infeasible,
            final_error: true,
            in_use,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_failures_map_to_status_memory_and_note() {
        use ErrorClass::*;
        use FailureCode::*;
        // (class, code, recorded, infeasible, final_error, in_use, note)
        let table = [
            (InProgress, Other, false, false, false, false, "boom"),
            // In progress wins over the code: nothing is known yet.
            (InProgress, FailedPrecondition, false, false, false, false, "boom"),
            (Final, Other, true, false, true, false, "boom"),
            (Infeasible, Other, true, true, true, false, "boom"),
            (
                Final,
                FailedPrecondition,
                true,
                false,
                true,
                true,
                "boom (the volume is in use; retried once no pod uses the claim)",
            ),
        ];
        for (class, code, recorded, infeasible, final_error, in_use, note) in table {
            let failure = Failure { class, code, text: "boom".into() };
            let got = after_failure(ResizeFailure::of_call(&failure));
            let want = AfterFailure {
                record: recorded.then(|| "boom".to_string()),
                infeasible,
                final_error,
                in_use,
                note: note.into(),
            };
            assert_eq!(got, want, "{class:?} {code:?}");
        }
    }

    #[test]
    fn an_unusable_attempt_is_final_and_feasible() {
        let got = after_failure(ResizeFailure::unusable("bad answer".into()));
        assert_eq!(got.record.as_deref(), Some("bad answer"));
        assert!(got.final_error && !got.infeasible && !got.in_use);
    }
}
