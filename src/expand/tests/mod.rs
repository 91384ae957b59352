//! Table tests of the resize decisions of docs/expansion.md, by topic; the fixtures are here.

mod decide;
mod pass;
mod patches;
mod target;

use super::*;
use crate::fixtures;
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

/// Claim `ns/c`, bound to `pv` at 2Gi and asking for 4Gi, with an old resize error.
fn claim(extra: Value) -> PersistentVolumeClaim {
    fixtures::pvc("c")
        .uid("u")
        .version("7")
        .annotation(ANN_NODE_EXPANSION_NOT_REQUIRED, "true")
        .volume("pv")
        .size("4Gi")
        .phase("Bound")
        .with(json!({"status": {"capacity": {"storage": "2Gi"},
            "conditions": [{"type": "Other", "status": "True"},
                           {"type": "ControllerResizeError", "status": "True", "message": "old"}]}}))
        .with(extra)
        .build()
}

/// PV `pv` of driver `d`, 2Gi, xfs, claimed by `claim`.
fn pv(extra: Value) -> PersistentVolume {
    fixtures::pv("pv")
        .size("2Gi")
        .access_modes(&["ReadWriteOnce"])
        .csi("d", "h")
        .claim_ref("ns", "c", Some("u"))
        .with(json!({"spec": {"mountOptions": ["noatime"], "csi": {"fsType": "xfs"}}}))
        .with(extra)
        .build()
}

fn types(patch: &Value) -> Vec<&str> {
    patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect()
}
