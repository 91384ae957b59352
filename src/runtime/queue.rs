//! A keyed work queue: each key is queued at most once, worked on by at most one worker at a
//! time, and retried after failures with its own exponential backoff (client-go's workqueue with
//! an item-exponential rate limiter, in a few lines of tokio).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::Notify;

use super::fair::{FairLine, Lane, Ticket};

/// Per-key backoff: `start` doubled on each consecutive failure, capped at `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub start: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The delay before retry number `failures` (1 = first retry).
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
        self.start.saturating_mul(factor).min(self.max)
    }
}

/// The first retry after a write conflict, and the longest.
const CONFLICT_START: Duration = Duration::from_millis(20);
const CONFLICT_MAX: Duration = Duration::from_secs(5);

/// The ticket of a key no one has given one: its lane and share as far as the key shows.
pub type Tickets<K> = Arc<dyn Fn(&K) -> Ticket + Send + Sync>;

/// The most keys of lanes other than `Lane::Existing` one share may have worked on at once, as
/// it stands now (it follows the driver's limit: `model::turn::most_per_share`).
pub type ShareMost = Arc<dyn Fn() -> usize + Send + Sync>;

struct State<K> {
    /// Keys waiting for a worker, in their fair order.
    ready: FairLine<K>,
    /// The last ticket given to each key, for the adds that give none (retries, resyncs).
    tickets: HashMap<K, Ticket>,
    /// Queued keys, and since when (client-go's queue duration).
    queued: HashMap<K, Instant>,
    /// Keys being worked on, and since when (client-go's work duration).
    active: HashMap<K, Instant>,
    /// Of those, the keys handed out from a lane other than `Lane::Existing`, with their share.
    active_others: HashMap<K, String>,
    /// Keys added while a worker had them; they are queued again when that worker is done.
    dirty: HashSet<K>,
    failures: HashMap<K, u32>,
    /// Consecutive write conflicts per key (reset with `forget`).
    conflicts: HashMap<K, u32>,
    /// Write conflicts per key since the last [`WorkQueue::take_conflicts`].
    period_conflicts: HashMap<K, u32>,
    /// Passes handed out per key since the last [`WorkQueue::take_passes`].
    passes: HashMap<K, u32>,
    closed: bool,
}

struct Inner<K> {
    state: Mutex<State<K>>,
    wake: Notify,
    backoff: Backoff,
    default_ticket: std::sync::OnceLock<Tickets<K>>,
    /// The most keys of lanes other than `Lane::Existing` worked on at once (no bound unset).
    others_most: std::sync::OnceLock<usize>,
    /// The most of those one share may hold at once, asked at each hand-out (no bound unset).
    share_most: std::sync::OnceLock<ShareMost>,
    /// The `name` label of the workqueue metrics; unnamed queues are not measured.
    name: Option<crate::metrics::QueueLabels>,
    /// A second `name` the client-go workqueue series are also exported under: the claim
    /// queue does csi-resizer's work too, whose dashboards look for `<driver>-pvc`.
    alias: std::sync::OnceLock<crate::metrics::QueueLabels>,
}

