//! Table tests of the resize decisions: §3.3 (the size to send) row by row, and the patches of
//! the §3.2 transitions the controller makes (T1–T5, T12, T13).

use super::*;
use crate::provision::plan::tests::merge;
use serde_json::json;

const GI: u64 = 1 << 30;
const NOW: &str = "2026-11-21T00:00:00Z";

fn sizes(
    requested: u64,
    capacity: u64,
    volume: u64,
    allocated: Option<u64>,
    status: Option<&str>,
) -> Sizes<'_> {
    Sizes {
        requested: requested * GI,
        capacity: capacity * GI,
        volume: volume * GI,
        allocated: allocated.map(|a| a * GI),
        status,
        fs_resize_pending: false,
    }
}

fn expand(bytes: u64, restart: bool) -> Target {
    Target::Expand {
        bytes: bytes * GI,
        restart,
    }
}

#[test]
fn s3_3_no_resize_when_request_is_not_above_capacity() {
    assert_eq!(
        target(&sizes(2, 2, 2, None, None), false, true),
        Target::None
    );
}

#[test]
fn s3_3_volume_below_request_node_infeasible_sends_allocated_else_request() {
    assert_eq!(
        target(&sizes(5, 2, 2, Some(4), Some(NODE_INFEASIBLE)), false, true),
        expand(4, false)
    );
    assert_eq!(
        target(&sizes(5, 2, 2, None, Some(NODE_INFEASIBLE)), false, true),
        expand(5, true)
    );
}

#[test]
fn s3_3_volume_below_request_node_pending_sends_allocated_unless_reached() {
    assert_eq!(
        target(&sizes(5, 2, 2, Some(4), Some(NODE_PENDING)), false, true),
        expand(4, false)
    );
    assert_eq!(
        target(
            &sizes(6, 2, 4, Some(4), Some(NODE_IN_PROGRESS)),
            false,
            true
        ),
        Target::None
    );
}

#[test]
fn s3_3_volume_below_request_controller_in_progress_keeps_allocated_unless_final_error() {
    // Uncertain: the old attempt may still be running; keep pushing it.
    assert_eq!(
        target(
            &sizes(3, 2, 2, Some(8), Some(CONTROLLER_IN_PROGRESS)),
            false,
            true
        ),
        expand(8, false)
    );
    // Known finished with a final error: the user's new size is honoured.
    assert_eq!(
        target(
            &sizes(3, 2, 2, Some(8), Some(CONTROLLER_IN_PROGRESS)),
            true,
            true
        ),
        expand(3, true)
    );
}

#[test]
fn s3_3_volume_below_request_absent_or_infeasible_sends_request() {
    assert_eq!(
        target(&sizes(3, 2, 2, None, None), false, true),
        expand(3, true)
    );
    // Recovery: infeasible at 100, the user lowers to 3.
    assert_eq!(
        target(
            &sizes(3, 2, 2, Some(100), Some(CONTROLLER_INFEASIBLE)),
            false,
            true
        ),
        expand(3, true)
    );
    // Unchanged after infeasible: the same attempt, slowly.
    assert_eq!(
        target(
            &sizes(100, 2, 2, Some(100), Some(CONTROLLER_INFEASIBLE)),
            false,
            true
        ),
        expand(100, false)
    );
}

#[test]
fn s3_3_volume_reached_node_pending_is_kubelets() {
    assert_eq!(
        target(&sizes(4, 2, 4, Some(4), Some(NODE_PENDING)), false, true),
        Target::None
    );
    assert_eq!(
        target(
            &sizes(4, 2, 4, Some(4), Some(NODE_IN_PROGRESS)),
            false,
            true
        ),
        Target::None
    );
}

#[test]
fn s3_3_volume_reached_node_infeasible_depends_on_controller_expansion() {
    assert_eq!(
        target(&sizes(3, 2, 4, Some(4), Some(NODE_INFEASIBLE)), false, true),
        expand(4, false)
    );
    // Node-only driver: the user may lower the target.
    assert_eq!(
        target(
            &sizes(3, 2, 4, Some(4), Some(NODE_INFEASIBLE)),
            false,
            false
        ),
        expand(3, true)
    );
}

