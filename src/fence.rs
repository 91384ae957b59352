//! The one gate every side effect passes: an API write or a CSI call that changes the driver's
//! state goes only while this process is sure it leads.
//!
//! Sure means: by our own monotonic clock, less than the renew deadline has passed since the
//! start of the last renewal that succeeded. A standby takes over no sooner than a lease duration
//! after it first saw that renewal, which it cannot have seen before the renewal started; the
//! lease duration is longer than the renew deadline, so the two never act at once, whatever the
//! wall clocks say. A process frozen past its deadline (SIGSTOP, a GC pause, a stalled VM) finds
//! the gate shut the instant it runs again, before any of its workers can send anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Open while `base.elapsed()` is below this many nanoseconds.
    until: AtomicU64,
}

impl Fence {
    /// No leader election: this process is the only one, and always acts.
    pub fn open() -> Fence {
        Fence::new(true)
    }

    /// Leader election: shut until the first renewal.
    pub fn shut() -> Fence {
        Fence::new(false)
    }

    fn new(always: bool) -> Fence {
        Fence(Arc::new(Inner { always, base: Instant::now(), until: AtomicU64::new(0) }))
    }

    /// A renewal that started at `started` succeeded: open until `started + deadline`.
    pub fn renewed(&self, started: Instant, deadline: Duration) {
        let until = (started + deadline).saturating_duration_since(self.0.base);
        let nanos = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
        self.0.until.store(nanos, Ordering::SeqCst);
    }

    /// Shut now (stepping down, giving the Lease up).
    pub fn shut_now(&self) {
        self.0.until.store(0, Ordering::SeqCst);
    }

    /// Whether a side effect may go now.
    pub fn is_open(&self) -> bool {
        self.0.always || self.remaining().is_some()
    }

    /// How long the gate stays open without another renewal; None when shut.
    pub fn remaining(&self) -> Option<Duration> {
        let now = u64::try_from(self.0.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let until = self.0.until.load(Ordering::SeqCst);
        (now < until).then(|| Duration::from_nanos(until - now))
    }

    /// Ok to go, or [`Fenced`].
    pub fn check(&self) -> Result<(), Fenced> {
        if self.is_open() { Ok(()) } else { Err(Fenced) }
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
        assert!(fence.check().is_err(), "shut before the first renewal");
        fence.renewed(Instant::now(), Duration::from_secs(10));
        assert!(fence.check().is_ok());
        assert!(fence.remaining().is_some_and(|r| r > Duration::from_secs(9)));
        // A renewal that started longer ago than the deadline proves nothing about now.
        fence.renewed(Instant::now() - Duration::from_secs(11), Duration::from_secs(10));
        assert!(fence.check().is_err());
        fence.renewed(Instant::now(), Duration::from_secs(10));
        fence.shut_now();
        assert!(fence.check().is_err(), "stepping down shuts it at once");
    }

    #[test]
    fn the_deadline_passes_by_itself() {
        let fence = Fence::shut();
        fence.renewed(Instant::now(), Duration::from_millis(30));
        assert!(fence.is_open());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!fence.is_open(), "no renewal: shut once the deadline passed");
    }
}
