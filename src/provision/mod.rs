//! Dynamic provisioning decisions: which claims are ours, what CreateVolume gets, the PV built
//! from the answer, and when a volume is released and deleted. Pure: k8s-openapi types in,
//! actions out; the controller does the I/O.

pub mod answer;
pub mod claim;
pub mod claim_metadata;
pub mod facts;
pub mod inputs;
pub mod node_local;
pub mod parameters;
pub mod patches;
pub mod plan;
pub mod request;
pub mod secrets;
pub mod settings;
pub mod snapshot;
pub mod source;
pub mod topology;
pub mod turn;
pub mod uninstall;
pub mod volume;
pub mod waiting;
