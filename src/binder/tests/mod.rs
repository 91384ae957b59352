//! Table tests of the binder's pure decisions: one test per rule of docs/binder.md (matching
//! §2, claims and volumes §3), named after its section and row; split by topic, with the
//! fixtures here.

mod claims;
mod matching;
mod reclaim;
mod volumes;
mod writes;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

use super::bind;
use crate::binder::claim::{ClaimStep, ClaimView, decide as decide_claim};
use crate::binder::index::*;
use crate::binder::matching::*;
use crate::binder::volume::{ClaimLookup, Reclaim, VolumeStep, decide as decide_volume};
use crate::fixtures::{self, claim, merge};
use crate::model::VolumePhase;
use crate::model::names::*;

const UID: &str = crate::fixtures::CLAIM_UID;
const DRIVER: &str = "d.csi";

/// An Available Retain PV of class `gold`, ReadWriteOnce, at version 10.
fn available(name: &str, size: &str) -> fixtures::Build<PersistentVolume> {
    fixtures::pv(name)
        .version("10")
        .size(size)
        .access_modes(&["ReadWriteOnce"])
        .class("gold")
        .reclaim("Retain")
        .phase("Available")
}

fn pv(name: &str, size: &str, extra: Value) -> PersistentVolume {
    available(name, size).with(extra).build()
}

fn class(mode: Option<&str>) -> StorageClass {
    let class = fixtures::storage_class("gold");
    match mode {
        Some(mode) => class.binding_mode(mode).build(),
        None => class.build(),
    }
}

fn index(pvs: Vec<PersistentVolume>) -> VolumeIndex {
    let mut i = VolumeIndex::default();
    for p in pvs {
        i.upsert(&p);
    }
    i
}

/// The notice says `reason` and exactly `message`.
fn assert_notice(n: &crate::binder::claim::Notice, reason: &str, message: &str) {
    assert_eq!((n.reason.as_str(), n.message.as_str()), (reason, message));
}

fn claimed_by(name: &str, uid: &str) -> Value {
    json!({"spec": {"claimRef": {"name": name, "namespace": "ns", "uid": uid}}})
}

fn step(
    c: &PersistentVolumeClaim,
    pvs: Vec<PersistentVolume>,
    class: Option<&StorageClass>,
) -> ClaimStep {
    step_with_default(c, pvs, class, None)
}

fn step_with_default(
    c: &PersistentVolumeClaim,
    pvs: Vec<PersistentVolume>,
    class: Option<&StorageClass>,
    default: Option<&str>,
) -> ClaimStep {
    let volumes = index(pvs);
    decide_claim(c, &ClaimView { class, default_class: default, volumes: &volumes })
}

fn bound_to(s: &ClaimStep) -> Option<String> {
    match s {
        ClaimStep::Bind(pv) => pv.metadata.name.clone(),
        _ => None,
    }
}

fn best(c: &PersistentVolumeClaim, pvs: Vec<PersistentVolume>) -> Option<String> {
    let facts = ClaimFacts::of(c).unwrap();
    index(pvs).best_match(&facts, false).and_then(|p| p.metadata.name.clone())
}

fn immediate() -> StorageClass {
    class(Some("Immediate"))
}

fn requesting(v: &str) -> PersistentVolumeClaim {
    claim(json!({"spec": {"volumeName": v}}))
}

fn merge_pv(p: &mut PersistentVolume, extra: Value) {
    let mut v = serde_json::to_value(&*p).unwrap();
    merge(&mut v, extra);
    *p = serde_json::from_value(v).unwrap();
}

fn vstep(v: &PersistentVolume, c: ClaimLookup<'_>) -> VolumeStep {
    decide_volume(v, c, DRIVER)
}

/// PV `v` bound to the shared claim `ns/c`.
fn bound_pv(extra: Value) -> PersistentVolume {
    available("v", "1Gi").bound_to(&claim(json!({}))).with(extra).build()
}

/// The step leaves the claim Pending with an event of this reason, kind and message.
fn assert_pending(step: ClaimStep, reason: &str, warning: bool, message: &str) {
    let ClaimStep::Pending(Some(n)) = step else {
        panic!("not Pending with an event: {step:?}");
    };
    assert_eq!((n.reason.as_str(), n.warning, n.message.as_str()), (reason, warning, message));
}
