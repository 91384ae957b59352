//! Where one pod's time went, from its creation to Running, in the steps on its path. Pure: the
//! instants come from the watches and the driver relay; this orders them and takes the gaps.
//!
//! A step can be seen to end before the step ahead of it did (a StatefulSet's claim is
//! provisioned while its pod is still being made): each instant counts from the latest one
//! before it on the path, so no slice is negative and the slices add up to the pod's whole wait.

/// The slices of a pod's wait, in the order the bar draws them.
pub const SLICES: [&str; 7] = [
    "scheduling",
    "hand-over",
    "CreateVolume",
    "binding",
    "attach",
    "NodeStage/NodePublish",
    "container start",
];

const SCHEDULING: usize = 0;
const HAND_OVER: usize = 1;
const CREATE: usize = 2;
const BINDING: usize = 3;
const ATTACH: usize = 4;
const MOUNT: usize = 5;
const CONTAINER: usize = 6;

/// One pod's instants, in seconds from any common origin.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PodMarks {
    pub created: f64,
    /// WaitForFirstConsumer: when the scheduler chose the claim's node.
    pub node_selected: Option<f64>,
    /// The first CreateVolume for its claim reached the driver, and the successful one was
    /// answered. None when the claim was Bound before the pod was made.
    pub create_start: Option<f64>,
    pub create_end: Option<f64>,
    pub bound: Option<f64>,
    pub scheduled: f64,
    pub attached: f64,
    /// NodePublishVolume answered.
    pub mounted: f64,
    pub running: f64,
}

/// The seconds each of `SLICES` took on this pod's path.
pub fn split(m: &PodMarks) -> [f64; 7] {
    let mut path: Vec<(usize, f64)> = Vec::new();
    if let (Some(start), Some(end), Some(bound)) = (m.create_start, m.create_end, m.bound) {
        // The pod waits on the scheduler's node choice before anything is made for it.
        if let Some(selected) = m.node_selected {
            path.push((SCHEDULING, selected));
        }
        path.extend([(HAND_OVER, start), (CREATE, end), (BINDING, bound)]);
    }
    path.extend([
        (SCHEDULING, m.scheduled),
        (ATTACH, m.attached),
        (MOUNT, m.mounted),
        (CONTAINER, m.running),
    ]);
    let mut slices = [0.0; 7];
    let mut at = m.created;
    for (slice, instant) in path {
        let next = instant.max(at);
        slices[slice] += next - at;
        at = next;
    }
    slices
}

/// The slice-by-slice mean of `splits` (pods of a run, or runs of a scenario); None for none.
pub fn mean(splits: &[[f64; 7]]) -> Option<[f64; 7]> {
    if splits.is_empty() {
        return None;
    }
    let mut mean = [0.0; 7];
    for split in splits {
        mean.iter_mut().zip(split).for_each(|(m, v)| *m += v / splits.len() as f64);
    }
    Some(mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: [f64; 7], b: [f64; 7]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn each_path_splits_into_its_own_steps() {
        let bound_before = PodMarks {
            created: 10.0,
            scheduled: 11.0,
            attached: 13.0,
            mounted: 14.5,
            running: 16.0,
            ..PodMarks::default()
        };
        let immediate = PodMarks {
            created: 0.0,
            create_start: Some(0.5),
            create_end: Some(0.75),
            bound: Some(2.0),
            scheduled: 3.0,
            attached: 4.0,
            mounted: 5.0,
            running: 7.0,
            ..PodMarks::default()
        };
        let first_consumer = PodMarks { node_selected: Some(0.25), ..immediate };
        // (marks, slices, what it shows)
        let table = [
            (bound_before, [1.0, 0.0, 0.0, 0.0, 2.0, 1.5, 1.5], "only the node's steps"),
            (immediate, [1.0, 0.5, 0.25, 1.25, 1.0, 1.0, 2.0], "the claim first, then the pod"),
            (first_consumer, [1.25, 0.25, 0.25, 1.25, 1.0, 1.0, 2.0], "the node choice first"),
        ];
        for (marks, want, why) in table {
            let got = split(&marks);
            assert!(close(got, want), "{why}: {got:?} != {want:?}");
            let total: f64 = got.iter().sum();
            assert!((total - (marks.running - marks.created)).abs() < 1e-9, "{why}: sums up");
        }
    }

    #[test]
    fn the_mean_is_taken_slice_by_slice() {
        let pods = [[1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 4.0], [3.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0]];
        assert_eq!(mean(&pods), Some([2.0, 0.0, 0.0, 1.0, 0.0, 0.5, 3.0]));
        assert_eq!(mean(&[]), None);
    }

    #[test]
    fn a_step_seen_before_the_one_ahead_takes_no_time() {
        // The claim was provisioned and bound before its pod was made.
        let early = PodMarks {
            created: 5.0,
            create_start: Some(1.0),
            create_end: Some(2.0),
            bound: Some(3.0),
            scheduled: 6.0,
            attached: 6.5,
            mounted: 6.0,
            running: 8.0,
            ..PodMarks::default()
        };
        let got = split(&early);
        assert!(close(got, [1.0, 0.0, 0.0, 0.0, 0.5, 0.0, 1.5]), "{got:?}");
        assert!(got.iter().all(|s| *s >= 0.0));
    }
}
