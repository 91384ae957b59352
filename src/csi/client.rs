//! A CSI client over the driver's unix socket: readiness, discovery and typed calls with deadlines.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};
use tracing::{info, trace, warn};

use super::capabilities::{ControllerCapabilities, ControllerCapability, PluginCapabilities};
use super::error::CsiError;
use super::proto::v1 as csi;
use csi::controller_client::ControllerClient;
use csi::identity_client::IdentityClient;
use csi::node_client::NodeClient;

/// What the driver told us about itself.
#[derive(Debug, Clone)]
pub struct DriverInfo {
    pub name: String,
    pub vendor_version: String,
    pub plugin: PluginCapabilities,
    pub controller: ControllerCapabilities,
    /// Node EXPAND_VOLUME, asked on the controller socket only when the controller cannot
    /// expand: such a driver grows volumes on the node alone.
    pub node_expansion: bool,
}

/// Resolves `--csi-address`: `unix:///abs/path`, `unix:relative/path` or a bare path. Only unix
/// sockets are supported; relative paths are taken from the current directory.
pub fn socket_path(address: &str) -> Result<PathBuf, CsiError> {
    let invalid = |reason: &str| CsiError::Address {
        address: address.to_string(),
        reason: reason.to_string(),
    };
    let path = if let Some(rest) = address.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = address.strip_prefix("unix:") {
        rest
    } else if address.contains("://") {
        return Err(invalid("only unix:// sockets are supported"));
    } else {
        address
    };
    if path.is_empty() {
        return Err(invalid("no socket path"));
    }
    std::path::absolute(path).map_err(|e| invalid(&e.to_string()))
}

/// A cheap-to-clone handle on one HTTP/2 connection to the driver. When the driver restarts, the
/// next call dials the socket again; calls made while it is away fail as Unavailable.
#[derive(Clone)]
pub struct CsiClient {
    channel: Channel,
    path: PathBuf,
    timeout: Duration,
    /// Each sidecar's own deadline for its calls, where its args were marked.
    role_timeouts: super::RoleTimeouts,
    /// The driver's name once discovered: the `driver_name` label of the call metrics.
    driver: std::sync::Arc<std::sync::OnceLock<String>>,
    /// Calls that change the driver's state go only while it is open.
    fence: crate::runtime::fence::Fence,
}

/// The calls that change what the driver holds: none goes while leadership may have lapsed.
const FENCED_METHODS: [&str; 4] =
    ["CreateVolume", "DeleteVolume", "ControllerExpandVolume", "ControllerModifyVolume"];

impl CsiClient {
    /// Prepares a connection to the socket at `address`; nothing is dialled until the first call.
    /// `timeout` is the deadline of every call.
    pub fn new(address: &str, timeout: Duration) -> Result<Self, CsiError> {
        let path = socket_path(address)?;
        let dial_path = path.clone();
        // The URI is never used for routing, only as the :authority, which Go drivers accept.
        let channel = Endpoint::from_static("http://localhost")
            .connect_timeout(timeout)
            .connect_with_connector_lazy(tower::service_fn(move |_| {
                let p = dial_path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(p).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }));
        Ok(CsiClient {
            channel,
            path,
            timeout,
            role_timeouts: Default::default(),
            driver: Default::default(),
            fence: crate::runtime::fence::Fence::open(),
        })
    }

    /// Each sidecar's own `--timeout` for its calls.
    pub fn with_role_timeouts(mut self, timeouts: super::RoleTimeouts) -> Self {
        self.role_timeouts = timeouts;
        self
    }

    /// The same client, its state-changing calls behind `fence`.
    pub fn fenced(mut self, fence: crate::runtime::fence::Fence) -> Self {
        self.fence = fence;
        self
    }

