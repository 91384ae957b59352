//! How many driver calls may be in flight at once, found from what the backend answers:
//! additive increase while it answers in time, multiplicative decrease when it refuses as
//! overloaded (ResourceExhausted, Unavailable) or answers so late that calls near their
//! deadline. Never above the ceiling (`--worker-threads`), never below one call. And which
//! waiting calls may go now. Pure: answers and latencies in, limits and admissions out.

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

/// What one call heard.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Heard {
    /// An answer (OK or an error that is not overload), after this long.
    Answered(Duration),
    /// ResourceExhausted or Unavailable: the backend says it takes no more now.
    Overloaded,
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
}

impl Limit {
    pub fn new(settings: Settings) -> Limit {
        Limit { settings, limit: settings.ceiling, epoch: 0, refused_at: None }
    }

    /// The calls that may be in flight now.
    pub fn allowed(&self) -> usize {
        self.limit.floor().max(1.0) as usize
    }

    pub fn value(&self) -> f64 {
        self.limit
    }

    /// The epoch a call admitted now belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Takes in what a call admitted in `epoch` heard.
    pub fn heard(&mut self, epoch: u64, heard: Heard) -> Change {
        let current = epoch == self.epoch;
        match heard {
            Heard::Overloaded if current => {
                self.refused_at = Some(self.limit);
                self.cut(self.settings.refused)
            }
            Heard::Answered(latency) if latency >= self.settings.slow => {
                if current {
                    self.cut(self.settings.slowed)
                } else {
                    Change::Kept
                }
            }
            Heard::Overloaded => Change::Kept,
            Heard::Answered(_) => self.raise(),
        }
    }

    fn cut(&mut self, factor: f64) -> Change {
        self.limit = (self.limit * factor).max(1.0);
        self.epoch += 1;
        Change::Cut
    }

    /// One more call per limit's worth of answers (about one per round trip), a tenth of that
    /// near where the backend last refused; well past it, that knee is forgotten (the backend
    /// may have grown).
    fn raise(&mut self) -> Change {
        if self.limit >= self.settings.ceiling {
            return Change::Kept;
        }
        if self.refused_at.is_some_and(|knee| self.limit > knee * 1.2) {
            self.refused_at = None;
        }
        let near = self.refused_at.is_some_and(|knee| self.limit >= knee * 0.85);
        let step = if near { 0.1 } else { 1.0 };
        self.limit = (self.limit + step / self.limit).min(self.settings.ceiling);
        Change::Raised
    }
}

/// A call waiting to go: the budgets it needs room in, in order of priority (the caller sorts
/// the waiting calls: work on existing volumes first, then by arrival).
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
