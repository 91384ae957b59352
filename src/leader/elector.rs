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
use crate::runtime::fence::{Fence, FenceSlot};

/// Our part in the election: our own Lease first, then the Go sidecars' Leases (see
/// `leader::leases`), so that we act only while nobody else provisions or resizes for
/// the driver. Only the holder of our own Lease campaigns for theirs: two of our replicas never
/// hold one Lease each and wait for each other.
pub struct Leadership {
    leading: Vec<watch::Receiver<bool>>,
    fence: Fence,
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
    /// The Go sidecars' Leases, campaigned for once we hold our own.
    then: Vec<Elector>,
    name: String,
}

/// One Lease to campaign for: its name, and whose it is when it is not ours (for the log).
#[derive(Debug, Clone)]
pub struct LeaseName {
    pub name: String,
    pub whose: Option<&'static str>,
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
    /// Whose Lease it is, when not ours: waiting for it is said at info.
    whose: Option<&'static str>,
    identity: String,
    timing: Timing,
    fence: FenceSlot,
    /// The record as we last saw it, when we first saw it so, and its resourceVersion.
    observed: Option<(Observed, Option<String>)>,
    /// The Lease as our last write left it: the leader renews on it without reading first
    /// (client-go's fast path), and reads only when that write fails.
    written: Option<Lease>,
}

impl Leadership {
    /// Starts campaigning for `leases` in `namespace` on `client`, which must be the Leases'
    /// own (never held back by the controller's rate limit): the first now, the others once it
    /// is held. `fence` opens while we hold them all.
    pub fn campaign(
        client: kube::Client,
        namespace: &str,
        leases: &[LeaseName],
        identity: &str,
        timing: Timing,
        fence: Fence,
    ) -> Result<Leadership, LeaderError> {
        timing.check()?;
        // Every Lease has its part of the fence from the start: holding our own alone opens
        // nothing.
        let electors: Vec<Elector> = leases
            .iter()
            .map(|lease| Elector {
                api: Api::namespaced(client.clone(), namespace),
                name: lease.name.clone(),
                whose: lease.whose,
                identity: identity.to_string(),
                timing,
                fence: fence.slot(),
                observed: None,
                written: None,
            })
            .collect();
        let mut electors = electors.into_iter();
        let first = electors.next().ok_or(LeaderError::NoLease)?;
        let name = format!("{namespace}/{}", first.name);
        info!(lease = %name, %identity, "campaigning for leadership");
        let mut leadership = Leadership {
            leading: Vec::new(),
            fence,
            stops: Vec::new(),
            tasks: Vec::new(),
            then: electors.collect(),
            name,
        };
        leadership.start(first);
        Ok(leadership)
    }

    fn start(&mut self, elector: Elector) {
        let (sender, leading) = watch::channel(false);
        let (stop, stopped) = oneshot::channel();
        self.leading.push(leading);
        self.stops.push(stop);
        self.tasks.push(tokio::spawn(elector.run(sender, stopped)));
    }

    /// Resolves once we hold every Lease; false if an election stopped first.
    pub async fn won(&mut self) -> bool {
        if !self.all_held().await {
            return false;
        }
        if self.then.is_empty() {
            return true;
        }
        for elector in std::mem::take(&mut self.then) {
            info!(lease = %elector.name, whose = elector.whose.unwrap_or("ours"), "campaigning for the Lease too, so that no other provisioner or resizer acts beside us");
            self.start(elector);
        }
        self.all_held().await
    }

    /// Waits until every Lease started so far is held at once.
    async fn all_held(&mut self) -> bool {
        loop {
            for leading in &mut self.leading {
                if leading.wait_for(|l| *l).await.is_err() {
                    return false;
                }
            }
            if self.leading.iter().all(|l| *l.borrow()) {
                return true;
            }
        }
    }

    /// Resolves the moment leadership may have lapsed: an election says so, or a renew
    /// deadline passed by the clock with no renewal (an election loop may itself be stuck).
    pub async fn lost(&mut self) {
        loop {
            let Some(left) = self.fence.remaining() else {
                return;
            };
            let any_lost = futures::future::select_all(
                self.leading
                    .iter_mut()
                    .map(|l| Box::pin(async move { l.wait_for(|l| !*l).await.map(drop) })),
            );
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                _ = any_lost => return,
            }
        }
    }

    /// Shuts the fence and gives the Leases up, so a standby (or the Go sidecars, after a roll
    /// back) takes over without waiting for them to expire.
    pub async fn resign(mut self) {
        self.fence.shut_now();
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        let tasks = futures::future::join_all(self.tasks.drain(..));
        match tokio::time::timeout(Duration::from_secs(5), tasks).await {
            Ok(results) => {
                for error in results.into_iter().filter_map(Result::err) {
                    warn!(lease = %self.name, %error, "election task failed");
                }
            }
            Err(_) => warn!(lease = %self.name, "Leases not released within 5s; they will expire"),
        }
    }
}

impl Elector {
    async fn run(mut self, leading: watch::Sender<bool>, mut stopped: oneshot::Receiver<()>) {
        // client-go's gauge, as each Go sidecar exports it: one series, `name=""` (csi-lib-utils
        // names no election). Ours stands for the process; the Go sidecars' Leases, held so
        // that they stay idle, add none, so that a sum over the pod's leaders stays right.
        let gauge = match self.whose {
            None => crate::metrics::metrics()
                .leader
                .get_or_create(&crate::metrics::QueueLabels { name: String::new() })
                .clone(),
            Some(_) => Default::default(),
        };
        gauge.set(0);
        // Campaign: try every retry period until the Lease is ours.
        let mut said: Option<String> = None;
        loop {
            match self.attempt(self.timing.retry_period, false).await {
                Ok(Tried::Held) => break,
                Ok(Tried::Other(holder)) => match self.whose {
                    // Said once per holder: the switch from the Go sidecars waits here.
                    Some(whose) if said.as_deref() != Some(holder.as_str()) => {
                        info!(lease = %self.name, %holder, "{whose} Lease is held by another process; not acting until it is given up or expires");
                        said = Some(holder);
                    }
                    _ => debug!(%holder, "the Lease is held"),
                },
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
        super::events::record(&self.api, &self.name, &self.identity, "became leader");
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
        // Said only when we give the Lease up: a replica whose leadership may have lapsed sends
        // nothing more, an Event neither (client-go records it then too; we log it).
        if stopping {
            super::events::record(&self.api, &self.name, &self.identity, "stopped leading");
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
