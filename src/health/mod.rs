//! The diagnostics server: /healthz (liveness: the process serves; neither a driver nor an API
//! outage is cured by a restart), /readyz (the caches synced and kept current by their watches,
//! the driver answering Probe, no background work failing; a standby under leader election is
//! ready),
//! /healthz/leader-election and the metrics (`--metrics-path`, /metrics by default).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::cluster::stores::WatchHealth;
use crate::csi::CsiClient;
use crate::metrics::exposition::Scope;
use crate::runtime::failing::Failing;

/// A watch failing this long with no success is an outage, not a blip (its own retries start
/// at 800 ms).
const STALE_AFTER: Duration = Duration::from_secs(5);

/// What the probes report on.
pub struct Health {
    csi: CsiClient,
    ready: AtomicBool,
    /// Background work that can fail for good while the process serves (capacity publishing
    /// refused by RBAC, say): /readyz names each one failing past `STALE_AFTER`.
    pub checks: Arc<Failing>,
    watches: OnceLock<Arc<WatchHealth>>,
    /// Set once this replica leads: the fence that says whether it still may.
    leading: OnceLock<crate::runtime::fence::Fence>,
}

impl Health {
    pub fn new(csi: CsiClient) -> Arc<Self> {
        Arc::new(Health {
            csi,
            ready: AtomicBool::new(false),
            checks: Arc::default(),
            watches: OnceLock::new(),
            leading: OnceLock::new(),
        })
    }

    /// This replica leads from now on, for as long as `fence` is open.
    pub fn lead(&self, fence: crate::runtime::fence::Fence) {
        let _ = self.leading.set(fence);
    }

    /// The watches whose currency /readyz reports.
    pub fn watch(&self, watches: Arc<WatchHealth>) {
        let _ = self.watches.set(watches);
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// Liveness: answering is the test. A restart cures neither a driver nor an API outage, and a
/// liveness probe that followed them would restart the sidecar through every such outage.
async fn healthz() -> (StatusCode, &'static str) {
    (StatusCode::OK, "ok\n")
}

/// `/healthz/leader-election`, as csi-lib-utils serves it: 200 unless this replica leads and
/// has gone past its renew deadline without a renewal (it exits then; this is the probe's
/// view of a process that could not).
async fn leader_election(State(health): State<Arc<Health>>) -> (StatusCode, &'static str) {
    match health.leading.get() {
        Some(fence) if !fence.is_open() => (
            StatusCode::SERVICE_UNAVAILABLE,
            "leader without a Lease renewal within the renew deadline\n",
        ),
        _ => (StatusCode::OK, "ok\n"),
    }
}

/// Readiness, with every failing check named in the body.
async fn readyz(State(health): State<Arc<Health>>) -> (StatusCode, String) {
    if !health.is_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: waiting for the CSI driver and the API caches\n".into(),
        );
    }
    let mut failing = Vec::new();
    if let Some(watches) = health.watches.get() {
        for (kind, since) in watches.stale(STALE_AFTER) {
            failing.push(format!(
                "the {kind} watch has failed for {}s: the cache may be stale (is the API server reachable?)",
                since.as_secs()
            ));
        }
    }
    for (check, failing_for, why) in health.checks.stale(STALE_AFTER) {
        failing.push(format!("{check} has failed for {}s: {why}", failing_for.as_secs()));
    }
    match health.csi.probe().await {
        Ok(true) => {}
        Ok(false) => failing.push("the CSI driver answers Probe with ready=false".into()),
        Err(e) => failing.push(format!("the CSI driver does not answer Probe: {e}")),
    }
    if failing.is_empty() {
        (StatusCode::OK, "ok\n".into())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", failing.join("; ")))
    }
}

/// client_golang's answer to a scrape, as the Go sidecars configure it: Prometheus' text
/// format whatever `Accept` prefers, with the series of the address's role
/// (`metrics::exposition`).
async fn metrics(
    scope: Scope,
    headers: axum::http::HeaderMap,
) -> ([(axum::http::header::HeaderName, String); 1], String) {
    use crate::metrics::exposition;
    let accept = headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok());
    let body = crate::metrics::metrics().scrape(scope);
    ([(axum::http::header::CONTENT_TYPE, exposition::content_type(accept))], body)
}

/// Binds `address` (so that a busy port is reported at start) and returns the server future;
/// its metrics are the series `scope` serves.
pub async fn serve(
    address: String,
    metrics_path: String,
    scope: Scope,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<impl std::future::Future<Output = std::io::Result<()>>> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/healthz/leader-election", get(leader_election))
        .route(&metrics_path, get(move |headers| metrics(scope, headers)))
        .with_state(health);
    let listener = listen(&address).await?;
    Ok(async move { axum::serve(listener, app).with_graceful_shutdown(shutdown).await })
}

/// A listener on `address`. The IPv6 wildcard (what `:port` becomes) takes IPv4 too, as Go's
/// listener on `:port` does; on a host without IPv6 it falls back to IPv4's wildcard.
async fn listen(address: &str) -> std::io::Result<tokio::net::TcpListener> {
    use std::io::ErrorKind;
    use std::net::{Ipv4Addr, SocketAddr};
    match address.parse::<SocketAddr>() {
        Ok(SocketAddr::V6(v6)) if v6.ip().is_unspecified() => match dual_stack(v6.into()) {
            Err(e) if !matches!(e.kind(), ErrorKind::AddrInUse | ErrorKind::PermissionDenied) => {
                let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, v6.port()));
                tokio::net::TcpListener::bind(v4).await
            }
            bound => bound,
        },
        _ => tokio::net::TcpListener::bind(address).await,
    }
}

/// An IPv6 wildcard listener that accepts IPv4 too, whatever net.ipv6.bindv6only says.
fn dual_stack(address: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}
