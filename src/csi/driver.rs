//! The driver calls the executor makes, behind one trait: `CsiClient` answers them over the
//! driver's socket; tests answer them in memory.

use futures::future::BoxFuture;

use super::{CsiClient, CsiError, v1 as csi};

/// The state-changing calls of the CSI Controller service, and Probe.
pub trait Driver: Send + Sync {
    fn create_volume(
        &self,
        request: csi::CreateVolumeRequest,
    ) -> BoxFuture<'_, Result<csi::Volume, CsiError>>;

    fn delete_volume(
        &self,
        request: csi::DeleteVolumeRequest,
    ) -> BoxFuture<'_, Result<(), CsiError>>;

    fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
    ) -> BoxFuture<'_, Result<csi::ControllerExpandVolumeResponse, CsiError>>;

    fn controller_modify_volume(
        &self,
        request: csi::ControllerModifyVolumeRequest,
    ) -> BoxFuture<'_, Result<(), CsiError>>;

    /// Whether the driver says it is ready.
    fn probe(&self) -> BoxFuture<'_, Result<bool, CsiError>>;
}

impl Driver for CsiClient {
    fn create_volume(
        &self,
        request: csi::CreateVolumeRequest,
    ) -> BoxFuture<'_, Result<csi::Volume, CsiError>> {
        Box::pin(CsiClient::create_volume(self, request))
    }

    fn delete_volume(
        &self,
        request: csi::DeleteVolumeRequest,
    ) -> BoxFuture<'_, Result<(), CsiError>> {
        Box::pin(CsiClient::delete_volume(self, request))
    }

    fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
    ) -> BoxFuture<'_, Result<csi::ControllerExpandVolumeResponse, CsiError>> {
        Box::pin(CsiClient::controller_expand_volume(self, request))
    }

    fn controller_modify_volume(
        &self,
        request: csi::ControllerModifyVolumeRequest,
    ) -> BoxFuture<'_, Result<(), CsiError>> {
        Box::pin(CsiClient::controller_modify_volume(self, request))
    }

    fn probe(&self) -> BoxFuture<'_, Result<bool, CsiError>> {
        Box::pin(CsiClient::probe(self))
    }
}
