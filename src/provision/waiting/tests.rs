use std::time::Duration;

use serde_json::json;

use super::*;
use crate::csi::failure::{ErrorClass, Failure, FailureCode};
use crate::fixtures::pvc;

const NOW: &str = "2026-01-01T00:00:00Z";
const AFTER: Duration = Duration::from_secs(30);
const OLD: Duration = Duration::from_secs(60);

fn with_condition(reason: &str) -> PersistentVolumeClaim {
    pvc("c")
        .with(json!({"status": {"phase": "Pending", "conditions": [
            {"type": "Resizing", "status": "True"},
            {"type": CONDITION, "status": "True", "reason": reason, "message": "m"},
        ]}}))
        .build()
}

fn types_in(patch: &Value) -> Vec<String> {
    let list = patch["status"]["conditions"].as_array().cloned().unwrap_or_default();
    list.iter().map(|c| c["type"].as_str().unwrap_or_default().to_string()).collect()
}

/// A case: its name, the claim, its cause, its age, the condition types the patch leaves.
type Row<'a> = (&'a str, PersistentVolumeClaim, Option<&'a Wait>, Duration, Option<Vec<&'a str>>);

#[test]
fn written_only_when_the_cause_changes_and_the_claim_has_waited() {
    let fresh = pvc("c").phase("Pending").build();
    let failing = Wait {
        cause: Cause::DriverError,
        message: "CreateVolume failed".into(),
        attempts: 3,
        next_retry: Some("2026-01-01T00:00:04Z".into()),
    };
    let first_consumer = Wait::on(Cause::WaitForFirstConsumer, "no pod yet");
    let cases: [Row<'_>; 7] = [
        (
            "a young claim waits only moments: nothing",
            fresh.clone(),
            Some(&failing),
            AFTER / 2,
            None,
        ),
        ("an old one: the condition", fresh.clone(), Some(&failing), OLD, Some(vec![CONDITION])),
        ("no cause: nothing", fresh.clone(), None, OLD, None),
        (
            "the same reason again: nothing",
            with_condition("DriverError"),
            Some(&failing),
            OLD,
            None,
        ),
        (
            "another reason: rewritten, other conditions kept",
            with_condition("DriverError"),
            Some(&first_consumer),
            OLD,
            Some(vec!["Resizing", CONDITION]),
        ),
        ("cause gone, still unbound: kept", with_condition("DriverError"), None, OLD, None),
        ("waits on at the threshold", fresh, Some(&first_consumer), AFTER, Some(vec![CONDITION])),
    ];
    for (case, claim, wait, age, want) in cases {
        let patch = condition_patch(&claim, wait, age, AFTER, NOW);
        assert_eq!(
            patch.as_ref().map(types_in),
            want.map(|w| w.iter().map(|t| t.to_string()).collect()),
            "{case}"
        );
        if let Some(patch) = patch {
            let ours = patch["status"]["conditions"]
                .as_array()
                .and_then(|l| l.iter().find(|c| c["type"] == CONDITION).cloned())
                .unwrap_or_default();
            let wait = wait.unwrap_or(&failing);
            assert_eq!(ours["reason"], wait.cause.reason(), "{case}");
            assert_eq!(ours["status"], "True", "{case}");
            assert_eq!(ours["lastTransitionTime"], NOW, "{case}");
        }
    }
}

#[test]
fn removed_once_bound_and_only_if_there() {
    let mut bound = with_condition("NoCapacity");
    if let Some(status) = bound.status.as_mut() {
        status.phase = Some("Bound".into());
    }
    let patch = condition_patch(&bound, None, OLD, AFTER, NOW);
    assert_eq!(patch.as_ref().map(types_in), Some(vec!["Resizing".to_string()]));
    let clean = pvc("c").phase("Bound").build();
    assert_eq!(
        condition_patch(&clean, None, OLD, AFTER, NOW),
        None,
        "the happy path writes nothing"
    );
    let wait = Wait::on(Cause::WaitingForBinder, "x");
    assert_eq!(condition_patch(&clean, Some(&wait), OLD, AFTER, NOW), None, "Bound wins");
}

#[test]
fn the_message_carries_the_attempt_and_the_next_retry() {
    let wait = Wait {
        cause: Cause::SecretMissing,
        message: "secret ns/s not found".into(),
        attempts: 2,
        next_retry: Some("2026-01-01T00:00:02Z".into()),
    };
    assert_eq!(
        wait.condition_message(),
        "secret ns/s not found (attempt 2; next retry at 2026-01-01T00:00:02Z)"
    );
    assert_eq!(
        Wait::on(Cause::WaitingForPopulator, "filled by x").condition_message(),
        "filled by x"
    );
    let long = Wait::on(Cause::DriverError, "é".repeat(MESSAGE_LIMIT));
    let message = long.condition_message();
    assert!(message.len() <= MESSAGE_LIMIT && message.is_char_boundary(message.len()));
}

