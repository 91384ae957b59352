//! Why a pass over a key failed, and what that means for the next one.

use crate::csi::{CsiError, ErrorClass, Operation};

/// How the worker treats a failed pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncErrorClass {
    /// Done with this attempt, nothing lasting happened; retry with backoff.
    Final,
    /// Something may still be happening (a driver call or a write with no answer); repeat the
    /// same step with backoff.
    InProgress,
    /// Cannot work as asked until the user changes the input; retry slowly.
    Infeasible,
    /// The API refused the request as such (RBAC, validation): the same request gets the same
    /// answer until an operator or the user acts. Said loudly, retried rarely.
    Refused,
    /// Our view was stale (HTTP 409); look again at once.
    Conflict,
}

/// When the next pass over a key whose pass failed comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Once the watch has the newer version (a conflict): the queue's short conflict delay.
    Soon,
    /// The queue's exponential backoff.
    Backoff,
    /// The longest backoff at once: nothing changes until someone acts.
    Slowly,
}

impl SyncErrorClass {
    /// What each class means for the next try.
    pub fn retry(self) -> Retry {
        match self {
            SyncErrorClass::Conflict => Retry::Soon,
            SyncErrorClass::Final | SyncErrorClass::InProgress => Retry::Backoff,
            SyncErrorClass::Infeasible | SyncErrorClass::Refused => Retry::Slowly,
        }
    }

    /// The `class` label of `csi_pv_controller_sync_failures_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncErrorClass::Final => "final",
            SyncErrorClass::InProgress => "in_progress",
            SyncErrorClass::Infeasible => "infeasible",
            SyncErrorClass::Refused => "refused",
            SyncErrorClass::Conflict => "conflict",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("cannot {action}: {source}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("{source}")]
    Csi {
        operation: Operation,
        #[source]
        source: CsiError,
    },
    /// Bad input, already reported to the user in an Event.
    #[error("{0}")]
    Input(String),
    /// The cluster holds something that contradicts our records; reported in an Event.
    #[error("{0}")]
    Inconsistent(String),
    /// Not sent: the object changed where the decision looks while the write waited for its
    /// turn (the 409 it would have met, found before sending).
    #[error("cannot {action}: the object changed since the decision")]
    Stale { action: String },
    /// The intent journal's disk failed; nothing was sent to the driver.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    /// The pass panicked (a bug of ours, caught by runtime::panics); what it did before is safe
    /// to repeat, as after a crash.
    #[error(transparent)]
    Panicked(#[from] crate::runtime::panics::Panicked),
}

impl SyncError {
    pub fn api(action: impl Into<String>, source: kube::Error) -> Self {
        SyncError::Api { action: action.into(), source }
    }

    pub fn csi(operation: Operation, source: CsiError) -> Self {
        SyncError::Csi { operation, source }
    }

    pub fn class(&self) -> SyncErrorClass {
        match self {
            SyncError::Api { source, .. } if is_status(source, 409) => SyncErrorClass::Conflict,
            // Forbidden (RBAC), Invalid, BadRequest: the same request gets the same answer
            // until an operator or the user acts.
            SyncError::Api { source, .. } if refused(source) => SyncErrorClass::Refused,
            SyncError::Api { .. } => SyncErrorClass::InProgress,
            SyncError::Stale { .. } => SyncErrorClass::Conflict,
            SyncError::Csi { operation, source } => match source.class(*operation) {
                ErrorClass::Final => SyncErrorClass::Final,
                ErrorClass::InProgress => SyncErrorClass::InProgress,
                ErrorClass::Infeasible => SyncErrorClass::Infeasible,
            },
            SyncError::Input(_) => SyncErrorClass::Infeasible,
            SyncError::Inconsistent(_) => SyncErrorClass::Final,
            SyncError::Journal(_) | SyncError::Panicked(_) => SyncErrorClass::Final,
        }
    }
}

/// The API refused the request as such (400, 403, 422), as opposed to failing to serve it.
pub fn refused(error: &kube::Error) -> bool {
    [400, 403, 422].iter().any(|code| is_status(error, *code))
}

/// The API answered with this HTTP status.
pub use crate::cluster::is_status;

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> SyncError {
        SyncError::api(
            "patch the claim",
            kube::Error::Api(
                kube::core::Status::failure("refused", "Reason").with_code(code).boxed(),
            ),
        )
    }

    #[test]
    fn api_answers_are_classed_by_what_retrying_can_change() {
        let table = [
            (409, SyncErrorClass::Conflict),
            (403, SyncErrorClass::Refused),
            (422, SyncErrorClass::Refused),
            (400, SyncErrorClass::Refused),
            (500, SyncErrorClass::InProgress),
            (503, SyncErrorClass::InProgress),
            (429, SyncErrorClass::InProgress),
        ];
        for (code, class) in table {
            assert_eq!(api(code).class(), class, "{code}");
        }
        assert_eq!(SyncError::Input("bad".into()).class(), SyncErrorClass::Infeasible);
    }

    #[test]
    fn each_class_has_its_retry() {
        let table = [
            (SyncErrorClass::Conflict, Retry::Soon, "conflict"),
            (SyncErrorClass::Final, Retry::Backoff, "final"),
            (SyncErrorClass::InProgress, Retry::Backoff, "in_progress"),
            (SyncErrorClass::Infeasible, Retry::Slowly, "infeasible"),
            (SyncErrorClass::Refused, Retry::Slowly, "refused"),
        ];
        for (class, retry, label) in table {
            assert_eq!(class.retry(), retry, "{class:?}");
            assert_eq!(class.as_str(), label);
        }
    }
}
