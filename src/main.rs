//! csi-pv-controller: flags → driver → API caches → serve until SIGTERM.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context;
use tokio::sync::watch;
use tracing::{error, info, warn};

use csi_pv_controller::cluster::{self, Stores};
use csi_pv_controller::config::{self, Command, Config};
use csi_pv_controller::controller::{self, Controller, Intake, Options};
use csi_pv_controller::csi::CsiClient;
use csi_pv_controller::leader;
use csi_pv_controller::runtime::http;
use csi_pv_controller::runtime::logs;
use csi_pv_controller::runtime::queue::Backoff;
use tracing_subscriber::fmt::format::JsonFields;

/// The image's static musl binary allocates through mimalloc rather than musl's allocator.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The Lease's own client: renewals must never wait behind the API rate limit.
const LEASE_CLIENT_QPS: f32 = 100.0;
const LEASE_CLIENT_BURST: u32 = 100;
/// How long after --timeout a SIGTERM waits for the workers.
const SHUTDOWN_SLACK: std::time::Duration = std::time::Duration::from_secs(5);

/// The subcommands beside the controller itself.
mod cli {
    pub mod explain;
    pub mod flags_from;
    pub mod reconcile;
    pub mod uninstall;

    /// A client for a one-shot command, named `agent` in the apiserver's logs.
    pub async fn client(
        config: &csi_pv_controller::config::Config,
        agent: &'static str,
    ) -> anyhow::Result<kube::Client> {
        Ok(csi_pv_controller::cluster::client::build(
            config.kubeconfig.as_deref(),
            config.kube_api_qps,
            config.kube_api_burst,
            agent,
        )
        .await?)
    }
}

