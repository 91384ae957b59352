//! Talking to the CSI driver: the wire types, a client over its unix socket, its capabilities,
//! and what each kind of failure means.

pub mod capabilities;
pub mod client;
pub mod error;
pub mod proto;

pub use capabilities::{
    ControllerCapabilities, ControllerCapability, ExpansionMode, PluginCapabilities,
};
pub use client::{CsiClient, DriverInfo, socket_path};
pub use error::{CsiError, ErrorClass, Operation, classify};
pub use proto::v1;
