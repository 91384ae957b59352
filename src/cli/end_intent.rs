//! `csi-pv-controller --intent-journal=DIR end-intent <claim UID>`: the supported way to end one
//! provisioning intent by hand, when the controller cannot (a claim gone whose class changed,
//! or whose volume cannot be checked), once the operator has made sure that the volume it may
//! have made does not exist in the driver, or is recorded in a PersistentVolume.

use anyhow::Context;

use csi_pv_controller::config::Config;
use csi_pv_controller::journal::{self, Journal};

/// Ends the intent of claim `uid`; with `dry_run`, says which claim it is and changes nothing.
/// The journal is held by one process at a time: a running controller refuses the run.
pub async fn run(config: &Config, uid: &str, dry_run: bool) -> anyhow::Result<()> {
    let Some(dir) = config.intent_journal.as_deref() else {
        anyhow::bail!("end-intent needs --intent-journal=DIR, the running controller's directory");
    };
    let intents = journal::intents_in(dir)
        .with_context(|| format!("cannot read the intent journal in {}", dir.display()))?;
    let Some(claim) = intents.iter().find(|c| c.metadata.uid.as_deref() == Some(uid)) else {
        anyhow::bail!("no open intent for claim UID {uid} in {}/intents.log", dir.display());
    };
    let name = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    );
    if dry_run {
        println!("would end the intent of claim {name} (UID {uid})");
        return Ok(());
    }
    // Opening takes the journal's lock: a controller that holds it refuses the run here.
    let journal = Journal::open(dir).map_err(|e| match e {
        journal::JournalError::Held { .. } => {
            anyhow::anyhow!("{e}: stop the csi-pv-controller that uses {} first", dir.display())
        }
        other => anyhow::Error::new(other),
    })?;
    journal.remove(uid).await.context("cannot end the intent")?;
    println!("ended the intent of claim {name} (UID {uid})");
    Ok(())
}