#[test]
fn s3_3_volume_reached_controller_states_resend_allocated() {
    // Crash between the PV and the claim writes (T2a done, T2b not): the same attempt again.
    assert_eq!(
        target(
            &sizes(4, 2, 4, Some(4), Some(CONTROLLER_IN_PROGRESS)),
            false,
            true
        ),
        expand(4, false)
    );
    assert_eq!(
        target(
            &sizes(4, 2, 4, None, Some(CONTROLLER_INFEASIBLE)),
            false,
            true
        ),
        expand(4, true)
    );
}

#[test]
fn s3_3_volume_reached_absent_status() {
    assert_eq!(
        target(&sizes(4, 2, 4, Some(4), None), false, true),
        expand(4, false)
    );
    assert_eq!(
        target(&sizes(4, 2, 4, None, None), false, true),
        expand(4, true)
    );
    let old_server = Sizes {
        fs_resize_pending: true,
        ..sizes(4, 2, 4, None, None)
    };
    assert_eq!(target(&old_server, false, true), Target::None);
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    let mut v = json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                     "annotations": {ANN_NODE_EXPANSION_NOT_REQUIRED: "true"}},
        "spec": {"volumeName": "pv", "resources": {"requests": {"storage": "4Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "2Gi"},
                   "conditions": [{"type": "Other", "status": "True"},
                                  {"type": "ControllerResizeError", "status": "True", "message": "old"}]}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn pv(extra: Value) -> PersistentVolume {
    let mut v = json!({
        "metadata": {"name": "pv"},
        "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                 "mountOptions": ["noatime"],
                 "csi": {"driver": "d", "volumeHandle": "h", "fsType": "xfs"},
                 "claimRef": {"namespace": "ns", "name": "c", "uid": "u"}}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn types(patch: &Value) -> Vec<&str> {
    patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect()
}

#[test]
fn s2_3_ownership_needs_driver_claim_ref_uid_and_bound() {
    assert!(owns(&claim(json!({})), &pv(json!({})), "d"));
    assert!(!owns(&claim(json!({})), &pv(json!({})), "other"));
    assert!(!owns(
        &claim(json!({})),
        &pv(json!({"spec": {"claimRef": {"uid": "x"}}})),
        "d"
    ));
    assert!(!owns(
        &claim(json!({"status": {"phase": "Pending"}})),
        &pv(json!({})),
        "d"
    ));
}

#[test]
fn t1_start_sets_allocated_in_progress_and_resizing() {
    let p = start(&claim(json!({})), 4 * GI, true, NOW);
    assert_eq!(p["metadata"]["resourceVersion"], "7");
    assert_eq!(
        p["metadata"]["annotations"][ANN_NODE_EXPANSION_NOT_REQUIRED],
        Value::Null
    );
    assert_eq!(p["status"]["allocatedResources"]["storage"], "4Gi");
    assert_eq!(
        p["status"]["allocatedResourceStatuses"]["storage"],
        CONTROLLER_IN_PROGRESS
    );
    assert_eq!(types(&p), vec!["Other", RESIZING]);
    // The same attempt again: status untouched, old resize conditions kept.
    let p = start(&claim(json!({})), 4 * GI, false, NOW);
    assert!(p["status"].get("allocatedResourceStatuses").is_none());
    assert_eq!(types(&p), vec!["Other", CONTROLLER_RESIZE_ERROR, RESIZING]);
}

#[test]
fn t2_node_expansion_required_pv_then_node_pending() {
    let p = volume_capacity(&pv(json!({})), 4 * GI, true, "2Gi");
    assert_eq!(p["spec"]["capacity"]["storage"], "4Gi");
    assert_eq!(p["metadata"]["annotations"][ANN_PRE_RESIZE_CAPACITY], "2Gi");
    let annotated = pv(json!({"metadata": {"annotations": {ANN_PRE_RESIZE_CAPACITY: "1Gi"}}}));
    assert!(
        volume_capacity(&annotated, 4 * GI, true, "2Gi")
            .get("metadata")
            .is_none()
    );
    let resizing = claim(json!({"status": {"conditions": [{"type": RESIZING, "status": "True"}]}}));
    let p = node_pending(&resizing, NOW);
    assert_eq!(
        p["status"]["allocatedResourceStatuses"]["storage"],
        NODE_PENDING
    );
    assert_eq!(types(&p), vec![RESIZING, FS_RESIZE_PENDING]);
    assert_eq!(
        p["status"]["conditions"][1]["message"],
        "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
    );
}

#[test]
fn t3_no_node_expansion_finishes_the_claim() {
    assert!(
        volume_capacity(&pv(json!({})), 4 * GI, false, "2Gi")
            .get("metadata")
            .is_none()
    );
    let p = finished(&claim(json!({})), 4 * GI, NOW);
    assert_eq!(p["status"]["capacity"]["storage"], "4Gi");
    assert_eq!(p["status"]["allocatedResourceStatuses"], Value::Null);
    assert_eq!(types(&p), vec!["Other"]);
    assert_eq!(
        p["metadata"]["annotations"][ANN_NODE_EXPANSION_NOT_REQUIRED],
        "true"
    );
}

#[test]
fn t4_infeasible_error_marks_infeasible_without_precondition() {
    let p = failed(&claim(json!({})), "rpc error: code = OutOfRange", true, NOW);
    assert!(p.get("metadata").is_none());
    assert_eq!(
        p["status"]["allocatedResourceStatuses"]["storage"],
        CONTROLLER_INFEASIBLE
    );
    let c = &p["status"]["conditions"].as_array().unwrap();
    let error = c
        .iter()
        .find(|c| c["type"] == CONTROLLER_RESIZE_ERROR)
        .unwrap();
    assert_eq!(
        error["message"],
        "failed to expand pvc with rpc error: code = OutOfRange"
    );
}

#[test]
fn t5_final_error_adds_only_the_condition() {
    let p = failed(&claim(json!({})), "boom", false, NOW);
    assert!(p["status"].get("allocatedResourceStatuses").is_none());
    assert_eq!(types(&p), vec!["Other", CONTROLLER_RESIZE_ERROR]);
}

#[test]
fn t12_node_infeasible_with_volume_reached_resends_allocated() {
    assert_eq!(
        target(&sizes(4, 2, 4, Some(4), Some(NODE_INFEASIBLE)), false, true),
        expand(4, false)
    );
}

#[test]
fn t13_pre_resize_annotation_dropped_once_the_claim_caught_up() {
    let annotated = pv(json!({"metadata": {"annotations": {ANN_PRE_RESIZE_CAPACITY: "1Gi"}}}));
    assert!(drop_pre_resize(&claim(json!({})), &annotated).is_some());
    let behind = pv(
        json!({"metadata": {"annotations": {ANN_PRE_RESIZE_CAPACITY: "1Gi"}}, "spec": {"capacity": {"storage": "4Gi"}}}),
    );
    assert!(drop_pre_resize(&claim(json!({})), &behind).is_none());
    assert!(drop_pre_resize(&claim(json!({})), &pv(json!({}))).is_none());
}

#[test]
fn request_carries_handle_size_and_capability() {
    let r = request(&pv(json!({})), 4 * GI, false).unwrap();
    assert_eq!(r.volume_id, "h");
    assert_eq!(r.capacity_range.unwrap().required_bytes, (4 * GI) as i64);
    let cap = r.volume_capability.unwrap();
    match cap.access_type.unwrap() {
        AccessType::Mount(m) => {
            assert_eq!(m.fs_type, "xfs");
            assert_eq!(m.mount_flags, vec!["noatime".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(cap.access_mode.unwrap().mode, Mode::SingleNodeWriter as i32);
    let block = request(&pv(json!({"spec": {"volumeMode": "Block"}})), GI, true).unwrap();
    assert!(matches!(
        block.volume_capability.unwrap().access_type,
        Some(AccessType::Block(_))
    ));
    assert!(
        request(
            &pv(json!({"spec": {"csi": {"volumeHandle": ""}}})),
            GI,
            false
        )
        .is_err()
    );
}

#[test]
fn access_modes_for_expansion() {
    let m = |modes: &[&str], snmw| {
        access_mode(
            &modes.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            snmw,
        )
    };
    assert_eq!(m(&["ReadWriteOnce"], false), Ok(Mode::SingleNodeWriter));
    assert_eq!(m(&["ReadWriteOnce"], true), Ok(Mode::SingleNodeMultiWriter));
    assert_eq!(
        m(&["ReadWriteOncePod"], true),
        Ok(Mode::SingleNodeSingleWriter)
    );
    assert_eq!(
        m(&["ReadWriteMany", "ReadWriteOnce"], false),
        Ok(Mode::MultiNodeMultiWriter)
    );
    assert_eq!(m(&["ReadOnlyMany"], false), Ok(Mode::MultiNodeReaderOnly));
    assert!(m(&["ReadOnlyMany", "ReadWriteOnce"], false).is_err());
    assert!(m(&["ReadWriteOncePod", "ReadWriteOnce"], false).is_err());
}

#[test]
fn answers_zero_means_asked_and_smaller_is_refused() {
    assert_eq!(answer(4 * GI, 0), Ok(4 * GI));
    assert_eq!(answer(4 * GI, (5 * GI) as i64), Ok(5 * GI));
    assert!(answer(4 * GI, GI as i64).is_err());
    assert!(answer(4 * GI, -1).is_err());
}

fn step(c: &PersistentVolumeClaim, p: &PersistentVolume, expander: Expander) -> ResizeStep {
    decide(c, p, "d", expander, false, NOW).step
}

#[test]
fn decide_leaves_claims_of_other_drivers_and_satisfied_claims_alone() {
    let other = decide(
        &claim(json!({})),
        &pv(json!({})),
        "x",
        Expander::Controller,
        false,
        NOW,
    );
    assert_eq!(other.step, ResizeStep::None);
    assert_eq!(other.drop_pre_resize, None);
    let satisfied = claim(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    assert_eq!(
        step(&satisfied, &pv(json!({})), Expander::Controller),
        ResizeStep::None
    );
}

#[test]
fn decide_starts_a_new_attempt_with_a_t1_patch() {
    match step(&claim(json!({})), &pv(json!({})), Expander::Controller) {
        ResizeStep::Expand {
            bytes,
            start: Some(p),
        } => {
            assert_eq!(bytes, 4 * GI);
            assert_eq!(
                p["status"]["allocatedResourceStatuses"]["storage"],
                CONTROLLER_IN_PROGRESS
            );
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
        ResizeStep::Expand {
            bytes: 4 * GI,
            start: None
        }
    );
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
fn decide_drops_pre_resize_capacity_alongside() {
    let c = claim(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    let p = pv(json!({"metadata": {"annotations": {ANN_PRE_RESIZE_CAPACITY: "1Gi"}}}));
    let r = decide(&c, &p, "d", Expander::Controller, false, NOW);
    assert_eq!(r.step, ResizeStep::None);
    assert!(r.drop_pre_resize.is_some());
}

#[test]
fn expander_from_capabilities() {
    assert_eq!(Expander::of(true, true), Some(Expander::Controller));
    assert_eq!(Expander::of(true, false), Some(Expander::Controller));
    assert_eq!(Expander::of(false, true), Some(Expander::NodeOnly));
    assert_eq!(Expander::of(false, false), None);
}

#[test]
fn in_use_by_running_or_pending_pods_of_the_namespace() {
    let pod = |ns: &str, claim_name: &str, phase: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": ns},
            "spec": {"containers": [{"name": "c"}],
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    };
    let c = claim(json!({}));
    assert!(in_use(&c, &[pod("ns", "c", "Running")]));
    assert!(in_use(&c, &[pod("ns", "c", "Pending")]));
    assert!(!in_use(&c, &[pod("ns", "c", "Succeeded")]));
    assert!(!in_use(&c, &[pod("ns", "c", "Failed")]));
    assert!(!in_use(&c, &[pod("other", "c", "Running")]));
    assert!(!in_use(&c, &[pod("ns", "d", "Running")]));
    assert!(!in_use(&c, &[]));
}