    pub fn socket(&self) -> &Path {
        &self.path
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn identity(&self) -> IdentityClient<Channel> {
        IdentityClient::new(self.channel.clone())
    }

    fn node(&self) -> NodeClient<Channel> {
        NodeClient::new(self.channel.clone())
    }

    fn controller(&self) -> ControllerClient<Channel> {
        // Driver answers (ListVolumes pages, large topologies) may exceed the 4 MiB default.
        ControllerClient::new(self.channel.clone()).max_decoding_message_size(64 << 20)
    }

    /// Runs one unary call with the per-call deadline, logging it (secrets are redacted by the
    /// messages' Debug impls) and mapping a failure to [`CsiError`].
    async fn unary<Req, Resp, Fut>(
        &self,
        method: &'static str,
        message: Req,
        call: impl FnOnce(tonic::Request<Req>) -> Fut,
    ) -> Result<Resp, CsiError>
    where
        Req: std::fmt::Debug,
        Resp: std::fmt::Debug,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        self.unary_about(method, message, false, call).await
    }

    /// As `unary`; `migrated`: the call is about a volume served through CSI migration (its
    /// metrics say so).
    async fn unary_about<Req, Resp, Fut>(
        &self,
        method: &'static str,
        message: Req,
        migrated: bool,
        call: impl FnOnce(tonic::Request<Req>) -> Fut,
    ) -> Result<Resp, CsiError>
    where
        Req: std::fmt::Debug,
        Resp: std::fmt::Debug,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        trace!(method, request = ?message, "CSI call");
        if FENCED_METHODS.contains(&method) && self.fence.check().is_err() {
            crate::metrics::metrics().fenced("csi");
            return Err(CsiError::Fenced { method });
        }
        let mut request = tonic::Request::new(message);
        let timeout = self.role_timeouts.for_method(method, self.timeout);
        request.set_timeout(timeout);
        let start = Instant::now();
        let result = call(request).await;
        let elapsed = start.elapsed();
        let result = result.map_err(|s| super::error::our_deadline(s, elapsed, timeout));
        let code = match &result {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        crate::metrics::metrics().csi_call(
            self.driver.get().map(String::as_str).unwrap_or_default(),
            method,
            code,
            elapsed,
            migrated,
        );
        match result {
            Ok(response) => {
                let response = response.into_inner();
                trace!(method, ?elapsed, ?response, "CSI call succeeded");
                Ok(response)
            }
            Err(status) => {
                trace!(method, ?elapsed, code = ?status.code(), message = status.message(), "CSI call failed");
                Err(CsiError::from_status(method, &status))
            }
        }
    }

    /// Probe: Ok(true) when the driver is ready (an unset `ready` means ready).
    pub async fn probe(&self) -> Result<bool, CsiError> {
        let mut c = self.identity();
        let r = self.unary("Probe", csi::ProbeRequest {}, |r| c.probe(r)).await?;
        Ok(r.ready.unwrap_or(true))
    }

