//! The driver calls the executor makes, behind one trait: `CsiClient` answers them over the
//! driver's socket; tests answer them in memory.

use futures::future::BoxFuture;

use super::{CsiClient, CsiError, v1 as csi};

/// What the driver answers, later.
pub type Answer<'a, T> = BoxFuture<'a, Result<T, CsiError>>;

/// Whether a call is about a volume of an in-tree plugin served through CSI migration: its
/// metrics carry `migrated="true"` (csi-lib-utils' label, for migration drivers only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum About {
    #[default]
    Csi,
    Migrated,
}

impl About {
    pub fn migrated(migrated: bool) -> About {
        if migrated { About::Migrated } else { About::Csi }
    }
}

/// The state-changing calls of the CSI Controller service, and Probe.
pub trait Driver: Send + Sync {
    fn create_volume(
        &self,
        request: csi::CreateVolumeRequest,
        about: About,
    ) -> Answer<'_, csi::Volume>;

    fn delete_volume(&self, request: csi::DeleteVolumeRequest, about: About) -> Answer<'_, ()>;

    fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
        about: About,
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
        about: About,
    ) -> Answer<'_, ()> {
        let request = csi::DeleteVolumeRequest { volume_id: volume_id.to_string(), secrets };
        let call = self.delete_volume(request, about);
        Box::pin(async move {
            match call.await {
                Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(()),
                other => other,
            }
        })
    }
}

/// Each call goes to `CsiClient`'s own method of that name (`_about` where it says whether
/// the volume is a migrated one).
impl Driver for CsiClient {
    fn create_volume(
        &self,
        request: csi::CreateVolumeRequest,
        about: About,
    ) -> Answer<'_, csi::Volume> {
        Box::pin(self.create_volume_about(request, about == About::Migrated))
    }

    fn delete_volume(&self, request: csi::DeleteVolumeRequest, about: About) -> Answer<'_, ()> {
        Box::pin(self.delete_volume_about(request, about == About::Migrated))
    }

    fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
        about: About,
    ) -> Answer<'_, csi::ControllerExpandVolumeResponse> {
        Box::pin(self.controller_expand_volume_about(request, about == About::Migrated))
    }

    fn controller_modify_volume(
        &self,
        request: csi::ControllerModifyVolumeRequest,
    ) -> Answer<'_, ()> {
        Box::pin(CsiClient::controller_modify_volume(self, request))
    }

    fn probe(&self) -> Answer<'_, bool> {
        Box::pin(CsiClient::probe(self))
    }
}
