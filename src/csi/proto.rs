//! The CSI v1 messages and gRPC stubs generated from proto/csi.proto.

use std::fmt;

/// Package `csi.v1`: clients for the driver and, for the fake driver in tests, servers.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("csi.v1");
    // Debug impls for messages with (csi_secret) fields; see build.rs.
    include!(concat!(env!("OUT_DIR"), "/csi_secret_debug.rs"));
}

/// Stands in for a secrets map in Debug output: how many entries there were, never their content.
pub struct Redacted(pub usize);

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} redacted>", self.0)
    }
}
