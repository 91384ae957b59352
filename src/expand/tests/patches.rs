//! Ownership, and the status patches of the transitions the controller makes (T1–T5, T12, T13).

use super::*;

#[test]
fn s2_3_ownership_needs_driver_claim_ref_uid_and_bound() {
    assert!(owns(&claim(json!({})), &pv(json!({})), "d"));
    assert!(!owns(&claim(json!({})), &pv(json!({})), "other"));
    assert!(!owns(&claim(json!({})), &pv(json!({"spec": {"claimRef": {"uid": "x"}}})), "d"));
    assert!(!owns(&claim(json!({"status": {"phase": "Pending"}})), &pv(json!({})), "d"));
}

#[test]
fn t1_start_sets_allocated_in_progress_and_resizing() {
    let p = start(&claim(json!({})), 4 * GI, true, NOW);
    assert_eq!(p["metadata"]["resourceVersion"], "7");
    assert_eq!(p["metadata"]["annotations"][ANN_NODE_EXPANSION_NOT_REQUIRED], Value::Null);
    assert_eq!(p["status"]["allocatedResources"]["storage"], "4Gi");
    assert_eq!(p["status"]["allocatedResourceStatuses"]["storage"], CONTROLLER_IN_PROGRESS);
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
    assert!(volume_capacity(&annotated, 4 * GI, true, "2Gi").get("metadata").is_none());
    let resizing = claim(json!({"status": {"conditions": [{"type": RESIZING, "status": "True"}]}}));
    let p = node_pending(&resizing, NOW);
    assert_eq!(p["status"]["allocatedResourceStatuses"]["storage"], NODE_PENDING);
    assert_eq!(types(&p), vec![RESIZING, FS_RESIZE_PENDING]);
    assert_eq!(
        p["status"]["conditions"][1]["message"],
        "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
    );
}

#[test]
fn t3_no_node_expansion_finishes_the_claim() {
    assert!(volume_capacity(&pv(json!({})), 4 * GI, false, "2Gi").get("metadata").is_none());
    let p = finished(&claim(json!({})), 4 * GI, NOW);
    assert_eq!(p["status"]["capacity"]["storage"], "4Gi");
    assert_eq!(p["status"]["allocatedResourceStatuses"], Value::Null);
    assert_eq!(types(&p), vec!["Other"]);
    assert_eq!(p["metadata"]["annotations"][ANN_NODE_EXPANSION_NOT_REQUIRED], "true");
}

#[test]
fn t4_infeasible_error_marks_infeasible_without_precondition() {
    let p = failed(&claim(json!({})), "rpc error: code = OutOfRange", true, NOW);
    assert!(p.get("metadata").is_none());
    assert_eq!(p["status"]["allocatedResourceStatuses"]["storage"], CONTROLLER_INFEASIBLE);
    let c = &p["status"]["conditions"].as_array().unwrap();
    let error = c.iter().find(|c| c["type"] == CONTROLLER_RESIZE_ERROR).unwrap();
    assert_eq!(error["message"], "failed to expand pvc with rpc error: code = OutOfRange");
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
