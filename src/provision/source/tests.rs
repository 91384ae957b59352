use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use serde_json::{Value, json};

use super::*;
use crate::fixtures::{self, class, data_claim as claim, merge, settings};
use crate::provision::plan::{Features, build};

fn clone_features() -> Features {
    Features { clone: true, ..Features::default() }
}

/// Claim `team/src` of 1Gi, bound to `pv-src`: the clone source.
fn source_claim(extra: Value) -> PersistentVolumeClaim {
    let pv = fixtures::pv("pv-src").build();
    fixtures::pvc("src")
        .namespace("team")
        .uid("src-uid")
        .size("1Gi")
        .bound_to(&pv)
        .with(extra)
        .build()
}

/// PV `pv-src` of `driver`, whose claimRef carries `uid` only.
fn source_pv(driver: &str, uid: &str) -> PersistentVolume {
    fixtures::pv("pv-src")
        .csi(driver, "h-src")
        .with(json!({"spec": {"claimRef": {"uid": uid}}}))
        .build()
}

fn clone_of(name: &str) -> PersistentVolumeClaim {
    claim(json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": name}}}))
}

#[test]
fn sources_are_sorted_by_who_fills_the_volume() {
    let table: [(&str, Value, Source); 8] = [
        ("none", json!({}), Source::Empty),
        (
            "clone",
            json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "a"}}),
            Source::Clone { name: "a".into() },
        ),
        (
            "snapshot",
            json!({"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "s"}}),
            Source::Snapshot { name: "s".into() },
        ),
        (
            "snapshot kind in the core group is a populator's",
            json!({"dataSource": {"kind": "VolumeSnapshot", "name": "s"}}),
            Source::Populator { group: "".into(), kind: "VolumeSnapshot".into(), name: "s".into() },
        ),
        (
            "populator through dataSourceRef",
            json!({"dataSourceRef": {"apiGroup": "hello.example.com", "kind": "Hello", "name": "h"}}),
            Source::Populator {
                group: "hello.example.com".into(),
                kind: "Hello".into(),
                name: "h".into(),
            },
        ),
        (
            "dataSourceRef naming the claim's own namespace",
            json!({"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "a", "namespace": "team"}}),
            Source::Clone { name: "a".into() },
        ),
        (
            "cross-namespace dataSourceRef",
            json!({"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "a", "namespace": "other"}}),
            Source::CrossNamespace {
                kind: "PersistentVolumeClaim".into(),
                namespace: "other".into(),
                name: "a".into(),
            },
        ),
        (
            "dataSource wins over dataSourceRef",
            json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "a"},
                   "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "b"}}),
            Source::Clone { name: "a".into() },
        ),
    ];
    for (case, spec, want) in table {
        assert_eq!(of(&claim(json!({ "spec": spec }))), want, "{case}");
    }
}

#[test]
fn a_cross_namespace_source_is_refused_never_an_empty_volume() {
    let c = claim(
        json!({"spec": {"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "a", "namespace": "other"}}}),
    );
    let e = build(&c, &class(json!({})), &settings(), clone_features(), PlanFacts::default())
        .unwrap_err();
    assert!(e.to_string().contains("cross-namespace"), "{e}");
}

#[test]
fn clone_sources_are_checked() {
    let s = settings();
    let target = clone_of("src");
    let good_claim = source_claim(json!({}));
    let good_pv = source_pv("d.csi", "src-uid");
    let facts = |c, v| PlanFacts { claim: c, volume: v, ..PlanFacts::default() };
    let plan = build(
        &target,
        &class(json!({})),
        &s,
        clone_features(),
        facts(Some(&good_claim), Some(&good_pv)),
    )
    .unwrap();
    assert_eq!(
        plan.request.volume_content_source.unwrap().r#type,
        Some(csi::volume_content_source::Type::Volume(csi::volume_content_source::VolumeSource {
            volume_id: "h-src".into()
        }))
    );
    let e = build(
        &target,
        &class(json!({})),
        &s,
        Features::default(),
        facts(Some(&good_claim), Some(&good_pv)),
    )
    .unwrap_err();
    assert!(e.to_string().contains("CLONE_VOLUME"), "{e}");

    let pending = source_claim(json!({"status": {"phase": "Pending"}}));
    let bigger = source_claim(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    let block = source_claim(json!({"spec": {"volumeMode": "Block"}}));
    let deleting = source_claim(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
    let other_driver = source_pv("x.csi", "src-uid");
    let other_claim = source_pv("d.csi", "someone");
    let table: [(&str, Option<&PersistentVolumeClaim>, Option<&PersistentVolume>, &str); 7] = [
        ("missing", None, None, "does not exist"),
        ("pending", Some(&pending), Some(&good_pv), "not Bound"),
        ("bigger", Some(&bigger), Some(&good_pv), "less than the source's 2Gi"),
        ("mode", Some(&block), Some(&good_pv), "volumeMode"),
        ("deleting", Some(&deleting), Some(&good_pv), "being deleted"),
        ("driver", Some(&good_claim), Some(&other_driver), "driver x.csi"),
        ("claimRef", Some(&good_claim), Some(&other_claim), "another claim"),
    ];
    for (case, c, v, text) in table {
        let e = build(&target, &class(json!({})), &s, clone_features(), facts(c, v))
            .unwrap_err()
            .to_string();
        assert!(e.contains(text), "{case}: {e}");
    }
}

#[test]
fn a_protected_source_on_its_way_out_still_serves_a_clone_in_flight() {
    let protected_deleting = source_claim(json!({"metadata": {
        "deletionTimestamp": "2026-01-01T00:00:00Z",
        "finalizers": [FINALIZER_CLONING_PROTECTION],
    }}));
    let pv = source_pv("d.csi", "src-uid");
    let facts = |in_flight| PlanFacts {
        claim: Some(&protected_deleting),
        volume: Some(&pv),
        in_flight,
        ..PlanFacts::default()
    };
    let build_with = |in_flight| {
        build(&clone_of("src"), &class(json!({})), &settings(), clone_features(), facts(in_flight))
    };
    // A new clone of a source being deleted is refused; one that holds our intent (its
    // CreateVolume may be under way, or is replayed to undo it) is not.
    assert!(build_with(false).is_err());
    assert!(build_with(true).is_ok());
}

#[test]
fn the_protection_goes_once_no_clone_may_be_in_flight() {
    let protected = |deleting: bool| {
        let mut extra = json!({"metadata": {"finalizers": [FINALIZER_CLONING_PROTECTION]}});
        if deleting {
            merge(&mut extra, json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        }
        source_claim(extra)
    };
    let clone = clone_of("src");
    let clone_of_other = clone_of("other");
    let plain = claim(json!({}));
    let unprotected_deleting =
        source_claim(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
    let table: [(&str, PersistentVolumeClaim, Vec<&PersistentVolumeClaim>, bool, bool); 6] = [
        ("not being deleted", protected(false), vec![], false, false),
        ("no finalizer", unprotected_deleting, vec![], false, false),
        ("deleting, no clone", protected(true), vec![&plain], false, true),
        ("a clone in flight", protected(true), vec![&clone], true, false),
        ("a clone done", protected(true), vec![&clone], false, true),
        ("a clone of another claim in flight", protected(true), vec![&clone_of_other], true, true),
    ];
    for (case, source, clones, in_flight, want) in table {
        assert_eq!(release_clone_protection(&source, clones, |_| in_flight), want, "{case}");
    }
    assert_eq!(clone_source_key(&clone), Some(("team".into(), "src".into())));
    assert_eq!(clone_source_key(&plain), None);
    let facts = PlanFacts { claim: Some(&protected(false)), ..PlanFacts::default() };
    assert!(unprotected_clone_source(&facts).is_none());
    let bare = source_claim(json!({}));
    let facts = PlanFacts { claim: Some(&bare), ..PlanFacts::default() };
    assert!(unprotected_clone_source(&facts).is_some());
}

#[test]
fn a_populator_kind_nobody_serves_is_a_warning() {
    let (warning, note) = populator_notice("hello.example.com", "Hello", "h", false);
    assert!(warning);
    assert!(note.contains("Hello.hello.example.com"), "{note}");
    assert!(note.contains("no empty volume"), "{note}");
    let (warning, note) = populator_notice("hello.example.com", "Hello", "h", true);
    assert!(!warning);
    assert_eq!(note, "Assuming an external populator will provision the volume");
}
