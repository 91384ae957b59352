use super::*;
use crate::fixtures;
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;
use serde_json::json;

/// Claim `team/data` bound to `pv-1` and resizing, asking for class `spec_class` while its
/// volume has `current`; `status` merged into its status.
fn claim(spec_class: Option<&str>, current: Option<&str>, status: Value) -> PersistentVolumeClaim {
    fixtures::pvc("data")
        .namespace("team")
        .uid("u1")
        .version("9")
        .volume("pv-1")
        .phase("Bound")
        .with(json!({
            "spec": {"volumeAttributesClassName": spec_class},
            "status": {"conditions": [{"type": "Resizing", "status": "True"}],
                       "currentVolumeAttributesClassName": current}
        }))
        .with(json!({"status": status}))
        .build()
}

fn pv(driver: &str) -> PersistentVolume {
    fixtures::pv("pv-1").csi(driver, "h-1").build()
}

fn vac(name: &str) -> VolumeAttributesClass {
    serde_json::from_value(json!({
        "metadata": {"name": name}, "driverName": "d.csi", "parameters": {"iops": name}
    }))
    .unwrap()
}

fn in_progress(target: &str, error: Option<&str>) -> Value {
    let mut conditions = vec![
        json!({"type": "Resizing", "status": "True"}),
        json!({"type": MODIFYING, "status": "True"}),
    ];
    if let Some(code) = error {
        conditions.push(json!({"type": MODIFY_ERROR, "status": "True", "reason": code}));
    }
    json!({"modifyVolumeStatus": {"status": ModifyStatus::InProgress.as_str(), "targetVolumeAttributesClassName": target},
           "conditions": conditions})
}

/// The gate's word, or the step's name.
fn name(step: &Gated<ModifyStep>) -> &'static str {
    match step {
        Gated::Go(step) => step.name(),
        Gated::WaitForRetry => "wait-for-retry",
        Gated::ConfirmLive => "confirm-live",
    }
}

/// (step name, target class of a Modify, whether it starts with a status mark)
fn outcome(step: &Gated<ModifyStep>) -> (&'static str, String, bool) {
    let Gated::Go(step) = step else {
        return (name(step), String::new(), false);
    };
    match step {
        ModifyStep::Modify { class, start } => {
            (step.name(), class.metadata.name.clone().unwrap_or_default(), start.is_some())
        }
        ModifyStep::Missing { target, patch } => (step.name(), target.clone(), patch.is_some()),
        ModifyStep::RolledBack { patch } => (step.name(), String::new(), patch.is_some()),
        ModifyStep::None => (step.name(), String::new(), false),
    }
}

#[test]
fn the_modify_controllers_table() {
    let classes = [vac("fast"), vac("faster"), vac("gold")];
    let lookup = |n: &str| classes.iter().find(|c| c.metadata.name.as_deref() == Some(n)).cloned();
    let ours = pv("d.csi");
    let modifying = json!({"conditions": [{"type": MODIFYING, "status": "True"}]});
    let table: Vec<(&str, PersistentVolumeClaim, (&str, &str, bool))> = vec![
        ("settled", claim(Some("gold"), Some("gold"), json!({})), ("none", "", false)),
        ("no class at all", claim(None, None, json!({})), ("none", "", false)),
        (
            "a new class: mark, then call",
            claim(Some("fast"), Some("gold"), json!({})),
            ("modify", "fast", true),
        ),
        (
            "a class that does not exist: Pending",
            claim(Some("nope"), Some("gold"), json!({})),
            ("modify-class-missing", "nope", true),
        ),
        (
            "class taken back, nothing in progress, nothing to clear",
            claim(None, Some("gold"), json!({})),
            ("modify-rolled-back", "", false),
        ),
        (
            "class taken back after a Pending mark",
            claim(None, Some("gold"), modifying.clone()),
            ("modify-rolled-back", "", true),
        ),
        (
            "in progress, the end never seen: the old target again",
            claim(Some("faster"), Some("gold"), in_progress("fast", None)),
            ("modify", "fast", false),
        ),
        (
            "in progress after a timeout: the old target again",
            claim(Some("faster"), Some("gold"), in_progress("fast", Some("DeadlineExceeded"))),
            ("modify", "fast", false),
        ),
        (
            "in progress after a final error: the user's newest class",
            claim(Some("faster"), Some("gold"), in_progress("fast", Some("Internal"))),
            ("modify", "faster", true),
        ),
        (
            "in progress, class emptied: the old target still",
            claim(None, Some("gold"), in_progress("fast", Some("Internal"))),
            ("modify", "fast", false),
        ),
        (
            "infeasible: tried again (the executor's slow backoff spaces it out)",
            claim(
                Some("fast"),
                Some("gold"),
                json!({"modifyVolumeStatus": {"status": ModifyStatus::Infeasible.as_str(), "targetVolumeAttributesClassName": "fast"}}),
            ),
            ("modify", "fast", true),
        ),
    ];
    for (case, c, (name, target, marks)) in table {
        let step =
            decide(&c, &ours, "d.csi", lookup, "2026-01-01T00:00:00Z", no_hold(), ClaimCopy::Live);
        let (got, got_target, got_marks) = outcome(&step);
        assert_eq!((got, got_target.as_str(), got_marks), (name, target, marks), "{case}");
    }
    // Another driver's volume, or a claim not Bound, is not ours to modify.
    let wanting = claim(Some("fast"), Some("gold"), json!({}));
    assert_eq!(
        decide(&wanting, &pv("x.csi"), "d.csi", lookup, "", no_hold(), ClaimCopy::Live),
        Gated::Go(ModifyStep::None)
    );
    let mut pending = wanting.clone();
    pending.status.as_mut().unwrap().phase = Some("Pending".into());
    assert_eq!(
        decide(&pending, &ours, "d.csi", lookup, "", no_hold(), ClaimCopy::Live),
        Gated::Go(ModifyStep::None)
    );
}

