//! The driver calls the executor makes, behind one trait: `CsiClient` answers them over the
//! driver's socket; tests answer them in memory.

use futures::future::BoxFuture;

use super::{CsiClient, CsiError, v1 as csi};

/// What the driver answers, later.
pub type Answer<'a, T> = BoxFuture<'a, Result<T, CsiError>>;

/// The state-changing calls of the CSI Controller service, and Probe.
pub trait Driver: Send + Sync {
    fn create_volume(&self, request: csi::CreateVolumeRequest) -> Answer<'_, csi::Volume>;

    fn delete_volume(&self, request: csi::DeleteVolumeRequest) -> Answer<'_, ()>;

    fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
    ) -> Answer<'_, csi::ControllerExpandVolumeResponse>;

    fn controller_modify_volume(
        &self,
        request: csi::ControllerModifyVolumeRequest,
    ) -> Answer<'_, ()>;

    /// Whether the driver says it is ready.
    fn probe(&self) -> Answer<'_, bool>;

    /// DeleteVolume, where a volume the driver does not know counts as deleted (the spec's
    /// NOT_FOUND: deleted already, by us before a crash or by someone else).
    fn delete_volume_if_present(
        &self,
        volume_id: &str,
        secrets: std::collections::HashMap<String, String>,
    ) -> Answer<'_, ()> {
        let call = self
            .delete_volume(csi::DeleteVolumeRequest { volume_id: volume_id.to_string(), secrets });
        Box::pin(async move {
            match call.await {
                Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(()),
                other => other,
            }
        })
    }
}

/// Each call goes to `CsiClient`'s own method of that name.
macro_rules! delegate {
    ($($call:ident($request:ty) -> $out:ty;)*) => {$(
        fn $call(&self, request: $request) -> Answer<'_, $out> {
            Box::pin(CsiClient::$call(self, request))
        }
    )*};
}

impl Driver for CsiClient {
    delegate! {
        create_volume(csi::CreateVolumeRequest) -> csi::Volume;
        delete_volume(csi::DeleteVolumeRequest) -> ();
        controller_expand_volume(csi::ControllerExpandVolumeRequest) -> csi::ControllerExpandVolumeResponse;
        controller_modify_volume(csi::ControllerModifyVolumeRequest) -> ();
    }

    fn probe(&self) -> Answer<'_, bool> {
        Box::pin(CsiClient::probe(self))
    }
}
