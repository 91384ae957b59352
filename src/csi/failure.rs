//! A failed driver call as decisions see it: its class and the few status codes that change
//! what happens next. Free of the gRPC types, so that pure decision modules can take it.

/// The driver call an error came from; the classification depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Delete,
    Expand,
    /// Identity calls, capability queries and anything else with no state in the driver.
    Query,
}

/// How the caller must treat a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The driver finished with the call and did nothing lasting; retrying with backoff is safe,
    /// and the arguments may change before the next attempt.
    Final,
    /// The operation may still be running in the driver (deadline, lost connection, abort). It
    /// must be repeated with the same arguments until a final answer arrives, even if the object
    /// that asked for it has gone away meanwhile.
    InProgress,
    /// The request can never succeed as sent (bad argument, size out of range). Retry slowly, and
    /// only at once when the user changes what they asked for.
    Infeasible,
}

/// The status codes a decision looks at beyond the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCode {
    /// Out of space (CreateVolume: where the scheduler put the pod).
    ResourceExhausted,
    /// A volume of that name exists with other parameters.
    AlreadyExists,
    /// The driver refuses in the volume's present state (expansion: in use).
    FailedPrecondition,
    /// Any other code, or no code at all.
    Other,
}

/// A failed driver call: how to treat it, the code, and the text for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub class: ErrorClass,
    pub code: FailureCode,
    pub text: String,
}
