//! Table tests of the binder's pure decisions: one test per row of reference/binder.md §2 and
//! §3, named after the row.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

use super::bind;
use super::claim::{ClaimStep, ClaimView, decide as decide_claim};
use super::matching::*;
use super::volume::{ClaimLookup, Reclaim, VolumeStep, decide as decide_volume};
use crate::model::VolumePhase;
use crate::names::*;
use crate::provision::plan::tests::merge;

const UID: &str = "uid-1";
const DRIVER: &str = "d.csi";

fn pv(name: &str, size: &str, extra: Value) -> PersistentVolume {
    let mut v = json!({
        "metadata": {"name": name, "resourceVersion": "10"},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "gold", "persistentVolumeReclaimPolicy": "Retain"},
        "status": {"phase": "Available"}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    let mut v = json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": UID, "resourceVersion": "5"},
        "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn class(mode: Option<&str>) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": "gold"}, "provisioner": DRIVER, "volumeBindingMode": mode
    }))
    .unwrap()
}

fn index(pvs: Vec<PersistentVolume>) -> VolumeIndex {
    let mut i = VolumeIndex::default();
    for p in pvs {
        i.upsert(p);
    }
    i
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
    decide_claim(
        c,
        &ClaimView {
            class,
            default_class: default,
            volumes: &volumes,
        },
    )
}

fn bound_to(s: &ClaimStep) -> Option<String> {
    match s {
        ClaimStep::Bind(pv) => pv.metadata.name.clone(),
        _ => None,
    }
}

fn best(c: &PersistentVolumeClaim, pvs: Vec<PersistentVolume>) -> Option<String> {
    let facts = ClaimFacts::of(c).unwrap();
    index(pvs)
        .best_match(&facts, false)
        .and_then(|p| p.metadata.name.clone())
}

fn immediate() -> StorageClass {
    class(Some("Immediate"))
}

// §2.1 the access-mode index.

#[test]
fn s2_1_index_key_is_deduplicated_in_fixed_order() {
    let modes = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        modes_key(&modes(&["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"])),
        "ReadWriteOnce,ReadWriteMany"
    );
    assert_eq!(
        modes_key(&modes(&["ReadWriteOncePod", "ReadOnlyMany"])),
        "ReadOnlyMany,ReadWriteOncePod"
    );
    assert_eq!(modes_key(&[]), "");
}

#[test]
fn s2_1_fewest_modes_group_first_upstream_index_test() {
    let g = |name: &str, modes: Value| pv(name, "10Gi", json!({"spec": {"accessModes": modes}}));
    let pvs = || {
        vec![
            g("gce", json!(["ReadWriteOnce", "ReadOnlyMany"])),
            g("ebs", json!(["ReadWriteOnce"])),
            g(
                "nfs",
                json!(["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"]),
            ),
        ]
    };
    let ask = |m: Value| claim(json!({"spec": {"accessModes": m}}));
    assert_eq!(
        best(&ask(json!(["ReadWriteOnce"])), pvs()).as_deref(),
        Some("ebs")
    );
    assert_eq!(
        best(&ask(json!(["ReadWriteOnce", "ReadOnlyMany"])), pvs()).as_deref(),
        Some("gce")
    );
    assert_eq!(
        best(
            &ask(json!(["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"])),
            pvs()
        )
        .as_deref(),
        Some("nfs")
    );
    assert_eq!(
        best(&ask(json!(["ReadWriteMany"])), pvs()).as_deref(),
        Some("nfs")
    );
    assert_eq!(
        best(&ask(json!(["ReadOnlyMany"])), pvs()).as_deref(),
        Some("gce")
    );
    // ebs taken: RWO falls through to the next group.
    let mut taken = pvs();
    taken[1] = g("ebs", json!(["ReadWriteOnce"]));
    merge_pv(&mut taken[1], claimed_by("other", "u-9"));
    assert_eq!(
        best(&ask(json!(["ReadWriteOnce"])), taken).as_deref(),
        Some("gce")
    );
}

fn merge_pv(p: &mut PersistentVolume, extra: Value) {
    let mut v = serde_json::to_value(&*p).unwrap();
    merge(&mut v, extra);
    *p = serde_json::from_value(v).unwrap();
}

#[test]
fn s2_1_quirk_match_in_fewer_modes_group_beats_prebound_in_larger_group() {
    let a = pv("a", "5Gi", json!({}));
    let b = pv(
        "b",
        "1Gi",
        json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
        "claimRef": {"name": "c", "namespace": "ns"}}}),
    );
    assert_eq!(best(&claim(json!({})), vec![a, b]).as_deref(), Some("a"));
}

// §2.2 FindMatchingVolume.

#[test]
fn s2_2_smallest_volume_that_fits() {
    let pvs = vec![
        pv("big", "10Gi", json!({})),
        pv("small", "2Gi", json!({})),
        pv("tiny", "500Mi", json!({})),
    ];
    assert_eq!(best(&claim(json!({})), pvs).as_deref(), Some("small"));
}

#[test]
fn s2_2_a_volume_reserved_by_another_claims_bind_is_skipped_until_released() {
    let mut i = index(vec![
        pv("first", "1Gi", json!({})),
        pv("second", "1Gi", json!({})),
    ]);
    let other = ("ns".to_string(), "other".to_string());
    let ours = ClaimFacts::of(&claim(json!({}))).unwrap();
    let name = |i: &VolumeIndex| {
        i.best_match(&ours, false)
            .and_then(|p| p.metadata.name.clone())
    };
    type Held<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(&str, Held, Option<&str>)] = &[
        ("nothing reserved: the first", &[], Some("first")),
        (
            "first held by another claim",
            &[("first", "other")],
            Some("second"),
        ),
        (
            "both held by another claim",
            &[("first", "other"), ("second", "other")],
            None,
        ),
        ("first held by this claim", &[("first", "c")], Some("first")),
    ];
    for (what, held, want) in cases {
        for (pv, by) in *held {
            assert!(i.reserve(pv, ("ns".into(), (*by).into())), "{what}");
        }
        assert_eq!(name(&i).as_deref(), *want, "{what}");
        for (pv, by) in *held {
            i.unreserve(pv, &("ns".into(), (*by).into()));
        }
    }
    // One holder at a time; only the holder's release ends it.
    assert!(i.reserve("first", other.clone()));
    assert!(!i.reserve("first", ("ns".into(), "c".into())));
    i.unreserve("first", &("ns".into(), "c".into()));
    assert_eq!(name(&i).as_deref(), Some("second"));
    i.unreserve("first", &other);
    assert_eq!(name(&i).as_deref(), Some("first"));
}

