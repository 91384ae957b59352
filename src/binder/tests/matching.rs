//! §2: the access-mode index, FindMatchingVolume and checkVolumeSatisfyClaim.

use super::*;

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
            g("nfs", json!(["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"])),
        ]
    };
    let ask = |m: Value| claim(json!({"spec": {"accessModes": m}}));
    assert_eq!(best(&ask(json!(["ReadWriteOnce"])), pvs()).as_deref(), Some("ebs"));
    assert_eq!(best(&ask(json!(["ReadWriteOnce", "ReadOnlyMany"])), pvs()).as_deref(), Some("gce"));
    assert_eq!(
        best(&ask(json!(["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"])), pvs()).as_deref(),
        Some("nfs")
    );
    assert_eq!(best(&ask(json!(["ReadWriteMany"])), pvs()).as_deref(), Some("nfs"));
    assert_eq!(best(&ask(json!(["ReadOnlyMany"])), pvs()).as_deref(), Some("gce"));
    // ebs taken: RWO falls through to the next group.
    let mut taken = pvs();
    taken[1] = g("ebs", json!(["ReadWriteOnce"]));
    merge_pv(&mut taken[1], claimed_by("other", "u-9"));
    assert_eq!(best(&ask(json!(["ReadWriteOnce"])), taken).as_deref(), Some("gce"));
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
    let mut i = index(vec![pv("first", "1Gi", json!({})), pv("second", "1Gi", json!({}))]);
    let other = ("ns".to_string(), "other".to_string());
    let ours = ClaimFacts::of(&claim(json!({}))).unwrap();
    let name = |i: &VolumeIndex| i.best_match(&ours, false).and_then(|p| p.metadata.name.clone());
    type Held<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(&str, Held, Option<&str>)] = &[
        ("nothing reserved: the first", &[], Some("first")),
        ("first held by another claim", &[("first", "other")], Some("second")),
        ("both held by another claim", &[("first", "other"), ("second", "other")], None),
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
        pv("fast", "1Gi", json!({"spec": {"volumeAttributesClassName": "fast"}})),
        pv("plain", "5Gi", json!({})),
    ];
    assert_eq!(best(&claim(json!({})), pvs.clone()).as_deref(), Some("plain"));
    let c = claim(json!({"spec": {"volumeAttributesClassName": "fast"}}));
    assert_eq!(best(&c, pvs).as_deref(), Some("fast"));
}

#[test]
fn s2_2_deleting_volume_is_skipped() {
    let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
    assert_eq!(best(&claim(json!({})), vec![pv("x", "1Gi", deleting)]), None);
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
    let silver_mine = json!({"spec": {"storageClassName": "silver",
        "claimRef": {"name": "c", "namespace": "ns", "uid": UID}}});
    assert_eq!(best(&c, vec![pv("mine", "1Gi", silver_mine)]).as_deref(), Some("mine"));
}

#[test]
fn s2_2_prebound_still_needs_size() {
    let pvs =
        vec![pv("mine", "100Mi", json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}}))];
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
        pv("labelled", "5Gi", json!({"metadata": {"labels": {"tier": "gold"}}})),
    ];
    assert_eq!(best(&c, pvs).as_deref(), Some("labelled"));
}

