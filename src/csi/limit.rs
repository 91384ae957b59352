//! How many driver calls may be in flight at once, found from what the backend answers:
//! additive increase while it answers in time, multiplicative decrease when it refuses as
//! overloaded (ResourceExhausted, Unavailable) or answers so late that calls near their
//! deadline. Never above the ceiling (`--worker-threads`). Once cut, the limit is a paced
//! window: `limit` calls per usual answer's time, started evenly rather than at once, so that
//! a fraction of a call counts (a backend that takes five calls a second, each answered in
//! 200 ms, needs about one in flight, and whole calls would swing between half and double
//! that). And which waiting calls may go now. Pure: answers and latencies in, limits and
//! admissions out.

use std::collections::HashSet;
use std::time::Duration;

/// The limiter's constants.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The most calls in flight, and where the limit starts: a driver that never refuses and
    /// never nears its deadline is never held below it.
    pub ceiling: f64,
    /// The limit times this on a refusal.
    pub refused: f64,
    /// The limit times this on an answer that took `slow` or longer.
    pub slowed: f64,
    /// An answer this late says the backend is past what it can take: calls are nearing their
    /// deadline, and those that pass it are repeated, which adds to the load. Half the calls'
    /// timeout. (A latency that merely grows with the calls in flight is no such sign: a driver
    /// that serializes its work answers later under a burst and loses nothing by it.)
    pub slow: Duration,
}

impl Settings {
    /// `ceiling`: --worker-threads; `timeout`: the driver calls' --timeout.
    pub fn new(ceiling: usize, timeout: Duration) -> Settings {
        Settings { ceiling: (ceiling.max(1)) as f64, refused: 0.7, slowed: 0.9, slow: timeout / 2 }
    }
}

const PAUSE_BEFORE_ANY: Duration = Duration::from_millis(100);
const PAUSE_MAX: Duration = Duration::from_secs(5);
/// The least limit: one call per twenty usual answers' time.
const FLOOR: f64 = 0.05;
/// From 0.9 of the level the backend last refused at, the limit grows by this share of that
/// level per answer: two hundred answers from there back to it, so about one refusal in two
/// hundred calls while the backend stays as it is.
const NEAR_STEP: f64 = 0.0005;
/// Past the level the backend last refused at, the excess over it grows by this share per
/// answer, on top of the slow step: a hundred answers or so to 1.2 times it, where it is
/// forgotten. A rate limit that filled its bucket while we were below it says no only once the
/// bucket is empty, some seconds past its rate; a faster probe would forget the level first and
/// climb into a run of refusals.
const PROBE_GROWTH: f64 = 0.02;
/// Within a float's error of a whole call, it is that whole call.
const EPSILON: f64 = 1e-9;

/// What one call heard.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Heard {
    /// An answer (OK or an error that is not overload), after this long.
    Answered(Duration),
    /// ResourceExhausted: the backend says it takes no more now.
    Overloaded,
    /// Unavailable: the backend, or the driver's socket, cannot take calls now. Cut as a
    /// refusal, with no pause: a driver that is down is waited out by the executor (its Probe),
    /// and a pause on top would only hold back its return.
    Unavailable,
}

/// What hearing an answer did to the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Kept,
    Raised,
    Cut,
}

/// One budget's limit.
#[derive(Debug, Clone)]
pub struct Limit {
    settings: Settings,
    limit: f64,
    /// Bumped on every cut. A call admitted before the last cut says nothing new when it is
    /// refused too: the calls in flight at one overload cut the limit once, not once each.
    epoch: u64,
    /// The limit the last refusal came at: the backend's knee, as far as we know it. Near it,
    /// the limit grows ten times slower, so that finding the knee again costs few refusals.
    refused_at: Option<f64>,
    /// Refusals since the last answer, and the usual time of an answer: a refusal comes back
    /// at once, so without a pause the next call would meet the same empty bucket.
    refusals: u32,
    typical: Option<Duration>,
}

impl Limit {
    pub fn new(settings: Settings) -> Limit {
        Limit {
            settings,
            limit: settings.ceiling,
            epoch: 0,
            refused_at: None,
            refusals: 0,
            typical: None,
        }
    }

    /// The calls that may be in flight now: the limit rounded up (a paced fraction of a call
    /// is a call sent less often), at least one.
    pub fn allowed(&self) -> usize {
        (self.limit - EPSILON).ceil().clamp(1.0, self.settings.ceiling) as usize
    }

    /// The time between two calls' starts: none at the ceiling (a driver that never refused
    /// is never held back); below it, the usual answer's time (100 ms before any) over the
    /// limit, so that `limit` calls go per answer's time, spread out.
    pub fn interval(&self) -> Duration {
        if self.limit >= self.settings.ceiling {
            return Duration::ZERO;
        }
        self.typical.unwrap_or(PAUSE_BEFORE_ANY).div_f64(self.limit)
    }

    pub fn value(&self) -> f64 {
        self.limit
    }

    /// The epoch a call admitted now belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How long the budget sends nothing after a refusal: the usual answer's time (100 ms
    /// before any), doubled for each refusal in a row, at most 5 s; zero once an answer came.
    pub fn pause(&self) -> Duration {
        if self.refusals == 0 {
            return Duration::ZERO;
        }
        let base = self.typical.unwrap_or(PAUSE_BEFORE_ANY);
        let doubling = 1u32 << (self.refusals - 1).min(10);
        base.saturating_mul(doubling).min(PAUSE_MAX)
    }

