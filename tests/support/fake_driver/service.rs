//! The fake's Identity, Controller and Node services: each call is logged, answers a scripted
//! fault if one is due, and otherwise acts on the volumes as a driver would.

use std::collections::HashMap;
use std::sync::Arc;

use csi::controller_server::Controller;
use csi::identity_server::Identity;
use csi::node_server::Node;
use csi_pv_controller::csi::v1 as csi;
use tonic::{Request, Response, Status};

use super::{Call, DEFAULT_VOLUME_SIZE, FakeVolume, Fault, Shared, TOPOLOGY_KEY};

/// The fake's gRPC services over its shared state.
#[derive(Clone)]
pub(super) struct Service(pub(super) Arc<Shared>);

fn invalid(message: impl Into<String>) -> Status {
    Status::invalid_argument(message)
}

fn validate_capabilities(caps: &[csi::VolumeCapability]) -> Result<(), Status> {
    use csi::volume_capability::access_mode::Mode;
    if caps.is_empty() {
        return Err(invalid("volume_capabilities must not be empty"));
    }
    for cap in caps {
        if cap.access_type.is_none() {
            return Err(invalid("volume capability without block or mount access type"));
        }
        match cap.access_mode.as_ref().map(|m| m.mode()) {
            None | Some(Mode::Unknown) => {
                return Err(invalid("volume capability without access mode"));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

impl Service {
    fn rpc_capability(
        t: csi::controller_service_capability::rpc::Type,
    ) -> csi::ControllerServiceCapability {
        csi::ControllerServiceCapability {
            r#type: Some(csi::controller_service_capability::Type::Rpc(
                csi::controller_service_capability::Rpc { r#type: t as i32 },
            )),
        }
    }

    fn topology(&self) -> Vec<csi::Topology> {
        if self.0.config.topology {
            vec![csi::Topology {
                segments: [(TOPOLOGY_KEY.to_string(), self.0.config.node_id.clone())].into(),
            }]
        } else {
            vec![]
        }
    }

    /// Crashes the driver after the work was done; the status is never seen, the connection is
    /// gone before it could be sent.
    fn crashed(&self) -> Status {
        self.0.crash();
        Status::unavailable("driver crashed")
    }

    fn volume_message(v: &FakeVolume) -> csi::Volume {
        csi::Volume {
            capacity_bytes: v.capacity_bytes,
            volume_id: v.id.clone(),
            volume_context: v.parameters.clone(),
            content_source: v.content_source.clone(),
            accessible_topology: v.accessible_topology.clone(),
        }
    }
}

#[tonic::async_trait]
impl Identity for Service {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        self.0.enter(Call::GetPluginInfo).await?;
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.0.config.name.clone(),
            vendor_version: self.0.config.vendor_version.clone(),
            manifest: HashMap::new(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        use csi::plugin_capability::{
            Service as Svc, Type, VolumeExpansion, service, volume_expansion,
        };
        self.0.enter(Call::GetPluginCapabilities).await?;
        let service = |t: service::Type| csi::PluginCapability {
            r#type: Some(Type::Service(Svc { r#type: t as i32 })),
        };
        let mut capabilities = vec![service(service::Type::ControllerService)];
        if self.0.config.topology {
            capabilities.push(service(service::Type::VolumeAccessibilityConstraints));
        }
        if let Some(online) = self.0.config.online_expansion {
            let t = if online {
                volume_expansion::Type::Online
            } else {
                volume_expansion::Type::Offline
            };
            capabilities.push(csi::PluginCapability {
                r#type: Some(Type::VolumeExpansion(VolumeExpansion { r#type: t as i32 })),
            });
        }
        Ok(Response::new(csi::GetPluginCapabilitiesResponse { capabilities }))
    }

    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        self.0.enter(Call::Probe).await?;
        let ready = self.0.state().ready;
        Ok(Response::new(csi::ProbeResponse { ready: Some(ready) }))
    }
}

#[tonic::async_trait]
impl Controller for Service {
    async fn controller_get_capabilities(
        &self,
        _: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        use csi::controller_service_capability::rpc::Type;
        self.0.enter(Call::ControllerGetCapabilities).await?;
        let c = &self.0.config;
        let mut types = vec![Type::CreateDeleteVolume];
        if c.controller_expansion {
            types.push(Type::ExpandVolume);
        }
        if c.clone {
            types.push(Type::CloneVolume);
        }
        if c.publish_unpublish {
            types.push(Type::PublishUnpublishVolume);
        }
        if c.single_node_multi_writer {
            types.push(Type::SingleNodeMultiWriter);
        }
        if c.list_volumes {
            types.push(Type::ListVolumes);
        }
        Ok(Response::new(csi::ControllerGetCapabilitiesResponse {
            capabilities: types.into_iter().map(Self::rpc_capability).collect(),
        }))
    }

    async fn list_volumes(
        &self,
        request: Request<csi::ListVolumesRequest>,
    ) -> Result<Response<csi::ListVolumesResponse>, Status> {
        let req = request.into_inner();
        self.0.enter(Call::ListVolumes(req.clone())).await?;
        if !self.0.config.list_volumes {
            return Err(Status::unimplemented("ListVolumes is off"));
        }
        let start: usize = match req.starting_token.as_str() {
            "" => 0,
            token => token.parse().map_err(|_| Status::aborted("starting_token is not ours"))?,
        };
        let state = self.0.state();
        let total = state.volumes.len();
        let take = match usize::try_from(req.max_entries) {
            Ok(0) | Err(_) => total,
            Ok(n) => n,
        };
        let entries: Vec<_> = state
            .volumes
            .values()
            .skip(start)
            .take(take)
            .map(|v| csi::list_volumes_response::Entry {
                volume: Some(Self::volume_message(v)),
                status: None,
            })
            .collect();
        let end = start + entries.len();
        let next_token = if end < total { end.to_string() } else { String::new() };
        Ok(Response::new(csi::ListVolumesResponse { entries, next_token }))
    }

    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> Result<Response<csi::CreateVolumeResponse>, Status> {
        self.0.note_caller(&request, "CreateVolume");
        let req = request.into_inner();
        let answer_fault = self.0.enter(Call::CreateVolume(req.clone())).await?;
        if req.name.is_empty() {
            return Err(invalid("name must not be empty"));
        }
        validate_capabilities(&req.volume_capabilities)?;
        let (required, limit) =
            req.capacity_range.as_ref().map_or((0, 0), |r| (r.required_bytes, r.limit_bytes));
        if required < 0 || limit < 0 {
            return Err(Status::out_of_range("capacity must not be negative"));
        }
        if limit > 0 && required > limit {
            return Err(Status::out_of_range("required_bytes exceeds limit_bytes"));
        }
        let size = match (required, limit) {
            (0, 0) => DEFAULT_VOLUME_SIZE.min(self.0.config.max_volume_size),
            (0, l) => l.min(DEFAULT_VOLUME_SIZE),
            (r, _) => r,
        };
        if size > self.0.config.max_volume_size {
            return Err(Status::out_of_range(format!(
                "requested {size} bytes, more than the maximum {}",
                self.0.config.max_volume_size
            )));
        }
        let volume = {
            let mut state = self.0.state();
            if let Some(existing) = state.volumes.values().find(|v| v.name == req.name) {
                if existing.capacity_bytes < required
                    || (limit > 0 && existing.capacity_bytes > limit)
                {
                    return Err(Status::already_exists(format!(
                        "volume {} exists with {} bytes",
                        req.name, existing.capacity_bytes
                    )));
                }
                if existing.content_source != req.volume_content_source {
                    return Err(Status::already_exists(format!(
                        "volume {} exists with another content source",
                        req.name
                    )));
                }
                existing.clone()
            } else {
                if let Some(source) = &req.volume_content_source {
                    use csi::volume_content_source::Type;
                    match &source.r#type {
                        Some(Type::Volume(v)) if self.0.config.clone => {
                            if !state.volumes.contains_key(&v.volume_id) {
                                return Err(Status::not_found(format!(
                                    "source volume {} not found",
                                    v.volume_id
                                )));
                            }
                        }
                        Some(Type::Snapshot(s)) => {
                            return Err(Status::not_found(format!(
                                "snapshot {} not found",
                                s.snapshot_id
                            )));
                        }
                        _ => return Err(invalid("unsupported volume content source")),
                    }
                }
                let accessible_topology = match &req.accessibility_requirements {
                    Some(t) if self.0.config.topology => t
                        .preferred
                        .first()
                        .or(t.requisite.first())
                        .cloned()
                        .map(|t| vec![t])
                        .unwrap_or_else(|| self.topology()),
                    _ => self.topology(),
                };
                state.next_id += 1;
                let volume = FakeVolume {
                    id: match self.0.config.ids_carry_names {
                        true => format!("fake/{}", req.name),
                        false => format!("fake-vol-{:06}", state.next_id),
                    },
                    name: req.name.clone(),
                    capacity_bytes: size,
                    parameters: req.parameters.clone(),
                    content_source: req.volume_content_source.clone(),
                    accessible_topology,
                };
                state.volumes.insert(volume.id.clone(), volume.clone());
                volume
            }
        };
        let mut answer = Self::volume_message(&volume);
        match answer_fault {
            Some(Fault::CapacityBytes(b)) => answer.capacity_bytes = b,
            Some(Fault::EmptyVolumeId) => answer.volume_id.clear(),
            Some(Fault::CrashAfter) => return Err(self.crashed()),
            _ => {}
        }
        Ok(Response::new(csi::CreateVolumeResponse { volume: Some(answer) }))
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        self.0.note_caller(&request, "DeleteVolume");
        let req = request.into_inner();
        let answer_fault = self.0.enter(Call::DeleteVolume(req.clone())).await?;
        if req.volume_id.is_empty() {
            return Err(invalid("volume_id must not be empty"));
        }
        self.0.state().volumes.remove(&req.volume_id);
        if let Some(Fault::CrashAfter) = answer_fault {
            return Err(self.crashed());
        }
        Ok(Response::new(csi::DeleteVolumeResponse {}))
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        let req = request.into_inner();
        self.0.enter(Call::ValidateVolumeCapabilities(req.clone())).await?;
        if req.volume_id.is_empty() {
            return Err(invalid("volume_id must not be empty"));
        }
        validate_capabilities(&req.volume_capabilities)?;
        if !self.0.state().volumes.contains_key(&req.volume_id) {
            return Err(Status::not_found(format!("volume {} not found", req.volume_id)));
        }
        Ok(Response::new(csi::ValidateVolumeCapabilitiesResponse {
            confirmed: Some(csi::validate_volume_capabilities_response::Confirmed {
                volume_context: req.volume_context,
                volume_capabilities: req.volume_capabilities,
                parameters: req.parameters,
                mutable_parameters: req.mutable_parameters,
            }),
            message: String::new(),
        }))
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Result<Response<csi::ControllerExpandVolumeResponse>, Status> {
        self.0.note_caller(&request, "ControllerExpandVolume");
        let req = request.into_inner();
        let answer_fault = self.0.enter(Call::ControllerExpandVolume(req.clone())).await?;
        if !self.0.config.controller_expansion {
            return Err(Status::unimplemented("controller expansion is off"));
        }
        if req.volume_id.is_empty() {
            return Err(invalid("volume_id must not be empty"));
        }
        let Some(range) = req.capacity_range else {
            return Err(invalid("capacity_range must be set"));
        };
        if range.required_bytes < 0 || range.limit_bytes < 0 {
            return Err(Status::out_of_range("capacity must not be negative"));
        }
        if range.required_bytes > self.0.config.max_volume_size {
            return Err(Status::out_of_range(format!(
                "requested {} bytes, more than the maximum {}",
                range.required_bytes, self.0.config.max_volume_size
            )));
        }
        let capacity = {
            let mut state = self.0.state();
            if self.0.config.online_expansion == Some(false)
                && state.published.contains(&req.volume_id)
            {
                return Err(Status::failed_precondition(format!(
                    "volume {} is in use and this driver only expands offline",
                    req.volume_id
                )));
            }
            let Some(volume) = state.volumes.get_mut(&req.volume_id) else {
                return Err(Status::not_found(format!("volume {} not found", req.volume_id)));
            };
            // Never shrinks: asking for less than the volume has succeeds with its current size.
            volume.capacity_bytes = volume.capacity_bytes.max(range.required_bytes);
            volume.capacity_bytes
        };
        let capacity_bytes = match answer_fault {
            Some(Fault::CapacityBytes(b)) => b,
            Some(Fault::CrashAfter) => return Err(self.crashed()),
            _ => capacity,
        };
        Ok(Response::new(csi::ControllerExpandVolumeResponse {
            capacity_bytes,
            node_expansion_required: self.0.config.node_expansion_required,
        }))
    }
}

#[tonic::async_trait]
impl Node for Service {
    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        use csi::node_service_capability::{Rpc, Type, rpc};
        self.0.enter(Call::NodeGetCapabilities).await?;
        let capabilities = if self.0.config.node_expansion_required {
            vec![csi::NodeServiceCapability {
                r#type: Some(Type::Rpc(Rpc { r#type: rpc::Type::ExpandVolume as i32 })),
            }]
        } else {
            vec![]
        };
        Ok(Response::new(csi::NodeGetCapabilitiesResponse { capabilities }))
    }

    /// Nothing is ever published by the fake, so unpublishing always succeeds (csi-sanity's
    /// cleanup calls it for every volume it created).
    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0.enter(Call::NodeUnpublishVolume(req.clone())).await?;
        if req.volume_id.is_empty() || req.target_path.is_empty() {
            return Err(invalid("volume_id and target_path must not be empty"));
        }
        Ok(Response::new(csi::NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        self.0.enter(Call::NodeGetInfo).await?;
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.0.config.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: self.topology().into_iter().next(),
        }))
    }
}