#[test]
fn s2_2_class_must_match_beta_annotation_first() {
    let c = claim(json!({"metadata": {"annotations": {ANN_BETA_STORAGE_CLASS: "silver"}}}));
    let pvs = vec![
        pv("gold", "1Gi", json!({})),
        pv("silver", "5Gi", json!({"spec": {"storageClassName": "silver"}})),
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
    assert_eq!(best(&c, vec![pv("x", "1Mi", json!({}))]).as_deref(), Some("x"));
}

#[test]
fn s2_2_delay_binding_returns_only_prebound() {
    let c = claim(json!({}));
    let facts = ClaimFacts::of(&c).unwrap();
    let i = index(vec![pv("free", "1Gi", json!({}))]);
    assert!(i.best_match(&facts, true).is_none());
    let i = index(vec![pv("free", "1Gi", json!({})), pv("picked", "2Gi", claimed_by("c", UID))]);
    assert_eq!(
        i.best_match(&facts, true).and_then(|p| p.metadata.name.clone()).as_deref(),
        Some("picked")
    );
}

#[test]
fn s2_2_is_delay_binding_mode() {
    let c = claim(json!({}));
    assert_eq!(delay_binding(&c, Some(&class(Some("WaitForFirstConsumer")))), Ok(true));
    assert_eq!(delay_binding(&c, Some(&immediate())), Ok(false));
    assert_eq!(delay_binding(&c, None), Ok(false));
    assert!(delay_binding(&c, Some(&class(None))).is_err());
    let none = claim(json!({"spec": {"storageClassName": ""}}));
    assert_eq!(delay_binding(&none, Some(&class(None))), Ok(false));
}

#[test]
fn s2_2_index_ignores_older_resource_version() {
    let mut i = VolumeIndex::default();
    assert!(i.upsert(&pv("x", "1Gi", json!({"metadata": {"resourceVersion": "2"}}))));
    assert!(i.upsert(&pv("x", "1Gi", json!({"metadata": {"resourceVersion": "2"}}))));
    assert!(i.upsert(&pv("x", "1Gi", json!({"metadata": {"resourceVersion": "10"}}))));
    assert!(!i.upsert(&pv("x", "1Gi", json!({"metadata": {"resourceVersion": "9"}}))));
    // Claimed in the newer version: no longer a candidate, even though an older copy said Available.
    i.upsert(&pv("x", "1Gi", json!({"metadata": {"resourceVersion": "11"}, "spec": {"claimRef": {"name": "o", "namespace": "ns", "uid": "u"}}})));
    let facts = ClaimFacts::of(&claim(json!({}))).unwrap();
    assert!(i.best_match(&facts, false).is_none());
    i.remove("x", None);
    assert!(i.is_empty());
}

/// kubernetes#124224 (fixed in 1.38 by #140691): a write's answer that comes back after its
/// PV's delete event does not bring the PV back; a PV made again under the name does come in.
#[test]
fn s2_2_index_does_not_bring_back_a_deleted_pv() {
    let at = |rv: &str| pv("x", "1Gi", json!({"metadata": {"resourceVersion": rv}}));
    let mut i = VolumeIndex::default();
    assert!(i.upsert(&at("10")));
    // Deleted at 12 (the delete event's version), the watch having skipped 11.
    assert!(i.remove("x", Some(12)).is_some());
    assert!(!i.upsert(&at("11")), "our write's answer, late");
    assert!(!i.upsert(&at("12")), "the deleted copy itself");
    assert!(i.is_empty());
    assert!(i.upsert(&at("20")), "made again");
    assert_eq!(i.len(), 1);
    // Gone from a relist (no delete event): the last version held stands for it.
    assert!(i.remove("x", None).is_some());
    assert!(!i.upsert(&at("20")));
    assert!(i.upsert(&at("21")));
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

/// kubernetes#141618 (fixed in 1.38): sizes past int64 are compared as sizes, not read as
/// 0 or wrapped. A request of 10E does not fit a 1Gi PV, nor an 8Ei one; a 20E PV holds it.
#[test]
fn s2_3_sizes_past_int64_are_compared_exactly() {
    let rows = [
        ("10E", "1Gi", Err("requested PV is too small")),
        ("10E", "8Ei", Err("requested PV is too small")),
        ("10E", "20E", Ok(())),
        ("10E", "10E", Ok(())),
        ("1Gi", "10E", Ok(())),
        ("20E", "10E", Err("requested PV is too small")),
    ];
    for (request, capacity, want) in rows {
        let c = claim(json!({"spec": {"resources": {"requests": {"storage": request}}}}));
        let got = check_volume_satisfies_claim(&pv("v", capacity, json!({})), &c);
        assert_eq!(got, want.map_err(String::from), "{request} on a {capacity} PV");
    }
}

// §5 beside the cluster's binder: may we write the binding of the PV we made?

#[test]
fn s5_the_binder_takes_only_our_pv_when_it_is_the_match_and_alone() {
    let c = claim(json!({}));
    let facts = ClaimFacts::of(&c).unwrap();
    let ours = || pv("pvc-ours", "1Gi", claimed_by("c", UID));
    let takes = |pvs: Vec<PersistentVolume>| index(pvs).takes_only(&facts, "pvc-ours");
    let table: Vec<(&str, Vec<PersistentVolume>, bool)> = vec![
        ("ours alone", vec![ours()], true),
        ("not in the index", vec![], false),
        ("an unrelated Available PV beside", vec![ours(), pv("big", "5Gi", json!({}))], true),
        (
            "another PV pre-bound to the claim by name",
            vec![
                ours(),
                pv("admin", "5Gi", json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}})),
            ],
            false,
        ),
        (
            "another PV pre-bound with the claim's UID",
            vec![ours(), pv("twin", "1Gi", claimed_by("c", UID))],
            false,
        ),
        (
            "an old PV of an earlier claim of that name",
            vec![ours(), pv("old", "1Gi", claimed_by("c", "u-old"))],
            true,
        ),
        (
            "ours too small for the request",
            vec![pv("pvc-ours", "1Mi", claimed_by("c", UID))],
            false,
        ),
        (
            "an Available PV in a group of fewer modes wins over ours",
            vec![
                pv(
                    "pvc-ours",
                    "1Gi",
                    json!({"spec": {"claimRef": {"name": "c", "namespace": "ns", "uid": UID},
                                    "accessModes": ["ReadWriteOnce", "ReadWriteMany"]}}),
                ),
                pv("static", "1Gi", json!({})),
            ],
            false,
        ),
    ];
    for (case, pvs, want) in table {
        assert_eq!(takes(pvs), want, "{case}");
    }
}
