//! A fault-injecting, in-memory CSI driver (Identity, Controller and the Node calls csi-sanity's
//! controller specs touch), served on a real unix socket.
//!
//! Volumes are idempotent by name, as the spec asks. Tests script faults per method (an error code
//! for the next N calls, latency, a hang until released, nonsense answers), stop the server (the
//! socket disappears, as when the driver crashes) and start it again with its volumes intact, and
//! read the log of every call it received.

#![allow(dead_code)] // each test binary uses a different part of the support code

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use csi::controller_server::{Controller, ControllerServer};
use csi::identity_server::{Identity, IdentityServer};
use csi::node_server::{Node, NodeServer};
use csi_pv_controller::csi::v1 as csi;
use tokio::net::UnixListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Code, Request, Response, Status};

/// The largest volume the fake creates, like hostpathplugin's --max-volume-size.
pub const DEFAULT_MAX_VOLUME_SIZE: i64 = 1 << 40;
/// The size of a volume created without a capacity range.
pub const DEFAULT_VOLUME_SIZE: i64 = 1 << 30;
/// The topology key the fake reports when topology is on.
pub const TOPOLOGY_KEY: &str = "topology.fake.csi/node";

/// What the fake driver claims to be and to support.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub name: String,
    pub vendor_version: String,
    /// Controller EXPAND_VOLUME.
    pub controller_expansion: bool,
    /// Plugin VolumeExpansion capability: Some(true) ONLINE, Some(false) OFFLINE.
    pub online_expansion: Option<bool>,
    /// Node EXPAND_VOLUME, and what ControllerExpandVolume answers in node_expansion_required.
    pub node_expansion_required: bool,
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS; volumes are reported accessible from `node_id`.
    pub topology: bool,
    pub clone: bool,
    pub single_node_multi_writer: bool,
    /// PUBLISH_UNPUBLISH_VOLUME: volumes are attached to nodes (VolumeAttachments).
    pub publish_unpublish: bool,
    pub node_id: String,
    pub max_volume_size: i64,
    /// LIST_VOLUMES, paged by max_entries and a decimal index token.
    pub list_volumes: bool,
    /// Volume IDs `fake/<name>`, as drivers that keep the CreateVolume name in the ID (disk
    /// paths); else `fake-vol-<n>`, an ID of the driver's own.
    pub ids_carry_names: bool,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            name: "fake.csi.test".into(),
            vendor_version: "0.1.0".into(),
            controller_expansion: true,
            online_expansion: Some(true),
            node_expansion_required: false,
            topology: false,
            clone: true,
            single_node_multi_writer: true,
            publish_unpublish: false,
            node_id: "fake-node".into(),
            max_volume_size: DEFAULT_MAX_VOLUME_SIZE,
            list_volumes: false,
            ids_carry_names: false,
        }
    }
}

/// One scripted behaviour, consumed by one call of the method it was injected for.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status instead of doing anything.
    Error(Code, String),
    /// Wait this long, then behave normally.
    Delay(Duration),
    /// Wait until [`FakeDriver::release`] (or until the caller gives up), then behave normally.
    Hang,
    /// Do the work, but report this capacity_bytes (CreateVolume, ControllerExpandVolume).
    CapacityBytes(i64),
    /// Do the work, but report an empty volume_id (CreateVolume).
    EmptyVolumeId,
    /// Crash on receipt, before doing anything (see [`FakeDriver::stop`]).
    CrashBefore,
    /// Do the work, then crash before answering: the caller never learns that it succeeded
    /// (CreateVolume, DeleteVolume, ControllerExpandVolume).
    CrashAfter,
}

/// A request the fake received, kept whole so tests can assert on every field (secrets too).
#[derive(Debug, Clone)]
pub enum Call {
    Probe,
    GetPluginInfo,
    GetPluginCapabilities,
    ControllerGetCapabilities,
    CreateVolume(csi::CreateVolumeRequest),
    DeleteVolume(csi::DeleteVolumeRequest),
    ControllerExpandVolume(csi::ControllerExpandVolumeRequest),
    ValidateVolumeCapabilities(csi::ValidateVolumeCapabilitiesRequest),
    NodeGetInfo,
    NodeGetCapabilities,
    NodeUnpublishVolume(csi::NodeUnpublishVolumeRequest),
    ListVolumes(csi::ListVolumesRequest),
}