#[test]
fn the_patches_say_where_the_change_stands() {
    let classes = [vac("fast")];
    let lookup = |n: &str| classes.iter().find(|c| c.metadata.name.as_deref() == Some(n)).cloned();
    let c = claim(Some("fast"), Some("gold"), json!({}));
    let Gated::Go(ModifyStep::Modify { start: Some(start), .. }) =
        decide(&c, &pv("d.csi"), "d.csi", lookup, "t0", no_hold(), ClaimCopy::Live)
    else {
        panic!("expected a marked modify");
    };
    assert_eq!(start["metadata"]["resourceVersion"], "9");
    assert_eq!(start["status"]["modifyVolumeStatus"]["status"], ModifyStatus::InProgress.as_str());
    assert_eq!(start["status"]["modifyVolumeStatus"]["targetVolumeAttributesClassName"], "fast");
    let types: Vec<&str> = start["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Resizing", MODIFYING], "other conditions are kept");

    let bad = failed(&c, "fast", "InvalidArgument", "no such knob", "t1");
    assert_eq!(bad["status"]["modifyVolumeStatus"]["status"], ModifyStatus::Infeasible.as_str());
    let error = &bad["status"]["conditions"][2];
    assert_eq!(
        (error["type"].as_str(), error["reason"].as_str()),
        (Some(MODIFY_ERROR), Some("InvalidArgument"))
    );
    assert_eq!(error["message"], "no such knob");
    assert!(
        bad["status"]["conditions"][1]["message"]
            .as_str()
            .unwrap()
            .contains("failed. Waiting for retry.")
    );
    let slow = failed(&c, "fast", "DeadlineExceeded", "slow", "t1");
    assert_eq!(slow["status"]["modifyVolumeStatus"]["status"], ModifyStatus::InProgress.as_str());
    assert!(
        slow["status"]["conditions"][1]["message"].as_str().unwrap().contains("still in progress")
    );
    assert!(!is_final("DeadlineExceeded") && is_final("Internal"));

    let after = claim(Some("fast"), Some("gold"), in_progress("fast", Some("Internal")));
    let done = claim_done(&after, "fast");
    assert_eq!(done["status"]["currentVolumeAttributesClassName"], "fast");
    assert!(done["status"]["modifyVolumeStatus"].is_null());
    assert_eq!(done["status"]["conditions"], json!([{"type": "Resizing", "status": "True"}]));
    assert_eq!(volume_done("fast"), json!({"spec": {"volumeAttributesClassName": "fast"}}));
}

#[test]
fn the_request_carries_the_class_parameters() {
    let c = claim(Some("fast"), None, json!({}));
    let plain = request(&c, &pv("d.csi"), &vac("fast"), false);
    assert_eq!(plain.volume_id, "h-1");
    assert_eq!(plain.mutable_parameters, HashMap::from([("iops".into(), "fast".into())]));
    let extra = request(&c, &pv("d.csi"), &vac("fast"), true);
    assert_eq!(extra.mutable_parameters["csi.storage.k8s.io/pvc/name"], "data");
    assert_eq!(extra.mutable_parameters["csi.storage.k8s.io/pvc/namespace"], "team");
    assert_eq!(extra.mutable_parameters["csi.storage.k8s.io/pv/name"], "pv-1");
    let mut other = vac("fast");
    other.driver_name = "x.csi".into();
    assert!(class_error(&other, "d.csi").unwrap().contains("x.csi"));
    assert!(class_error(&vac("fast"), "d.csi").is_none());
}

