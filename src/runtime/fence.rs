//! The one gate every side effect passes: an API write or a CSI call that changes the driver's
//! state goes only while this process is sure it leads.
//!
//! Sure means: by our own monotonic clock, less than the renew deadline has passed since the
//! start of the last renewal that succeeded. A standby takes over no sooner than a lease duration
//! after it first saw that renewal, which it cannot have seen before the renewal started; the
//! lease duration is longer than the renew deadline, so the two never act at once, whatever the
//! wall clocks say. A process frozen past its deadline (SIGSTOP, a GC pause, a stalled VM) finds
//! the gate shut the instant it runs again, before any of its workers can send anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Refused: leadership may have lapsed.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "not sent: this replica's leadership may have lapsed (no Lease renewal within the renew deadline)"
)]
pub struct Fenced;

/// Shared by the clients and the election; cheap to clone.
#[derive(Debug, Clone)]
pub struct Fence(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Leader election off: always open.
    always: bool,
    base: Instant,
    /// One deadline per Lease held (`slot`), in nanoseconds after `base`: open while every one
    /// is ahead. No Lease yet: shut.
    slots: RwLock<Vec<Arc<AtomicU64>>>,
}

/// The part of the fence one Lease keeps open.
#[derive(Debug, Clone)]
pub struct FenceSlot {
    fence: Fence,
    until: Arc<AtomicU64>,
}

impl Fence {
    /// No leader election: this process is the only one, and always acts.
    pub fn open() -> Fence {
        Fence::new(true)
    }

    /// Leader election: shut until every Lease's first renewal.
    pub fn shut() -> Fence {
        Fence::new(false)
    }

    fn new(always: bool) -> Fence {
        Fence(Arc::new(Inner { always, base: Instant::now(), slots: RwLock::default() }))
    }

    /// A new part for one more Lease, shut until its first renewal: from now on the fence is
    /// open only while this Lease too is renewed.
    pub fn slot(&self) -> FenceSlot {
        let until = Arc::new(AtomicU64::new(0));
        self.0.slots.write().unwrap_or_else(|p| p.into_inner()).push(until.clone());
        FenceSlot { fence: self.clone(), until }
    }

    /// Shut now (stepping down, giving the Leases up).
    pub fn shut_now(&self) {
        for until in self.0.slots.read().unwrap_or_else(|p| p.into_inner()).iter() {
            until.store(0, Ordering::SeqCst);
        }
    }

    /// Whether a side effect may go now.
    pub fn is_open(&self) -> bool {
        self.0.always || self.remaining().is_some()
    }

    fn now(&self) -> u64 {
        u64::try_from(self.0.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// How long the gate stays open without another renewal of the Lease due first; None when
    /// shut.
    pub fn remaining(&self) -> Option<Duration> {
        let now = self.now();
        let slots = self.0.slots.read().unwrap_or_else(|p| p.into_inner());
        let until = slots.iter().map(|u| u.load(Ordering::SeqCst)).min()?;
        (now < until).then(|| Duration::from_nanos(until - now))
    }

    /// Ok to go, or [`Fenced`].
    pub fn check(&self) -> Result<(), Fenced> {
        if self.is_open() { Ok(()) } else { Err(Fenced) }
    }
}

impl FenceSlot {
    /// A renewal of this Lease that started at `started` succeeded: this part stays open until
    /// `started + deadline`.
    pub fn renewed(&self, started: Instant, deadline: Duration) {
        let until = (started + deadline).saturating_duration_since(self.fence.0.base);
        let nanos = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        self.until.store(nanos, Ordering::SeqCst);
    }

    /// This Lease is given up or lost: the whole fence shuts.
    pub fn shut_now(&self) {
        self.until.store(0, Ordering::SeqCst);
    }

    /// How long this Lease keeps its part open without another renewal; None when shut.
    pub fn remaining(&self) -> Option<Duration> {
        let (now, until) = (self.fence.now(), self.until.load(Ordering::SeqCst));
        (now < until).then(|| Duration::from_nanos(until - now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_fence_never_shuts() {
        let fence = Fence::open();
        fence.shut_now();
        assert!(fence.check().is_ok());
    }

    #[test]
    fn shut_until_renewed_and_after_the_deadline() {
        let fence = Fence::shut();
        assert!(fence.check().is_err(), "shut with no Lease");
        let lease = fence.slot();
        assert!(fence.check().is_err(), "shut before the first renewal");
        lease.renewed(Instant::now(), Duration::from_secs(10));
        assert!(fence.check().is_ok());
        assert!(fence.remaining().is_some_and(|r| r > Duration::from_secs(9)));
        // A renewal that started longer ago than the deadline proves nothing about now.
        lease.renewed(Instant::now() - Duration::from_secs(11), Duration::from_secs(10));
        assert!(fence.check().is_err());
        lease.renewed(Instant::now(), Duration::from_secs(10));
        fence.shut_now();
        assert!(fence.check().is_err(), "stepping down shuts it at once");
    }

    #[test]
    fn open_only_while_every_lease_is_renewed() {
        let fence = Fence::shut();
        let (ours, provisioner) = (fence.slot(), fence.slot());
        ours.renewed(Instant::now(), Duration::from_secs(10));
        assert!(fence.check().is_err(), "the second Lease is not held yet");
        provisioner.renewed(Instant::now(), Duration::from_secs(5));
        assert!(
            fence.remaining().is_some_and(|r| r <= Duration::from_secs(5)),
            "the nearer deadline"
        );
        assert!(ours.remaining().is_some_and(|r| r > Duration::from_secs(9)));
        provisioner.shut_now();
        assert!(fence.check().is_err(), "losing one Lease shuts it all");
    }

    #[test]
    fn the_deadline_passes_by_itself() {
        let fence = Fence::shut();
        fence.slot().renewed(Instant::now(), Duration::from_millis(30));
        assert!(fence.is_open());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!fence.is_open(), "no renewal: shut once the deadline passed");
    }
}
