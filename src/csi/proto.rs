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

#[cfg(test)]
mod tests {
    use super::v1::*;

    const SECRET: &str = "s3cr3t-value";

    /// Formats each message with a secret in it and checks the value never shows, while an
    /// ordinary field still does.
    macro_rules! assert_redacted {
        ($($message:ident),* $(,)?) => {{
            let mut checked = Vec::new();
            $(
                // Some messages have no field but the secrets.
                #[allow(clippy::needless_update)]
                let m = $message {
                    secrets: [("password".to_string(), SECRET.to_string())].into(),
                    ..Default::default()
                };
                let text = format!("{m:?} {m:#?}");
                assert!(!text.contains(SECRET), "{} leaks its secret: {text}", stringify!($message));
                assert!(text.contains("<1 redacted>"), "{}: {text}", stringify!($message));
                checked.push(stringify!($message));
            )*
            checked
        }};
    }

    #[test]
    fn every_message_with_secrets_redacts_them() {
        let mut checked = assert_redacted!(
            ControllerExpandVolumeRequest,
            ControllerGetVolumeHealthRequest,
            ControllerListVolumeHealthRequest,
            ControllerModifyVolumeRequest,
            ControllerPublishVolumeRequest,
            ControllerUnpublishVolumeRequest,
            CreateSnapshotRequest,
            CreateVolumeGroupSnapshotRequest,
            CreateVolumeRequest,
            DeleteSnapshotRequest,
            DeleteVolumeGroupSnapshotRequest,
            DeleteVolumeRequest,
            GetMetadataAllocatedRequest,
            GetMetadataDeltaRequest,
            GetSnapshotRequest,
            GetVolumeGroupSnapshotRequest,
            ListSnapshotsRequest,
            NodeExpandVolumeRequest,
            NodeGetStorageHealthRequest,
            NodePublishVolumeRequest,
            NodeStageVolumeRequest,
            ValidateVolumeCapabilitiesRequest,
        );
        checked.sort();
        // build.rs found exactly these in proto/csi.proto: a new secret field fails here.
        assert_eq!(checked, REDACTED_MESSAGES);
    }

    #[test]
    fn ordinary_fields_still_print() {
        let m = CreateVolumeRequest {
            name: "pvc-1234".into(),
            parameters: [("type".to_string(), "fast".to_string())].into(),
            secrets: [("token".to_string(), SECRET.to_string())].into(),
            ..Default::default()
        };
        let text = format!("{m:?}");
        assert!(text.contains("pvc-1234") && text.contains("fast"), "{text}");
        assert!(!text.contains(SECRET) && !text.contains("token"), "{text}");
    }
}

/// kubelet's plugin registration API (proto/pluginregistration.proto), as a client only: the
/// tests check with it the registrar that announces a driver to the test node's kubelet
/// (peers/registrar, in place of node-driver-registrar). The sidecar never uses it.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}
