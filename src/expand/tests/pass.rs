//! One pass of `Resizer::decide`, with what was remembered and the time, and the writes
//! `Resizer::after_expand` builds.

use std::time::{Duration, Instant};

use super::*;
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;
use crate::model::reason::Reason;

fn resizer(expander: Expander) -> Resizer<'static> {
    Resizer {
        driver: "d",
        expander: Some(expander),
        handle_in_use: true,
        annotate_fs_resize: false,
    }
}

/// A fixed origin, so that "now" and a deadline compare as the table says.
fn at(seconds: u64) -> Instant {
    static ORIGIN: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
    *ORIGIN + Duration::from_secs(seconds)
}

/// The step decided on a live copy, with nothing remembered (the gate lets every step go).
fn step(c: &PersistentVolumeClaim, p: &PersistentVolume, expander: Expander) -> ResizeStep {
    match resizer(expander).decide((c, ClaimCopy::Live), p, &ResizeMemory::default(), at(0), NOW) {
        Gated::Go(step) => step,
        other => panic!("the gate stopped a live copy with nothing remembered: {other:?}"),
    }
}

#[test]
fn decide_leaves_claims_of_other_drivers_and_satisfied_claims_alone() {
    let other = Resizer { driver: "x", ..resizer(Expander::Controller) }.decide(
        (&claim(json!({})), ClaimCopy::Live),
        &pv(json!({})),
        &ResizeMemory::default(),
        at(0),
        NOW,
    );
    assert_eq!(other, Gated::Go(ResizeStep::None));
    let satisfied = claim(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    assert_eq!(step(&satisfied, &pv(json!({})), Expander::Controller), ResizeStep::None);
}

#[test]
fn decide_starts_a_new_attempt_with_a_t1_patch() {
    match step(&claim(json!({})), &pv(json!({})), Expander::Controller) {
        ResizeStep::Expand { bytes, start: Some(p), check_in_use: false } => {
            assert_eq!(bytes, 4 * GI);
            assert_eq!(p["status"]["allocatedResourceStatuses"]["storage"], CONTROLLER_IN_PROGRESS);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn decide_repeats_a_recorded_attempt_without_writing() {
    // After T1 (and a crash, a timeout or a restart): same size, nothing to write.
    let unannotated = |extra: Value| {
        let mut c = claim(extra);
        c.metadata.annotations = None;
        c
    };
    let recorded = unannotated(json!({
        "status": {"allocatedResources": {"storage": "4Gi"},
                   "allocatedResourceStatuses": {"storage": CONTROLLER_IN_PROGRESS},
                   "conditions": [{"type": RESIZING, "status": "True"}]}
    }));
    assert_eq!(
        step(&recorded, &pv(json!({})), Expander::Controller),
        ResizeStep::Expand { bytes: 4 * GI, start: None, check_in_use: false }
    );
    // Nothing to write proves the store's copy current: read it live first, then the call.
    let cached = resizer(Expander::Controller).decide(
        (&recorded, ClaimCopy::Cached),
        &pv(json!({})),
        &ResizeMemory::default(),
        at(0),
        NOW,
    );
    assert_eq!(cached, Gated::ConfirmLive);
    // Without the Resizing condition the attempt is written again.
    let bare = unannotated(json!({
        "status": {"allocatedResources": {"storage": "4Gi"},
                   "allocatedResourceStatuses": {"storage": CONTROLLER_IN_PROGRESS},
                   "conditions": []}
    }));
    assert!(matches!(
        step(&bare, &pv(json!({})), Expander::Controller),
        ResizeStep::Expand { start: Some(_), .. }
    ));
}

#[test]
fn decide_node_only_driver_with_node_infeasible_sends_the_request() {
    // §3.3 P ≥ S, NodeResizeInfeasible: A for controller drivers, S for node-only ones.
    let c = claim(json!({
        "spec": {"resources": {"requests": {"storage": "3Gi"}}},
        "status": {"allocatedResources": {"storage": "4Gi"},
                   "allocatedResourceStatuses": {"storage": NODE_INFEASIBLE}}
    }));
    let p = pv(json!({"spec": {"capacity": {"storage": "4Gi"}}}));
    assert!(matches!(
        step(&c, &p, Expander::Controller),
        ResizeStep::Expand { bytes, .. } if bytes == 4 * GI
    ));
    assert!(matches!(
        step(&c, &p, Expander::NodeOnly),
        ResizeStep::Expand { bytes, .. } if bytes == 3 * GI
    ));
}

#[test]
fn decide_drops_pre_resize_capacity_first() {
    let c = claim(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    let p = pv(json!({"metadata": {"annotations": {ANN_PRE_RESIZE_CAPACITY: "1Gi"}}}));
    let r = resizer(Expander::Controller).decide(
        (&c, ClaimCopy::Live),
        &p,
        &ResizeMemory::default(),
        at(0),
        NOW,
    );
    assert!(matches!(r, Gated::Go(ResizeStep::DropPreResize(_))), "{r:?}");
    // Dropped, the PV no longer holds the claim back.
    let dropped = pv(json!({}));
    let r = resizer(Expander::Controller).decide(
        (&c, ClaimCopy::Live),
        &dropped,
        &ResizeMemory::default(),
        at(0),
        NOW,
    );
    assert_eq!(r, Gated::Go(ResizeStep::None));
}

#[test]
fn decide_with_memory_and_time() {
    // The claim asks 4Gi of a 2Gi volume; rows vary what was remembered and the time.
    let (c, p) = (claim(json!({})), pv(json!({})));
    let waits_for = |size: u64, until: u64| ResizeMemory {
        wait: Some((size * GI, at(until))),
        ..ResizeMemory::default()
    };
    let expand =
        |check_in_use| Gated::Go(ResizeStep::Expand { bytes: 4 * GI, start: None, check_in_use });
    let rows: [(&str, ResizeMemory, u64, Gated<ResizeStep>); 5] = [
        ("a failed attempt at this size waits", waits_for(4, 10), 5, Gated::WaitForRetry),
        ("its backoff over, it goes again", waits_for(4, 10), 10, expand(false)),
        ("a new size does not wait", waits_for(3, 10), 5, expand(false)),
        (
            "refused while in use: look at the pods",
            ResizeMemory { in_use: true, ..ResizeMemory::default() },
            0,
            expand(true),
        ),
        (
            "a final error honours a smaller size at once",
            ResizeMemory { final_error: true, ..ResizeMemory::default() },
            0,
            expand(false),
        ),
    ];
    for (row, memory, now, want) in rows {
        let got =
            resizer(Expander::Controller).decide((&c, ClaimCopy::Live), &p, &memory, at(now), NOW);
        let got = match got {
            Gated::Go(ResizeStep::Expand { bytes, check_in_use, .. }) => {
                Gated::Go(ResizeStep::Expand { bytes, start: None, check_in_use })
            }
            other => other,
        };
        assert_eq!(got, want, "{row}");
    }
    // Without --handle-volume-inuse-error the pods are never looked at.
    let memory = ResizeMemory { in_use: true, ..ResizeMemory::default() };
    let plain = Resizer { handle_in_use: false, ..resizer(Expander::Controller) };
    assert!(matches!(
        plain.decide((&c, ClaimCopy::Live), &p, &memory, at(0), NOW),
        Gated::Go(ResizeStep::Expand { check_in_use: false, .. })
    ));
}

#[test]
fn a_driver_that_cannot_expand_says_so_once_per_size() {
    let cannot = Resizer { expander: None, ..resizer(Expander::Controller) };
    let (c, p) = (claim(json!({})), pv(json!({})));
    let announce = |memory: &ResizeMemory| match cannot.decide(
        (&c, ClaimCopy::Live),
        &p,
        memory,
        at(0),
        NOW,
    ) {
        Gated::Go(ResizeStep::CannotExpand { announce }) => announce,
        other => panic!("{other:?}"),
    };
    assert_eq!(announce(&ResizeMemory::default()), Some(4 * GI));
    let told = ResizeMemory { announced: Some(4 * GI), ..ResizeMemory::default() };
    assert_eq!(announce(&told), None);
    let older = ResizeMemory { announced: Some(3 * GI), ..ResizeMemory::default() };
    assert_eq!(announce(&older), Some(4 * GI));
    let satisfied = claim(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    assert_eq!(
        cannot.decide((&satisfied, ClaimCopy::Live), &p, &ResizeMemory::default(), at(0), NOW),
        Gated::Go(ResizeStep::CannotExpand { announce: None })
    );
    assert!(cannot.cannot_expand_note().contains("CSI driver d cannot expand"));
}

#[test]
fn after_expand_writes_the_volume_then_the_claim_by_where_it_ends() {
    let started = "2026-11-20T00:00:00Z";
    let c = claim(json!({"status": {"conditions": [
        {"type": RESIZING, "status": "True", "lastTransitionTime": started}]}}));
    let p = pv(json!({}));
    let annotating = Resizer { annotate_fs_resize: true, ..resizer(Expander::Controller) };
    // (node still to grow, annotate gate, reason, pre-resize annotation kept)
    let rows = [
        (false, false, Reason::VolumeResizeSuccessful, false),
        (false, true, Reason::VolumeResizeSuccessful, false),
        (true, false, Reason::FileSystemResizeRequired, false),
        (true, true, Reason::FileSystemResizeRequired, true),
    ];
    for (node, annotate, reason, kept) in rows {
        let r = if annotate { annotating } else { resizer(Expander::Controller) };
        let e = r.after_expand(&c, &p, 4 * GI, node, NOW);
        assert_eq!(e.reason, reason, "{node} {annotate}");
        assert_eq!(e.volume["spec"]["capacity"]["storage"], "4Gi");
        let annotation = &e.volume["metadata"]["annotations"][ANN_PRE_RESIZE_CAPACITY];
        assert_eq!(annotation.as_str(), kept.then_some("2Gi"), "{node} {annotate}");
        let statuses = &e.claim["status"]["allocatedResourceStatuses"];
        if node {
            assert_eq!(statuses["storage"], NODE_PENDING);
            assert_eq!(e.note, FS_RESIZE_REQUIRED_NOTE);
        } else {
            assert!(statuses.is_null());
            assert_eq!(e.claim["status"]["capacity"]["storage"], "4Gi");
            assert_eq!(e.note, RESIZE_SUCCESSFUL_NOTE);
        }
        assert_eq!(e.started.as_ref().map(|t| t.0.to_string()).as_deref(), Some(started));
    }
}
