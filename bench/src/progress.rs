//! Where a long `make bench` stands: the runs done of all those planned, the time spent, and an
//! estimate of the time left. The estimate takes, for each run still to come, the mean time of
//! the finished runs of the same kind (stack, scenario and throttle); failing that, of the same
//! scenario; failing that, of every finished run. Pure: the caller gives the clock's readings.

use std::time::Duration;

/// What a planned run is, for the estimate: its stack, scenario and throttle as labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    pub stack: String,
    pub scenario: String,
    pub throttle: String,
}

/// The finished runs and how long each took.
#[derive(Debug, Default)]
pub struct Progress {
    done: Vec<(Kind, Duration)>,
}

impl Progress {
    pub fn finished(&mut self, kind: Kind, took: Duration) {
        self.done.push((kind, took));
    }

    /// The time the runs in `left` should take; None before any run has finished.
    pub fn left(&self, left: &[Kind]) -> Option<Duration> {
        let mean = |keep: &dyn Fn(&Kind) -> bool| -> Option<Duration> {
            let took: Vec<Duration> =
                self.done.iter().filter(|(k, _)| keep(k)).map(|(_, d)| *d).collect();
            let count = u32::try_from(took.len()).ok().filter(|n| *n > 0)?;
            Some(took.iter().sum::<Duration>() / count)
        };
        let overall = mean(&|_| true)?;
        let mut total = Duration::ZERO;
        for kind in left {
            let same = mean(&|k| k == kind);
            let scenario = || mean(&|k| k.scenario == kind.scenario);
            total += same.or_else(scenario).unwrap_or(overall);
        }
        Some(total)
    }

    /// One line for the log: `bench: 7 of 36 runs done, 12m 4s spent, about 48m left`.
    pub fn line(&self, total: usize, spent: Duration, left: &[Kind]) -> String {
        let estimate = match self.left(left) {
            Some(d) if left.is_empty() || d.is_zero() => "nothing left".to_string(),
            Some(d) => format!("about {} left", minutes(d)),
            None => "no estimate before the first run ends".to_string(),
        };
        format!(
            "bench: {} of {total} runs done, {} spent, {estimate}",
            self.done.len(),
            minutes(spent)
        )
    }
}

/// `1h 5m`, `12m 4s`, `40s`: precise enough for a wait of minutes to hours.
fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, min, sec) => format!("{min}m {sec}s"),
        (h, min, _) => format!("{h}h {min}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(stack: &str, scenario: &str) -> Kind {
        Kind { stack: stack.into(), scenario: scenario.into(), throttle: "defaults".into() }
    }

    #[test]
    fn the_estimate_follows_the_runs_of_the_same_kind() {
        let mut progress = Progress::default();
        let (ours, theirs) = (kind("ours", "burst@1000"), kind("upstream", "burst@1000"));
        let rest = kind("ours", "rest@10000");
        assert_eq!(progress.left(std::slice::from_ref(&ours)), None);
        assert!(
            progress.line(4, Duration::ZERO, std::slice::from_ref(&ours)).contains("no estimate")
        );
        progress.finished(theirs.clone(), Duration::from_secs(300));
        progress.finished(ours.clone(), Duration::from_secs(60));
        let table: [(&[Kind], u64); 5] = [
            (&[], 0),
            (std::slice::from_ref(&ours), 60),
            (&[ours.clone(), theirs.clone()], 360),
            // No run of the kind: the scenario's mean; no run of the scenario: every run's.
            (&[kind("beside", "burst@1000")], 180),
            (std::slice::from_ref(&rest), 180),
        ];
        for (left, want) in table {
            assert_eq!(progress.left(left), Some(Duration::from_secs(want)), "{left:?}");
        }
        let line = progress.line(4, Duration::from_secs(3725), &[ours, theirs]);
        assert_eq!(line, "bench: 2 of 4 runs done, 1h 2m spent, about 6m 0s left");
        assert!(
            progress.line(2, Duration::from_secs(40), &[]).ends_with("40s spent, nothing left")
        );
    }
}
