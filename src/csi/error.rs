//! What a failed driver call means: finished, maybe still running, or impossible as asked.
//!
//! The tables follow external-provisioner (CreateVolume) and external-resizer
//! (ControllerExpandVolume), see docs/provisioning.md §3.4 and docs/expansion.md §5.1. They
//! differ on purpose: ResourceExhausted ends a CreateVolume attempt, but leaves an expansion
//! uncertain.

use std::time::Duration;

use tonic::Code;

pub use super::failure::{ErrorClass, Failure, FailureCode, Operation};

/// A failed call to the CSI driver.
#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    /// The driver (or the gRPC stack on our side) answered with a status code. The text ends as
    /// Go's gRPC writes a status (`rpc error: code = … desc = …`), which alerts on the sidecars'
    /// events match.
    #[error("{method} failed: rpc error: code = {} desc = {message}", crate::metrics::code_name(*code))]
    Status { method: &'static str, code: Code, message: String },
    /// The call failed on our side of the socket (connection refused or dropped mid-call, HTTP/2
    /// error): the driver sent no answer, so what it did is unknown. tonic reports these as
    /// statuses too, usually `Unknown: transport error`; they differ in carrying a local cause.
    #[error("{method} failed on the connection to the driver: rpc error: code = {} desc = {message}", crate::metrics::code_name(*code))]
    Transport { method: &'static str, code: Code, message: String },
    /// The driver answered OK, but with something that breaks the CSI contract.
    #[error("{method} returned an invalid response: {reason}")]
    InvalidResponse { method: &'static str, reason: String },
    /// The driver never became ready within the time we were willing to wait.
    #[error("CSI driver at {address} not ready after {waited:?}: {last_error}")]
    NotReady { address: String, waited: Duration, last_error: String },
    /// Not sent: this replica's leadership may have lapsed (see `fence`).
    #[error("{method} not sent: this replica's leadership may have lapsed")]
    Fenced { method: &'static str },
    /// The configured address cannot name a unix socket.
    #[error("invalid CSI address {address:?}: {reason}")]
    Address { address: String, reason: String },
}

impl CsiError {
    /// The driver could not be reached: the connection failed, or it said `Unavailable`.
    pub fn unreachable(&self) -> bool {
        match self {
            CsiError::Transport { .. } => true,
            CsiError::Status { code, .. } => *code == Code::Unavailable,
            _ => false,
        }
    }

    pub(crate) fn from_status(method: &'static str, status: &tonic::Status) -> Self {
        let code = status.code();
        let message = status.message().to_string();
        // A status with a local source error was made by our gRPC stack, not sent by the driver.
        // The codes that are "in progress" anyway stay statuses, so that deadlines keep their code.
        if std::error::Error::source(status).is_some()
            && classify(Operation::Query, code) == ErrorClass::Final
        {
            CsiError::Transport { method, code, message }
        } else {
            CsiError::Status { method, code, message }
        }
    }

    /// The gRPC code, when the failure was a status.
    pub fn code(&self) -> Option<Code> {
        match self {
            CsiError::Status { code, .. } | CsiError::Transport { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The driver's message, when the failure was a status.
    pub fn message(&self) -> Option<&str> {
        match self {
            CsiError::Status { message, .. } | CsiError::Transport { message, .. } => Some(message),
            _ => None,
        }
    }

    /// What the decisions need to know of this error from `operation`.
    pub fn failure(&self, operation: Operation) -> Failure {
        let code = match self.code() {
            Some(Code::ResourceExhausted) => FailureCode::ResourceExhausted,
            Some(Code::AlreadyExists) => FailureCode::AlreadyExists,
            Some(Code::FailedPrecondition) => FailureCode::FailedPrecondition,
            _ => FailureCode::Other,
        };
        Failure { class: self.class(operation), code, text: self.to_string() }
    }

    /// Classifies this error for an operation of the given kind.
    pub fn class(&self, operation: Operation) -> ErrorClass {
        match self {
            CsiError::Status { code, .. } => classify(operation, *code),
            CsiError::Transport { .. } => ErrorClass::InProgress,
            // An OK that makes no sense leaves us not knowing what the driver did: repeat the same
            // (idempotent) call until it answers sensibly.
            CsiError::InvalidResponse { .. } => ErrorClass::InProgress,
            CsiError::NotReady { .. } => ErrorClass::InProgress,
            CsiError::Address { .. } => ErrorClass::Final,
            // Nothing was sent; what it was for stays as it is, for the next leader.
            CsiError::Fenced { .. } => ErrorClass::InProgress,
        }
    }
}

/// tonic reports our own deadline passing as `Cancelled: Timeout expired`. grpc-go, and so every
/// Go sidecar, reports it as `DeadlineExceeded`, and that code is what events, alerts and the
/// `grpc_status_code` metric label carry: a call that ran out of its `timeout` is given that code.
pub fn our_deadline(status: tonic::Status, elapsed: Duration, timeout: Duration) -> tonic::Status {
    if status.code() == Code::Cancelled && elapsed >= timeout {
        tonic::Status::deadline_exceeded(format!(
            "context deadline exceeded: no answer within {}",
            humantime::format_duration(timeout)
        ))
    } else {
        status
    }
}

/// Maps a gRPC status code from `operation` to its class.
///
/// A failed dial is `Unavailable`, "may still be in progress" like a deadline (see
/// `our_deadline`).
pub fn classify(operation: Operation, code: Code) -> ErrorClass {
    match code {
        Code::Cancelled | Code::DeadlineExceeded | Code::Unavailable | Code::Aborted => {
            ErrorClass::InProgress
        }
        Code::ResourceExhausted if operation == Operation::Expand => ErrorClass::InProgress,
        Code::InvalidArgument if operation == Operation::Create => ErrorClass::Infeasible,
        Code::InvalidArgument | Code::OutOfRange | Code::NotFound
            if operation == Operation::Expand =>
        {
            ErrorClass::Infeasible
        }
        _ => ErrorClass::Final,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use ErrorClass::{Final, InProgress, Infeasible};
    use Operation::{Create, Delete, Expand, Query};

    #[test]
    fn our_deadline_speaks_as_grpc_go() {
        let second = Duration::from_secs(1);
        let table = [
            // (code, elapsed, code after)
            (Code::Cancelled, second, Code::DeadlineExceeded),
            (Code::Cancelled, second * 2, Code::DeadlineExceeded),
            // Cancelled before the deadline is someone else's cancel, not ours.
            (Code::Cancelled, second / 2, Code::Cancelled),
            (Code::Unavailable, second * 2, Code::Unavailable),
            (Code::DeadlineExceeded, second / 2, Code::DeadlineExceeded),
        ];
        for (code, elapsed, after) in table {
            let status = our_deadline(tonic::Status::new(code, "x"), elapsed, second);
            assert_eq!(status.code(), after, "{code:?} after {elapsed:?}");
        }
        let status = our_deadline(tonic::Status::cancelled("Timeout expired"), second, second);
        assert_eq!(status.message(), "context deadline exceeded: no answer within 1s");
    }

    #[test]
    fn driver_failures_read_as_go_grpc_writes_a_status() {
        let status = |code, message: &str| CsiError::Status {
            method: "CreateVolume",
            code,
            message: message.into(),
        };
        let rows = [
            (
                status(Code::ResourceExhausted, "pool is full"),
                "CreateVolume failed: rpc error: code = ResourceExhausted desc = pool is full",
            ),
            (
                status(Code::Cancelled, "gone"),
                "CreateVolume failed: rpc error: code = Canceled desc = gone",
            ),
            (
                CsiError::Transport {
                    method: "DeleteVolume",
                    code: Code::Unknown,
                    message: "transport error".into(),
                },
                "DeleteVolume failed on the connection to the driver: rpc error: code = Unknown desc = transport error",
            ),
        ];
        for (error, text) in rows {
            assert_eq!(error.to_string(), text);
        }
    }

    #[test]
    fn classification_table() {
        let table = [
            // (operation, code, class)
            (Create, Code::Cancelled, InProgress),
            (Create, Code::DeadlineExceeded, InProgress),
            (Create, Code::Unavailable, InProgress),
            (Create, Code::Aborted, InProgress),
            (Create, Code::ResourceExhausted, Final),
            (Create, Code::InvalidArgument, Infeasible),
            (Create, Code::OutOfRange, Final),
            (Create, Code::NotFound, Final),
            (Create, Code::Internal, Final),
            (Create, Code::AlreadyExists, Final),
            (Create, Code::Unknown, Final),
            (Delete, Code::DeadlineExceeded, InProgress),
            (Delete, Code::FailedPrecondition, Final),
            (Delete, Code::InvalidArgument, Final),
            (Expand, Code::Cancelled, InProgress),
            (Expand, Code::ResourceExhausted, InProgress),
            (Expand, Code::InvalidArgument, Infeasible),
            (Expand, Code::OutOfRange, Infeasible),
            (Expand, Code::NotFound, Infeasible),
            (Expand, Code::FailedPrecondition, Final),
            (Expand, Code::Internal, Final),
            (Expand, Code::Unimplemented, Final),
            (Query, Code::Unavailable, InProgress),
            (Query, Code::Unimplemented, Final),
        ];
        for (operation, code, want) in table {
            assert_eq!(classify(operation, code), want, "{operation:?} {code:?}");
        }
    }

    #[test]
    fn nonsense_answers_are_uncertain() {
        let e =
            CsiError::InvalidResponse { method: "CreateVolume", reason: "empty volume_id".into() };
        assert_eq!(e.class(Create), InProgress);
        assert_eq!(e.code(), None);
    }
}
