//! Work that keeps failing: by name, since when it has failed with no success in between, and
//! why. /readyz names what has failed past a grace (a watch, capacity publishing), not every
//! blip.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct Failing {
    failing: Mutex<BTreeMap<String, (Instant, String)>>,
}

impl Failing {
    /// `name` failed; the time of its first failure in a row is kept, and the latest why.
    pub fn failed(&self, name: &str, why: String) {
        let mut failing = self.lock();
        match failing.get_mut(name) {
            Some((_, last)) => *last = why,
            None => {
                failing.insert(name.to_string(), (Instant::now(), why));
            }
        }
    }

    pub fn passed(&self, name: &str) {
        self.lock().remove(name);
    }

    /// What has failed for at least `grace` with no success since: its name, for how long,
    /// and the latest why.
    pub fn stale(&self, grace: Duration) -> Vec<(String, Duration, String)> {
        self.lock()
            .iter()
            .map(|(name, (since, why))| (name.clone(), since.elapsed(), why.clone()))
            .filter(|(_, failing_for, _)| *failing_for >= grace)
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, (Instant, String)>> {
        self.failing.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_named_past_the_grace_with_its_latest_why_until_a_success() {
        let failing = Failing::default();
        failing.failed("capacity publishing", "forbidden".into());
        assert!(failing.stale(Duration::from_secs(3600)).is_empty());
        failing.failed("capacity publishing", "still forbidden".into());
        let stale = failing.stale(Duration::ZERO);
        assert_eq!(stale.len(), 1, "{stale:?}");
        let (name, failing_for, why) = &stale[0];
        assert_eq!((name.as_str(), why.as_str()), ("capacity publishing", "still forbidden"));
        assert!(*failing_for < Duration::from_secs(60), "the first failure's time is kept");
        failing.passed("capacity publishing");
        assert!(failing.stale(Duration::ZERO).is_empty());
    }
}
