//! csi-pv-controller: flags → driver → API caches → serve until SIGTERM.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use tracing::{error, info, warn};

use csi_pv_controller::config::{self, Command, Config};
use csi_pv_controller::controller::Intake;
use csi_pv_controller::csi::CsiClient;
use csi_pv_controller::health;
use csi_pv_controller::runtime::logs;
use tracing_subscriber::fmt::format::JsonFields;

/// The image's static musl binary allocates through mimalloc rather than musl's allocator.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The subcommands beside the controller itself.
mod cli {
    pub mod end_intent;
    pub mod explain;
    pub mod flags_from;
    pub mod reconcile;
    pub mod startup;
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
            Some(Command::EndIntent { uid, dry_run }) => {
                cli::end_intent::run(&config, uid, *dry_run).await
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
    csi_pv_controller::runtime::panics::install_hook();
}

/// The controller: each step of start-up is a function of `cli::startup`.
async fn run(config: Config) -> anyhow::Result<()> {
    use cli::startup::{self, Stop};
    config.validate()?;
    let stop = Stop::on_signal();
    let fence = startup::fence(&config);
    let csi = CsiClient::new(&config.csi_address, config.timeout)?
        .with_role_timeouts(config.role_timeouts)
        .fenced(fence.clone());
    let health = health::Health::new(csi.clone());
    let servers = startup::serve_http(&config, &health, &stop).await?;
    let intake = Intake::new(config.backoff());
    let journal = startup::open_journal(&config).await?;
    let (driver, stores, clients) = tokio::select! {
        connected = startup::connect(&config, &csi, &fence, &intake) => connected?,
        _ = stop.stopped() => return Ok(()),
    };
    health.watch(stores.watches.clone());
    let parts = (&fence, &csi, &stores, &driver);
    let publisher = startup::publisher(&config, parts, &intake, &health).await?;
    let identity = config::provisioner_identity(&driver.name);
    let parts = (&csi, &stores, &clients, &driver);
    let reconciler = startup::reconciler(&config, parts, (&identity, journal.clone()));
    let parts = (&driver, stores, clients);
    let controller = startup::controller(&config, parts, &csi, intake, (&identity, journal));
    // Ready means the caches are warm: a standby is ready to take over at once.
    health.set_ready(true);
    info!(driver = %driver.name, "ready: driver probed and caches synced");
    let startup::Led::Acting(mut leadership) =
        startup::lead(&config, &driver, (&fence, &health), &stop).await?
    else {
        return Ok(());
    };
    let running = tokio::spawn(controller.run(startup::options(&config), stop.stopped()));
    if let Some(publisher) = publisher {
        tokio::spawn(publisher.run(stop.stopped()));
    }
    if let Some(reconciler) = reconciler {
        tokio::spawn(reconciler.run(stop.stopped()));
    }
    startup::until_stopped_or_lapsed(&mut leadership, &stop).await;
    health.set_ready(false);
    startup::wind_down(&config, running, leadership, servers).await?;
    info!("stopped");
    Ok(())
}