impl Call {
    pub fn method(&self) -> &'static str {
        match self {
            Call::Probe => "Probe",
            Call::GetPluginInfo => "GetPluginInfo",
            Call::GetPluginCapabilities => "GetPluginCapabilities",
            Call::ControllerGetCapabilities => "ControllerGetCapabilities",
            Call::CreateVolume(_) => "CreateVolume",
            Call::DeleteVolume(_) => "DeleteVolume",
            Call::ControllerExpandVolume(_) => "ControllerExpandVolume",
            Call::ValidateVolumeCapabilities(_) => "ValidateVolumeCapabilities",
            Call::NodeGetInfo => "NodeGetInfo",
            Call::NodeGetCapabilities => "NodeGetCapabilities",
            Call::NodeUnpublishVolume(_) => "NodeUnpublishVolume",
            Call::ListVolumes(_) => "ListVolumes",
        }
    }
}

/// A volume held by the fake.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeVolume {
    pub id: String,
    pub name: String,
    pub capacity_bytes: i64,
    pub parameters: HashMap<String, String>,
    pub content_source: Option<csi::VolumeContentSource>,
    pub accessible_topology: Vec<csi::Topology>,
}

#[derive(Default)]
struct State {
    volumes: BTreeMap<String, FakeVolume>, // by id
    next_id: u64,
    faults: HashMap<&'static str, VecDeque<Fault>>,
    calls: Vec<Call>,
    /// The state-changing calls, with when they came and the calling process (from the
    /// socket's peer credentials): which replica called, when several share the driver.
    callers: Vec<(std::time::SystemTime, Option<i32>, &'static str)>,
    /// Volume ids in use on a node (as a workload would have them).
    published: std::collections::HashSet<String>,
    ready: bool,
}

struct Shared {
    config: DriverConfig,
    state: Mutex<State>,
    release: Notify,
    socket: PathBuf,
    server: Mutex<Option<JoinHandle<()>>>,
    /// Duplicates of every accepted connection, so that a crash can cut them (aborting the
    /// accept loop alone leaves served connections running).
    connections: Mutex<Vec<std::os::unix::net::UnixStream>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Dies as a killed driver process would: the server stops, open connections drop, the
    /// socket file goes away.
    fn crash(&self) {
        if let Some(task) = lock(&self.server).take() {
            task.abort();
        }
        for connection in lock(&self.connections).drain(..) {
            let _ = connection.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    fn note_caller<T>(&self, request: &Request<T>, method: &'static str) {
        let pid = request
            .extensions()
            .get::<tonic::transport::server::UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .and_then(|cred| cred.pid());
        self.state().callers.push((std::time::SystemTime::now(), pid, method));
    }

    /// Records the call and applies the next scripted fault for its method. Returns a fault that
    /// changes the answer (CapacityBytes, EmptyVolumeId), to be applied by the caller.
    async fn enter(&self, call: Call) -> Result<Option<Fault>, Status> {
        let method = call.method();
        let fault = {
            let mut state = self.state();
            state.calls.push(call);
            state.faults.get_mut(method).and_then(|q| q.pop_front())
        };
        match fault {
            None => Ok(None),
            Some(Fault::Error(code, message)) => Err(Status::new(code, message)),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(None)
            }
            Some(Fault::Hang) => {
                self.release.notified().await;
                Ok(None)
            }
            Some(Fault::CrashBefore) => {
                self.crash();
                Err(Status::unavailable("driver crashed"))
            }
            Some(f @ (Fault::CapacityBytes(_) | Fault::EmptyVolumeId | Fault::CrashAfter)) => {
                Ok(Some(f))
            }
        }
    }
}

/// The running fake. Dropping it stops the server.
pub struct FakeDriver {
    shared: Arc<Shared>,
}

impl FakeDriver {
    /// Serves a new fake on `socket` (its parent must exist; an old socket file is replaced).
    pub async fn start(socket: &Path, config: DriverConfig) -> std::io::Result<FakeDriver> {
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State { ready: true, ..State::default() }),
            release: Notify::new(),
            socket: socket.to_path_buf(),
            server: Mutex::new(None),
            connections: Mutex::default(),
        });
        let driver = FakeDriver { shared };
        driver.serve()?;
        Ok(driver)
    }

    fn serve(&self) -> std::io::Result<()> {
        let _ = std::fs::remove_file(&self.shared.socket);
        let listener = UnixListener::bind(&self.shared.socket)?;
        let service = Service(self.shared.clone());
        let shared = self.shared.clone();
        let incoming = UnixListenerStream::new(listener).map(move |accepted| {
            if let Ok(stream) = &accepted
                && let Ok(fd) = stream.as_fd().try_clone_to_owned()
            {
                lock(&shared.connections).push(std::os::unix::net::UnixStream::from(fd));
            }
            accepted
        });
        let server = tonic::transport::Server::builder()
            .add_service(IdentityServer::new(service.clone()))
            .add_service(ControllerServer::new(service.clone()))
            .add_service(NodeServer::new(service))
            .serve_with_incoming(incoming);
        let task = tokio::spawn(async move {
            if let Err(e) = server.await {
                eprintln!("fake CSI driver stopped: {e}");
            }
        });
        *lock(&self.shared.server) = Some(task);
        Ok(())
    }

    pub fn socket(&self) -> &Path {
        &self.shared.socket
    }

    /// `unix://` address of the socket.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.shared.socket.display())
    }

    pub fn config(&self) -> &DriverConfig {
        &self.shared.config
    }

    /// Kills the server as a crash would: open connections drop, the socket file goes away.
    pub fn stop(&self) {
        self.shared.crash();
    }

    /// Serves again on the same socket, with the volumes it had.
    pub async fn restart(&self) -> std::io::Result<()> {
        self.stop();
        tokio::task::yield_now().await;
        self.serve()
    }

    /// Queues `fault` for the next call of `method` after those already queued.
    pub fn inject(&self, method: &'static str, fault: Fault) {
        self.shared.state().faults.entry(method).or_default().push_back(fault);
    }

    /// The next `times` calls of `method` fail with `code`.
    pub fn fail(&self, method: &'static str, code: Code, times: usize) {
        for _ in 0..times {
            self.inject(method, Fault::Error(code, format!("injected {code:?}")));
        }
    }

    /// Drops the faults still queued for `method`.
    pub fn clear_faults(&self, method: &'static str) {
        self.shared.state().faults.remove(method);
    }

    /// Marks a volume as in use on a node, or no longer. An OFFLINE-expansion driver refuses to
    /// expand it meanwhile with FailedPrecondition, as the CSI spec asks.
    pub fn set_published(&self, volume_id: &str, published: bool) {
        let mut state = self.shared.state();
        if published {
            state.published.insert(volume_id.to_string());
        } else {
            state.published.remove(volume_id);
        }
    }

    /// Lets every call hanging on [`Fault::Hang`] go on.
    pub fn release(&self) {
        self.shared.release.notify_waiters();
    }

    /// What Probe reports.
    pub fn set_ready(&self, ready: bool) {
        self.shared.state().ready = ready;
    }

    pub fn calls(&self) -> Vec<Call> {
        self.shared.state().calls.clone()
    }

    /// The state-changing calls (CreateVolume, DeleteVolume, ControllerExpandVolume): when,
    /// from which process, which method.
    pub fn callers(&self) -> Vec<(std::time::SystemTime, Option<i32>, &'static str)> {
        self.shared.state().callers.clone()
    }

    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.method() == method).collect()
    }

    /// The volume ids of every DeleteVolume call, in order.
    pub fn deleted_ids(&self) -> Vec<String> {
        self.calls_of("DeleteVolume")
            .into_iter()
            .filter_map(|c| match c {
                Call::DeleteVolume(r) => Some(r.volume_id),
                _ => None,
            })
            .collect()
    }

    /// How many volumes exist, without copying them.
    pub fn volume_count(&self) -> usize {
        self.shared.state().volumes.len()
    }

    pub fn volumes(&self) -> Vec<FakeVolume> {
        self.shared.state().volumes.values().cloned().collect()
    }

    /// A volume made behind the sidecar's back (or left by someone else).
    pub fn add_volume(&self, id: &str, name: &str, capacity_bytes: i64) {
        let volume = FakeVolume {
            id: id.to_string(),
            name: name.to_string(),
            capacity_bytes,
            parameters: HashMap::new(),
            content_source: None,
            accessible_topology: Vec::new(),
        };
        self.shared.state().volumes.insert(id.to_string(), volume);
    }

    /// A volume deleted behind the sidecar's back.
    pub fn remove_volume(&self, id: &str) -> bool {
        self.shared.state().volumes.remove(id).is_some()
    }
}

impl Drop for FakeDriver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A panicking test thread may poison a lock; the data is still what the test needs.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Clone)]
struct Service(Arc<Shared>);

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
