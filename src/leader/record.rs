//! One election step, decided purely: from the Lease as it is, when we first saw it so, and
//! now, what to write (or why not). client-go's rules (tryAcquireOrRenew), so that a Go
//! candidate and we would agree on who holds a Lease.
//!
//! A Lease held by another is taken only after it has stood unchanged for a whole lease
//! duration by our own monotonic clock, counted from when we first saw it so: the holder's
//! renewTime, written by its wall clock, is never compared with ours. The duration is the one
//! the holder wrote in its record, as client-go reads it: a Go sidecar with a longer lease than
//! ours still leads for all of it.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

/// What to do about the Lease now.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// No Lease yet: create it, held by us.
    Create(LeaseSpec),
    /// Write this record, preconditioned on the version read (renewal, or taking over).
    Write(LeaseSpec),
    /// Another holder's Lease is current; it may be taken once `for_at_least` has passed
    /// without a change.
    HeldBy { holder: String, for_at_least: Duration },
}

/// The Lease record we last saw, and when we first saw it so.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub record: LeaseSpec,
    pub since: Instant,
}

/// Notes the Lease as read at `now`: a record unlike the one we had restarts its clock.
pub fn observe(previous: Option<Observed>, current: &LeaseSpec, now: Instant) -> Observed {
    match previous {
        Some(seen) if seen.record == *current => seen,
        _ => Observed { record: current.clone(), since: now },
    }
}

/// The step for `identity`, given the Lease (None: there is none) as observed, at `now`
/// (monotonic) and `wall` (the time written into the record, as client-go writes it).
pub fn step(
    observed: Option<&Observed>,
    identity: &str,
    lease_duration: Duration,
    now: Instant,
    wall: MicroTime,
) -> Step {
    let seconds = i32::try_from(lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
    let Some(observed) = observed else {
        return Step::Create(LeaseSpec {
            holder_identity: Some(identity.to_string()),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(wall.clone()),
            renew_time: Some(wall),
            lease_transitions: Some(0),
            ..Default::default()
        });
    };
    let record = &observed.record;
    let holder = record.holder_identity.as_deref().unwrap_or_default();
    let ours = holder == identity;
    if !holder.is_empty() && !ours {
        let holders = record.lease_duration_seconds.and_then(|s| u64::try_from(s).ok());
        let duration = holders.filter(|s| *s > 0).map_or(lease_duration, Duration::from_secs);
        let expires = observed.since + duration;
        if expires > now {
            return Step::HeldBy { holder: holder.to_string(), for_at_least: expires - now };
        }
    }
    let transitions = record.lease_transitions.unwrap_or_default();
    Step::Write(LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(seconds),
        acquire_time: if ours { record.acquire_time.clone() } else { Some(wall.clone()) },
        renew_time: Some(wall),
        lease_transitions: Some(if ours { transitions } else { transitions.saturating_add(1) }),
        ..record.clone()
    })
}

/// The record that gives the Lease up (client-go's release): no holder, and a one-second
/// duration, so that a Go candidate takes it at once too.
pub fn released(record: &LeaseSpec, wall: MicroTime) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(wall.clone()),
        acquire_time: Some(wall),
        ..record.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    const LEASE: Duration = Duration::from_secs(15);

    fn wall(seconds: i64) -> MicroTime {
        MicroTime(Timestamp::from_second(seconds).unwrap())
    }

    fn held(by: &str, renewed: i64, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(by.into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(wall(100)),
            renew_time: Some(wall(renewed)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    #[test]
    fn no_lease_is_created_held_by_us() {
        let now = Instant::now();
        let Step::Create(spec) = step(None, "a", LEASE, now, wall(500)) else {
            panic!("expected a create");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(wall(500)));
    }

    #[test]
    fn another_holder_waits_a_lease_duration_from_when_we_saw_it() {
        let start = Instant::now();
        let seen = observe(None, &held("b", 999_999, 3), start);
        // The holder's renewTime is far in the future by its clock: it does not matter.
        let at = |s| start + Duration::from_secs(s);
        let table = [
            (0, Some(Duration::from_secs(15))),
            (10, Some(Duration::from_secs(5))),
            (15, None),
            (60, None),
        ];
        for (after, waiting) in table {
            match step(Some(&seen), "a", LEASE, at(after), wall(1)) {
                Step::HeldBy { holder, for_at_least } => {
                    assert_eq!(holder, "b");
                    assert_eq!(Some(for_at_least), waiting, "{after}s after");
                }
                Step::Write(spec) => {
                    assert_eq!(waiting, None, "{after}s after: taken too early");
                    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
                    assert_eq!(spec.lease_transitions, Some(4), "a takeover counts");
                    assert_eq!(spec.acquire_time, Some(wall(1)));
                }
                Step::Create(_) => panic!("the Lease exists"),
            }
        }
    }

    #[test]
    fn another_holder_is_judged_by_the_duration_in_its_record() {
        let start = Instant::now();
        let at = |s| start + Duration::from_secs(s);
        let with = |seconds: Option<i32>| LeaseSpec {
            lease_duration_seconds: seconds,
            ..held("b", 10, 0)
        };
        // (its duration, seconds after we first saw it, still held for)
        let table = [
            (Some(137), 15, Some(122)),
            (Some(137), 136, Some(1)),
            (Some(137), 137, None),
            (Some(5), 5, None),
            (Some(5), 4, Some(1)),
            // No duration written: ours.
            (None, 14, Some(1)),
            (Some(0), 15, None),
        ];
        for (duration, after, held_for) in table {
            let seen = observe(None, &with(duration), start);
            let got = match step(Some(&seen), "a", LEASE, at(after), wall(1)) {
                Step::HeldBy { for_at_least, .. } => Some(for_at_least.as_secs()),
                Step::Write(_) => None,
                Step::Create(_) => panic!("the Lease exists"),
            };
            assert_eq!(got, held_for, "{duration:?} s, {after} s after");
        }
    }

    #[test]
    fn a_renewed_record_restarts_the_clock_an_unchanged_one_does_not() {
        let start = Instant::now();
        let first = observe(None, &held("b", 10, 0), start);
        let later = start + Duration::from_secs(14);
        let same = observe(Some(first.clone()), &held("b", 10, 0), later);
        assert_eq!(same.since, start);
        let renewed = observe(Some(first), &held("b", 12, 0), later);
        assert_eq!(renewed.since, later);
        let at = later + Duration::from_secs(2);
        assert!(matches!(step(Some(&renewed), "a", LEASE, at, wall(1)), Step::HeldBy { .. }));
    }

    #[test]
    fn our_own_lease_is_renewed_keeping_acquire_time_and_transitions() {
        let now = Instant::now();
        let seen = observe(None, &held("a", 10, 2), now);
        let Step::Write(spec) = step(Some(&seen), "a", LEASE, now, wall(20)) else {
            panic!("expected a renewal");
        };
        assert_eq!(spec.renew_time, Some(wall(20)));
        assert_eq!(spec.acquire_time, Some(wall(100)));
        assert_eq!(spec.lease_transitions, Some(2));
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let now = Instant::now();
        let free = released(&held("b", 10, 5), wall(11));
        assert_eq!(free.holder_identity, None);
        assert_eq!(free.lease_duration_seconds, Some(1));
        let seen = observe(None, &free, now);
        let Step::Write(spec) = step(Some(&seen), "a", LEASE, now, wall(12)) else {
            panic!("a Lease with no holder is free");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(6));
    }
}
