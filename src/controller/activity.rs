//! Once per resync, what the queues did: passes per key into the metric and a WARN for a key
//! worked on far more often than changes and retries explain; a summary of write conflicts.

use tracing::{info, warn};

use super::Controller;

/// Passes of one key in one resync period beyond what changes and backoff retries explain.
const HOT_KEY_PASSES: u32 = 100;

/// Write conflicts in one resync period beyond the odd race with another writer.
const CONFLICTS_WORTH_A_WARNING: u32 = 100;

impl Controller {
    /// Once per resync: how often each key was worked on since the last one, into the metric;
    /// a key worked on far more often than changes and retries explain is a loop, said loudly.
    pub(super) fn report_activity(&self) {
        for (key, passes) in self.intake.claims.observe_passes(HOT_KEY_PASSES) {
            warn!(claim = %key, passes, "claim worked on {passes} times in one resync period: a hot loop; please report it with this log");
        }
        for (key, passes) in self.intake.volumes.observe_passes(HOT_KEY_PASSES) {
            warn!(volume = %key, passes, "PersistentVolume worked on {passes} times in one resync period: a hot loop; please report it with this log");
        }
        let claims = self.intake.claims.take_conflicts();
        let volumes = self.intake.volumes.take_conflicts();
        let refused: u32 = claims.values().chain(volumes.values()).sum();
        if refused > 0 {
            let keys = claims.len() + volumes.len();
            let most = claims
                .iter()
                .map(|(k, n)| (k.to_string(), *n))
                .chain(volumes.iter().map(|(k, n)| (k.clone(), *n)))
                .max_by_key(|(_, n)| *n)
                .unwrap_or_default();
            let line = format!(
                "{refused} writes met a newer version (HTTP 409) in the last resync period, over {keys} objects (most: {} with {}); each retried after the watch or a backoff",
                most.0, most.1
            );
            if refused >= CONFLICTS_WORTH_A_WARNING {
                warn!("{line}");
            } else {
                info!("{line}");
            }
        }
    }
}
