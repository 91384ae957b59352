//! The controller's start-up, step by step, as `run` in main.rs takes them: stop on SIGTERM,
//! serve the HTTP endpoints, open the intent journal, reach the driver and warm the caches,
//! build the controller and its companions, lead, and wind down.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use csi_pv_controller::capacity::publisher::Publisher;
use csi_pv_controller::cluster::client::ApiClients;
use csi_pv_controller::cluster::events::Events;
use csi_pv_controller::cluster::{self, Stores};
use csi_pv_controller::config::Config;
use csi_pv_controller::controller::{Controller, Intake, Options, Switches};
use csi_pv_controller::csi::limited::{Gate, Limited};
use csi_pv_controller::csi::{ControllerCapability, CsiClient, DriverInfo, limit};
use csi_pv_controller::health::{Health, serve};
use csi_pv_controller::inventory::reconciler::Reconciler;
use csi_pv_controller::journal::Journal;
use csi_pv_controller::leader::{self, Leadership};
use csi_pv_controller::runtime::fence::Fence;

/// The Lease's own client: renewals must never wait behind the API rate limit.
const LEASE_CLIENT_QPS: f32 = 100.0;
const LEASE_CLIENT_BURST: u32 = 100;
/// How long after --timeout a SIGTERM waits for the workers.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(5);

/// SIGTERM (or Ctrl-C), seen by every task that waits for it.
#[derive(Clone)]
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// Starts listening for the signal.
    pub fn on_signal() -> Stop {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            signal().await;
            info!("shutdown requested");
            let _ = tx.send(true);
        });
        Stop(rx)
    }

    /// Resolves once the stop is asked for.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }
}

