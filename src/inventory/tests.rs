use std::collections::HashSet;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::fixtures::pv;

const UID: &str = "0f2a4c6e-1b3d-4f5a-8c7e-9d0b1a2c3e4f";
const GONE: &str = "11111111-2222-4333-8444-555555555555";

fn naming() -> VolumeNaming {
    VolumeNaming { prefix: "pvc".into(), uuid_length: None }
}

fn known() -> Known {
    let mut k = Known::default();
    k.handles.insert("pvc-aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa".into(), "pv-a".into());
    k.handles.insert("uuid-made-by-driver".into(), "pv-static".into());
    k.claims.insert(format!("pvc-{UID}"));
    k.intents.insert("pvc-99999999-9999-4999-8999-999999999999".into());
    k
}

#[test]
fn classify_by_id_records_and_name() {
    let rows: [(String, State, Option<&str>); 9] = [
        ("pvc-aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa".into(), State::Adopted, Some("pv-a")),
        ("uuid-made-by-driver".into(), State::Adopted, Some("pv-static")),
        (format!("pvc-{UID}"), State::InFlight, None),
        ("pvc-99999999-9999-4999-8999-999999999999".into(), State::InFlight, None),
        (format!("pvc-{GONE}"), State::Orphaned, None),
        (format!("projects/p/zones/z/disks/pvc-{GONE}"), State::Orphaned, None),
        (format!("nfs.example#share#pvc-{GONE}#"), State::Orphaned, None),
        ("5a3c0a5e-e958-11f1-8d41-4ac468948ed7".into(), State::Unknown, None),
        ("pvc-not-a-uid".into(), State::Unknown, None),
    ];
    for (id, state, pv) in rows {
        let v = classify(&id, &known(), &naming());
        assert_eq!(v.state, state, "{id}");
        assert_eq!(v.pv.as_deref(), pv, "{id}");
    }
}

#[test]
fn our_name_honours_prefix_and_uuid_length() {
    let short = VolumeNaming { prefix: "vol".into(), uuid_length: Some(12) };
    assert_eq!(our_name("vol-0f2a4c6e1b3d", &short).as_deref(), Some("vol-0f2a4c6e1b3d"));
    assert_eq!(our_name("vol-0f2a4c6e1b3", &short), None, "one digit short");
    assert_eq!(our_name(&format!("pvc-{UID}"), &short), None, "another prefix");
    assert_eq!(our_name(&format!("x/pvc-{UID}"), &naming()), Some(format!("pvc-{UID}")));
    assert_eq!(our_name(&format!("pvcx-{UID}"), &naming()), None);
}

fn at(seconds: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(seconds).expect("time"))
}

#[test]
fn lost_only_for_settled_pvs_of_the_driver_made_before_the_listing() {
    let old = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}});
    let new = json!({"metadata": {"creationTimestamp": "2030-01-01T00:00:00Z"}});
    let pvs = [
        pv("bound").csi("d", "gone-1").phase("Bound").with(old.clone()).build(),
        pv("listed").csi("d", "here").phase("Bound").with(old.clone()).build(),
        pv("other-driver").csi("e", "gone-2").phase("Bound").with(old.clone()).build(),
        pv("too-new").csi("d", "gone-3").phase("Bound").with(new).build(),
        pv("deleting").csi("d", "gone-4").phase("Bound").with(old.clone()).deleting().build(),
        pv("released-delete")
            .csi("d", "gone-5")
            .phase("Released")
            .reclaim("Delete")
            .with(old.clone())
            .build(),
        pv("released-retain")
            .csi("d", "gone-6")
            .phase("Released")
            .reclaim("Retain")
            .with(old)
            .build(),
    ];
    let listed: HashSet<&str> = ["here"].into();
    let began = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    assert_eq!(lost(&pvs, "d", &listed, &began), ["bound", "released-retain"]);
    assert!(lost(&pvs, "d", &listed, &at(0)).is_empty(), "nothing existed before the listing");
}

/// A volume a Retain PV recorded is never an orphan: not while the PV is there, not after the
/// admin deletes the PV to keep the volume (remembered from the passes that saw the PV), and
/// not when a class of the driver retains (its PV may have gone before this process saw it).
/// An orphan is deleted only where none of that holds.
#[test]
fn a_volume_a_retain_pv_held_is_never_deletable() {
    use crate::fixtures::storage_class;
    let retained = format!("pvc-{GONE}");
    let retain_pv = pv("kept-on-purpose").csi("d", &retained).reclaim("Retain").build();
    let delete_class =
        storage_class("fast").with(json!({"provisioner": "d", "reclaimPolicy": "Delete"})).build();
    let retain_class =
        storage_class("keep").with(json!({"provisioner": "d", "reclaimPolicy": "Retain"})).build();
    let other_driver = storage_class("elsewhere")
        .with(json!({"provisioner": "e", "reclaimPolicy": "Retain"}))
        .build();
    let grace = Duration::ZERO;
    let t = Instant::now();
    let listing = [Listed { id: retained.clone(), capacity_bytes: 1 }];
    let pass = |memory: &mut Memory,
                pvs: &[&PersistentVolume],
                classes: &[&StorageClass],
                at: Duration| {
        let known =
            super::known(pvs.iter().copied(), [], [], classes.iter().copied(), ("d", &naming()));
        let known = memory.with_retained(known);
        let c = census(&listing, true, pvs.iter().copied(), "d", &known, &naming(), &at0());
        (c.verdicts[0].1.state, memory.after_pass(&c, t + at, grace).deletable)
    };
    // (the Retain PV on the passes before, and now; the driver's classes; the state; deletable)
    let delete_only: &[&StorageClass] = &[&delete_class, &other_driver];
    let retaining: &[&StorageClass] = &[&delete_class, &retain_class];
    let rows: [(bool, bool, &[&StorageClass], State, bool); 4] = [
        (true, true, delete_only, State::Adopted, false),
        // The admin deleted the Retain PV: this process saw it, so the volume is kept.
        (true, false, delete_only, State::Retained, false),
        // Never seen with a PV, but a class of the driver retains: kept.
        (false, false, retaining, State::Retained, false),
        // Nothing says it was kept on purpose: an orphan, deletable on its second pass.
        (false, false, delete_only, State::Orphaned, true),
    ];
    for (before, now, classes, state, deletable) in rows {
        let mut memory = Memory::default();
        let earlier: &[&PersistentVolume] = if before { &[&retain_pv] } else { &[] };
        let current: &[&PersistentVolume] = if now { &[&retain_pv] } else { &[] };
        pass(&mut memory, earlier, classes, Duration::ZERO);
        let (got, due) = pass(&mut memory, current, classes, Duration::from_secs(1));
        assert_eq!(got, state, "before {before}, now {now}");
        assert_eq!(!due.is_empty(), deletable, "before {before}, now {now}: {due:?}");
    }
}

