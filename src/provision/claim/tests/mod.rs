//! Tests of `provision::claim::decide`, by topic; the fixtures are here.

mod passes;
mod tables;

use super::*;
use crate::fixtures::{self, claim};
use serde_json::{Value, json};

const DRIVER: &str = "d.csi";
const UID: &str = crate::fixtures::CLAIM_UID;

fn settings() -> Settings {
    Settings { default_fs_type: None, ..crate::fixtures::settings() }
}

fn class(provisioner: &str, extra: Value) -> StorageClass {
    fixtures::storage_class("gold").provisioner(provisioner).with(extra).build()
}

/// The PV named after the shared claim, of `driver`, whose claimRef has `claim_uid`.
fn pv(driver: &str, claim_uid: &str) -> PersistentVolume {
    fixtures::pv(&format!("pvc-{UID}"))
        .csi(driver, "h")
        .claim_ref("ns", "c", Some(claim_uid))
        .build()
}

const INTENT: &str = FINALIZER_PROVISIONING;

/// (case, claim patch, class, PV named after the claim, expected action)
type Row<'a> =
    (&'static str, Value, Option<&'a StorageClass>, Option<&'a PersistentVolume>, &'static str);

/// Runs a decision table; `binds`: whether this process binds.
fn check(s: &Settings, table: Vec<Row<'_>>, binds: bool) {
    check_with(s, table, binds, false);
}

/// As `check`; `journaled`: the claim's intent is in the intent journal.
fn check_with(s: &Settings, table: Vec<Row<'_>>, binds: bool, journaled: bool) {
    check_beside(s, table, binds, journaled, false);
}

/// As `check_with`; `binder_takes_ours`: the cluster's binder can take only our PV.
fn check_beside(s: &Settings, table: Vec<Row<'_>>, binds: bool, journaled: bool, takes: bool) {
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
            binder_takes_ours: takes,
            copy: crate::model::copy::ClaimCopy::Live,
            hold: None,
            now: std::time::Instant::now(),
        };
        assert_eq!(decide(&c, &ctx).name(), want, "{case}");
    }
}
