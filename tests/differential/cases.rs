//! The hand-written states: the cases a generator may take long to hit.

use super::{ClaimRef, ClaimSpec, Class, State, Uid, VolumeSpec};

fn claim(class: Class, size: &'static str, volume: Option<usize>) -> ClaimSpec {
    ClaimSpec {
        class,
        size,
        modes: vec!["ReadWriteOnce"],
        selector: false,
        volume,
        bind_completed: false,
        bound_by_controller: false,
        phase: None,
        block: false,
        vac: false,
    }
}

fn volume(class: Class, size: &'static str, claim_ref: ClaimRef) -> VolumeSpec {
    VolumeSpec {
        class,
        size,
        modes: vec!["ReadWriteOnce"],
        gold: false,
        claim_ref,
        reclaim: "Retain",
        phase: None,
        bound_by_controller: false,
        block: false,
        vac: false,
        in_tree: false,
    }
}

/// The cases a generator may take long to hit.
pub fn hand_written() -> Vec<State> {
    let bound = |c: ClaimSpec| ClaimSpec { bind_completed: true, phase: Some("Bound"), ..c };
    let state = |label: &str, claims: Vec<ClaimSpec>, volumes: Vec<VolumeSpec>| {
        State { label: label.into(), claims, volumes }.without_races()
    };
    vec![
        state(
            "smallest fitting PV is chosen",
            vec![claim(Class::Immediate, "2Gi", None)],
            ["5Gi", "2Gi", "1Gi"]
                .into_iter()
                .map(|size| VolumeSpec {
                    phase: Some("Available"),
                    ..volume(Class::Immediate, size, ClaimRef::None)
                })
                .collect(),
        ),
        state(
            "misbound: the PV names the claim with another UID",
            vec![bound(claim(Class::Immediate, "1Gi", Some(0)))],
            vec![VolumeSpec {
                phase: Some("Bound"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Claim(0, Uid::Wrong))
            }],
        ),
        state(
            "bound claim whose PV is gone: Lost",
            vec![bound(claim(Class::Immediate, "1Gi", Some(usize::MAX)))],
            vec![],
        ),
        state(
            "pre-bound PV without UID, claim free",
            vec![claim(Class::Immediate, "1Gi", None)],
            vec![volume(Class::Immediate, "1Gi", ClaimRef::Claim(0, Uid::Empty))],
        ),
        state(
            "claim pre-bound to a PV of another class",
            vec![claim(Class::Immediate, "1Gi", Some(0))],
            vec![volume(Class::NoProvisioner, "1Gi", ClaimRef::None)],
        ),
        state(
            "claim pre-bound to a PV too small",
            vec![claim(Class::Immediate, "5Gi", Some(0))],
            vec![volume(Class::Immediate, "1Gi", ClaimRef::None)],
        ),
        state(
            "Released Delete PV of an in-tree source: Failed",
            vec![],
            vec![VolumeSpec {
                in_tree: true,
                reclaim: "Delete",
                phase: Some("Released"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Ghost)
            }],
        ),
        state(
            "Released Delete PV of another CSI driver: left to its provisioner",
            vec![],
            vec![VolumeSpec {
                reclaim: "Delete",
                phase: Some("Released"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Ghost)
            }],
        ),
        state(
            "Bound PV whose claim is gone, Retain: Released",
            vec![],
            vec![VolumeSpec {
                phase: Some("Bound"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Ghost)
            }],
        ),
        state(
            "selector: only the labelled PV",
            vec![ClaimSpec { selector: true, ..claim(Class::Immediate, "1Gi", None) }],
            vec![
                volume(Class::Immediate, "1Gi", ClaimRef::None),
                VolumeSpec { gold: true, ..volume(Class::Immediate, "2Gi", ClaimRef::None) },
            ],
        ),
        state(
            "WaitForFirstConsumer claim with a fitting PV waits",
            vec![claim(Class::Delayed, "1Gi", None)],
            vec![volume(Class::Delayed, "1Gi", ClaimRef::None)],
        ),
        state(
            "block claim, filesystem PV",
            vec![ClaimSpec { block: true, ..claim(Class::Immediate, "1Gi", None) }],
            vec![volume(Class::Immediate, "1Gi", ClaimRef::None)],
        ),
        state(
            "attributes class copied into the claim's status on bind",
            vec![ClaimSpec { vac: true, ..claim(Class::Immediate, "1Gi", None) }],
            vec![VolumeSpec { vac: true, ..volume(Class::Immediate, "1Gi", ClaimRef::None) }],
        ),
        state(
            "attributes classes differ: no match",
            vec![ClaimSpec { vac: true, ..claim(Class::Immediate, "1Gi", None) }],
            vec![volume(Class::Immediate, "1Gi", ClaimRef::None)],
        ),
        state(
            "pre-bound both ways, Released: bound again",
            vec![bound(claim(Class::Immediate, "1Gi", Some(0)))],
            vec![VolumeSpec {
                phase: Some("Released"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Claim(0, Uid::Matching))
            }],
        ),
        state(
            "PV pre-bound to a claim by name only, Delete, claim gone",
            vec![],
            vec![VolumeSpec {
                reclaim: "Delete",
                phase: Some("Available"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Ghost)
            }],
        ),
        state("missing class, no PV", vec![claim(Class::Missing, "1Gi", None)], vec![]),
        state(
            "no-provisioner class, no PV",
            vec![claim(Class::NoProvisioner, "1Gi", None)],
            vec![],
        ),
        state(
            "Lost claim whose PV is back",
            vec![ClaimSpec {
                phase: Some("Lost"),
                ..bound(claim(Class::Immediate, "1Gi", Some(0)))
            }],
            vec![VolumeSpec {
                phase: Some("Bound"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Claim(0, Uid::Matching))
            }],
        ),
    ]
}