/// Cloning gives another handle on the same queue.
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue { inner: self.inner.clone() }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    pub fn new(backoff: Backoff) -> Self {
        Self::build(backoff, None)
    }

    /// A queue whose depth, adds and retries are exported under `name`.
    pub fn named(backoff: Backoff, name: &str) -> Self {
        Self::build(backoff, Some(crate::metrics::QueueLabels { name: name.to_string() }))
    }

    /// Exports the client-go workqueue series under `name` as well (once; later calls change
    /// nothing).
    pub fn also_export_as(&self, name: &str) {
        let labels = crate::metrics::QueueLabels { name: name.to_string() };
        crate::metrics::metrics().queue_created(&labels);
        let _ = self.inner.alias.set(labels);
    }

    /// The names the client-go workqueue series are exported under.
    fn exported(&self) -> impl Iterator<Item = &crate::metrics::QueueLabels> {
        self.inner.name.iter().chain(self.inner.alias.get())
    }

    /// The queue's metrics name ("" when unnamed).
    pub fn name(&self) -> &str {
        self.inner.name.as_ref().map_or("", |n| n.name.as_str())
    }

    fn build(backoff: Backoff, name: Option<crate::metrics::QueueLabels>) -> Self {
        if let Some(labels) = &name {
            crate::metrics::metrics().queue_created(labels);
        }
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    ready: FairLine::default(),
                    tickets: HashMap::new(),
                    queued: HashMap::new(),
                    active: HashMap::new(),
                    active_others: HashMap::new(),
                    dirty: HashSet::new(),
                    failures: HashMap::new(),
                    conflicts: HashMap::new(),
                    period_conflicts: HashMap::new(),
                    passes: HashMap::new(),
                    closed: false,
                }),
                wake: Notify::new(),
                backoff,
                default_ticket: std::sync::OnceLock::new(),
                others_most: std::sync::OnceLock::new(),
                share_most: std::sync::OnceLock::new(),
                name,
                alias: std::sync::OnceLock::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<K>> {
        // A worker that panicked while holding the lock leaves consistent sets behind: every
        // mutation below is a single insert or remove.
        self.inner.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets how keys no one has given a ticket are placed (once; later calls change nothing).
    pub fn place_by(&self, tickets: Tickets<K>) {
        let _ = self.inner.default_ticket.set(tickets);
    }

    /// Keeps `reserved` of `workers` for work on existing volumes (`model::turn`): keys of the
    /// other lanes are handed out only while fewer than the rest are worked on. Once; later
    /// calls change nothing.
    pub fn reserve_for_existing(&self, workers: usize, reserved: usize) {
        if reserved > 0 {
            let _ = self.inner.others_most.set(workers.saturating_sub(reserved).max(1));
        }
    }

    /// Holds back a share's keys of lanes other than `Lane::Existing` while it has `most()` of
    /// them worked on: workers beyond what the driver takes would only wait for it, and one
    /// share holding them all would leave another share's first claim no worker. Once; later
    /// calls change nothing.
    pub fn limit_shares(&self, most: ShareMost) {
        let _ = self.inner.share_most.set(most);
    }

    fn ticket_of(&self, state: &State<K>, key: &K) -> Ticket {
        match state.tickets.get(key) {
            Some(ticket) => ticket.clone(),
            None => self.inner.default_ticket.get().map(|f| f(key)).unwrap_or_default(),
        }
    }

    /// Queues `key` unless it is queued already; a key being worked on is queued again once done.
    pub fn add(&self, key: K) {
        let mut state = self.state();
        if state.closed || state.queued.contains_key(&key) {
            return;
        }
        if state.active.contains_key(&key) {
            state.dirty.insert(key);
            return;
        }
        state.queued.insert(key.clone(), Instant::now());
        let ticket = self.ticket_of(&state, &key);
        state.ready.push(key, ticket.clone());
        let (depth, share) = (state.ready.len(), state.ready.count(&ticket));
        drop(state);
        self.measure(depth, true);
        self.measure_share(&ticket, share);
        self.inner.wake.notify_one();
    }

    /// Gives `key` its place in the fair order from now on (a queued key moves there), then
    /// queues it as [`WorkQueue::add`] does.
    pub fn add_with(&self, key: K, ticket: Ticket) {
        let moved = {
            let mut state = self.state();
            state.tickets.insert(key.clone(), ticket.clone());
            let queued = state.ready.place(&key).map(|(old, _)| old);
            let moved = queued.filter(|old| *old != ticket);
            if moved.is_some() {
                state.ready.push(key.clone(), ticket.clone());
            }
            moved.map(|old| {
                let counts = (state.ready.count(&old), state.ready.count(&ticket));
                (old, counts)
            })
        };
        if let Some((old, (left, now))) = moved {
            self.measure_share(&old, left);
            self.measure_share(&ticket, now);
        }
        self.add(key);
    }

    /// Keeps the tickets of the keys `keep` holds, and forgets the rest: keys whose object went
    /// while a late event still gave them a ticket.
    pub fn retain_tickets(&self, keep: impl Fn(&K) -> bool) {
        self.state().tickets.retain(|k, _| keep(k));
    }

    /// Forgets the ticket of a key whose object is gone.
    pub fn drop_ticket(&self, key: &K) {
        self.state().tickets.remove(key);
    }

    /// Where `key` waits: its ticket and the keys of its share ahead of it in its lane.
    pub fn place(&self, key: &K) -> Option<(Ticket, usize)> {
        self.state().ready.place(key)
    }

    /// The keys queued for at least `waited`, longest first, at most `most` of them: each with
    /// its ticket and the keys of its share ahead of it.
    pub fn waiting_longer_than(&self, waited: Duration, most: usize) -> Vec<(K, Ticket, usize)> {
        let state = self.state();
        let now = Instant::now();
        let mut found: Vec<(Duration, (K, Ticket, usize))> = state
            .ready
            .places()
            .into_iter()
            .filter_map(|place| {
                let since = state.queued.get(&place.0)?;
                let waited_for = now.saturating_duration_since(*since);
                (waited_for >= waited).then_some((waited_for, place))
            })
            .collect();
        drop(state);
        found.sort_by_key(|(waited, _)| std::cmp::Reverse(*waited));
        found.into_iter().take(most).map(|(_, place)| place).collect()
    }

    /// Queues `key` after `delay`.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(key);
        });
    }

    /// Queues `key` again after its next backoff delay, and returns that delay.
    pub fn retry(&self, key: K) -> Duration {
        let delay = {
            let mut state = self.state();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            *failures = failures.saturating_add(1);
            self.inner.backoff.delay(*failures)
        };
        self.count_retry();
        self.add_after(key, delay);
        delay
    }

    fn count_retry(&self) {
        for labels in self.exported() {
            crate::metrics::metrics().queue_retries.get_or_create(labels).inc();
        }
    }

    /// Queues `key` again after the longest backoff delay: for failures that only a change by
    /// the user can cure (upstream's slow set). A change to the object queues it sooner.
    pub fn retry_slowly(&self, key: K) -> Duration {
        {
            let mut state = self.state();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            *failures = failures.saturating_add(1);
        }
        let delay = self.inner.backoff.max;
        self.count_retry();
        self.add_after(key, delay);
        delay
    }

    /// Clears the failure and conflict counts of `key` (after a success).
    pub fn forget(&self, key: &K) {
        let mut state = self.state();
        state.failures.remove(key);
        state.conflicts.remove(key);
    }

    /// Queues `key` again after a write of its pass met a newer version (HTTP 409). The watch
    /// brings that version and queues the key itself, usually within milliseconds; this is the
    /// net under it, doubling from CONFLICT_START per consecutive conflict up to CONFLICT_MAX,
    /// so a cache that lags (a watch re-listing after an API server restart) costs a few
    /// refused writes per key rather than a storm of them.
    pub fn retry_conflict(&self, key: K) -> Duration {
        let delay = {
            let mut state = self.state();
            *state.period_conflicts.entry(key.clone()).or_insert(0) += 1;
            let conflicts = state.conflicts.entry(key.clone()).or_insert(0);
            *conflicts = conflicts.saturating_add(1);
            Backoff { start: CONFLICT_START, max: CONFLICT_MAX }.delay(*conflicts)
        };
        if let Some(labels) = &self.inner.name {
            crate::metrics::metrics().write_conflicts.get_or_create(labels).inc();
        }
        self.add_after(key, delay);
        delay
    }

    /// Consecutive failures recorded for `key`.
    pub fn failures(&self, key: &K) -> u32 {
        self.state().failures.get(key).copied().unwrap_or(0)
    }

    /// Waits for the next key; the caller owns it until [`WorkQueue::done`]. None once closed.
    pub async fn next(&self) -> Option<K> {
        loop {
            let woken = self.inner.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            // Asked before the queue's lock: it may take the driver's.
            let share_most = self.inner.share_most.get().map_or(usize::MAX, |most| most());
            {
                let mut guard = self.state();
                let state = &mut *guard;
                if state.closed {
                    return None;
                }
                let most = self.inner.others_most.get().copied().unwrap_or(usize::MAX);
                let others_open = state.active_others.len() < most;
                let mut held: HashMap<&str, usize> = HashMap::new();
                for share in state.active_others.values() {
                    *held.entry(share.as_str()).or_default() += 1;
                }
                let open = |lane: Lane, share: &str| {
                    lane == Lane::Existing
                        || (others_open && held.get(share).copied().unwrap_or(0) < share_most)
                };
                if let Some((key, ticket)) = state.ready.pop_where(open) {
                    if ticket.lane != Lane::Existing {
                        state.active_others.insert(key.clone(), ticket.share.clone());
                    }
                    let share = state.ready.count(&ticket);
                    let waited = state.queued.remove(&key).map(|at| at.elapsed());
                    state.active.insert(key.clone(), Instant::now());
                    *state.passes.entry(key.clone()).or_insert(0) += 1;
                    let more = !state.ready.is_empty();
                    let depth = state.ready.len();
                    drop(guard);
                    self.measure(depth, false);
                    self.measure_share(&ticket, share);
                    self.observe(waited, |m| &m.queue_seconds);
                    if more {
                        // Pass the baton: another worker may take the next key.
                        self.inner.wake.notify_one();
                    }
                    return Some(key);
                }
            }
            woken.await;
        }
    }

    /// Ends the work on `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let mut state = self.state();
        let worked = state.active.remove(key).map(|at| at.elapsed());
        // A key of the other lanes done: one held back by the reserve may go now.
        let freed = state.active_others.remove(key).is_some();
        let again = state.dirty.remove(key)
            && !state.closed
            && state.queued.insert(key.clone(), Instant::now()).is_none();
        let share = again.then(|| {
            let ticket = self.ticket_of(&state, key);
            state.ready.push(key.clone(), ticket.clone());
            (state.ready.count(&ticket), ticket)
        });
        drop(state);
        if let Some((waiting, ticket)) = &share {
            self.measure_share(ticket, *waiting);
        }
        self.observe(worked, |m| &m.work_seconds);
        if again || freed {
            self.inner.wake.notify_one();
        }
    }

    /// The passes each key got since the last call, and a fresh count from now on. Called once
    /// per resync: a settled key gets about one pass per call, a hot loop thousands.
    pub fn take_passes(&self) -> HashMap<K, u32> {
        std::mem::take(&mut self.state().passes)
    }

    /// The write conflicts of each key since the last call.
    pub fn take_conflicts(&self) -> HashMap<K, u32> {
        std::mem::take(&mut self.state().period_conflicts)
    }

    /// No key waits and none is being worked on.
    pub fn is_idle(&self) -> bool {
        let state = self.state();
        state.ready.is_empty() && state.active.is_empty()
    }

    /// Keys waiting for a worker.
    pub fn len(&self) -> usize {
        self.state().ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes every worker with None; later adds are ignored.
    pub fn close(&self) {
        self.state().closed = true;
        self.inner.wake.notify_waiters();
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;

#[path = "queue_metrics.rs"]
mod metrics;