fn at0() -> Time {
    at(0)
}

fn census_of(ids: &[&str], lost: Option<&[&str]>) -> Census {
    let listing: Vec<Listed> =
        ids.iter().map(|id| Listed { id: id.to_string(), capacity_bytes: 1 }).collect();
    let mut c = census(&listing, false, [], "d", &known(), &naming(), &at(0));
    c.lost = lost.map(|l| l.iter().map(|s| s.to_string()).collect());
    c
}

#[test]
fn orphans_are_deletable_after_two_passes_the_grace_apart() {
    let orphan = format!("pvc-{GONE}");
    let grace = Duration::from_secs(60);
    let t0 = Instant::now();
    let mut memory = Memory::default();
    let pass = census_of(&[&orphan, "uuid-made-by-driver"], None);
    assert_eq!(pass.count(State::Orphaned), 1);
    assert_eq!(memory.after_pass(&pass, t0, grace).deletable, Vec::<String>::new());
    let early = memory.after_pass(&pass, t0 + Duration::from_secs(59), grace);
    assert!(early.deletable.is_empty(), "within the grace");
    let due = memory.after_pass(&pass, t0 + grace, grace);
    assert_eq!(due.deletable, std::slice::from_ref(&orphan));
    // Adopted meanwhile: the clock starts again if it is ever orphaned again.
    memory.after_pass(&census_of(&[], None), t0 + grace * 2, grace);
    let back = memory.after_pass(&pass, t0 + grace * 3, grace);
    assert!(back.deletable.is_empty());
    // A grace of zero still needs two passes.
    let mut fresh = Memory::default();
    assert!(fresh.after_pass(&pass, t0, Duration::ZERO).deletable.is_empty());
    assert_eq!(
        fresh.after_pass(&pass, t0 + Duration::from_millis(1), Duration::ZERO).deletable,
        [orphan]
    );
}

#[test]
fn a_lost_pv_is_announced_once_after_two_passes_in_a_row() {
    let grace = Duration::from_secs(60);
    let t = Instant::now();
    let mut memory = Memory::default();
    let lost = census_of(&[], Some(&["pv-x"]));
    assert!(memory.after_pass(&lost, t, grace).announce_lost.is_empty(), "one pass is not enough");
    // An incomplete listing neither confirms nor clears.
    assert!(memory.after_pass(&census_of(&[], None), t, grace).announce_lost.is_empty());
    assert_eq!(memory.after_pass(&lost, t, grace).announce_lost, ["pv-x"]);
    assert!(memory.after_pass(&lost, t, grace).announce_lost.is_empty(), "once");
    memory.after_pass(&census_of(&[], Some(&[])), t, grace);
    memory.after_pass(&lost, t, grace);
    assert_eq!(memory.after_pass(&lost, t, grace).announce_lost, ["pv-x"], "lost anew");
}

#[test]
fn an_orphans_secret_comes_from_the_drivers_only_class() {
    use crate::fixtures::storage_class;
    let secret = json!({"parameters": {
        "csi.storage.k8s.io/provisioner-secret-name": "del-${pv.name}",
        "csi.storage.k8s.io/provisioner-secret-namespace": "storage"}});
    let by_claim = json!({"parameters": {
        "csi.storage.k8s.io/provisioner-secret-name": "${pvc.name}",
        "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}"}});
    let one = storage_class("one").provisioner("d").with(secret).build();
    let plain = storage_class("plain").provisioner("d").build();
    let templated = storage_class("templated").provisioner("d").with(by_claim).build();
    let named = orphan_secret(&[&one], "pvc-1").expect("resolves").expect("a secret");
    assert_eq!((named.namespace.as_str(), named.name.as_str()), ("storage", "del-pvc-1"));
    assert_eq!(orphan_secret(&[&plain], "pvc-1"), Ok(None));
    assert_eq!(orphan_secret(&[], "pvc-1"), Ok(None));
    assert!(orphan_secret(&[&one, &plain], "pvc-1").is_err(), "which class is unknown");
    assert!(orphan_secret(&[&templated], "pvc-1").is_err(), "needs the claim");
}
