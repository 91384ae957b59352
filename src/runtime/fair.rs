//! The order in which queued keys reach a worker: by lane first (work on volumes that exist,
//! then claims a pod waits for, then the rest), and within a lane round robin over shares (a
//! claim's namespace), so that one namespace's burst of creates neither holds back another
//! namespace's few claims nor a deletion, an expansion or a modify. A plain structure with no
//! clock and no I/O: the queue keeps one, and the tables below pin its order.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

pub use crate::model::turn::{Lane, Ticket};

/// One lane: a line per share, and the shares in the order their turns come.
#[derive(Debug)]
struct Shares<K> {
    lines: HashMap<String, VecDeque<K>>,
    turns: VecDeque<String>,
}

impl<K> Default for Shares<K> {
    fn default() -> Self {
        Shares { lines: HashMap::new(), turns: VecDeque::new() }
    }
}

/// Queued keys in their fair order.
#[derive(Debug)]
pub struct FairLine<K> {
    lanes: [Shares<K>; 3],
    /// Each queued key's ticket, to find it again.
    tickets: HashMap<K, Ticket>,
}

impl<K> Default for FairLine<K> {
    fn default() -> Self {
        FairLine { lanes: Default::default(), tickets: HashMap::new() }
    }
}

fn index(lane: Lane) -> usize {
    lane as usize
}

impl<K: Clone + Eq + Hash> FairLine<K> {
    /// Queues `key` at the end of its share's line in its lane. A key queued already is moved
    /// when its ticket changed (it keeps its place when not).
    pub fn push(&mut self, key: K, ticket: Ticket) {
        if let Some(old) = self.tickets.get(&key) {
            if *old == ticket {
                return;
            }
            self.remove(&key);
        }
        let shares = &mut self.lanes[index(ticket.lane)];
        let line = shares.lines.entry(ticket.share.clone()).or_default();
        if line.is_empty() {
            shares.turns.push_back(ticket.share.clone());
        }
        line.push_back(key.clone());
        self.tickets.insert(key, ticket);
    }

    /// The next key: the first lane with work, the share whose turn it is, that share's oldest
    /// key. The share goes to the back of the turns.
    pub fn pop(&mut self) -> Option<K> {
        self.pop_where(|_, _| true).map(|(key, _)| key)
    }

    /// The next key as `pop` gives it, and its ticket, from the lanes and shares `open` lets
    /// through. A share it holds back keeps its turn: it goes first once it is let through.
    pub fn pop_where(&mut self, open: impl Fn(Lane, &str) -> bool) -> Option<(K, Ticket)> {
        for (lane, shares) in Lane::ALL.into_iter().zip(&mut self.lanes) {
            while let Some(at) = shares.turns.iter().position(|s| open(lane, s)) {
                let Some(share) = shares.turns.remove(at) else {
                    break;
                };
                let Some(line) = shares.lines.get_mut(&share) else {
                    continue;
                };
                let Some(key) = line.pop_front() else {
                    shares.lines.remove(&share);
                    continue;
                };
                if line.is_empty() {
                    shares.lines.remove(&share);
                } else {
                    shares.turns.push_back(share.clone());
                }
                self.tickets.remove(&key);
                return Some((key, Ticket { lane, share }));
            }
        }
        None
    }

    /// Takes `key` out of the line, wherever it waits.
    pub fn remove(&mut self, key: &K) -> Option<Ticket> {
        let ticket = self.tickets.remove(key)?;
        let shares = &mut self.lanes[index(ticket.lane)];
        if let Some(line) = shares.lines.get_mut(&ticket.share) {
            line.retain(|k| k != key);
            if line.is_empty() {
                shares.lines.remove(&ticket.share);
                shares.turns.retain(|s| *s != ticket.share);
            }
        }
        Some(ticket)
    }

    /// Where `key` waits: its ticket and how many keys of its share wait ahead of it in its
    /// lane. None when it is not queued.
    pub fn place(&self, key: &K) -> Option<(Ticket, usize)> {
        let ticket = self.tickets.get(key)?;
        let line = self.lanes[index(ticket.lane)].lines.get(&ticket.share)?;
        let ahead = line.iter().position(|k| k == key)?;
        Some((ticket.clone(), ahead))
    }

    /// Every queued key with its ticket and the keys of its share ahead of it in its lane.
    pub fn places(&self) -> Vec<(K, Ticket, usize)> {
        let mut out = Vec::with_capacity(self.len());
        for lane in Lane::ALL {
            for (share, line) in &self.lanes[index(lane)].lines {
                let ticket = Ticket::new(lane, share);
                out.extend(line.iter().enumerate().map(|(n, k)| (k.clone(), ticket.clone(), n)));
            }
        }
        out
    }

    pub fn contains(&self, key: &K) -> bool {
        self.tickets.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.tickets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tickets.is_empty()
    }

    /// Keys waiting in `ticket`'s lane and share.
    pub fn count(&self, ticket: &Ticket) -> usize {
        self.lanes[index(ticket.lane)].lines.get(&ticket.share).map_or(0, VecDeque::len)
    }

