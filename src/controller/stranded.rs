//! Keys whose last pass failed because the driver could not be reached (connection refused or
//! dropped, `Unavailable`). Their retries wait out a backoff that grows during an outage (up to
//! `--retry-interval-max`); once the driver answers Probe again they are queued at once.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use tracing::info;

use super::{ClaimKey, Controller};
use crate::csi::CsiError;

/// How often Probe is asked while some key is stranded.
const PROBE_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct Stranded {
    claims: Mutex<HashSet<ClaimKey>>,
    volumes: Mutex<HashSet<String>>,
}

impl Stranded {
    pub(super) fn claim(&self, key: &ClaimKey, error: &CsiError) {
        if error.unreachable() {
            self.claims
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.clone());
        }
    }

    pub(super) fn volume(&self, name: &str, error: &CsiError) {
        if error.unreachable() {
            self.volumes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.to_string());
        }
    }

    fn is_empty(&self) -> bool {
        self.claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
            && self
                .volumes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
    }

    fn take(&self) -> (Vec<ClaimKey>, Vec<String>) {
        let claims = std::mem::take(&mut *self.claims.lock().unwrap_or_else(|p| p.into_inner()));
        let volumes = std::mem::take(&mut *self.volumes.lock().unwrap_or_else(|p| p.into_inner()));
        (claims.into_iter().collect(), volumes.into_iter().collect())
    }
}

impl Controller {
    /// Runs until the queues close: while keys are stranded, asks Probe every second, and on
    /// the first answer queues them all at once, their backoff cleared.
    pub(super) async fn resume_when_driver_returns(&self) {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            if self.stranded.is_empty() || !matches!(self.csi.probe().await, Ok(true)) {
                continue;
            }
            let (claims, volumes) = self.stranded.take();
            info!(
                claims = claims.len(),
                volumes = volumes.len(),
                "the driver answers again; retrying at once what failed while it was unreachable"
            );
            for key in claims {
                self.clear_backoff(&key);
                self.resizes.lift_wait(&key);
                self.claims.add(key);
            }
            for name in volumes {
                self.volumes.forget(&name);
                self.volumes.add(name);
            }
        }
    }
}
