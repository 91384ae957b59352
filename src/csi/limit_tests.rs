use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Calls time out after 10 s: answers from 5 s on are late.
fn limit(ceiling: usize) -> Limit {
    Limit::new(Settings::new(ceiling, Duration::from_secs(10)))
}

#[test]
fn a_driver_that_answers_in_time_keeps_the_ceiling() {
    let mut l = limit(10);
    for latency in [1, 3, 2, 40, 900, 4_999, 1] {
        assert_eq!(l.heard(l.epoch(), Heard::Answered(ms(latency))), Change::Kept);
    }
    assert_eq!(l.allowed(), 10);
}

#[test]
fn what_each_answer_does() {
    // From a limit of 10: what a call of the current epoch heard, what that does, and the
    // calls allowed after.
    let cases: &[(&str, Heard, Change, usize)] = &[
        ("a refusal cuts to 0.7", Heard::Overloaded, Change::Cut, 7),
        ("Unavailable cuts to 0.7", Heard::Unavailable, Change::Cut, 7),
        ("an answer at half the timeout cuts to 0.9", Heard::Answered(ms(5_000)), Change::Cut, 9),
        ("a late answer is still one", Heard::Answered(ms(4_999)), Change::Kept, 10),
        ("in time", Heard::Answered(ms(12)), Change::Kept, 10),
    ];
    for (name, heard, change, allowed) in cases {
        let mut l = limit(10);
        assert_eq!(l.heard(l.epoch(), *heard), *change, "{name}");
        assert_eq!(l.allowed(), *allowed, "{name}");
    }
}

#[test]
fn a_call_admitted_before_the_last_cut_cuts_no_more() {
    for heard in [Heard::Overloaded, Heard::Answered(ms(8_000))] {
        let mut l = limit(10);
        let before = l.epoch();
        l.heard(before, Heard::Overloaded);
        assert_eq!(l.heard(before, heard), Change::Kept, "{heard:?}");
        assert_eq!(l.allowed(), 7, "{heard:?}");
    }
}

#[test]
fn the_calls_in_flight_at_one_overload_cut_once() {
    let mut l = limit(20);
    let admitted = l.epoch();
    let changes: Vec<Change> = (0..8).map(|_| l.heard(admitted, Heard::Overloaded)).collect();
    assert_eq!(changes[0], Change::Cut);
    assert!(changes[1..].iter().all(|c| *c == Change::Kept), "{changes:?}");
    assert_eq!(l.allowed(), 14);
}

#[test]
fn one_call_in_flight_at_least_and_a_twentieth_of_a_call_per_answer_time() {
    let mut l = limit(4);
    l.heard(l.epoch(), Heard::Answered(ms(200)));
    for _ in 0..40 {
        l.heard(l.epoch(), Heard::Overloaded);
    }
    assert_eq!(l.allowed(), 1);
    assert!((l.value() - FLOOR).abs() < 1e-9, "{}", l.value());
    // One call per twenty answers' time: 200 ms / 0.05.
    assert_eq!(l.interval(), ms(4_000));
}

#[test]
fn the_interval_between_starts_is_the_usual_answer_over_the_limit_below_the_ceiling() {
    let mut l = limit(10);
    assert_eq!(l.interval(), Duration::ZERO, "never cut: never paced");
    l.heard(l.epoch(), Heard::Overloaded);
    assert_eq!(l.interval(), ms(100).div_f64(7.0), "100 ms before any answer");
    l.heard(l.epoch(), Heard::Answered(ms(350)));
    assert_eq!(l.allowed(), 8, "7 and a fraction: the fraction is a paced call");
    assert_eq!(l.interval(), ms(350).div_f64(l.value()));
    for _ in 0..10_000 {
        l.heard(l.epoch(), Heard::Answered(ms(350)));
    }
    assert_eq!((l.value(), l.interval()), (10.0, Duration::ZERO), "back at the ceiling");
}

