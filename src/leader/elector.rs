//! The election loop: reads and writes the Lease as [`record::step`] decides, keeps the
//! [`Fence`] open while renewals succeed, and reports whether we lead.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::record::{self, Observed, Step};
use super::{JITTER, LeaderError, Timing};
use crate::fence::Fence;

/// Our part in the election.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    fence: Fence,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    name: String,
}

/// How one attempt on the Lease went.
#[derive(Debug)]
enum Tried {
    /// We hold it: our write went through (and opened the fence).
    Held,
    /// Another replica holds it.
    Other(String),
    /// Someone wrote it between our read and our write; look again.
    Raced,
    /// No answer within the time the attempt had.
    TimedOut,
}

struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    fence: Fence,
    /// The record as we last saw it, when we first saw it so, and its resourceVersion.
    observed: Option<(Observed, Option<String>)>,
    /// The Lease as our last write left it: the leader renews on it without reading first
    /// (client-go's fast path), and reads only when that write fails.
    written: Option<Lease>,
}

impl Leadership {
    /// Starts campaigning for the Lease `namespace/name` on `client`, which must be the
    /// Lease's own (never held back by the controller's rate limit). `fence` opens while we
    /// lead.
    pub fn campaign(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
        fence: Fence,
    ) -> Result<Leadership, LeaderError> {
        timing.check()?;
        let (sender, leading) = watch::channel(false);
        let (stop, stopped) = oneshot::channel();
        let elector = Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
            fence: fence.clone(),
            observed: None,
            written: None,
        };
        let full = format!("{namespace}/{name}");
        info!(lease = %full, %identity, "campaigning for leadership");
        let task = tokio::spawn(elector.run(sender, stopped));
        Ok(Leadership { leading, fence, stop: Some(stop), task, name: full })
    }

    /// Resolves once we lead; false if the election stopped first.
    pub async fn won(&mut self) -> bool {
        self.leading.wait_for(|l| *l).await.is_ok()
    }

    /// Resolves the moment leadership may have lapsed: the election says so, or the renew
    /// deadline passed by the clock with no renewal (the election loop may itself be stuck).
    pub async fn lost(&mut self) {
        loop {
            let Some(left) = self.fence.remaining() else {
                return;
            };
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                _ = self.leading.wait_for(|l| !*l) => return,
            }
        }
    }

    /// Shuts the fence and gives the Lease up, so a standby takes over without waiting for it
    /// to expire.
    pub async fn resign(mut self) {
        self.fence.shut_now();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => warn!(lease = %self.name, %error, "election task failed"),
            Err(_) => warn!(lease = %self.name, "Lease not released within 5s; it will expire"),
        }
    }
}

