//! §3.2 and §3.3: syncUnboundClaim and syncBoundClaim.

use super::*;

// §3.2 A: syncUnboundClaim, no volumeName.

#[test]
fn s3_2a_binding_mode_unset_fails() {
    assert!(matches!(step(&claim(json!({})), vec![], Some(&class(None))), ClaimStep::Fail(_)));
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
    let one_gi = vec![pv("x", "1Gi", json!({}))];
    let s = step(&claim(json!({})), one_gi, Some(&immediate()));
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
        vec![pv("none", "1Gi", json!({"spec": {"storageClassName": null}}))],
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
    let n = crate::binder::claim::wait_notice(&[]);
    assert_eq!(
        (n.reason.as_str(), n.message.as_str()),
        ("WaitForFirstConsumer", "waiting for first consumer to be created before binding")
    );
    assert!(!n.warning);
}

#[test]
fn s3_2a_delay_binding_with_unscheduled_pods_waits_for_pod_scheduled() {
    let n = crate::binder::claim::wait_notice(&["web-0".into()]);
    assert_eq!(
        (n.reason.as_str(), n.message.as_str()),
        ("WaitForPodScheduled", "waiting for pod web-0 to be scheduled")
    );
    let n = crate::binder::claim::wait_notice(&["a".into(), "b".into()]);
    assert_eq!(n.message, "waiting for pods a,b to be scheduled");
    let pod = |extra: Value| -> k8s_openapi::api::core::v1::Pod {
        crate::fixtures::object(
            json!({"metadata": {"name": "web-0", "namespace": "ns"},
                "spec": {"containers": [], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]}}),
            extra,
        )
    };
    assert!(crate::binder::claim::waits_for_claim(&pod(json!({})), "c"));
    assert!(!crate::binder::claim::waits_for_claim(&pod(json!({})), "other"));
    assert!(!crate::binder::claim::waits_for_claim(&pod(json!({"spec": {"nodeName": "n1"}})), "c"));
    assert!(!crate::binder::claim::waits_for_claim(
        &pod(json!({"status": {"phase": "Failed"}})),
        "c"
    ));
    let ephemeral = pod(
        json!({"spec": {"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}}),
    );
    assert!(crate::binder::claim::waits_for_claim(&ephemeral, "web-0-scratch"));
}

#[test]
fn s3_2a_delay_binding_with_selected_node_provisions() {
    let c = claim(json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}}));
    let s = step(&c, vec![pv("x", "1Gi", json!({}))], Some(&class(Some("WaitForFirstConsumer"))));
    assert!(matches!(s, ClaimStep::Provision { provisioner } if provisioner == DRIVER));
}

#[test]
fn s3_2a_no_volume_with_class_provisions() {
    let s = step(&claim(json!({})), vec![pv("small", "1Mi", json!({}))], Some(&immediate()));
    assert!(matches!(s, ClaimStep::Provision { .. }));
}

#[test]
fn s3_2a_no_volume_with_missing_class_reports_it() {
    match step(&claim(json!({})), vec![], None) {
        ClaimStep::CannotProvision(n) => assert_notice(
            &n,
            "ProvisioningFailed",
            "storageclass.storage.k8s.io \"gold\" not found",
        ),
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
            assert_eq!(n.message, "no volume plugin matched name: kubernetes.io/no-provisioner");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn s3_2a_no_volume_empty_class_failed_binding() {
    let c = claim(json!({"spec": {"storageClassName": ""}}));
    assert_pending(
        step(&c, vec![], None),
        "FailedBinding",
        false,
        "no persistent volumes available for this claim and no storage class is set",
    );
}

// §3.2 B: syncUnboundClaim, volumeName set.

#[test]
fn s3_2b_volume_not_in_cache_pending_without_event() {
    assert!(matches!(step(&requesting("v"), vec![], Some(&immediate())), ClaimStep::Pending(None)));
}

#[test]
fn s3_2b_unclaimed_volume_that_does_not_satisfy_volume_mismatch() {
    let s = step(&requesting("v"), vec![pv("v", "1Mi", json!({}))], Some(&immediate()));
    assert_pending(
        s,
        "VolumeMismatch",
        true,
        "Cannot bind to requested volume \"v\": requested PV is too small",
    );
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
    // Pre-bound by name only, or with this claim's UID; 1Mi is smaller than the request.
    for uid in ["", UID] {
        let pvs = vec![pv("v", "1Mi", claimed_by("c", uid))];
        let s = step(&requesting("v"), pvs, Some(&immediate()));
        assert_eq!(bound_to(&s).as_deref(), Some("v"), "{uid:?}");
    }
}

#[test]
fn s3_2b_bound_to_another_claim_failed_binding() {
    let s = step(
        &requesting("v"),
        vec![pv("v", "1Gi", claimed_by("other", "u-2"))],
        Some(&immediate()),
    );
    assert_pending(s, "FailedBinding", true, "volume \"v\" already bound to a different claim.");
}

#[test]
fn s3_2b_bound_to_another_claim_with_bound_by_controller_is_an_error() {
    let c = claim(
        json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}, "spec": {"volumeName": "v"}}),
    );
    match step(&c, vec![pv("v", "1Gi", claimed_by("other", "u-2"))], Some(&immediate())) {
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
    claim(json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}},
        "spec": {"volumeName": volume}, "status": {"phase": "Bound"}}))
}

#[test]
fn s3_3_no_volume_name_claim_lost() {
    match step(&bound_claim(None), vec![], Some(&immediate())) {
        ClaimStep::Lost(n) => assert_notice(
            &n,
            "ClaimLost",
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
        ),
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
        match step(&bound_claim(Some("v")), vec![pv("v", "1Gi", r)], Some(&immediate())) {
            ClaimStep::Lost(n) => assert_notice(
                &n,
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            ),
            other => panic!("{other:?}"),
        }
    }
}
