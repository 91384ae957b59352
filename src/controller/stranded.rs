//! Keys whose last pass failed because the driver could not be reached (connection refused or
//! dropped, `Unavailable`). Their retries wait out a backoff that grows during an outage (up to
//! `--retry-interval-max`); once the driver answers Probe again they are queued at once.

use std::time::Duration;

use tracing::info;

use super::Controller;

/// How often Probe is asked while some key is stranded.
const PROBE_EVERY: Duration = Duration::from_secs(1);

impl Controller {
    /// Runs until the queues close: while keys are stranded, asks Probe every second, and on
    /// the first answer queues them all at once, their backoff cleared.
    pub(super) async fn resume_when_driver_returns(&self) {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            let stranded =
                self.memory.claims.any(|m| m.stranded) || self.memory.volumes.any(|m| m.stranded);
            if !stranded || !matches!(self.csi.probe().await, Ok(true)) {
                continue;
            }
            let claims = self.memory.claims.take_where(|m| std::mem::take(&mut m.stranded));
            let volumes = self.memory.volumes.take_where(|m| std::mem::take(&mut m.stranded));
            info!(
                claims = claims.len(),
                volumes = volumes.len(),
                "the driver answers again; retrying at once what failed while it was unreachable"
            );
            for key in claims {
                self.clear_backoff(&key);
                self.memory.claims.update_if_known(&key, |m| m.resize.wait = None);
                self.intake.claims.add(key);
            }
            for name in volumes {
                // A PV's memory is only this mark.
                self.memory.volumes.forget(&name);
                self.intake.volumes.forget(&name);
                self.intake.volumes.add(name);
            }
        }
    }
}