impl Elector {
    async fn run(mut self, leading: watch::Sender<bool>, mut stopped: oneshot::Receiver<()>) {
        let gauge = crate::metrics::metrics()
            .leader
            .get_or_create(&crate::metrics::QueueLabels { name: self.name.clone() })
            .clone();
        gauge.set(0);
        // Campaign: try every retry period until the Lease is ours.
        loop {
            match self.attempt(self.timing.retry_period, false).await {
                Ok(Tried::Held) => break,
                Ok(Tried::Other(holder)) => debug!(%holder, "the Lease is held"),
                Ok(Tried::Raced) => debug!("the Lease changed under us"),
                Ok(Tried::TimedOut) => warn!("no answer about the Lease in time"),
                Err(error) => warn!(%error, "cannot read or write the Lease"),
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(self.timing.retry_period)) => {}
                _ = &mut stopped => return,
            }
        }
        info!(lease = %self.name, "acquired the Lease");
        gauge.set(1);
        let _ = leading.send(true);
        // Lead: renew every retry period; stop when the deadline passes with no renewal or
        // another replica holds the Lease.
        let stopping = loop {
            tokio::select! {
                _ = tokio::time::sleep(self.timing.retry_period) => {}
                _ = &mut stopped => break true,
            }
            let Some(left) = self.fence.remaining() else {
                warn!(lease = %self.name, deadline = ?self.timing.renew_deadline, "no renewal within the renew deadline");
                break false;
            };
            match self.attempt(left, true).await {
                Ok(Tried::Held) => {}
                Ok(Tried::Other(holder)) => {
                    warn!(lease = %self.name, %holder, "another replica holds the Lease");
                    break false;
                }
                Ok(Tried::Raced) => debug!("the Lease changed under us; looking again"),
                Ok(Tried::TimedOut) => {
                    warn!(lease = %self.name, "no answer to the renewal before the renew deadline");
                }
                Err(error) => warn!(lease = %self.name, %error, "cannot renew the Lease"),
            }
        };
        self.fence.shut_now();
        gauge.set(0);
        let _ = leading.send(false);
        if stopping {
            self.release().await;
        }
    }

    /// One read and, if the step says so, one write, all within `limit`. `leading`: a renewal,
    /// which first writes on the Lease as we left it, with no read.
    async fn attempt(&mut self, limit: Duration, leading: bool) -> Result<Tried, kube::Error> {
        let started = Instant::now();
        match tokio::time::timeout(limit, self.try_once(started, leading)).await {
            Ok(result) => result,
            Err(_) => Ok(Tried::TimedOut),
        }
    }

    /// The leader's renewal on the Lease our last write left, with no read first. None: there
    /// is no such Lease, or the write failed (someone else wrote it, or the API refused).
    async fn renew_on_written(&mut self, started: Instant) -> Option<Tried> {
        let mut lease = self.written.take()?;
        let now = Instant::now();
        let wall = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let ours = record::observe(None, &lease.spec.clone().unwrap_or_default(), now);
        let Step::Write(spec) =
            record::step(Some(&ours), &self.identity, self.timing.lease_duration, now, wall)
        else {
            return None;
        };
        lease.spec = Some(spec);
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(lease) => Some(self.wrote(started, lease)),
            Err(error) => {
                debug!(lease = %self.name, %error, "renewal on the last written Lease failed; reading it");
                None
            }
        }
    }

    /// Our write went through: the fence stays open, and the Lease is remembered as written.
    fn wrote(&mut self, started: Instant, lease: Lease) -> Tried {
        self.fence.renewed(started, self.timing.renew_deadline);
        let spec = lease.spec.clone().unwrap_or_default();
        let seen = record::observe(None, &spec, Instant::now());
        self.observed = Some((seen, lease.metadata.resource_version.clone()));
        self.written = Some(lease);
        Tried::Held
    }

    async fn try_once(&mut self, started: Instant, leading: bool) -> Result<Tried, kube::Error> {
        if leading {
            if let Some(tried) = self.renew_on_written(started).await {
                return Ok(tried);
            }
            crate::metrics::metrics()
                .leader_slowpath
                .get_or_create(&crate::metrics::QueueLabels { name: self.name.clone() })
                .inc();
        }
        let current = self.api.get_opt(&self.name).await?;
        let now = Instant::now();
        let wall = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let observed = current.as_ref().map(|lease| {
            let previous = self.observed.take().map(|(o, _)| o);
            let spec = lease.spec.clone().unwrap_or_default();
            record::observe(previous, &spec, now)
        });
        let rv = current.as_ref().and_then(|l| l.metadata.resource_version.clone());
        self.observed = observed.clone().map(|o| (o, rv));
        let step =
            record::step(observed.as_ref(), &self.identity, self.timing.lease_duration, now, wall);
        let written = match step {
            Step::HeldBy { holder, .. } => return Ok(Tried::Other(holder)),
            Step::Create(spec) => {
                let mut lease = Lease::default();
                lease.metadata.name = Some(self.name.clone());
                lease.spec = Some(spec);
                self.api.create(&PostParams::default(), &lease).await
            }
            Step::Write(spec) => {
                let mut lease = current.unwrap_or_default();
                lease.spec = Some(spec);
                self.api.replace(&self.name, &PostParams::default(), &lease).await
            }
        };
        match written {
            Ok(lease) => Ok(self.wrote(started, lease)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Tried::Raced),
            Err(error) => Err(error),
        }
    }

    /// Gives the Lease up if the last record we saw is ours (a conflict means it no longer is).
    async fn release(&mut self) {
        let Some((seen, rv)) = self.observed.take() else {
            return;
        };
        if seen.record.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        let wall = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let mut lease = Lease::default();
        lease.metadata.name = Some(self.name.clone());
        lease.metadata.resource_version = rv;
        lease.spec = Some(record::released(&seen.record, wall));
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => info!(lease = %self.name, "Lease released"),
            Err(error) => {
                warn!(lease = %self.name, %error, "cannot release the Lease; it will expire");
            }
        }
    }
}

/// `period` stretched by up to the jitter factor, so that candidates do not poll in step.
fn jittered(period: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let fraction = f64::from(nanos % 1000) / 1000.0;
    period.mul_f64(1.0 + (JITTER - 1.0) * fraction)
}
