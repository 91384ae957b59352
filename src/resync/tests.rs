//! The periodic pass's choice, by table: (case, claim or PV change, binds, looked at again).

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::{Value, json};

use std::collections::HashSet;

use super::*;
use crate::expand::CONTROLLER_IN_PROGRESS as RESIZING;
use crate::fixtures::{self, claim, merge};
use crate::model::names::FINALIZER_PROVISIONING as INTENT;

fn deleting() -> Value {
    json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})
}

/// A Bound claim of 1Gi on PV `pv`, whose status agrees with its spec.
fn bound_claim(extra: Value) -> PersistentVolumeClaim {
    let mut fields = json!({"spec": {"volumeName": "pv"}, "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}});
    merge(&mut fields, extra);
    claim(fields)
}

/// PV `pv`, Bound to the fixture claim.
fn bound_pv(extra: Value) -> PersistentVolume {
    fixtures::pv("pv").bound_to(&claim(json!({}))).with(extra).build()
}

#[test]
fn claims() {
    let pv = bound_pv(json!({}));
    let released = bound_pv(json!({"status": {"phase": "Released"}}));
    let table: [(&str, Value, Option<&PersistentVolume>, bool, bool); 12] = [
        ("Bound pair, binding", json!({}), Some(&pv), true, false),
        ("Bound pair, beside the binder", json!({}), Some(&pv), false, false),
        ("Pending", json!({"status": {"phase": "Pending"}}), None, false, true),
        ("Lost", json!({"status": {"phase": "Lost"}}), Some(&pv), true, true),
        ("its PV not in the store, binding", json!({}), None, true, true),
        ("its PV not in the store, beside the binder", json!({}), None, false, false),
        ("its PV Released, binding", json!({}), Some(&released), true, true),
        ("being deleted", deleting(), Some(&pv), false, true),
        (
            "provisioning intent still on",
            json!({"metadata": {"finalizers": [INTENT]}}),
            Some(&pv),
            true,
            true,
        ),
        (
            "resize asked",
            json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
            Some(&pv),
            false,
            true,
        ),
        (
            "resize recorded",
            json!({"status": {"allocatedResourceStatuses": {"storage": RESIZING}}}),
            Some(&pv),
            true,
            true,
        ),
        (
            "attributes class to change",
            json!({"spec": {"volumeAttributesClassName": "x"}}),
            Some(&pv),
            false,
            true,
        ),
    ];
    for (case, change, volume, binds, looked_at) in table {
        assert_eq!(claim_needs_pass(&bound_claim(change), volume, binds), looked_at, "{case}");
    }
}

#[test]
fn volumes() {
    let c = bound_claim(json!({}));
    let other_uid = bound_claim(json!({"metadata": {"uid": "another"}}));
    let elsewhere = bound_claim(json!({"spec": {"volumeName": "other-pv"}}));
    let table: [(&str, Value, Option<&PersistentVolumeClaim>, bool, bool); 12] = [
        ("Bound pair, binding", json!({}), Some(&c), true, false),
        ("Bound pair, beside the binder", json!({}), Some(&c), false, false),
        ("claim not in the store, binding", json!({}), None, true, true),
        ("claim not in the store, beside the binder", json!({}), None, false, true),
        (
            "claim recreated (another UID), beside the binder",
            json!({}),
            Some(&other_uid),
            false,
            true,
        ),
        ("claim names another PV, beside the binder", json!({}), Some(&elsewhere), false, false),
        ("claim recreated (another UID), binding", json!({}), Some(&other_uid), true, true),
        ("claim names another PV, binding", json!({}), Some(&elsewhere), true, true),
        (
            "Available, nobody named",
            json!({"spec": {"claimRef": null}, "status": {"phase": "Available"}}),
            None,
            true,
            false,
        ),
        ("Available, pre-bound", json!({"status": {"phase": "Available"}}), None, true, true),
        ("Released", json!({"status": {"phase": "Released"}}), None, false, true),
        ("being deleted", deleting(), Some(&c), true, true),
    ];
    for (case, change, claim, binds, looked_at) in table {
        assert_eq!(volume_needs_pass(&bound_pv(change), claim, binds), looked_at, "{case}");
    }
}

#[test]
fn index_sweeps() {
    let store = ["listed"];
    let index = ["listed", "ours-new", "deleted-while-down", "ours-new-again"];
    let unseen_before: HashSet<String> =
        ["deleted-while-down", "dropped-meanwhile"].map(String::from).into();
    // (case, suspect, gone, unseen after)
    let table = [
        ("the store has it", "listed", false, false),
        ("first time missing: a PV we just made, ahead of the watch", "ours-new", false, true),
        ("missing at two passes in a row", "deleted-while-down", true, false),
        ("the index dropped it meanwhile", "dropped-meanwhile", false, false),
        ("in neither", "never", false, false),
    ];
    for (case, suspect, gone, unseen) in table {
        let s = sweep(
            [suspect.to_string()],
            |n| store.contains(&n),
            |n| index.contains(&n),
            &unseen_before,
        );
        assert_eq!(s.gone.contains(&suspect.to_string()), gone, "{case}");
        assert_eq!(s.unseen.contains(suspect), unseen, "{case}");
    }
}
