//! Tests of `provision::claim::decide`, by topic; the fixtures are here.

mod passes;
mod tables;

use super::*;
use serde_json::{Value, json};

const DRIVER: &str = "d.csi";
const UID: &str = "11111111-2222-3333-4444-555555555555";

fn settings() -> Settings {
    Settings {
        driver: DRIVER.into(),
        volume_name_prefix: "pvc".into(),
        volume_name_uuid_length: None,
        default_fs_type: None,
        extra_create_metadata: false,
        controller_publish_readonly: false,
        identity: "id".into(),
        prevent_volume_mode_conversion: true,
        topology: Default::default(),
        extra_modify_metadata: false,
    }
}

fn class(provisioner: &str, extra: Value) -> StorageClass {
    let mut v = json!({"metadata": {"name": "gold"}, "provisioner": provisioner});
    crate::provision::plan::tests::merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    let mut v = json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": UID, "resourceVersion": "1"},
        "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    });
    crate::provision::plan::tests::merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn pv(driver: &str, claim_uid: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": format!("pvc-{UID}")},
        "spec": {"csi": {"driver": driver, "volumeHandle": "h"},
                 "claimRef": {"name": "c", "namespace": "ns", "uid": claim_uid}}
    }))
    .unwrap()
}

const INTENT: &str = FINALIZER_PROVISIONING;

/// (case, claim patch, class, PV named after the claim, expected action)
type Row<'a> = (
    &'static str,
    Value,
    Option<&'a StorageClass>,
    Option<&'a PersistentVolume>,
    &'static str,
);

/// Runs a decision table; `binds`: whether this process binds.
fn check(s: &Settings, table: Vec<Row<'_>>, binds: bool) {
    check_with(s, table, binds, false)
}

/// As `check`; `journaled`: the claim's intent is in the intent journal.
fn check_with(s: &Settings, table: Vec<Row<'_>>, binds: bool, journaled: bool) {
    for (case, patch, class, volume, want) in table {
        let c = claim(patch);
        let ctx = ClaimContext {
            settings: s,
            features: Features::default(),
            class,
            volume,
            facts: PlanFacts::default(),
            binds,
            journaled,
        };
        assert_eq!(decide(&c, &ctx).name(), want, "{case}");
    }
}
