//! Talking to the CSI driver: the wire types, a client over its unix socket, its capabilities,
//! and what each kind of failure means.

pub mod capabilities;
pub mod client;
pub mod deadlines;
pub mod driver;
pub mod error;
pub mod failure;
pub mod limit;
pub mod limited;
pub mod proto;

pub use capabilities::{
    ControllerCapabilities, ControllerCapability, ExpansionMode, PluginCapabilities,
};
pub use client::{CsiClient, DriverInfo, socket_path};
pub use deadlines::RoleTimeouts;
pub use driver::{About, Driver};
pub use error::{CsiError, classify};
pub use failure::{ErrorClass, Failure, FailureCode, Operation};
pub use proto::v1;