#[test]
fn recovers_by_about_one_call_per_round_trip_then_slowly_near_the_refused_level() {
    let mut l = limit(20);
    l.heard(l.epoch(), Heard::Overloaded);
    assert_eq!(l.allowed(), 14);
    let answers_to = |l: &mut Limit, level: f64| {
        let mut answers = 0;
        while l.value() < level - 1e-9 {
            l.heard(l.epoch(), Heard::Answered(ms(5)));
            answers += 1;
        }
        answers
    };
    // About 14 answers (one round trip at 14 in flight) for the fifteenth call.
    let fast = answers_to(&mut l, 15.0);
    assert!((13..=15).contains(&fast), "{fast}");
    // From 0.9 of the refused level (18) to it: half a thousandth of 20 per answer.
    answers_to(&mut l, 18.0);
    let slow = answers_to(&mut l, 20.0);
    assert!((195..=205).contains(&slow), "{slow}");
    for _ in 0..10 {
        l.heard(l.epoch(), Heard::Answered(ms(5)));
    }
    assert_eq!(l.value(), 20.0, "never above the ceiling");
}

#[test]
fn well_past_the_refused_level_it_is_forgotten() {
    let mut l = limit(100);
    for _ in 0..5 {
        l.heard(l.epoch(), Heard::Overloaded);
    }
    let refused = l.value() / 0.7;
    // Up to the refused level: slowly (two hundred answers from 0.9 of it); past it, faster
    // and faster; past 1.2 times it, one call per round trip again.
    let mut answers = 0;
    while l.value() < refused * 1.2 {
        l.heard(l.epoch(), Heard::Answered(ms(5)));
        answers += 1;
    }
    let before = l.value();
    l.heard(l.epoch(), Heard::Answered(ms(5)));
    // About 90 answers from 17 to 21.6 (0.9 of 24), 200 from there to 24, 111 past it.
    assert!((370..=430).contains(&answers), "{answers}");
    assert!((l.value() - before - 1.0 / before).abs() < 1e-9, "{} from {before}", l.value());
}

#[test]
fn answers_near_the_deadline_hold_the_limit_back_until_they_come_in_time_again() {
    let mut l = limit(20);
    for _ in 0..10 {
        l.heard(l.epoch(), Heard::Answered(ms(6_000)));
    }
    let held = l.value();
    assert!(held < 8.0, "{held}");
    for _ in 0..200 {
        l.heard(l.epoch(), Heard::Answered(ms(300)));
    }
    assert!(l.value() > held + 5.0, "{} from {held}", l.value());
}

#[test]
fn admission_tables() {
    let b = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let driver = b(&["driver"]);
    let zone_a = b(&["driver", "zone=a"]);
    let zone_b = b(&["driver", "zone=b"]);
    let w = |id, budgets| Waiter { id, budgets };
    type Room = &'static [(&'static str, usize)];
    let cases: &[(&str, Vec<Waiter<'_>>, Room, &[u64])] = &[
        (
            "room for two of three",
            vec![w(1, &driver), w(2, &driver), w(3, &driver)],
            &[("driver", 2)],
            &[1, 2],
        ),
        ("no room", vec![w(1, &driver)], &[("driver", 0)], &[]),
        (
            "a full segment holds its calls, another segment's call goes",
            vec![w(1, &zone_a), w(2, &zone_b), w(3, &zone_a)],
            &[("driver", 5), ("zone=a", 0), ("zone=b", 1)],
            &[2],
        ),
        (
            "a call held by its full segment leaves the driver's room to others",
            vec![w(1, &zone_a), w(2, &driver), w(3, &zone_a)],
            &[("driver", 5), ("zone=a", 0)],
            &[2],
        ),
        (
            "a call held by the driver's room keeps later calls off it",
            vec![w(1, &driver), w(2, &driver), w(3, &zone_b)],
            &[("driver", 1), ("zone=b", 4)],
            &[1],
        ),
        (
            "the driver's room is shared by every segment",
            vec![w(1, &zone_a), w(2, &zone_b), w(3, &driver)],
            &[("driver", 2), ("zone=a", 3), ("zone=b", 3)],
            &[1, 2],
        ),
    ];
    for (name, waiters, room, want) in cases {
        let room_of = |budget: &str| room.iter().find(|(b, _)| *b == budget).map_or(0, |(_, n)| *n);
        assert_eq!(admissible(waiters, &room_of), *want, "{name}");
    }
}

