//! csi-pv-controller: flags → driver → API caches → serve until SIGTERM.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tokio::sync::watch;
use tracing::{error, info};

use csi_pv_controller::cluster::{self, Stores};
use csi_pv_controller::config::Config;
use csi_pv_controller::csi::CsiClient;
use csi_pv_controller::http;

fn main() -> ExitCode {
    let config = Config::parse(); // exits 2 with clap's message on unparsable flags
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, with the cause chain, and no backtrace.
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
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

    let csi = CsiClient::new(&config.csi_address, config.timeout)?;
    let health = http::Health::new(csi.clone());
    let server = match config.http_address()? {
        Some(address) => {
            let server = http::serve(address, health.clone(), stopped())
                .await
                .with_context(|| format!("cannot listen on --http-endpoint {address}"))?;
            info!(%address, "serving /healthz and /readyz");
            Some(tokio::spawn(server))
        }
        None => None,
    };

    let startup = async {
        csi.wait_ready(config.connect_limit()).await?;
        let driver = csi
            .discover()
            .await
            .context("cannot read the CSI driver's identity")?;
        let client = cluster::client::build(
            config.kubeconfig.as_deref(),
            config.kube_api_qps,
            config.kube_api_burst,
        )
        .await?;
        let (stores, watch) = Stores::watch(&client);
        tokio::spawn(watch);
        stores
            .synced()
            .await
            .context("API caches stopped before they synced")?;
        anyhow::Ok((driver, stores))
    };
    let (driver, _stores) = tokio::select! {
        r = startup => r?,
        _ = stopped() => return Ok(()),
    };
    health.set_ready(true);
    info!(driver = %driver.name, "ready: driver probed and caches synced");

    stopped().await;
    health.set_ready(false);
    if let Some(server) = server {
        server.await.context("HTTP server task failed")??;
    }
    info!("stopped");
    Ok(())
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
