//! §3.3: the size to send, row by row.

use super::*;

#[test]
fn s3_3_no_resize_when_request_is_not_above_capacity() {
    assert_eq!(target(&sizes(2, 2, 2, None, None), false, true), Target::None);
}

#[test]
fn s3_3_volume_below_request_node_infeasible_sends_allocated_else_request() {
    assert_eq!(
        target(&sizes(5, 2, 2, Some(4), Some(NODE_INFEASIBLE)), false, true),
        expand(4, false)
    );
    assert_eq!(target(&sizes(5, 2, 2, None, Some(NODE_INFEASIBLE)), false, true), expand(5, true));
}

#[test]
fn s3_3_volume_below_request_node_pending_sends_allocated_unless_reached() {
    assert_eq!(target(&sizes(5, 2, 2, Some(4), Some(NODE_PENDING)), false, true), expand(4, false));
    assert_eq!(target(&sizes(6, 2, 4, Some(4), Some(NODE_IN_PROGRESS)), false, true), Target::None);
}

#[test]
fn s3_3_volume_below_request_controller_in_progress_keeps_allocated_unless_final_error() {
    // Uncertain: the old attempt may still be running; keep pushing it.
    assert_eq!(
        target(&sizes(3, 2, 2, Some(8), Some(CONTROLLER_IN_PROGRESS)), false, true),
        expand(8, false)
    );
    // Known finished with a final error: the user's new size is honoured.
    assert_eq!(
        target(&sizes(3, 2, 2, Some(8), Some(CONTROLLER_IN_PROGRESS)), true, true),
        expand(3, true)
    );
}

#[test]
fn s3_3_volume_below_request_absent_or_infeasible_sends_request() {
    assert_eq!(target(&sizes(3, 2, 2, None, None), false, true), expand(3, true));
    // Recovery: infeasible at 100, the user lowers to 3.
    assert_eq!(
        target(&sizes(3, 2, 2, Some(100), Some(CONTROLLER_INFEASIBLE)), false, true),
        expand(3, true)
    );
    // Unchanged after infeasible: the same attempt, slowly.
    assert_eq!(
        target(&sizes(100, 2, 2, Some(100), Some(CONTROLLER_INFEASIBLE)), false, true),
        expand(100, false)
    );
}

#[test]
fn s3_3_volume_reached_node_pending_is_kubelets() {
    assert_eq!(target(&sizes(4, 2, 4, Some(4), Some(NODE_PENDING)), false, true), Target::None);
    assert_eq!(target(&sizes(4, 2, 4, Some(4), Some(NODE_IN_PROGRESS)), false, true), Target::None);
}

#[test]
fn s3_3_volume_reached_node_infeasible_depends_on_controller_expansion() {
    assert_eq!(
        target(&sizes(3, 2, 4, Some(4), Some(NODE_INFEASIBLE)), false, true),
        expand(4, false)
    );
    // Node-only driver: the user may lower the target.
    assert_eq!(
        target(&sizes(3, 2, 4, Some(4), Some(NODE_INFEASIBLE)), false, false),
        expand(3, true)
    );
}

#[test]
fn s3_3_volume_reached_controller_states_resend_allocated() {
    // Crash between the PV and the claim writes (T2a done, T2b not): the same attempt again.
    assert_eq!(
        target(&sizes(4, 2, 4, Some(4), Some(CONTROLLER_IN_PROGRESS)), false, true),
        expand(4, false)
    );
    assert_eq!(
        target(&sizes(4, 2, 4, None, Some(CONTROLLER_INFEASIBLE)), false, true),
        expand(4, true)
    );
}

#[test]
fn s3_3_volume_reached_absent_status() {
    assert_eq!(target(&sizes(4, 2, 4, Some(4), None), false, true), expand(4, false));
    assert_eq!(target(&sizes(4, 2, 4, None, None), false, true), expand(4, true));
    let old_server = Sizes { fs_resize_pending: true, ..sizes(4, 2, 4, None, None) };
    assert_eq!(target(&old_server, false, true), Target::None);
}
