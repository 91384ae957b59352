//! Where a claim waits in the claim queue's fair order: its namespace is its share, and its lane
//! says how directly someone waits on its next pass.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::model::claim::ClaimExt;
use crate::model::names::{ANN_ALPHA_SELECTED_NODE, ANN_SELECTED_NODE};
use crate::model::turn::{Lane, Ticket};

/// A bound claim's work is on a volume that exists (an expansion, a modify, its release): it
/// goes first, and never waits behind a burst of creates; so does a claim whose volume is made
/// (`volume_made`: a PV provisioned for it, or naming it, exists) and only its binding is left.
/// An unbound claim a scheduler placed (a pod waits on it) goes before the creates no pod waits
/// for yet.
pub fn ticket(claim: &PersistentVolumeClaim, volume_made: bool) -> Ticket {
    let lane = if claim.volume_name().is_some() || volume_made {
        Lane::Existing
    } else if selected_node(claim) {
        Lane::Scheduled
    } else {
        Lane::Other
    };
    Ticket::new(lane, claim.metadata.namespace.as_deref().unwrap_or_default())
}

fn selected_node(claim: &PersistentVolumeClaim) -> bool {
    claim.metadata.annotations.as_ref().is_some_and(|a| {
        [ANN_SELECTED_NODE, ANN_ALPHA_SELECTED_NODE]
            .iter()
            .any(|k| a.get(*k).is_some_and(|node| !node.is_empty()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::claim;

    #[test]
    fn lane_tables() {
        use serde_json::json;
        let ns = |n: &str| json!({"metadata": {"namespace": n}});
        let placed = |key: &str, node: &str| json!({"metadata": {"namespace": "b", "annotations": {key: node}}});
        let bound = json!({"metadata": {"namespace": "a"}, "spec": {"volumeName": "pv-1"}});
        let cases = [
            ("bound: work on an existing volume", bound, false, Lane::Existing, "a"),
            ("its volume is made: the binding is left", ns("a"), true, Lane::Existing, "a"),
            ("a pod's node is chosen", placed(ANN_SELECTED_NODE, "n"), false, Lane::Scheduled, "b"),
            (
                "the alpha annotation too",
                placed(ANN_ALPHA_SELECTED_NODE, "n"),
                false,
                Lane::Scheduled,
                "b",
            ),
            (
                "an emptied annotation is no node",
                placed(ANN_SELECTED_NODE, ""),
                false,
                Lane::Other,
                "b",
            ),
            ("a create no pod waits for", ns("c"), false, Lane::Other, "c"),
        ];
        for (name, extra, made, lane, share) in cases {
            assert_eq!(ticket(&claim(extra), made), Ticket::new(lane, share), "{name}");
        }
    }
}