    /// Takes in what a call admitted in `epoch` heard.
    pub fn heard(&mut self, epoch: u64, heard: Heard) -> Change {
        let current = epoch == self.epoch;
        match heard {
            // Calls sent before the last cut met the same overload: one refusal in a row.
            Heard::Overloaded if current => self.refusals = self.refusals.saturating_add(1),
            Heard::Overloaded | Heard::Unavailable => {}
            Heard::Answered(latency) => {
                self.refusals = 0;
                self.typical = Some(match self.typical {
                    // Over about twenty answers: the paced interval follows it, and an
                    // average that jumps with each answer would make the rate jump too.
                    Some(t) => t.mul_f64(0.95) + latency.mul_f64(0.05),
                    None => latency,
                });
            }
        }
        match heard {
            Heard::Overloaded | Heard::Unavailable if current => {
                // Refused while probing past the level of the last refusal (not yet forgotten):
                // that level is confirmed, not raised, so the climb back stops below it.
                let level = match self.refused_at {
                    Some(knee) if knee < self.limit => knee,
                    _ => self.limit,
                };
                self.refused_at = Some(level);
                self.cut(self.settings.refused)
            }
            Heard::Answered(latency) if latency >= self.settings.slow => {
                if current {
                    self.cut(self.settings.slowed)
                } else {
                    Change::Kept
                }
            }
            Heard::Overloaded | Heard::Unavailable => Change::Kept,
            Heard::Answered(_) => self.raise(),
        }
    }

    fn cut(&mut self, factor: f64) -> Change {
        self.limit = (self.limit * factor).max(FLOOR);
        self.epoch += 1;
        Change::Cut
    }

    /// One more call per limit's worth of answers (about one per round trip; below one call,
    /// half again per answer) up to 0.9 of where the backend last refused; from there, half a
    /// thousandth of that level per answer, and faster past it. Well past it, that knee is
    /// forgotten (the backend may have grown).
    fn raise(&mut self) -> Change {
        if self.limit >= self.settings.ceiling {
            return Change::Kept;
        }
        if self.refused_at.is_some_and(|knee| self.limit > knee * 1.2) {
            self.refused_at = None;
        }
        let fast = if self.limit >= 1.0 { 1.0 / self.limit } else { self.limit / 2.0 };
        self.limit = match self.refused_at {
            // Past it, probing speeds up: the backend may have grown.
            Some(knee) if self.limit >= knee => {
                self.limit + NEAR_STEP * knee + (self.limit - knee) * PROBE_GROWTH
            }
            Some(knee) if self.limit >= knee * 0.9 => self.limit + NEAR_STEP * knee,
            // The fast climb stops where the slow one starts: at a fraction of a call, one
            // step could pass the refused level at once.
            Some(knee) => (self.limit + fast).min(knee * 0.9),
            None => self.limit + fast,
        }
        .min(self.settings.ceiling);
        Change::Raised
    }
}

/// A call waiting for room, as the order sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued<'a> {
    pub id: u64,
    /// Work on an existing volume: a deletion, an expansion, a modify.
    pub existing: bool,
    /// The claim's namespace ("" when the call has none).
    pub share: &'a str,
}

/// The order waiting calls go in: work on existing volumes first, by arrival; then creates,
/// the share served least first (by `served`, calls admitted per share), by arrival within a
/// share. With every share backlogged that is round robin; a share that starts waiting is
/// counted from where the others are (`joined`), so it neither jumps the line for what it did
/// not ask before nor waits behind what the others asked.
pub fn fair_order(waiting: &[Queued<'_>], served: &dyn Fn(&str) -> u64) -> Vec<u64> {
    let mut order: Vec<&Queued<'_>> = waiting.iter().collect();
    order.sort_by_key(|q| (!q.existing, if q.existing { 0 } else { served(q.share) }, q.id));
    order.into_iter().map(|q| q.id).collect()
}

/// The count a share starts from when its first call starts waiting: its own, or one less
/// than the least among the shares already waiting, whichever is more. One less is the count
/// of the call that share last had admitted (start-time fair queueing's virtual time): the
/// newcomer goes next, once, as it would have had it been waiting all along, rather than
/// after the next call of a share that has had every turn so far.
pub fn joined(own: u64, waiting_shares: impl Iterator<Item = u64>) -> u64 {
    waiting_shares.min().map_or(own, |least| own.max(least.saturating_sub(1)))
}

/// A call waiting to go: the budgets it needs room in, in the order calls go in
/// (`fair_order`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<'a> {
    pub id: u64,
    pub budgets: &'a [String],
}

/// Which waiting calls may go now, given the room each budget has left. A call goes when every
/// budget it needs has room that no call before it waits for. One that cannot go holds the
/// budgets that stopped it, so that later calls never overtake it there, while calls that need
/// none of those (another topology segment's) still go.
pub fn admissible(waiters: &[Waiter<'_>], room: &dyn Fn(&str) -> usize) -> Vec<u64> {
    let mut taken: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut held: HashSet<&str> = HashSet::new();
    let mut go = Vec::new();
    for waiter in waiters {
        let blocked: Vec<&str> = waiter
            .budgets
            .iter()
            .map(String::as_str)
            .filter(|b| held.contains(b) || taken.get(b).copied().unwrap_or(0) >= room(b))
            .collect();
        if blocked.is_empty() {
            for b in waiter.budgets {
                *taken.entry(b.as_str()).or_default() += 1;
            }
            go.push(waiter.id);
        } else {
            held.extend(blocked);
        }
    }
    go
}

#[cfg(test)]
#[path = "limit_tests.rs"]
mod tests;
