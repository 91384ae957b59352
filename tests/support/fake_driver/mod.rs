//! A fault-injecting, in-memory CSI driver (Identity, Controller and the Node calls csi-sanity's
//! controller specs touch), served on a real unix socket.
//!
//! Volumes are idempotent by name, as the spec asks. Tests script faults per method (an error code
//! for the next N calls, latency, a hang until released, nonsense answers), stop the server (the
//! socket disappears, as when the driver crashes) and start it again with its volumes intact, and
//! read the log of every call it received.

#![allow(dead_code)] // each test binary uses a different part of the support code

mod service;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use csi::controller_server::ControllerServer;
use csi::identity_server::IdentityServer;
use csi::node_server::NodeServer;
use csi_pv_controller::csi::v1 as csi;
use tokio::net::UnixListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Code, Request, Status};

use service::Service;

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
