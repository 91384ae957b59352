//! The diagnostics server: /healthz (process up, driver answering Probe), /readyz (driver
//! probed and stores synced; a standby under leader election is ready) and /metrics.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::csi::CsiClient;

/// What the probes report on.
pub struct Health {
    csi: CsiClient,
    ready: AtomicBool,
}

impl Health {
    pub fn new(csi: CsiClient) -> Arc<Self> {
        Arc::new(Health {
            csi,
            ready: AtomicBool::new(false),
        })
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

async fn healthz(State(health): State<Arc<Health>>) -> (StatusCode, String) {
    match health.csi.probe().await {
        Ok(true) => (StatusCode::OK, "ok\n".into()),
        Ok(false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "CSI driver answers Probe with ready=false\n".into(),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("CSI driver not answering Probe: {e}\n"),
        ),
    }
}

async fn readyz(State(health): State<Arc<Health>>) -> (StatusCode, &'static str) {
    if health.is_ready() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: waiting for the CSI driver and the API caches\n",
        )
    }
}

async fn metrics() -> ([(axum::http::header::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        crate::metrics::metrics().encode(),
    )
}

/// Binds `address` (so that a busy port is reported at start) and returns the server future.
pub async fn serve(
    address: SocketAddr,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<impl std::future::Future<Output = std::io::Result<()>>> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health);
    let listener = tokio::net::TcpListener::bind(address).await?;
    Ok(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    })
}