#[test]
fn s2_2_claimed_by_another_claim_is_skipped() {
    let pvs = vec![pv("x", "1Gi", claimed_by("other", "u-2"))];
    assert_eq!(best(&claim(json!({})), pvs), None);
}

#[test]
fn s2_2_claimref_same_name_other_uid_is_never_a_candidate() {
    let pvs = vec![pv("x", "1Gi", claimed_by("c", "u-old"))];
    assert_eq!(best(&claim(json!({})), pvs), None);
}

#[test]
fn s2_2_volume_mode_must_match() {
    let pvs = vec![
        pv("block", "1Gi", json!({"spec": {"volumeMode": "Block"}})),
        pv("fs", "5Gi", json!({})),
    ];
    assert_eq!(best(&claim(json!({})), pvs.clone()).as_deref(), Some("fs"));
    let block = claim(json!({"spec": {"volumeMode": "Block"}}));
    assert_eq!(best(&block, pvs).as_deref(), Some("block"));
}

#[test]
fn s2_2_volume_attributes_class_must_match() {
    let pvs = vec![
        pv(
            "fast",
            "1Gi",
            json!({"spec": {"volumeAttributesClassName": "fast"}}),
        ),
        pv("plain", "5Gi", json!({})),
    ];
    assert_eq!(
        best(&claim(json!({})), pvs.clone()).as_deref(),
        Some("plain")
    );
    let c = claim(json!({"spec": {"volumeAttributesClassName": "fast"}}));
    assert_eq!(best(&c, pvs).as_deref(), Some("fast"));
}

#[test]
fn s2_2_deleting_volume_is_skipped() {
    let pvs = vec![pv(
        "x",
        "1Gi",
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
    )];
    assert_eq!(best(&claim(json!({})), pvs), None);
}

#[test]
fn s2_2_prebound_volume_wins_in_its_group_even_if_larger() {
    let pvs = vec![
        pv("small", "1Gi", json!({})),
        pv(
            "mine",
            "50Gi",
            json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}, "status": {"phase": "Released"}}),
        ),
    ];
    assert_eq!(best(&claim(json!({})), pvs).as_deref(), Some("mine"));
}

#[test]
fn s2_2_prebound_by_uid_skips_class_and_selector() {
    let c = claim(json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}}));
    let pvs = vec![pv(
        "mine",
        "1Gi",
        json!({"spec": {"storageClassName": "silver",
        "claimRef": {"name": "c", "namespace": "ns", "uid": UID}}}),
    )];
    assert_eq!(best(&c, pvs).as_deref(), Some("mine"));
}

#[test]
fn s2_2_prebound_still_needs_size() {
    let pvs = vec![pv(
        "mine",
        "100Mi",
        json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}}),
    )];
    assert_eq!(best(&claim(json!({})), pvs), None);
}

#[test]
fn s2_2_only_available_phase_is_a_candidate() {
    for phase in ["Pending", "Released", "Failed", "Bound"] {
        let pvs = vec![pv("x", "1Gi", json!({"status": {"phase": phase}}))];
        assert_eq!(best(&claim(json!({})), pvs), None, "{phase}");
    }
}

#[test]
fn s2_2_selector_must_match_labels() {
    let c = claim(
        json!({"spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}}}),
    );
    let pvs = vec![
        pv("plain", "1Gi", json!({})),
        pv(
            "labelled",
            "5Gi",
            json!({"metadata": {"labels": {"tier": "gold"}}}),
        ),
    ];
    assert_eq!(best(&c, pvs).as_deref(), Some("labelled"));
}

#[test]
fn s2_2_class_must_match_beta_annotation_first() {
    let c = claim(json!({"metadata": {"annotations": {ANN_BETA_STORAGE_CLASS: "silver"}}}));
    let pvs = vec![
        pv("gold", "1Gi", json!({})),
        pv(
            "silver",
            "5Gi",
            json!({"spec": {"storageClassName": "silver"}}),
        ),
    ];
    assert_eq!(best(&c, pvs).as_deref(), Some("silver"));
    let empty = claim(json!({"spec": {"storageClassName": null}}));
    let pvs = vec![
        pv("gold", "1Gi", json!({})),
        pv("none", "5Gi", json!({"spec": {"storageClassName": null}})),
    ];
    assert_eq!(best(&empty, pvs).as_deref(), Some("none"));
}

#[test]
fn s2_2_claim_without_request_matches_any_size() {
    let c = claim(json!({"spec": {"resources": {"requests": null}}}));
    assert_eq!(
        best(&c, vec![pv("x", "1Mi", json!({}))]).as_deref(),
        Some("x")
    );
}

#[test]
fn s2_2_delay_binding_returns_only_prebound() {
    let c = claim(json!({}));
    let facts = ClaimFacts::of(&c).unwrap();
    let i = index(vec![pv("free", "1Gi", json!({}))]);
    assert!(i.best_match(&facts, true).is_none());
    let i = index(vec![
        pv("free", "1Gi", json!({})),
        pv("picked", "2Gi", claimed_by("c", UID)),
    ]);
    assert_eq!(
        i.best_match(&facts, true)
            .and_then(|p| p.metadata.name.clone())
            .as_deref(),
        Some("picked")
    );
}

#[test]
fn s2_2_is_delay_binding_mode() {
    let c = claim(json!({}));
    assert_eq!(
        delay_binding(&c, Some(&class(Some("WaitForFirstConsumer")))),
        Ok(true)
    );
    assert_eq!(delay_binding(&c, Some(&immediate())), Ok(false));
    assert_eq!(delay_binding(&c, None), Ok(false));
    assert!(delay_binding(&c, Some(&class(None))).is_err());
    let none = claim(json!({"spec": {"storageClassName": ""}}));
    assert_eq!(delay_binding(&none, Some(&class(None))), Ok(false));
}

#[test]
fn s2_2_index_ignores_older_resource_version() {
    let mut i = VolumeIndex::default();
    assert!(i.upsert(pv(
        "x",
        "1Gi",
        json!({"metadata": {"resourceVersion": "2"}})
    )));
    assert!(i.upsert(pv(
        "x",
        "1Gi",
        json!({"metadata": {"resourceVersion": "2"}})
    )));
    assert!(i.upsert(pv(
        "x",
        "1Gi",
        json!({"metadata": {"resourceVersion": "10"}})
    )));
    assert!(!i.upsert(pv(
        "x",
        "1Gi",
        json!({"metadata": {"resourceVersion": "9"}})
    )));
    // Claimed in the newer version: no longer a candidate, even though an older copy said Available.
    i.upsert(pv("x", "1Gi", json!({"metadata": {"resourceVersion": "11"}, "spec": {"claimRef": {"name": "o", "namespace": "ns", "uid": "u"}}})));
    let facts = ClaimFacts::of(&claim(json!({}))).unwrap();
    assert!(i.best_match(&facts, false).is_none());
    i.remove("x");
    assert!(i.is_empty());
}

// §2.3 checkVolumeSatisfyClaim.

#[test]
fn s2_3_check_volume_satisfy_claim_order_and_messages() {
    let c = claim(json!({}));
    let rows: Vec<(&str, Value, Result<(), &str>)> = vec![
        ("fits", json!({}), Ok(())),
        (
            "deleting",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"capacity": {"storage": "1"}}}),
            Err("the volume is marked for deletion \"v\""),
        ),
        (
            "too small",
            json!({"spec": {"capacity": {"storage": "1Mi"}, "storageClassName": "x"}}),
            Err("requested PV is too small"),
        ),
        (
            "class",
            json!({"spec": {"storageClassName": "x", "volumeMode": "Block"}}),
            Err("storageClassName does not match"),
        ),
        (
            "mode",
            json!({"spec": {"volumeMode": "Block", "accessModes": ["ReadOnlyMany"]}}),
            Err("incompatible volumeMode"),
        ),
        (
            "access",
            json!({"spec": {"accessModes": ["ReadOnlyMany"]}}),
            Err("incompatible accessMode"),
        ),
        ("selector not checked", json!({}), Ok(())),
    ];
    for (name, extra, want) in rows {
        let got = check_volume_satisfies_claim(&pv("v", "1Gi", extra), &c);
        assert_eq!(got, want.map_err(String::from), "{name}");
    }
}

