//! Where a queued key waits in a work queue's fair order: its lane, and its share (a claim's
//! namespace). The order itself is `runtime::fair`; which lane a claim takes is
//! `provision::turn`.

/// Which line a queued key waits in; lower goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Lane {
    /// Work on a volume that exists: a deletion, an expansion, a modify. Short, and what users
    /// wait on most directly.
    Existing,
    /// A claim a scheduled pod waits for (WaitForFirstConsumer with a selected node).
    Scheduled,
    /// Everything else: a create no pod waits for yet, a claim with nothing to do.
    #[default]
    Other,
}

impl Lane {
    pub const ALL: [Lane; 3] = [Lane::Existing, Lane::Scheduled, Lane::Other];

    /// The metrics' name for the lane.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Existing => "existing",
            Lane::Scheduled => "scheduled",
            Lane::Other => "other",
        }
    }
}

/// Where one key waits: its lane and its share (the namespace; "" for keys of no namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Ticket {
    pub lane: Lane,
    pub share: String,
}

impl Ticket {
    pub fn new(lane: Lane, share: &str) -> Ticket {
        Ticket { lane, share: share.to_string() }
    }
}

/// Of `workers`, how many only take work on existing volumes: a tenth. Creates that wait for
/// the driver hold their worker; without a reserve, a burst of them would leave a deletion, an
/// expansion or a modify no worker until the driver has taken a create. Under ten workers,
/// none: each is needed for creates, and the fair order still puts existing volumes first.
pub fn reserved_for_existing(workers: usize) -> usize {
    workers / 10
}

/// Workers a share's passes spend on the API before and after their driver call, at most:
/// the hand-over and the writes that bind what was made.
const BESIDE_THE_CALL: usize = 8;

/// The most workers one namespace's claims may hold at once while the driver takes `allowed`
/// creates in flight: as many calls in flight, as many waiting their turn, and some busy with
/// the API around their call. More would only wait at the driver's limit, and one namespace
/// holding every worker would leave another's first claim none until a create finishes. At
/// the limit's ceiling (a driver that never refused) it is more than there are workers.
pub fn most_per_share(allowed: usize) -> usize {
    allowed.saturating_mul(2).saturating_add(BESIDE_THE_CALL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_holds_twice_the_creates_in_flight_and_some_for_the_api() {
        let cases = [(1, 10), (4, 16), (5, 18), (16, 40), (100, 208), (usize::MAX, usize::MAX)];
        for (allowed, most) in cases {
            assert_eq!(most_per_share(allowed), most, "{allowed} allowed");
        }
    }

    #[test]
    fn a_tenth_of_the_workers_is_kept_for_existing_volumes() {
        let cases = [(1, 0), (2, 0), (9, 0), (10, 1), (16, 1), (100, 10), (250, 25)];
        for (workers, reserved) in cases {
            assert_eq!(reserved_for_existing(workers), reserved, "{workers} workers");
        }
    }
}