    /// Keys waiting, by lane and share.
    pub fn waiting(&self) -> Vec<(Lane, String, usize)> {
        let mut out = Vec::new();
        for lane in Lane::ALL {
            for (share, line) in &self.lanes[index(lane)].lines {
                out.push((lane, share.clone(), line.len()));
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(pushes: &[(&'static str, Lane, &str)]) -> FairLine<&'static str> {
        let mut line = FairLine::default();
        for (key, lane, share) in pushes {
            line.push(*key, Ticket::new(*lane, share));
        }
        line
    }

    fn drain(mut line: FairLine<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| line.pop()).collect()
    }

    use Lane::{Existing as E, Other as O, Scheduled as S};

    #[test]
    fn order_tables() {
        type Pushes = &'static [(&'static str, Lane, &'static str)];
        let cases: &[(&str, Pushes, &[&str])] = &[
            ("one share is first in, first out", &[("a1", O, "a"), ("a2", O, "a")], &["a1", "a2"]),
            (
                "a burst in one namespace does not hold back another's claim",
                &[("a1", O, "a"), ("a2", O, "a"), ("a3", O, "a"), ("b1", O, "b")],
                &["a1", "b1", "a2", "a3"],
            ),
            (
                "shares take turns, each in its own order",
                &[("a1", O, "a"), ("a2", O, "a"), ("b1", O, "b"), ("b2", O, "b"), ("c1", O, "c")],
                &["a1", "b1", "c1", "a2", "b2"],
            ),
            (
                "work on existing volumes goes before any create",
                &[("a1", O, "a"), ("a2", O, "a"), ("del", E, "a"), ("grow", E, "b")],
                &["del", "grow", "a1", "a2"],
            ),
            (
                "a claim a pod waits for goes before one no pod waits for",
                &[("a1", O, "a"), ("b1", S, "b"), ("a2", S, "a")],
                &["b1", "a2", "a1"],
            ),
            (
                "a key pushed twice with the same ticket keeps its place",
                &[("a1", O, "a"), ("a2", O, "a"), ("a1", O, "a")],
                &["a1", "a2"],
            ),
            (
                "a key whose ticket changes moves to its new line's end",
                &[("a1", O, "a"), ("a2", O, "a"), ("a1", E, "a")],
                &["a1", "a2"],
            ),
            (
                "a key moved out of a lane leaves no empty turn behind",
                &[("a1", O, "a"), ("b1", O, "b"), ("a1", S, "a"), ("b2", O, "b")],
                &["a1", "b1", "b2"],
            ),
        ];
        for (name, pushes, want) in cases {
            assert_eq!(drain(line(pushes)), *want, "{name}");
        }
    }

    #[test]
    fn place_counts_only_the_share_ahead() {
        let line = line(&[("a1", O, "a"), ("a2", O, "a"), ("b1", O, "b"), ("a3", O, "a")]);
        let cases = [("a1", 0), ("a2", 1), ("a3", 2), ("b1", 0)];
        for (key, ahead) in cases {
            assert_eq!(line.place(&key).map(|(_, n)| n), Some(ahead), "{key}");
        }
        assert_eq!(line.place(&"zz"), None);
        assert_eq!(line.place(&"b1").map(|(t, _)| t), Some(Ticket::new(O, "b")));
        let mut places = line.places();
        places.sort_by_key(|(k, _, _)| *k);
        let ahead: Vec<(&str, usize)> = places.iter().map(|(k, _, n)| (*k, *n)).collect();
        assert_eq!(ahead, [("a1", 0), ("a2", 1), ("a3", 2), ("b1", 0)]);
    }

    #[test]
    fn removing_keeps_the_rest_in_order_and_counts_right() {
        let mut line = line(&[("a1", O, "a"), ("a2", O, "a"), ("b1", O, "b")]);
        assert_eq!(line.remove(&"a1"), Some(Ticket::new(O, "a")));
        assert_eq!(line.remove(&"a1"), None);
        assert_eq!(line.len(), 2);
        assert!(!line.contains(&"a1"));
        assert_eq!(line.waiting(), vec![(O, "a".to_string(), 1), (O, "b".to_string(), 1)]);
        assert_eq!(drain(line), ["a2", "b1"]);
    }

    #[test]
    fn closed_lanes_are_passed_over_and_keep_their_turns() {
        let mut line = line(&[
            ("a1", O, "a"),
            ("b1", O, "b"),
            ("s1", S, "a"),
            ("del", E, "b"),
            ("a2", O, "a"),
        ]);
        let existing_only = |lane: Lane, _: &str| lane == E;
        assert_eq!(line.pop_where(existing_only), Some(("del", Ticket::new(E, "b"))));
        assert_eq!(line.pop_where(existing_only), None);
        assert_eq!(line.len(), 4);
        assert_eq!(line.pop_where(|lane, _| lane != S), Some(("a1", Ticket::new(O, "a"))));
        assert_eq!(drain(line), ["s1", "b1", "a2"]);
    }

    #[test]
    fn a_share_held_back_keeps_its_turn_for_when_it_is_let_through() {
        let mut line = line(&[("a1", O, "a"), ("a2", O, "a"), ("b1", O, "b"), ("b2", O, "b")]);
        let not_a = |_: Lane, share: &str| share != "a";
        assert_eq!(line.pop_where(not_a), Some(("b1", Ticket::new(O, "b"))));
        assert_eq!(line.pop_where(not_a), Some(("b2", Ticket::new(O, "b"))));
        assert_eq!(line.pop_where(not_a), None);
        line.push("b3", Ticket::new(O, "b"));
        assert_eq!(drain(line), ["a1", "b3", "a2"]);
    }

    #[test]
    fn a_thousand_creates_let_a_late_claim_through_at_the_next_turn() {
        let mut line = FairLine::default();
        for n in 0..1000u32 {
            line.push(n, Ticket::new(O, "tenant-a"));
        }
        line.pop();
        line.push(5000, Ticket::new(O, "tenant-b"));
        let next: Vec<u32> = (0..3).filter_map(|_| line.pop()).collect();
        assert_eq!(next, [1, 5000, 2]);
        assert_eq!(line.len(), 997);
    }
}