// §3.2 A: syncUnboundClaim, no volumeName.

#[test]
fn s3_2a_binding_mode_unset_fails() {
    assert!(matches!(
        step(&claim(json!({})), vec![], Some(&class(None))),
        ClaimStep::Fail(_)
    ));
}

#[test]
fn s3_2a_bad_selector_fails_finding() {
    let c = claim(
        json!({"spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}}),
    );
    match step(&c, vec![pv("x", "1Gi", json!({}))], Some(&immediate())) {
        ClaimStep::Fail(e) => assert!(e.starts_with("error finding PV for claim \"ns/c\""), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_2a_volume_found_binds() {
    let s = step(
        &claim(json!({})),
        vec![pv("x", "1Gi", json!({}))],
        Some(&immediate()),
    );
    assert_eq!(bound_to(&s).as_deref(), Some("x"));
}

#[test]
fn s3_2a_no_volume_no_class_assigns_default_class() {
    let c = claim(json!({"spec": {"storageClassName": null}}));
    assert!(
        matches!(step_with_default(&c, vec![], None, Some("gold")), ClaimStep::AssignDefaultClass(d) if d == "gold")
    );
    // An explicit "" is a class choice: no default.
    let c = claim(json!({"spec": {"storageClassName": ""}}));
    assert!(matches!(
        step_with_default(&c, vec![], None, Some("gold")),
        ClaimStep::Pending(Some(_))
    ));
}

#[test]
fn s3_2a_no_class_claim_matches_before_default_is_assigned() {
    let c = claim(json!({"spec": {"storageClassName": null}}));
    let s = step_with_default(
        &c,
        vec![pv(
            "none",
            "1Gi",
            json!({"spec": {"storageClassName": null}}),
        )],
        None,
        Some("gold"),
    );
    assert_eq!(bound_to(&s).as_deref(), Some("none"));
}

#[test]
fn s3_2a_delay_binding_without_selected_node_waits_for_first_consumer() {
    let s = step(
        &claim(json!({})),
        vec![pv("x", "1Gi", json!({}))],
        Some(&class(Some("WaitForFirstConsumer"))),
    );
    assert!(matches!(s, ClaimStep::WaitForConsumer), "{s:?}");
    let n = super::claim::wait_notice(&[]);
    assert_eq!(
        (n.reason, n.message.as_str()),
        (
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding"
        )
    );
    assert!(!n.warning);
}

#[test]
fn s3_2a_delay_binding_with_unscheduled_pods_waits_for_pod_scheduled() {
    let n = super::claim::wait_notice(&["web-0".into()]);
    assert_eq!(
        (n.reason, n.message.as_str()),
        (
            "WaitForPodScheduled",
            "waiting for pod web-0 to be scheduled"
        )
    );
    let n = super::claim::wait_notice(&["a".into(), "b".into()]);
    assert_eq!(n.message, "waiting for pods a,b to be scheduled");
    let pod = |extra: Value| -> k8s_openapi::api::core::v1::Pod {
        let mut v = json!({"metadata": {"name": "web-0", "namespace": "ns"},
            "spec": {"containers": [], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    };
    assert!(super::claim::waits_for_claim(&pod(json!({})), "c"));
    assert!(!super::claim::waits_for_claim(&pod(json!({})), "other"));
    assert!(!super::claim::waits_for_claim(
        &pod(json!({"spec": {"nodeName": "n1"}})),
        "c"
    ));
    assert!(!super::claim::waits_for_claim(
        &pod(json!({"status": {"phase": "Failed"}})),
        "c"
    ));
    let ephemeral = pod(
        json!({"spec": {"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}}),
    );
    assert!(super::claim::waits_for_claim(&ephemeral, "web-0-scratch"));
}

#[test]
fn s3_2a_delay_binding_with_selected_node_provisions() {
    let c = claim(json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}}));
    let s = step(
        &c,
        vec![pv("x", "1Gi", json!({}))],
        Some(&class(Some("WaitForFirstConsumer"))),
    );
    assert!(matches!(s, ClaimStep::Provision { provisioner } if provisioner == DRIVER));
}

#[test]
fn s3_2a_no_volume_with_class_provisions() {
    let s = step(
        &claim(json!({})),
        vec![pv("small", "1Mi", json!({}))],
        Some(&immediate()),
    );
    assert!(matches!(s, ClaimStep::Provision { .. }));
}

#[test]
fn s3_2a_no_volume_with_missing_class_reports_it() {
    match step(&claim(json!({})), vec![], None) {
        ClaimStep::CannotProvision(n) => {
            assert_eq!(n.reason, EVENT_PROVISIONING_FAILED);
            assert_eq!(n.message, "storageclass.storage.k8s.io \"gold\" not found");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_2a_no_volume_in_tree_provisioner_cannot_provision() {
    let local: StorageClass = serde_json::from_value(json!({"metadata": {"name": "gold"},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"}))
    .unwrap();
    match step(&claim(json!({})), vec![], Some(&local)) {
        ClaimStep::CannotProvision(n) => {
            assert_eq!(
                n.message,
                "no volume plugin matched name: kubernetes.io/no-provisioner"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_2a_no_volume_empty_class_failed_binding() {
    let c = claim(json!({"spec": {"storageClassName": ""}}));
    match step(&c, vec![], None) {
        ClaimStep::Pending(Some(n)) => {
            assert_eq!(n.reason, "FailedBinding");
            assert!(!n.warning);
            assert_eq!(
                n.message,
                "no persistent volumes available for this claim and no storage class is set"
            );
        }
        other => panic!("{other:?}"),
    }
}

// §3.2 B: syncUnboundClaim, volumeName set.

fn requesting(v: &str) -> PersistentVolumeClaim {
    claim(json!({"spec": {"volumeName": v}}))
}

#[test]
fn s3_2b_volume_not_in_cache_pending_without_event() {
    assert!(matches!(
        step(&requesting("v"), vec![], Some(&immediate())),
        ClaimStep::Pending(None)
    ));
}

#[test]
fn s3_2b_unclaimed_volume_that_does_not_satisfy_volume_mismatch() {
    let s = step(
        &requesting("v"),
        vec![pv("v", "1Mi", json!({}))],
        Some(&immediate()),
    );
    match s {
        ClaimStep::Pending(Some(n)) => {
            assert_eq!(n.reason, "VolumeMismatch");
            assert!(n.warning);
            assert_eq!(
                n.message,
                "Cannot bind to requested volume \"v\": requested PV is too small"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_2b_unclaimed_volume_that_satisfies_binds() {
    let s = step(
        &requesting("v"),
        vec![pv("v", "1Gi", json!({"status": {"phase": "Released"}}))],
        Some(&immediate()),
    );
    assert_eq!(bound_to(&s).as_deref(), Some("v"));
}

#[test]
fn s3_2b_selector_is_not_checked_for_a_requested_volume() {
    let c = claim(json!({"spec": {"volumeName": "v", "selector": {"matchLabels": {"a": "b"}}}}));
    let s = step(&c, vec![pv("v", "1Gi", json!({}))], Some(&immediate()));
    assert_eq!(bound_to(&s).as_deref(), Some("v"));
}

#[test]
fn s3_2b_prebound_to_this_claim_binds_without_checks() {
    let s = step(
        &requesting("v"),
        vec![pv("v", "1Mi", claimed_by("c", ""))],
        Some(&immediate()),
    );
    assert_eq!(bound_to(&s).as_deref(), Some("v"));
    let s = step(
        &requesting("v"),
        vec![pv("v", "1Mi", claimed_by("c", UID))],
        Some(&immediate()),
    );
    assert_eq!(bound_to(&s).as_deref(), Some("v"));
}

#[test]
fn s3_2b_bound_to_another_claim_failed_binding() {
    let s = step(
        &requesting("v"),
        vec![pv("v", "1Gi", claimed_by("other", "u-2"))],
        Some(&immediate()),
    );
    match s {
        ClaimStep::Pending(Some(n)) => {
            assert_eq!(n.reason, "FailedBinding");
            assert!(n.warning);
            assert_eq!(
                n.message,
                "volume \"v\" already bound to a different claim."
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_2b_bound_to_another_claim_with_bound_by_controller_is_an_error() {
    let c = claim(
        json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}, "spec": {"volumeName": "v"}}),
    );
    match step(
        &c,
        vec![pv("v", "1Gi", claimed_by("other", "u-2"))],
        Some(&immediate()),
    ) {
        ClaimStep::Refuse(n, e) => {
            assert_eq!(n.reason, "FailedBinding");
            assert_eq!(
                e,
                "invalid binding of claim \"ns/c\" to volume \"v\": volume already claimed by \"ns/other\""
            );
        }
        other => panic!("{other:?}"),
    }
}

// §3.3 syncBoundClaim.

fn bound_claim(volume: Option<&str>) -> PersistentVolumeClaim {
    claim(
        json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}},
        "spec": {"volumeName": volume}, "status": {"phase": "Bound"}}),
    )
}

#[test]
fn s3_3_no_volume_name_claim_lost() {
    match step(&bound_claim(None), vec![], Some(&immediate())) {
        ClaimStep::Lost(n) => {
            assert_eq!(n.reason, "ClaimLost");
            assert_eq!(
                n.message,
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_3_volume_missing_claim_lost() {
    match step(&bound_claim(Some("v")), vec![], Some(&immediate())) {
        ClaimStep::Lost(n) => assert_eq!(
            n.message,
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_3_volume_without_claimref_is_bound_again_without_checks() {
    let s = step(
        &bound_claim(Some("v")),
        vec![pv("v", "1Mi", json!({"spec": {"storageClassName": "x"}}))],
        Some(&immediate()),
    );
    assert_eq!(bound_to(&s).as_deref(), Some("v"));
}

#[test]
fn s3_3_volume_bound_to_this_uid_binds() {
    let s = step(
        &bound_claim(Some("v")),
        vec![pv("v", "1Gi", claimed_by("c", UID))],
        Some(&immediate()),
    );
    assert_eq!(bound_to(&s).as_deref(), Some("v"));
}

#[test]
fn s3_3_volume_bound_elsewhere_claim_misbound() {
    for r in [claimed_by("other", "u-2"), claimed_by("c", "")] {
        match step(
            &bound_claim(Some("v")),
            vec![pv("v", "1Gi", r)],
            Some(&immediate()),
        ) {
            ClaimStep::Lost(n) => {
                assert_eq!(n.reason, "ClaimMisbound");
                assert_eq!(
                    n.message,
                    "Two claims are bound to the same volume, this one is bound incorrectly"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

// §3.4 and §3.5: status writers and the bind sequence.

#[test]
fn s3_5_bind_unbound_volume_sets_claimref_and_bound_by_controller() {
    let p = bind::volume_spec(&pv("v", "1Gi", json!({})), &claim(json!({}))).unwrap();
    assert_eq!(p["spec"]["claimRef"]["uid"], UID);
    assert_eq!(p["spec"]["claimRef"]["kind"], "PersistentVolumeClaim");
    assert_eq!(p["metadata"]["annotations"][ANN_BOUND_BY_CONTROLLER], "yes");
    assert_eq!(p["metadata"]["resourceVersion"], "10");
}

#[test]
fn s3_5_bind_prebound_volume_adds_uid_without_bound_by_controller() {
    let p = bind::volume_spec(&pv("v", "1Gi", claimed_by("c", "")), &claim(json!({}))).unwrap();
    assert_eq!(p["spec"]["claimRef"]["uid"], UID);
    assert!(p["metadata"].get("annotations").is_none());
    assert!(bind::volume_spec(&pv("v", "1Gi", claimed_by("c", UID)), &claim(json!({}))).is_none());
}

#[test]
fn s3_5_bind_volume_phase_skipped_when_bound() {
    assert!(
        bind::volume_phase(
            &pv("v", "1Gi", json!({"status": {"phase": "Bound"}})),
            PHASE_BOUND,
            None
        )
        .is_none()
    );
    assert_eq!(
        bind::volume_phase(&pv("v", "1Gi", json!({})), PHASE_BOUND, None).unwrap()["status"]["phase"],
        "Bound"
    );
}

#[test]
fn s3_5_bind_claim_picked_by_controller_gets_both_annotations() {
    let p = bind::claim_spec(&claim(json!({})), &pv("v", "1Gi", json!({}))).unwrap();
    assert_eq!(p["spec"]["volumeName"], "v");
    assert_eq!(p["metadata"]["annotations"][ANN_BOUND_BY_CONTROLLER], "yes");
    assert_eq!(p["metadata"]["annotations"][ANN_BIND_COMPLETED], "yes");
}

#[test]
fn s3_5_bind_claim_prebound_by_user_gets_only_bind_completed() {
    let p = bind::claim_spec(&requesting("v"), &pv("v", "1Gi", json!({}))).unwrap();
    assert!(p.get("spec").is_none());
    assert!(
        p["metadata"]["annotations"]
            .get(ANN_BOUND_BY_CONTROLLER)
            .is_none()
    );
    assert_eq!(p["metadata"]["annotations"][ANN_BIND_COMPLETED], "yes");
    let done = claim(
        json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "v"}}),
    );
    assert!(bind::claim_spec(&done, &pv("v", "1Gi", json!({}))).is_none());
}

#[test]
fn s3_5_bind_claim_drops_our_provisioning_intent() {
    let c = claim(
        json!({"metadata": {"finalizers": [FINALIZER_PROVISIONING, "kubernetes.io/pvc-protection"],
        "annotations": {ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "v"}}),
    );
    let p = bind::claim_spec(&c, &pv("v", "1Gi", json!({}))).unwrap();
    assert_eq!(
        p["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"])
    );
}

#[test]
fn s3_4_claim_status_on_binding_copies_modes_and_capacity() {
    let p = bind::claim_status_bound(&claim(json!({})), &pv("v", "2Gi", json!({}))).unwrap();
    assert_eq!(p["status"]["phase"], "Bound");
    assert_eq!(p["status"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(p["status"]["capacity"]["storage"], "2Gi");
}

#[test]
fn s3_4_claim_status_on_binding_takes_the_volumes_attributes_class() {
    let with_vac = pv(
        "v",
        "2Gi",
        json!({"spec": {"volumeAttributesClassName": "gold"}}),
    );
    let table = [
        (
            "PV with a class",
            claim(json!({})),
            &with_vac,
            json!("gold"),
        ),
        (
            "PV without a class",
            claim(json!({})),
            &pv("v", "2Gi", json!({})),
            Value::Null,
        ),
    ];
    for (case, c, v, want) in table {
        let p = bind::claim_status_bound(&c, v).unwrap();
        assert_eq!(
            p["status"]["currentVolumeAttributesClassName"], want,
            "{case}"
        );
    }
    // Pending again: the current class goes with the volume.
    let bound =
        claim(json!({"status": {"phase": "Pending", "currentVolumeAttributesClassName": "gold"}}));
    let p = bind::claim_status_unbound(&bound, PHASE_PENDING).unwrap();
    assert_eq!(p["status"]["currentVolumeAttributesClassName"], Value::Null);
    assert!(
        p["status"]
            .as_object()
            .unwrap()
            .contains_key("currentVolumeAttributesClassName")
    );
}

#[test]
fn s3_4_claim_status_uses_pre_resize_capacity() {
    let v = pv(
        "v",
        "4Gi",
        json!({"metadata": {"annotations": {"volume.alpha.kubernetes.io/pre-resize-capacity": "2Gi"}}}),
    );
    let p = bind::claim_status_bound(&claim(json!({})), &v).unwrap();
    assert_eq!(p["status"]["capacity"]["storage"], "2Gi");
}

#[test]
fn s3_4_claim_status_capacity_kept_when_phase_does_not_change() {
    let c = claim(
        json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}}),
    );
    assert!(bind::claim_status_bound(&c, &pv("v", "2Gi", json!({}))).is_none());
}

#[test]
fn s3_4_claim_status_pending_clears_modes_and_capacity() {
    assert!(bind::claim_status_unbound(&claim(json!({})), PHASE_PENDING).is_none());
    let c = claim(json!({"status": {"phase": "Pending", "capacity": {"storage": "1Gi"}}}));
    let p = bind::claim_status_unbound(&c, PHASE_PENDING).unwrap();
    assert_eq!(p["status"]["capacity"], Value::Null);
}

// §3.6 unbindVolume.

#[test]
fn s3_6_unbind_controller_bound_volume_drops_claimref_and_annotation() {
    let v = pv(
        "v",
        "1Gi",
        json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}, "spec": {"claimRef": {"name": "c", "namespace": "ns", "uid": UID}}}),
    );
    let p = bind::unbind(&v).unwrap();
    assert_eq!(p["spec"]["claimRef"], Value::Null);
    assert_eq!(
        p["metadata"]["annotations"][ANN_BOUND_BY_CONTROLLER],
        Value::Null
    );
}

#[test]
fn s3_6_unbind_user_prebound_volume_keeps_the_name() {
    let p = bind::unbind(&pv("v", "1Gi", claimed_by("c", UID))).unwrap();
    assert_eq!(p["spec"]["claimRef"], json!({"uid": null}));
    assert!(bind::unbind(&pv("v", "1Gi", claimed_by("c", ""))).is_none());
}

// §3.7 syncVolume.

fn vstep(v: &PersistentVolume, c: ClaimLookup<'_>) -> VolumeStep {
    decide_volume(v, c, DRIVER)
}

fn bound_pv(extra: Value) -> PersistentVolume {
    let mut base = json!({"spec": {"claimRef": {"name": "c", "namespace": "ns", "uid": UID}}, "status": {"phase": "Bound"}});
    merge(&mut base, extra);
    pv("v", "1Gi", base)
}

#[test]
fn s3_7_row1_no_claimref_available() {
    assert_eq!(
        vstep(
            &pv("v", "1Gi", json!({"status": {"phase": "Pending"}})),
            ClaimLookup::Store(None)
        ),
        VolumeStep::Phase(VolumePhase::Available)
    );
    assert_eq!(
        vstep(&pv("v", "1Gi", json!({})), ClaimLookup::Store(None)),
        VolumeStep::None
    );
}

#[test]
fn s3_7_row2_prebound_by_name_available() {
    let v = pv(
        "v",
        "1Gi",
        json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}, "status": {"phase": "Pending"}}),
    );
    assert_eq!(
        vstep(&v, ClaimLookup::Store(None)),
        VolumeStep::Phase(VolumePhase::Available)
    );
}

#[test]
fn s3_7_row3_claim_missing_from_store_is_checked_live() {
    assert_eq!(
        vstep(&bound_pv(json!({})), ClaimLookup::Store(None)),
        VolumeStep::CheckClaim
    );
}

#[test]
fn s3_7_row3_released_volume_is_not_checked_again() {
    let v = bound_pv(json!({"status": {"phase": "Released"}}));
    assert_eq!(vstep(&v, ClaimLookup::Store(None)), VolumeStep::None);
}

#[test]
fn s3_7_row4_other_uid_in_store_is_checked_live() {
    let other = claim(json!({"metadata": {"uid": "new-uid"}}));
    assert_eq!(
        vstep(&bound_pv(json!({})), ClaimLookup::Store(Some(&other))),
        VolumeStep::CheckClaim
    );
    assert_eq!(
        vstep(&bound_pv(json!({})), ClaimLookup::Live(Some(&other))),
        VolumeStep::Release
    );
}

#[test]
fn s3_7_row5_claim_gone_released_then_reclaimed() {
    assert_eq!(
        vstep(&bound_pv(json!({})), ClaimLookup::Live(None)),
        VolumeStep::Release
    );
    let ours = bound_pv(
        json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}, "persistentVolumeReclaimPolicy": "Delete"},
        "metadata": {"finalizers": [FINALIZER_VOLUME]}, "status": {"phase": "Released"}}),
    );
    assert_eq!(
        vstep(&ours, ClaimLookup::Store(None)),
        VolumeStep::Reclaim(Reclaim::Delete)
    );
    // Being deleted with our finalizer still on: our deletion is unfinished, go on.
    let mut deleting = ours.clone();
    deleting.metadata.deletion_timestamp =
        serde_json::from_value(json!("2026-01-01T00:00:00Z")).ok();
    assert_eq!(
        vstep(&deleting, ClaimLookup::Store(None)),
        VolumeStep::Reclaim(Reclaim::Delete)
    );
    // Our finalizer gone: only pv-protection holds it; nothing more to do.
    deleting.metadata.finalizers = Some(vec!["kubernetes.io/pv-protection".into()]);
    assert_eq!(vstep(&deleting, ClaimLookup::Store(None)), VolumeStep::None);
}

#[test]
fn s3_7_row6_claim_not_bound_yet_queues_claim() {
    let c = claim(json!({}));
    assert_eq!(
        vstep(&bound_pv(json!({})), ClaimLookup::Store(Some(&c))),
        VolumeStep::QueueClaim
    );
}

#[test]
fn s3_7_row6_volume_mode_mismatch_events() {
    let c = claim(json!({"spec": {"volumeMode": "Block"}}));
    assert_eq!(
        vstep(&bound_pv(json!({})), ClaimLookup::Store(Some(&c))),
        VolumeStep::ModeMismatch
    );
    let (on_pv, on_claim) = super::volume::mode_mismatch_notices(&bound_pv(json!({})), "c");
    assert_eq!(
        on_pv.message,
        "Cannot bind PersistentVolume to requested PersistentVolumeClaim \"c\" due to incompatible volumeMode."
    );
    assert_eq!(
        on_claim.message,
        "Cannot bind PersistentVolume \"v\" to requested PersistentVolumeClaim due to incompatible volumeMode."
    );
}

#[test]
fn s3_7_row7_claim_bound_here_volume_bound() {
    let c = requesting("v");
    assert_eq!(
        vstep(
            &bound_pv(json!({"status": {"phase": "Available"}})),
            ClaimLookup::Store(Some(&c))
        ),
        VolumeStep::Phase(VolumePhase::Bound)
    );
    assert_eq!(
        vstep(&bound_pv(json!({})), ClaimLookup::Store(Some(&c))),
        VolumeStep::None
    );
}

#[test]
fn s3_7_row8_provisioned_delete_volume_of_claim_bound_elsewhere_released() {
    let c = requesting("other");
    let v = bound_pv(
        json!({"metadata": {"annotations": {ANN_PROVISIONED_BY: DRIVER}}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    );
    assert_eq!(vstep(&v, ClaimLookup::Store(Some(&c))), VolumeStep::Release);
}

#[test]
fn s3_7_row9_controller_bound_volume_of_claim_bound_elsewhere_unbound() {
    let c = requesting("other");
    let v = bound_pv(json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}}));
    assert_eq!(vstep(&v, ClaimLookup::Store(Some(&c))), VolumeStep::Unbind);
    assert_eq!(bind::unbind(&v).unwrap()["spec"]["claimRef"], Value::Null);
}

#[test]
fn s3_7_row10_user_prebound_volume_of_claim_bound_elsewhere_unbound_by_uid() {
    let c = requesting("other");
    let v = bound_pv(json!({}));
    assert_eq!(vstep(&v, ClaimLookup::Store(Some(&c))), VolumeStep::Unbind);
    assert_eq!(
        bind::unbind(&v).unwrap()["spec"]["claimRef"],
        json!({"uid": null})
    );
}

// §3.8 reclaim.

#[test]
fn s3_8_reclaim_by_policy() {
    let released = |policy: &str, csi: bool| {
        let mut extra = json!({"spec": {"persistentVolumeReclaimPolicy": policy}, "status": {"phase": "Released"}});
        if csi {
            merge(
                &mut extra,
                json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}}}),
            );
        }
        bound_pv(extra)
    };
    assert_eq!(
        super::volume::reclaim(&released("Retain", true), DRIVER),
        Reclaim::Keep
    );
    assert_eq!(
        super::volume::reclaim(&released("Delete", true), DRIVER),
        Reclaim::Delete
    );
    // Another driver's or an in-tree PV: its provisioner deletes it, if it names one; else
    // nothing can, and it fails as upstream's does.
    let mut theirs = released("Delete", false);
    theirs.metadata.annotations = Some(
        [(ANN_PROVISIONED_BY.to_string(), "other.csi".to_string())]
            .into_iter()
            .collect(),
    );
    assert_eq!(super::volume::reclaim(&theirs, DRIVER), Reclaim::External);
    // Another driver's CSI PV without the annotation: left Released, as kube-controller-
    // manager leaves every CSI PV to an external deleter (its differential test shows it).
    let mut other_csi = released("Delete", false);
    merge_pv(
        &mut other_csi,
        json!({"spec": {"csi": {"driver": "other.csi", "volumeHandle": "h"}}}),
    );
    assert_eq!(
        super::volume::reclaim(&other_csi, DRIVER),
        Reclaim::External
    );
    match super::volume::reclaim(&released("Delete", false), DRIVER) {
        Reclaim::Fail(n) => {
            assert_eq!(n.reason, "VolumeFailedDelete");
            assert_eq!(
                n.message,
                "error getting deleter volume plugin for volume \"v\": no deletable volume plugin matched"
            );
        }
        other => panic!("{other:?}"),
    }
    match super::volume::reclaim(&released("Recycle", true), DRIVER) {
        Reclaim::Fail(n) => assert_eq!(n.message, "No recycler plugin found for the volume!"),
        other => panic!("{other:?}"),
    }
    match super::volume::reclaim(&released("Sometimes", false), DRIVER) {
        Reclaim::Fail(n) => {
            assert_eq!(n.reason, "VolumeUnknownReclaimPolicy");
            assert_eq!(
                n.message,
                "Volume has unrecognized PersistentVolumeReclaimPolicy"
            );
        }
        other => panic!("{other:?}"),
    }
    // A released PV with an unknown policy is failed once; Failed stays Failed.
    let v = released("Sometimes", false);
    assert!(matches!(
        vstep(&v, ClaimLookup::Live(None)),
        VolumeStep::Reclaim(Reclaim::Fail(_))
    ));
    let failed = bound_pv(
        json!({"spec": {"persistentVolumeReclaimPolicy": "Sometimes"}, "status": {"phase": "Failed"}}),
    );
    assert_eq!(vstep(&failed, ClaimLookup::Live(None)), VolumeStep::None);
    // Retain: nothing, ever.
    assert_eq!(
        vstep(&released("Retain", true), ClaimLookup::Live(None)),
        VolumeStep::None
    );
}

#[test]
fn s3_8_migrated_volume_is_left_to_the_external_provisioner() {
    let v = bound_pv(
        json!({"metadata": {"annotations": {"pv.kubernetes.io/migrated-to": "x"}}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    );
    assert_eq!(super::volume::reclaim(&v, DRIVER), Reclaim::External);
}

#[test]
fn finalizer_upkeep_on_our_volumes() {
    let ours = json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}, "persistentVolumeReclaimPolicy": "Delete"}});
    let c = requesting("v");
    assert_eq!(
        vstep(&bound_pv(ours.clone()), ClaimLookup::Store(Some(&c))),
        VolumeStep::AddFinalizer
    );
    let mut retain = ours.clone();
    merge(
        &mut retain,
        json!({"metadata": {"finalizers": [FINALIZER_VOLUME]}, "spec": {"persistentVolumeReclaimPolicy": "Retain"}}),
    );
    assert_eq!(
        vstep(&bound_pv(retain), ClaimLookup::Store(Some(&c))),
        VolumeStep::RemoveFinalizer
    );
    // Not our driver: no finalizer upkeep.
    let theirs = json!({"spec": {"csi": {"driver": "other", "volumeHandle": "h"}, "persistentVolumeReclaimPolicy": "Delete"}});
    assert_eq!(
        vstep(&bound_pv(theirs), ClaimLookup::Store(Some(&c))),
        VolumeStep::None
    );
}

#[test]
fn beside_the_cluster_binder_only_finalizers_and_deletion_stay_ours() {
    use crate::binder::volume::beside_cluster_binder;
    let ours = json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}, "persistentVolumeReclaimPolicy": "Delete"}});
    let c = requesting("v");
    let mut released = ours.clone();
    merge(
        &mut released,
        json!({"metadata": {"finalizers": [FINALIZER_VOLUME], "annotations": {ANN_PROVISIONED_BY: DRIVER}}, "status": {"phase": "Released"}}),
    );
    let released = bound_pv(released);
    let mut static_released = released.clone();
    static_released.metadata.annotations = None;
    let fail = VolumeStep::Reclaim(Reclaim::Fail(crate::binder::claim::Notice {
        warning: true,
        reason: "VolumeFailedRecycle",
        message: String::new(),
    }));
    let table = [
        (
            "no claimRef: the binder makes it Available",
            pv("v", "1Gi", json!({"status": {"phase": "Pending"}})),
            ClaimLookup::Store(None),
            None,
            VolumeStep::None,
        ),
        (
            "claim gone, not Released yet: the binder releases",
            bound_pv(ours.clone()),
            ClaimLookup::Live(None),
            None,
            VolumeStep::None,
        ),
        (
            "claim missing from the store, PV not Released: nothing to read yet",
            bound_pv(ours.clone()),
            ClaimLookup::Store(None),
            None,
            VolumeStep::None,
        ),
        (
            "Released by the binder, provisioned by the driver: delete",
            released.clone(),
            ClaimLookup::Store(None),
            None,
            VolumeStep::Reclaim(Reclaim::Delete),
        ),
        (
            "Released, not provisioned by the driver: not ours to delete",
            static_released,
            ClaimLookup::Store(None),
            None,
            VolumeStep::None,
        ),
        (
            "our finalizer on a bound Delete PV",
            bound_pv(ours.clone()),
            ClaimLookup::Store(Some(&c)),
            None,
            VolumeStep::AddFinalizer,
        ),
        (
            "claim bound elsewhere: the binder unbinds",
            bound_pv(json!({})),
            ClaimLookup::Store(Some(&requesting("other"))),
            None,
            VolumeStep::None,
        ),
        (
            "Recycle: the binder fails it",
            released,
            ClaimLookup::Store(None),
            Some(fail),
            VolumeStep::None,
        ),
    ];
    for (case, volume, lookup, step, want) in table {
        let step = step.unwrap_or_else(|| vstep(&volume, lookup));
        assert_eq!(beside_cluster_binder(&volume, DRIVER, step), want, "{case}");
    }
}

// Default class and scope.

#[test]
fn default_class_is_newest_then_by_name() {
    let sc = |name: &str, created: &str, default: bool| -> StorageClass {
        serde_json::from_value(json!({"metadata": {"name": name, "creationTimestamp": created,
            "annotations": {"storageclass.kubernetes.io/is-default-class": if default {"true"} else {"false"}}},
            "provisioner": "p"}))
        .unwrap()
    };
    let classes = [
        sc("a", "2026-01-01T00:00:00Z", true),
        sc("b", "2026-02-01T00:00:00Z", true),
        sc("c", "2026-03-01T00:00:00Z", false),
        sc("bb", "2026-02-01T00:00:00Z", true),
    ];
    assert_eq!(
        default_class(classes.iter()).and_then(|c| c.metadata.name.as_deref()),
        Some("b")
    );
    assert!(default_class(classes[2..3].iter()).is_none());
}

#[test]
fn scope_by_default_and_bind_all() {
    let scope = super::Scope {
        driver: DRIVER.into(),
        binder: super::Binder::External,
    };
    let ours = class(Some("Immediate"));
    let theirs: StorageClass =
        serde_json::from_value(json!({"metadata": {"name": "gold"}, "provisioner": "x"})).unwrap();
    let c = claim(json!({}));
    assert!(scope.has_claim(&c, Some(&ours), None));
    assert!(!scope.has_claim(&c, Some(&theirs), None));
    let our_pv = pv(
        "v",
        "1Gi",
        json!({"spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}}}),
    );
    assert!(scope.has_claim(&requesting("v"), Some(&theirs), Some(&our_pv)));
    assert!(scope.has_volume(&our_pv));
    assert!(!scope.has_volume(&pv("hostpath", "1Gi", json!({}))));
    let all = super::Scope {
        driver: DRIVER.into(),
        binder: super::Binder::All,
    };
    assert!(all.has_claim(&c, Some(&theirs), None));
    assert!(all.has_volume(&pv("hostpath", "1Gi", json!({}))));
}

#[test]
fn explain_names_the_choice_and_every_rejection() {
    let volumes = index(vec![
        pv("chosen", "2Gi", json!({})),
        pv("larger", "5Gi", json!({})),
        pv("small", "100Mi", json!({})),
        pv(
            "silver",
            "2Gi",
            json!({"spec": {"storageClassName": "silver"}}),
        ),
        pv("taken", "2Gi", claimed_by("other", "u")),
    ]);
    let c = immediate();
    let text = super::explain::explain(
        &claim(json!({})),
        &ClaimView {
            class: Some(&c),
            default_class: None,
            volumes: &volumes,
        },
    );
    assert!(
        text.contains("decision: bind to PersistentVolume chosen"),
        "{text}"
    );
    assert!(text.contains("chosen: chosen"), "{text}");
    assert!(text.contains("larger: fits, but"), "{text}");
    assert!(
        text.contains("small: rejected: too small: 104857600 bytes, the claim asks for 1073741824"),
        "{text}"
    );
    assert!(
        text.contains("silver: rejected: storage class \"silver\", the claim asks for \"gold\""),
        "{text}"
    );
    assert!(
        text.contains("taken: rejected: already claimed by ns/other"),
        "{text}"
    );
}

#[test]
fn an_attached_volume_names_its_node() {
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    let attachment = |pv: Option<&str>, node: &str| -> VolumeAttachment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("va-{node}")},
            "spec": {"attacher": "d", "nodeName": node,
                     "source": {"persistentVolumeName": pv}},
        }))
        .unwrap()
    };
    let all = [
        attachment(Some("pv-a"), "node-1"),
        attachment(None, "node-2"),
        attachment(Some("pv-b"), "node-3"),
    ];
    assert_eq!(super::volume::attached_to("pv-a", &all), Some("node-1"));
    assert_eq!(super::volume::attached_to("pv-b", &all), Some("node-3"));
    assert_eq!(super::volume::attached_to("pv-c", &all), None);
    assert_eq!(super::volume::attached_to("pv-a", []), None);
}