/// A backend that refuses past 8 calls in flight, with the limiter in front of it, one round
/// trip per round: the calls in flight settle between the cut and the knee, and refusals stay
/// few.
#[test]
fn settles_below_a_knee_it_is_not_told_of() {
    let mut l = limit(100);
    let (mut refused, mut answered) = (0, 0);
    let mut seen = Vec::new();
    for round in 0..400 {
        let epoch = l.epoch();
        let in_flight = l.allowed();
        for call in 0..in_flight {
            let heard = if call >= 8 { Heard::Overloaded } else { Heard::Answered(ms(20)) };
            if round >= 100 {
                match heard {
                    Heard::Answered(_) => answered += 1,
                    _ => refused += 1,
                }
            }
            l.heard(epoch, heard);
        }
        seen.push(in_flight);
    }
    let settled = &seen[100..];
    assert!(settled.iter().all(|n| (4..=9).contains(n)), "{settled:?}");
    let mean = settled.iter().sum::<usize>() as f64 / settled.len() as f64;
    // Near the knee most of the time: at least 0.9 of it on average, and about one refusal
    // per hundred answers (one per cycle of slow probing).
    assert!(mean > 7.2, "{mean}");
    assert!(refused * 60 < answered, "{refused} refused, {answered} answered");
}

#[test]
fn a_refusal_pauses_the_budget_for_about_an_answer_doubling_while_refusals_go_on() {
    let mut l = limit(10);
    assert_eq!(l.pause(), Duration::ZERO);
    // Before any answer: 100 ms, then doubling.
    l.heard(l.epoch(), Heard::Overloaded);
    assert_eq!(l.pause(), ms(100));
    l.heard(l.epoch(), Heard::Answered(ms(200)));
    assert_eq!(l.pause(), Duration::ZERO, "an answer ends the pause");
    let pauses: Vec<Duration> = (0..7)
        .map(|_| {
            l.heard(l.epoch(), Heard::Overloaded);
            l.pause()
        })
        .collect();
    assert_eq!(pauses, [ms(200), ms(400), ms(800), ms(1_600), ms(3_200), ms(5_000), ms(5_000)]);
    // A call sent before the last cut was refused by the same overload: no doubling.
    let before = l.epoch() - 1;
    l.heard(before, Heard::Overloaded);
    assert_eq!(l.pause(), ms(5_000));
    // Unavailable pauses nothing: a driver that is down is waited out elsewhere.
    let mut down = limit(10);
    down.heard(down.epoch(), Heard::Unavailable);
    assert_eq!(down.pause(), Duration::ZERO);
    assert_eq!(down.allowed(), 7);
}

#[test]
fn fair_order_tables() {
    let q = |id, existing, share| Queued { id, existing, share };
    type Served = &'static [(&'static str, u64)];
    let cases: &[(&str, Vec<Queued<'_>>, Served, &[u64])] = &[
        (
            "existing-volume work first, by arrival",
            vec![q(1, false, "a"), q(2, true, "b"), q(3, true, "a")],
            &[],
            &[2, 3, 1],
        ),
        (
            "the share served least goes first",
            vec![q(1, false, "a"), q(2, false, "a"), q(3, false, "b")],
            &[("a", 40), ("b", 2)],
            &[3, 1, 2],
        ),
        (
            "equal shares by arrival",
            vec![q(5, false, "a"), q(4, false, "b")],
            &[("a", 3), ("b", 3)],
            &[4, 5],
        ),
    ];
    for (name, waiting, served, want) in cases {
        let served_of = |s: &str| served.iter().find(|(n, _)| *n == s).map_or(0, |(_, v)| *v);
        assert_eq!(fair_order(waiting, &served_of), *want, "{name}");
    }
}

