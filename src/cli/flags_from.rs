//! `--flags-from` of `explain` and `reconcile`: reads the running controller's args from its pod
//! or a file and parses the command line again with them (`config::flags_from` decides which).

use anyhow::{Context, anyhow};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tracing::{info, warn};

use csi_pv_controller::config::flags_from::{FlagsSource, container_args, file_args};
use csi_pv_controller::config::{self, Config, FlagError};

/// The configuration the command runs with: the typed flags over those read from `source`.
pub async fn apply(typed: &Config, source: &FlagsSource) -> anyhow::Result<Config> {
    let read = match source {
        FlagsSource::File(path) => file_args(
            &std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --flags-from {}", path.display()))?,
        ),
        FlagsSource::Pod { namespace, name, container } => {
            let client = super::client(typed, "flags-from").await?;
            let pod = Api::<Pod>::namespaced(client, namespace)
                .get(name)
                .await
                .with_context(|| format!("cannot read pod {namespace}/{name}"))?;
            container_args(&pod, container.as_deref()).map_err(|e| anyhow!("{source}: {e}"))?
        }
    };
    let argv = config::with_flags_from(std::env::args_os().collect(), read, source);
    let taken: Vec<String> =
        argv.iter().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    eprintln!("flags from {source}: {}", taken.join(" "));
    let read = config::from_args(argv)
        .map_err(|e| match e {
            FlagError::Clap(e) => anyhow!("{}", e.to_string().trim_end()),
            FlagError::Refused(message) | FlagError::Conflict { message, .. } => anyhow!(message),
        })
        .with_context(|| format!("the flags of {source}"))?;
    for note in read.notes {
        info!("{note}");
    }
    for warning in read.warnings {
        warn!("{warning}");
    }
    Ok(read.config)
}