fn main() -> ExitCode {
    // Exits 2 on flags that cannot be read, with clap's message or ours (refused flags).
    let read = match config::from_args(std::env::args_os()) {
        Ok(read) => read,
        Err(config::FlagError::Clap(e)) => e.exit(),
        Err(config::FlagError::Refused(message)) => {
            eprintln!("csi-pv-controller: {message}");
            return ExitCode::from(2);
        }
        Err(config::FlagError::Conflict { message, exit }) => {
            eprintln!("csi-pv-controller: {message}");
            return ExitCode::from(exit);
        }
    };
    let config = read.config;
    init_logging(&config);
    for note in read.notes {
        info!("{note}");
    }
    for warning in read.warnings {
        warn!("{warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let work = async {
        let config = match config.command.as_ref().and_then(Command::flags_from) {
            Some(source) => cli::flags_from::apply(&config, source).await?,
            None => config.clone(),
        };
        match &config.command {
            Some(Command::Explain { claim, all, .. }) => {
                cli::explain::run(&config, claim.as_deref(), *all).await
            }
            Some(Command::Reconcile { driver, output, .. }) => {
                cli::reconcile::run(&config, driver, output).await
            }
            Some(Command::Uninstall { driver, force, dry_run }) => {
                cli::uninstall::run(&config, driver, *force, *dry_run).await
            }
            None => run(config).await,
        }
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, with the cause chain, and no backtrace.
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(config.log_level()));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if config.log_format == "json" {
        logs.fmt_fields(JsonFields::new()).event_format(logs::ComponentJson).init();
    } else {
        // No colour codes: klog's lines are plain, and pipelines parse them.
        logs.with_ansi(false).event_format(logs::KlogText).init();
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    config.validate()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown requested");
        let _ = stop_tx.send(true);
    });
    let stopped = {
        let rx = stop_rx.clone();
        move || {
            let mut rx = rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        }
    };

    // Under leader election every side effect waits for (and stops with) leadership.
    let fence = match config.leader_election {
        true => csi_pv_controller::runtime::fence::Fence::shut(),
        false => csi_pv_controller::runtime::fence::Fence::open(),
    };
    let csi = CsiClient::new(&config.csi_address, config.timeout)?
        .with_role_timeouts(config.role_timeouts)
        .fenced(fence.clone());
    let health = http::Health::new(csi.clone());
    // Every address the sidecars' args name: a probe or a scrape on either port still answers.
    let mut servers = Vec::new();
    for address in config.http_addresses()? {
        let server =
            http::serve(address.clone(), config.metrics_path.clone(), health.clone(), stopped())
                .await
                .with_context(|| format!("cannot listen on --http-endpoint {address}"))?;
        info!(%address, metrics = %config.metrics_path, "serving /healthz, /readyz and the metrics");
        servers.push(tokio::spawn(server));
    }

    let backoff = Backoff { start: config.retry_interval_start, max: config.retry_interval_max };
    let intake = Intake::new(backoff);
    let on_change = intake.on_change(config.volume_naming());
    let journal = match (&config.intent_journal, config.binder().binds()) {
        (Some(dir), false) => {
            let journal = csi_pv_controller::runtime::journal::Journal::open(dir)
                .context("cannot use the directory of --intent-journal")?;
            info!(dir = %dir.display(), open = journal.len(), "provisioning intents kept in the intent journal");
            Some(std::sync::Arc::new(journal))
        }
        (Some(_), true) => {
            info!(
                "--intent-journal is not used when this process binds: the claim finalizer rides on the binding writes"
            );
            None
        }
        (None, _) => None,
    };
    let startup = async {
        csi.wait_ready(config.connect_limit()).await?;
        let driver = csi.discover().await.context("cannot read the CSI driver's identity")?;
        if config.feature_gates.topology_off && driver.plugin.accessibility_constraints {
            info!("--feature-gates=Topology=false: the driver's topology is not used");
        }
        let driver = driver.gated(&config.feature_gates);
        // One claim queue does csi-provisioner's and csi-resizer's work: its workqueue series
        // carry csi-resizer's queue name too, from the first key on.
        intake.claims.also_export_as(&format!("{}-pvc", driver.name));
        let clients = cluster::client::build_with_events(
            config.kubeconfig.as_deref(),
            config.kube_api_qps,
            config.kube_api_burst,
            &fence,
        )
        .await?;
        let modifies =
            driver.controller.has(csi_pv_controller::csi::ControllerCapability::ModifyVolume);
        // csi-resizer turns its modify controller off when the cluster lacks the v1 API.
        let attributes_classes = modifies
            && !config.feature_gates.attributes_classes_off
            && cluster::serves(&clients.state, "storage.k8s.io/v1", "VolumeAttributesClass")
                .await
                .unwrap_or_else(|e| {
                    warn!(error = %e, "cannot discover VolumeAttributesClass; taking it as not served");
                    false
                });
        if config.feature_gates.attributes_classes_off {
            info!(
                "--feature-gates=VolumeAttributesClass=false: claims' classes are not used and no volume is modified"
            );
        } else if modifies && !attributes_classes {
            warn!(
                "the driver modifies volumes, but this cluster does not serve storage.k8s.io/v1 VolumeAttributesClass: claims naming a class are refused"
            );
        }
        let (stores, watch) = Stores::watch_inspecting(
            &clients.state,
            on_change,
            binder_alarm(config.binder()),
            cluster::stores::Watched {
                attachments: driver
                    .controller
                    .has(csi_pv_controller::csi::ControllerCapability::PublishUnpublishVolume),
                topology: driver.plugin.accessibility_constraints,
                attributes_classes,
            },
        );
        tokio::spawn(watch);
        stores.synced().await.context("API caches stopped before they synced")?;
        anyhow::Ok((driver, stores, clients))
    };
    let (driver, stores, clients) = tokio::select! {
        r = startup => r?,
        _ = stopped() => return Ok(()),
    };
    let settings = config.settings(&driver.name, config::provisioner_identity(&driver.name));
    health.watch(stores.watches.clone());
    let publisher = match config.enable_capacity {
        true => Some(
            csi_pv_controller::capacity::publisher::Publisher::from_config(
                &config,
                &fence,
                &csi,
                &stores,
                &driver,
                intake.nudge.clone(),
            )
            .await?,
        ),
        false => None,
    };
    let reconciler = reconciler(&config, &csi, &stores, &clients, &driver, journal.clone());
    let controller = Controller::new(
        clients,
        std::sync::Arc::new(csi.clone()),
        stores,
        &driver,
        settings,
        intake,
        controller::Switches {
            binder: config.binder(),
            handle_volume_inuse_error: config.handle_volume_inuse_error,
            annotate_fs_resize: config.feature_gates.annotate_fs_resize,
            attributes_classes_off: config.feature_gates.attributes_classes_off,
            // Four periodic passes (a minute by default): the binder hands a claim over at once.
            handover_grace: config.pvclaimbinder_sync_period * 4,
            journal,
            expansion_workers: config.workers,
            waiting_condition_after: config.waiting_condition_after,
        },
    );
    // Ready means the caches are warm: a standby is ready to take over at once.
    health.set_ready(true);
    info!(driver = %driver.name, "ready: driver probed and caches synced");
    let mut leadership = match config.leader_election {
        true => {
            let lease_client = cluster::client::build(
                config.kubeconfig.as_deref(),
                LEASE_CLIENT_QPS,
                LEASE_CLIENT_BURST,
                "leader-election",
            )
            .await?;
            let namespace = leader::namespace(&config.leader_election_namespace);
            let mut leadership = leader::Leadership::campaign(
                lease_client,
                &namespace,
                &leader::leases(&driver.name),
                &leader::identity(),
                config.lease_timing(),
                fence.clone(),
            )?;
            tokio::select! {
                won = leadership.won() => anyhow::ensure!(won, "leader election stopped"),
                _ = stopped() => {
                    leadership.resign().await;
                    return Ok(());
                }
            }
            info!("became leader");
            health.lead(fence.clone());
            Some(leadership)
        }
        false => None,
    };
    let mut running = tokio::spawn(controller.run(
        Options {
            workers: config.worker_threads,
            backoff,
            sync: config.pvclaimbinder_sync_period,
            resync: config.resync_period,
            snapshot_sweep: config.snapshot_orphan_sweep_interval,
        },
        stopped(),
    ));
    if let Some(publisher) = publisher {
        tokio::spawn(publisher.run(stopped()));
    }
    if let Some(reconciler) = reconciler {
        tokio::spawn(reconciler.run(stopped()));
    }
    let lost = async {
        match leadership.as_mut() {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = stopped() => {}
        _ = lost => {
            // As the Go sidecars: another replica may act from now on. The fence already refuses
            // every write and driver call; exiting ends the workers too.
            error!("leadership lapsed (lost the Lease or no renewal within the renew deadline); exiting at once");
            std::process::exit(1);
        }
    }
    health.set_ready(false);
    // In-flight work ends within a CSI deadline; the rest is picked up by the next leader.
    match tokio::time::timeout(
        config.role_timeouts.longest(config.timeout) + SHUTDOWN_SLACK,
        &mut running,
    )
    .await
    {
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
    info!("stopped");
    Ok(())
}

/// The volume reconciler, when --reconcile-period asks for one and the driver lists volumes.
fn reconciler(
    config: &Config,
    csi: &CsiClient,
    stores: &cluster::Stores,
    clients: &cluster::client::ApiClients,
    driver: &csi_pv_controller::csi::DriverInfo,
    journal: Option<std::sync::Arc<csi_pv_controller::runtime::journal::Journal>>,
) -> Option<csi_pv_controller::inventory::reconciler::Reconciler> {
    use csi_pv_controller::inventory::reconciler::{Options, Reconciler};
    if config.reconcile_period.is_zero() {
        return None;
    }
    if !driver.controller.has(csi_pv_controller::csi::ControllerCapability::ListVolumes) {
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
        events: csi_pv_controller::runtime::events::Events::new(
            clients.events.clone(),
            &driver.name,
            &config::provisioner_identity(&driver.name),
        ),
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
    Some(std::sync::Arc::new(move |pv| {
        if !foreign::cluster_binder_wrote(&pv.metadata, &started) {
            return;
        }
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(60)) {
            *last = Some(std::time::Instant::now());
            let name = pv.metadata.name.as_deref().unwrap_or_default();
            error!("{}", foreign::alarm(name, binder.as_str()));
        }
    }))
}

async fn shutdown_signal() {
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
