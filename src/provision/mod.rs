//! Dynamic provisioning decisions: which claims are ours, what CreateVolume gets, and the PV
//! built from the answer. Pure: k8s-openapi types in, values out; the executor does the I/O.

pub mod parameters;
pub mod request;
pub mod secrets;
