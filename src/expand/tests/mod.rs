//! Table tests of the resize decisions of docs/expansion.md, by topic; the fixtures are here.

mod decide;
mod pass;
mod patches;
mod target;

use super::*;
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
    Target::Expand { bytes: bytes * GI, restart }
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    crate::fixtures::object(
        json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                         "annotations": {ANN_NODE_EXPANSION_NOT_REQUIRED: "true"}},
            "spec": {"volumeName": "pv", "resources": {"requests": {"storage": "4Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "2Gi"},
                       "conditions": [{"type": "Other", "status": "True"},
                                      {"type": "ControllerResizeError", "status": "True", "message": "old"}]}
        }),
        extra,
    )
}

fn pv(extra: Value) -> PersistentVolume {
    crate::fixtures::object(
        json!({
            "metadata": {"name": "pv"},
            "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                     "mountOptions": ["noatime"],
                     "csi": {"driver": "d", "volumeHandle": "h", "fsType": "xfs"},
                     "claimRef": {"namespace": "ns", "name": "c", "uid": "u"}}
        }),
        extra,
    )
}

fn types(patch: &Value) -> Vec<&str> {
    patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect()
}