#[test]
fn the_modify_secret_is_the_annotated_one_else_the_expansion_one() {
    let pv = |extra: Value| -> PersistentVolume {
        crate::fixtures::object(
            json!({
                "metadata": {"name": "pv-1"},
                "spec": {"csi": {"driver": "d.csi", "volumeHandle": "h-1"}}
            }),
            extra,
        )
    };
    let expand =
        json!({"spec": {"csi": {"controllerExpandSecretRef": {"name": "ex", "namespace": "ns"}}}});
    let mut both = expand.clone();
    both["metadata"] = json!({"annotations": {
        "volume.kubernetes.io/controller-modify-secret-name": "mod",
        "volume.kubernetes.io/controller-modify-secret-namespace": "ms"}});
    assert_eq!(secret_ref(&pv(json!({}))), None);
    assert_eq!(secret_ref(&pv(expand)), Some(("ns".into(), "ex".into())));
    assert_eq!(secret_ref(&pv(both)), Some(("ms".into(), "mod".into())));
    assert!(infeasible("InvalidArgument") && !infeasible("Internal"));
}

/// No failed attempt holds the claim.
fn no_hold() -> (Option<&'static Hold>, std::time::Instant) {
    (None, std::time::Instant::now())
}

/// A failed attempt on this version of the claim holds the call (and a missing class's
/// warning) until its retry; another version of the claim, or the retry due, lets it go.
#[test]
fn a_failed_attempt_holds_its_version_until_the_retry() {
    let classes = [vac("fast")];
    let lookup = |n: &str| classes.iter().find(|c| c.metadata.name.as_deref() == Some(n)).cloned();
    let c = claim(Some("fast"), Some("gold"), json!({}));
    let missing = claim(Some("ghost"), Some("gold"), json!({}));
    let t0 = std::time::Instant::now();
    let version = c.metadata.resource_version.clone().unwrap_or_default();
    let hold = Hold { version, until: t0 + std::time::Duration::from_secs(5) };
    let later = t0 + std::time::Duration::from_secs(6);
    let mut changed = c.clone();
    changed.metadata.resource_version = Some("10".into());
    // (case, claim, clock, step)
    for (case, claim, clock, want) in [
        ("held", &c, t0, "wait-for-retry"),
        ("missing class, held", &missing, t0, "wait-for-retry"),
        ("the retry is due", &c, later, "modify"),
        ("the claim changed", &changed, t0, "modify"),
    ] {
        let step = decide(
            claim,
            &pv("d.csi"),
            "d.csi",
            lookup,
            "t0",
            (Some(&hold), clock),
            ClaimCopy::Cached,
        );
        assert_eq!(name(&step), want, "{case}");
    }
}

/// A modify with nothing written before its call (an old target pursued) reads the claim live
/// first when decided on the store's copy; one that marks the claim first does not, as the
/// mark's precondition proves the copy; the other steps call nothing.
#[test]
fn a_modify_on_the_store_copy_confirms_it_live_unless_a_mark_goes_first() {
    let classes = [vac("fast")];
    let lookup = |n: &str| classes.iter().find(|c| c.metadata.name.as_deref() == Some(n)).cloned();
    let wanting = claim(Some("fast"), Some("gold"), json!({}));
    let pursued = claim(Some("faster"), Some("gold"), in_progress("fast", None));
    let missing = claim(Some("ghost"), Some("gold"), json!({}));
    // (case, claim, copy, step)
    for (case, claim, copy, want) in [
        ("store copy, marked first", &wanting, ClaimCopy::Cached, "modify"),
        ("store copy, old target pursued", &pursued, ClaimCopy::Cached, "confirm-live"),
        ("live copy, old target pursued", &pursued, ClaimCopy::Live, "modify"),
        ("store copy, class missing", &missing, ClaimCopy::Cached, "modify-class-missing"),
    ] {
        let step = decide(claim, &pv("d.csi"), "d.csi", lookup, "t0", no_hold(), copy);
        assert_eq!(name(&step), want, "{case}");
    }
}