#[test]
fn a_share_that_starts_waiting_counts_from_the_call_last_admitted() {
    let cases: &[(&str, u64, &[u64], u64)] = &[
        ("new, others far along: one before the least of them", 0, &[900, 40], 39),
        ("just behind them: the same", 39, &[40], 39),
        ("level with them: its own, after their next", 40, &[40], 40),
        ("ahead of them already: its own", 100, &[40], 100),
        ("none served yet", 0, &[0], 0),
        ("nobody else waits: its own", 7, &[], 7),
    ];
    for (name, own, others, want) in cases {
        assert_eq!(joined(*own, others.iter().copied()), *want, "{name}");
    }
}

/// A backend that takes `rate` calls a second (a token bucket holding one second's worth, as
/// cloud APIs throttle) and answers each in `latency.0` plus up to `latency.1` more (evenly
/// spread, from a fixed sequence: the driver's own work and a busy node's scheduling), behind
/// the limiter as the gate runs it (a start holds the next for the interval, a refusal pauses),
/// with calls always waiting; in 1 ms steps for `secs`. The volumes made and the refusals, from
/// `warm` seconds on.
fn behind_a_token_bucket(
    rate: f64,
    (latency, jitter): (u64, u64),
    secs: u64,
    warm: u64,
) -> (f64, f64) {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next_latency = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        latency + seed % (jitter + 1)
    };
    let mut l = limit(100);
    let mut tokens = rate;
    // (answered at, epoch, took)
    let mut in_flight: Vec<(u64, u64, u64)> = Vec::new();
    let mut not_before = 0.0_f64;
    let (mut made, mut refused) = (0.0, 0.0);
    for t in 0..secs * 1_000 {
        let counted = t >= warm * 1_000;
        tokens = (tokens + rate / 1_000.0).min(rate);
        for (_, epoch, took) in in_flight.iter().filter(|(done, ..)| *done == t) {
            l.heard(*epoch, Heard::Answered(ms(*took)));
            made += if counted { 1.0 } else { 0.0 };
        }
        in_flight.retain(|(done, ..)| *done > t);
        let now = t as f64;
        while in_flight.len() < l.allowed() && now >= not_before {
            let epoch = l.epoch();
            not_before = not_before.max(now + l.interval().as_secs_f64() * 1_000.0);
            if tokens >= 1.0 {
                tokens -= 1.0;
                let took = next_latency();
                in_flight.push((t + took, epoch, took));
            } else {
                l.heard(epoch, Heard::Overloaded);
                not_before = not_before.max(now + l.pause().as_secs_f64() * 1_000.0);
                refused += if counted { 1.0 } else { 0.0 };
            }
        }
    }
    (made, refused)
}

/// The paced window finds a rate it is not told of: near it, with under one refusal per
/// hundred volumes, whether the right number in flight is a fraction of a call or many, and
/// whether answers take the same time or vary (the second figure: up to that much on top).
#[test]
fn a_rate_limited_backend_is_used_near_its_rate_with_few_refusals() {
    let cases = [
        (5.0, (200, 0)),
        (2.0, (300, 0)),
        (40.0, (200, 0)),
        (5.0, (2_000, 0)),
        (10.0, (200, 50)),
        (5.0, (200, 50)),
        (40.0, (200, 50)),
        (5.0, (200, 200)),
        (10.0, (100, 100)),
    ];
    for (rate, (latency, jitter)) in cases {
        let (secs, warm) = (1_260, 60);
        let (made, refused) = behind_a_token_bucket(rate, (latency, jitter), secs, warm);
        let share = made / (rate * (secs - warm) as f64);
        let per_hundred = refused * 100.0 / made;
        let case = format!("{rate}/s at {latency}+{jitter} ms");
        println!("{case}: {share:.3} of the rate, {per_hundred:.2} refused per 100");
        assert!(share > 0.93, "{case}: {share:.3} of the rate");
        assert!(per_hundred < 1.0, "{case}: {per_hundred:.2} per 100");
    }
}