async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            error!("cannot watch SIGTERM ({e}); stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Under leader election every side effect waits for (and stops with) leadership.
pub fn fence(config: &Config) -> Fence {
    match config.leader_election {
        true => Fence::shut(),
        false => Fence::open(),
    }
}

/// `/healthz`, `/readyz` and the metrics on every address the sidecars' args name: a probe or
/// a scrape on either port still answers, and a role's own port has that role's series.
pub async fn serve_http(
    config: &Config,
    health: &Arc<Health>,
    stop: &Stop,
) -> anyhow::Result<Vec<JoinHandle<std::io::Result<()>>>> {
    use csi_pv_controller::config::merged::Role;
    use csi_pv_controller::metrics::exposition::Scope;
    let mut servers = Vec::new();
    for (address, role) in config.http_listeners()? {
        let path = config.metrics_path.clone();
        let scope = match role {
            None => Scope::All,
            Some(Role::Provisioner) => Scope::Provisioner,
            Some(Role::Resizer) => Scope::Resizer,
        };
        let server = serve(address.clone(), path, scope, health.clone(), stop.stopped())
            .await
            .with_context(|| format!("cannot listen on --http-endpoint {address}"))?;
        info!(%address, metrics = %config.metrics_path, series = ?scope, "serving /healthz, /readyz and the metrics");
        servers.push(tokio::spawn(server));
    }
    Ok(servers)
}

/// How long a start waits for the process that holds the intent journal to exit: one killed
/// a moment ago lets go of it within milliseconds, unless a disk write holds it up.
const JOURNAL_TAKEOVER: Duration = Duration::from_secs(30);

/// `--intent-journal`, opened; unused (and said so) when this process binds.
pub async fn open_journal(config: &Config) -> anyhow::Result<Option<Arc<Journal>>> {
    match (&config.intent_journal, config.binder().binds()) {
        (Some(dir), false) => {
            let path = dir.clone();
            let opened =
                tokio::task::spawn_blocking(move || Journal::open_waiting(&path, JOURNAL_TAKEOVER))
                    .await
                    .context("the intent journal's opening did not finish")?;
            let journal = opened.context("cannot use the directory of --intent-journal")?;
            info!(dir = %dir.display(), open = journal.len(), "provisioning intents kept in the intent journal");
            Ok(Some(Arc::new(journal)))
        }
        (Some(_), true) => {
            info!(
                "--intent-journal is not used when this process binds: the claim finalizer rides on the binding writes"
            );
            Ok(None)
        }
        (None, _) => Ok(None),
    }
}

/// The driver probed and discovered (under the feature gates), the API clients, and the
/// caches watched and synced.
pub async fn connect(
    config: &Config,
    csi: &CsiClient,
    fence: &Fence,
    intake: &Intake,
) -> anyhow::Result<(DriverInfo, Stores, ApiClients)> {
    csi.wait_ready(config.connect_limit()).await?;
    let driver = csi.discover().await.context("cannot read the CSI driver's identity")?;
    if config.feature_gates.topology_off && driver.plugin.accessibility_constraints {
        info!("--feature-gates=Topology=false: the driver's topology is not used");
    }
    let driver = csi_pv_controller::config::features::gated(driver, &config.feature_gates);
    // One claim queue does csi-provisioner's and csi-resizer's work: its workqueue series
    // carry csi-resizer's queue name too, from the first key on.
    intake.claims.also_export_as(&format!("{}-pvc", driver.name));
    let (qps, burst) = (config.kube_api_qps, config.kube_api_burst);
    let kubeconfig = config.kubeconfig.as_deref();
    let clients = cluster::client::build_with_events(kubeconfig, qps, burst, fence).await?;
    let attributes_classes = attributes_classes(config, &driver, &clients).await;
    let (stores, watch) = Stores::watch_inspecting(
        &clients.state,
        intake.on_change(config.volume_naming()),
        binder_alarm(config.binder()),
        cluster::stores::Watched {
            attachments: driver.controller.has(ControllerCapability::PublishUnpublishVolume),
            topology: driver.plugin.accessibility_constraints,
            attributes_classes,
        },
    );
    tokio::spawn(watch);
    stores.synced().await.context("API caches stopped before they synced")?;
    Ok((driver, stores, clients))
}

/// Whether VolumeAttributesClasses are watched: the driver modifies volumes, the gate is on,
/// and the cluster serves the v1 API (csi-resizer turns its modify controller off without it).
async fn attributes_classes(config: &Config, driver: &DriverInfo, clients: &ApiClients) -> bool {
    let modifies = driver.controller.has(ControllerCapability::ModifyVolume);
    if config.feature_gates.attributes_classes_off {
        info!(
            "--feature-gates=VolumeAttributesClass=false: claims' classes are not used and no volume is modified"
        );
        return false;
    }
    if !modifies {
        return false;
    }
    let served = cluster::serves(&clients.state, "storage.k8s.io/v1", "VolumeAttributesClass")
        .await
        .unwrap_or_else(|e| {
            warn!(error = %e, "cannot discover VolumeAttributesClass; taking it as not served");
            false
        });
    if !served {
        warn!(
            "the driver modifies volumes, but this cluster does not serve storage.k8s.io/v1 VolumeAttributesClass: claims naming a class are refused"
        );
    }
    served
}

/// The controller, with the switches the flags set. `identity`: this process's provisioner
/// identity (`config::provisioner_identity`), one for all its Events.
pub fn controller(
    config: &Config,
    (driver, stores, clients): (&DriverInfo, Stores, ApiClients),
    csi: &CsiClient,
    intake: Intake,
    (identity, journal): (&str, Option<Arc<Journal>>),
) -> Arc<Controller> {
    let settings = config.settings(&driver.name, identity.to_string());
    let switches = Switches {
        binder: config.binder(),
        handle_volume_inuse_error: config.handle_volume_inuse_error,
        gates: config.feature_gates.clone(),
        // Four periodic passes (a minute by default): the binder hands a claim over at once.
        handover_grace: config.pvclaimbinder_sync_period * 4,
        journal,
        expansion_workers: config.workers,
        waiting_condition_after: config.waiting_condition_after,
    };
    // Every state-changing driver call passes one adaptive limit, at most --worker-threads;
    // answers at half of --timeout count as the backend slowing down.
    let gate = Gate::new(limit::Settings::new(config.worker_threads, config.timeout));
    // A namespace's claims hold no more workers than the driver's creates keep busy.
    let creates = gate.clone();
    intake.claims.limit_shares(Arc::new(move || {
        csi_pv_controller::model::turn::most_per_share(creates.creates_allowed())
    }));
    let limited = Arc::new(Limited::new(csi.clone(), gate));
    Controller::new(clients, limited, stores, driver, settings, intake, switches)
}

/// The controller's work loop, as the flags size it.
pub fn options(config: &Config) -> Options {
    Options {
        workers: config.worker_threads,
        backoff: config.backoff(),
        sync: config.pvclaimbinder_sync_period,
        resync: config.resync_period,
        snapshot_sweep: config.snapshot_orphan_sweep_interval,
    }
}

/// The storage capacity publisher, with `--enable-capacity`.
pub async fn publisher(
    config: &Config,
    (fence, csi, stores, driver): (&Fence, &CsiClient, &Stores, &DriverInfo),
    intake: &Intake,
    health: &Health,
) -> anyhow::Result<Option<Publisher>> {
    if !config.enable_capacity {
        return Ok(None);
    }
    let report = (intake.nudge.clone(), health.checks.clone());
    Ok(Some(Publisher::from_config(config, fence, csi, stores, driver, report).await?))
}

/// The volume reconciler, when --reconcile-period asks for one and the driver lists volumes;
/// its Events carry the controller's `identity`.
pub fn reconciler(
    config: &Config,
    (csi, stores, clients, driver): (&CsiClient, &Stores, &ApiClients, &DriverInfo),
    (identity, journal): (&str, Option<Arc<Journal>>),
) -> Option<Reconciler> {
    use csi_pv_controller::inventory::reconciler::Options;
    if config.reconcile_period.is_zero() {
        return None;
    }
    if !driver.controller.has(ControllerCapability::ListVolumes) {
        warn!(
            "--reconcile-period is set, but the driver does not list its volumes (no LIST_VOLUMES): no volume reconciler runs"
        );
        return None;
    }
    info!(period = ?config.reconcile_period, delete_orphans = config.reconcile_delete_orphans, grace = ?config.reconcile_grace, "volume reconciler on");
    Some(Reconciler {
        csi: csi.clone(),
        stores: stores.clone(),
        objects: cluster::objects::Cluster::kube(clients.state.clone(), clients.state.clone()),
        events: Events::new(clients.events.clone(), &driver.name, identity),
        driver: driver.name.clone(),
        naming: config.volume_naming(),
        journal,
        options: Options {
            period: config.reconcile_period,
            grace: config.reconcile_grace,
            delete_orphans: config.reconcile_delete_orphans,
            page_size: config.reconcile_page_size,
            page_interval: config.reconcile_page_interval,
        },
        memory: Default::default(),
    })
}

/// When this process binds, an error line (at most one a minute) whenever kube-controller-
/// manager's binder is seen writing a PV too: two binders must not share a cluster.
fn binder_alarm(
    binder: csi_pv_controller::binder::Binder,
) -> Option<cluster::stores::Inspect<k8s_openapi::api::core::v1::PersistentVolume>> {
    use csi_pv_controller::binder::foreign;
    if !binder.binds() {
        return None;
    }
    let started =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let last = std::sync::Mutex::new(None::<std::time::Instant>);
    Some(Arc::new(move |pv| {
        if !foreign::cluster_binder_wrote(&pv.metadata, &started) {
            return;
        }
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            *last = Some(std::time::Instant::now());
            let name = pv.metadata.name.as_deref().unwrap_or_default();
            error!("{}", foreign::alarm(name, binder.as_str()));
        }
    }))
}

