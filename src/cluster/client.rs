//! Building the Kubernetes client from `--kubeconfig` (or the usual inference) with the QPS limit.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::gate::GateLayer;
use super::ratelimit::RateLimitLayer;
use crate::runtime::fence::Fence;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig { path: String, source: kube::config::KubeconfigError },
    #[error(
        "no Kubernetes configuration found (no --kubeconfig, KUBECONFIG or in-cluster service account): {0}"
    )]
    Infer(#[from] kube::config::InferConfigError),
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// A client for `kubeconfig` if given, otherwise KUBECONFIG / ~/.kube/config / in-cluster, whose
/// requests are limited to `qps` per second with bursts of `burst`.
/// `role` goes into the User-Agent, so that audit logs tell our clients apart.
pub async fn build(
    kubeconfig: Option<&Path>,
    qps: f32,
    burst: u32,
    role: &'static str,
) -> Result<Client, ClientError> {
    let config = load(kubeconfig).await?;
    limited(config, &RateLimitLayer::new(qps, burst), &Fence::open(), role)
}

/// A client of its own budget whose writes pass `fence` (the capacity objects' client).
pub async fn build_fenced(
    kubeconfig: Option<&Path>,
    qps: f32,
    burst: u32,
    role: &'static str,
    fence: &Fence,
) -> Result<Client, ClientError> {
    let config = load(kubeconfig).await?;
    limited(config, &RateLimitLayer::new(qps, burst), fence, role)
}

/// The controller's clients, on one `qps`/`burst` budget, their writes behind one fence.
#[derive(Clone)]
pub struct ApiClients {
    /// Reads and state changes.
    pub state: Client,
    /// Events: their requests use only the tokens `state` leaves spare
    /// (see [`RateLimitLayer::background`]).
    pub events: Client,
    /// Writes that take their token first and then look at the object once more.
    pub writes: Writes,
}

impl ApiClients {
    /// One client for everything, with no client-side limit (tests on an API in memory).
    pub fn unlimited(client: Client) -> Self {
        ApiClients {
            state: client.clone(),
            events: client.clone(),
            writes: Writes { client, budget: RateLimitLayer::new(-1.0, 1) },
        }
    }
}

/// A write that waited long for a token may have been decided on a copy that is stale by the
/// time it goes; sent so, it is refused (409), and under a busy object it is refused every time
/// (a livelock). Such writes take their token first ([`Writes::token`]), look at the newest
/// copy, and then go at once on `client`, which the limit does not hold back again.
#[derive(Clone)]
pub struct Writes {
    pub client: Client,
    budget: RateLimitLayer,
}

impl Writes {
    /// Waits for a token of the shared budget; returns how long that took.
    pub async fn token(&self) -> std::time::Duration {
        self.budget.acquire().await
    }
}

pub async fn build_with_events(
    kubeconfig: Option<&Path>,
    qps: f32,
    burst: u32,
    fence: &Fence,
) -> Result<ApiClients, ClientError> {
    let config = load(kubeconfig).await?;
    let limit = RateLimitLayer::new(qps, burst);
    Ok(ApiClients {
        state: limited(config.clone(), &limit, fence, "controller")?,
        events: limited(config.clone(), &limit.background(), fence, "events")?,
        writes: Writes {
            // Their token was taken before; a negative QPS holds nothing back.
            client: limited(config, &RateLimitLayer::new(-1.0, 1), fence, "controller")?,
            budget: limit,
        },
    })
}

async fn load(kubeconfig: Option<&Path>) -> Result<Config, ClientError> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig_error =
                |source| ClientError::Kubeconfig { path: path.display().to_string(), source };
            let file = Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(kubeconfig_error)?
        }
        None => Config::infer().await?,
    })
}

/// A client whose requests wait for `limit`, then pass the fence (writes only), and only then
/// are counted and sent.
fn limited(
    config: Config,
    limit: &RateLimitLayer,
    fence: &Fence,
    role: &'static str,
) -> Result<Client, ClientError> {
    let agent = axum::http::HeaderValue::from_str(&user_agent(role)).ok();
    // Layers listed inner first: the last one sees a request first.
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&tower::util::MapRequestLayer::new(count_write))
        .with_layer(&GateLayer::new(fence.clone()))
        .with_layer(limit)
        .with_layer(&tower::util::MapRequestLayer::new(
            move |mut request: axum::http::Request<kube::client::Body>| {
                if let Some(agent) = &agent {
                    request.headers_mut().insert(axum::http::header::USER_AGENT, agent.clone());
                }
                request
            },
        ))
        .build())
}

/// `csi-pv-controller/<version> (<os>/<arch>) <role>`, client-go's shape. The apiserver names
/// the field manager of our writes after the part before the first `/`.
pub fn user_agent(role: &str) -> String {
    format!(
        "csi-pv-controller/v{} ({}/{}) {role}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// Counts a write on its way to the API server (`csi_pv_controller_api_writes_total`).
fn count_write(
    request: axum::http::Request<kube::client::Body>,
) -> axum::http::Request<kube::client::Body> {
    if let Some(verb) = crate::metrics::verb_of(request.method()) {
        crate::metrics::metrics()
            .api_writes
            .get_or_create(&crate::metrics::WriteLabels {
                resource: crate::metrics::resource_of(request.uri().path()),
                verb: verb.to_string(),
            })
            .inc();
    }
    request
}