#[test]
fn driver_failures_by_class() {
    let failure = |class, code| Failure { class, code, text: String::new() };
    let cases = [
        (failure(ErrorClass::Final, FailureCode::Other), true, Cause::DriverUnreachable),
        (failure(ErrorClass::Final, FailureCode::ResourceExhausted), false, Cause::NoCapacity),
        (failure(ErrorClass::InProgress, FailureCode::ResourceExhausted), false, Cause::NoCapacity),
        (failure(ErrorClass::InProgress, FailureCode::Other), false, Cause::DriverTimeout),
        (failure(ErrorClass::Infeasible, FailureCode::Other), false, Cause::DriverRefused),
        (failure(ErrorClass::Final, FailureCode::AlreadyExists), false, Cause::DriverError),
    ];
    for (failure, unreachable, want) in cases {
        assert_eq!(Cause::of_driver(&failure, unreachable), want, "{failure:?}");
    }
}

#[test]
fn refusals_by_kind() {
    let cases = [
        (PlanError::MissingClass("gold".into()), Cause::InvalidRequest),
        (PlanError::Selector, Cause::InvalidRequest),
        (PlanError::CloneUnsupported("a".into(), "d".into()), Cause::DataSourceRefused),
        (
            PlanError::SnapshotSource { name: "s".into(), reason: "not ready".into() },
            Cause::DataSourceRefused,
        ),
        (
            PlanError::CrossNamespace { kind: "k".into(), namespace: "n".into(), name: "x".into() },
            Cause::DataSourceRefused,
        ),
    ];
    for (error, want) in cases {
        assert_eq!(Cause::of_plan(&error), want, "{error}");
    }
    assert_eq!(Cause::of_topology(&TopologyError::NodeGone("n".into())), Cause::NodeUnavailable);
    assert_eq!(Cause::of_topology(&TopologyError::BadTerm(0)), Cause::InvalidRequest);
    let unregistered = TopologyError::NotRegistered { node: "n".into(), driver: "d".into() };
    assert_eq!(Cause::of_topology(&unregistered), Cause::TopologyUnsatisfied);
}

#[test]
fn reasons_are_distinct_and_valid() {
    let mut seen = std::collections::HashSet::new();
    for cause in Cause::ALL {
        let reason = cause.reason();
        assert!(seen.insert(reason), "{reason} twice");
        assert!(reason.chars().all(|c| c.is_ascii_alphanumeric()), "{reason}");
    }
}

#[test]
fn recorded_reads_the_condition_back() {
    assert_eq!(recorded(&with_condition("NoCapacity")), Some(("NoCapacity", "m")));
    assert_eq!(recorded(&pvc("c").build()), None);
}

#[test]
fn a_claim_queued_for_the_driver_says_how_many_of_its_namespace_are_ahead() {
    const DRIVER: &str = "hostpath.csi.k8s.io";
    let handed = || {
        pvc("c").phase("Pending").annotation(crate::model::names::ANN_STORAGE_PROVISIONER, DRIVER)
    };
    let with_reason = |reason: &str| {
        handed()
            .with(json!({"status": {"conditions": [{"type": CONDITION, "status": "True", "reason": reason}]}}))
            .build()
    };
    let said = "waiting for the driver: 12 ahead in this namespace's share";
    let cases = [
        ("handed to the driver", handed().build(), Some(said)),
        ("the binder's wait is over", with_reason("WaitingForBinder"), Some(said)),
        ("the pod's wait is over", with_reason("WaitForFirstConsumer"), Some(said)),
        ("said already: the same cause, no new write", with_reason("WaitingForDriver"), Some(said)),
        ("a failed attempt says more", with_reason("DriverError"), None),
        (
            "another driver's claim",
            pvc("c")
                .phase("Pending")
                .annotation(crate::model::names::ANN_STORAGE_PROVISIONER, "other")
                .build(),
            None,
        ),
        ("a claim with a PV", handed().with(json!({"spec": {"volumeName": "pv-1"}})).build(), None),
    ];
    for (name, claim, want) in cases {
        let wait = in_queue(&claim, DRIVER, 12);
        assert_eq!(wait.as_ref().map(|w| w.message.as_str()), want, "{name}");
        if let Some(wait) = wait {
            assert_eq!(wait.cause, Cause::WaitingForDriver, "{name}");
            let patch = condition_patch(&claim, Some(&wait), OLD, AFTER, NOW);
            assert_eq!(patch.is_none(), name.starts_with("said already"), "{name}");
        }
    }
}