/// How the campaign for leadership ended.
pub enum Led {
    /// This process acts: with the Leadership it holds (None without `--leader-election`).
    Acting(Option<Leadership>),
    /// The stop came first; the campaign resigned.
    Stopped,
}

/// With `--leader-election`: campaigns until this process leads or the stop comes first.
/// Without it: acts at once.
pub async fn lead(
    config: &Config,
    driver: &DriverInfo,
    (fence, health): (&Fence, &Arc<Health>),
    stop: &Stop,
) -> anyhow::Result<Led> {
    if !config.leader_election {
        return Ok(Led::Acting(None));
    }
    let kubeconfig = config.kubeconfig.as_deref();
    let lease_client =
        cluster::client::build(kubeconfig, LEASE_CLIENT_QPS, LEASE_CLIENT_BURST, "leader-election")
            .await?;
    let mut leadership = Leadership::campaign(
        lease_client,
        &leader::namespace(&config.leader_election_namespace),
        &leader::leases(&driver.name),
        &leader::identity(),
        config.lease_timing(),
        fence.clone(),
    )?;
    tokio::select! {
        won = leadership.won() => anyhow::ensure!(won, "leader election stopped"),
        _ = stop.stopped() => {
            leadership.resign().await;
            return Ok(Led::Stopped);
        }
    }
    info!("became leader");
    health.lead(fence.clone());
    Ok(Led::Acting(Some(leadership)))
}

/// Until the stop, or the Lease lapses: then, as the Go sidecars, exit at once (another replica
/// may act from now on; the fence already refuses every write and driver call).
pub async fn until_stopped_or_lapsed(leadership: &mut Option<Leadership>, stop: &Stop) {
    let lost = async {
        match leadership.as_mut() {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = stop.stopped() => {}
        _ = lost => {
            error!("leadership lapsed (lost the Lease or no renewal within the renew deadline); exiting at once");
            std::process::exit(1);
        }
    }
}

/// In-flight work ends within a CSI deadline (the rest is picked up by the next leader); then
/// the Lease is given up and the HTTP servers end.
pub async fn wind_down(
    config: &Config,
    mut running: JoinHandle<()>,
    leadership: Option<Leadership>,
    servers: Vec<JoinHandle<std::io::Result<()>>>,
) -> anyhow::Result<()> {
    let limit = config.role_timeouts.longest(config.timeout) + SHUTDOWN_SLACK;
    match tokio::time::timeout(limit, &mut running).await {
        Ok(result) => result.context("controller task failed")?,
        Err(_) => {
            running.abort();
            error!(
                "workers did not stop within --timeout plus {SHUTDOWN_SLACK:?}; abandoning them"
            );
        }
    }
    if let Some(leadership) = leadership {
        leadership.resign().await;
    }
    for server in servers {
        server.await.context("HTTP server task failed")??;
    }
    Ok(())
}