    /// Probes until the driver is ready, backing off from 100 ms to 5 s between attempts. Gives up
    /// after `limit` (None: never), which is how a missing socket becomes one clear error.
    pub async fn wait_ready(&self, limit: Option<Duration>) -> Result<(), CsiError> {
        let start = Instant::now();
        let mut delay = Duration::from_millis(100);
        let mut last_report: Option<Instant> = None;
        loop {
            let last_error = match self.probe().await {
                Ok(true) => return Ok(()),
                Ok(false) => "driver reports it is not ready yet".to_string(),
                Err(_) if !self.path.exists() => "socket does not exist".to_string(),
                Err(e) => e.to_string(),
            };
            // The last attempt is made at the limit itself, not one backoff step short of it.
            let left = limit.map(|limit| limit.saturating_sub(start.elapsed()));
            if left.is_some_and(|left| left.is_zero()) {
                return Err(CsiError::NotReady {
                    address: self.path.display().to_string(),
                    waited: start.elapsed(),
                    last_error,
                });
            }
            if last_report.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                warn!(socket = %self.path.display(), reason = %last_error, "waiting for the CSI driver");
                last_report = Some(Instant::now());
            }
            tokio::time::sleep(left.map_or(delay, |left| delay.min(left))).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    /// Reads the driver's name and capabilities.
    pub async fn discover(&self) -> Result<DriverInfo, CsiError> {
        let info = self.get_plugin_info().await?;
        let plugin = self.get_plugin_capabilities().await?;
        let controller = self.controller_get_capabilities(&plugin).await?;
        let node_expansion = if controller.has(ControllerCapability::ExpandVolume) {
            false
        } else {
            self.node_expands().await?
        };
        let _ = self.driver.set(info.name.clone());
        let driver = DriverInfo {
            name: info.name,
            vendor_version: info.vendor_version,
            plugin,
            controller,
            node_expansion,
        };
        info!(driver = %driver.name, version = %driver.vendor_version,
              plugin = ?driver.plugin, controller = ?driver.controller,
              node_expansion = driver.node_expansion, "CSI driver discovered");
        Ok(driver)
    }

    pub async fn get_plugin_info(&self) -> Result<csi::GetPluginInfoResponse, CsiError> {
        let mut c = self.identity();
        let r = self
            .unary("GetPluginInfo", csi::GetPluginInfoRequest {}, |r| c.get_plugin_info(r))
            .await?;
        if r.name.is_empty() {
            return Err(CsiError::InvalidResponse {
                method: "GetPluginInfo",
                reason: "empty driver name".into(),
            });
        }
        Ok(r)
    }

    pub async fn get_plugin_capabilities(&self) -> Result<PluginCapabilities, CsiError> {
        let mut c = self.identity();
        let request = csi::GetPluginCapabilitiesRequest {};
        let call = self.unary("GetPluginCapabilities", request, |r| c.get_plugin_capabilities(r));
        Ok(PluginCapabilities::from_response(&call.await?.capabilities))
    }

    /// ControllerGetCapabilities; none when the plugin does not serve the Controller service.
    pub async fn controller_get_capabilities(
        &self,
        plugin: &PluginCapabilities,
    ) -> Result<ControllerCapabilities, CsiError> {
        if !plugin.controller_service {
            return Ok(ControllerCapabilities::default());
        }
        let mut c = self.controller();
        let request = csi::ControllerGetCapabilitiesRequest {};
        let answer =
            self.unary("ControllerGetCapabilities", request, |r| c.controller_get_capabilities(r));
        Ok(ControllerCapabilities::from_response(&answer.await?.capabilities))
    }

    /// CreateVolume. A success must name the volume and give a non-negative size.
    pub async fn create_volume(
        &self,
        request: csi::CreateVolumeRequest,
    ) -> Result<csi::Volume, CsiError> {
        self.create_volume_about(request, false).await
    }

    /// As `create_volume`; `migrated`: for a claim of an in-tree class.
    pub async fn create_volume_about(
        &self,
        request: csi::CreateVolumeRequest,
        migrated: bool,
    ) -> Result<csi::Volume, CsiError> {
        let create = |r| async move { self.controller().create_volume(r).await };
        let answer = self.unary_about("CreateVolume", request, migrated, create).await?;
        let invalid = |reason: &str| CsiError::InvalidResponse {
            method: "CreateVolume",
            reason: reason.to_string(),
        };
        let volume = answer.volume.ok_or_else(|| invalid("no volume in the response"))?;
        if volume.volume_id.is_empty() {
            return Err(invalid("empty volume_id"));
        }
        not_negative("CreateVolume", "capacity_bytes", volume.capacity_bytes)?;
        Ok(volume)
    }

    pub async fn delete_volume(&self, request: csi::DeleteVolumeRequest) -> Result<(), CsiError> {
        self.delete_volume_about(request, false).await
    }

    /// As `delete_volume`; `migrated`: the volume of an in-tree PV.
    pub async fn delete_volume_about(
        &self,
        request: csi::DeleteVolumeRequest,
        migrated: bool,
    ) -> Result<(), CsiError> {
        let mut c = self.controller();
        let call = self.unary_about("DeleteVolume", request, migrated, |r| c.delete_volume(r));
        call.await.map(|_| ())
    }

    /// Every volume the driver reports (LIST_VOLUMES), following its pages: the driver's own
    /// account of what exists, to check ours against.
    pub async fn list_volumes(&self) -> Result<Vec<csi::Volume>, CsiError> {
        let mut volumes = Vec::new();
        let mut token = String::new();
        loop {
            let (page, next) = self.list_volumes_page(0, &token).await?;
            volumes.extend(page);
            // A driver that hands back the token it was given would loop forever.
            if next.is_empty() || next == token {
                return Ok(volumes);
            }
            token = next;
        }
    }

    /// One ListVolumes page of at most `max_entries` (0: the driver decides) from `token`: the
    /// volumes, and the token of the next page (empty after the last).
    pub async fn list_volumes_page(
        &self,
        max_entries: i32,
        token: &str,
    ) -> Result<(Vec<csi::Volume>, String), CsiError> {
        let mut c = self.controller();
        let request = csi::ListVolumesRequest { max_entries, starting_token: token.to_string() };
        let page = self.unary("ListVolumes", request, |r| c.list_volumes(r)).await?;
        Ok((page.entries.into_iter().filter_map(|e| e.volume).collect(), page.next_token))
    }

    /// Whether NodeGetCapabilities lists EXPAND_VOLUME. A controller-only driver that does not
    /// serve the Node service at all (Unimplemented) expands nowhere.
    pub async fn node_expands(&self) -> Result<bool, CsiError> {
        use csi::node_service_capability::{Type, rpc};
        let mut c = self.node();
        let answer = self
            .unary("NodeGetCapabilities", csi::NodeGetCapabilitiesRequest {}, |r| {
                c.node_get_capabilities(r)
            })
            .await;
        match answer {
            Ok(r) => Ok(r.capabilities.iter().any(|c| {
                matches!(&c.r#type, Some(Type::Rpc(r)) if r.r#type == rpc::Type::ExpandVolume as i32)
            })),
            Err(e) if e.code() == Some(tonic::Code::Unimplemented) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// ControllerExpandVolume. A negative size is a broken answer; 0 ("unknown") and a size below
    /// the request are for the expansion logic to judge.
    pub async fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
    ) -> Result<csi::ControllerExpandVolumeResponse, CsiError> {
        self.controller_expand_volume_about(request, false).await
    }

    /// As `controller_expand_volume`; `migrated`: the volume of an in-tree PV.
    pub async fn controller_expand_volume_about(
        &self,
        request: csi::ControllerExpandVolumeRequest,
        migrated: bool,
    ) -> Result<csi::ControllerExpandVolumeResponse, CsiError> {
        let mut c = self.controller();
        let method = "ControllerExpandVolume";
        let call = self.unary_about(method, request, migrated, |r| c.controller_expand_volume(r));
        let r = call.await?;
        not_negative("ControllerExpandVolume", "capacity_bytes", r.capacity_bytes)?;
        Ok(r)
    }

    /// GetCapacity: what may still be provisioned with these parameters in this topology.
    pub async fn get_capacity(
        &self,
        request: csi::GetCapacityRequest,
    ) -> Result<csi::GetCapacityResponse, CsiError> {
        let mut c = self.controller();
        let call = self.unary("GetCapacity", request, |r| c.get_capacity(r));
        let answer = call.await?;
        not_negative("GetCapacity", "available_capacity", answer.available_capacity)?;
        Ok(answer)
    }

    /// ControllerModifyVolume: the volume takes the mutable parameters of a
    /// VolumeAttributesClass.
    pub async fn controller_modify_volume(
        &self,
        request: csi::ControllerModifyVolumeRequest,
    ) -> Result<(), CsiError> {
        let mut c = self.controller();
        self.unary("ControllerModifyVolume", request, |r| c.controller_modify_volume(r))
            .await
            .map(|_| ())
    }
}

/// A size in an answer that cannot be negative is a broken answer.
fn not_negative(method: &'static str, field: &str, value: i64) -> Result<(), CsiError> {
    if value < 0 {
        return Err(CsiError::InvalidResponse {
            method,
            reason: format!("negative {field} {value}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses() {
        assert_eq!(
            socket_path("unix:///run/csi/socket").unwrap(),
            PathBuf::from("/run/csi/socket")
        );
        assert_eq!(socket_path("/csi/csi.sock").unwrap(), PathBuf::from("/csi/csi.sock"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(socket_path("unix:rel/s.sock").unwrap(), cwd.join("rel/s.sock"));
        assert_eq!(socket_path("s.sock").unwrap(), cwd.join("s.sock"));
        for bad in ["", "unix://", "tcp://127.0.0.1:10000", "dns:///x:1"] {
            assert!(matches!(socket_path(bad), Err(CsiError::Address { .. })), "{bad:?}");
        }
    }
}
