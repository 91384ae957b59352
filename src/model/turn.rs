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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenth_of_the_workers_is_kept_for_existing_volumes() {
        let cases = [(1, 0), (2, 0), (9, 0), (10, 1), (16, 1), (100, 10), (250, 25)];
        for (workers, reserved) in cases {
            assert_eq!(reserved_for_existing(workers), reserved, "{workers} workers");
        }
    }
}
