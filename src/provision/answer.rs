//! What follows a CreateVolume answer: for a claim that wants the volume (`after_create`), and
//! for one that no longer does, where CreateVolume is repeated to learn whether the volume
//! exists and what its id is (`after_probe`).

use k8s_openapi::api::core::v1::PersistentVolume;

use super::plan::Plan;
use super::volume;
use crate::csi::v1 as csi;
use crate::csi::{ErrorClass, Failure, FailureCode};

/// The next step after CreateVolume for a claim that wants its volume.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterCreate {
    /// Create this PV, then bind.
    Record(Box<PersistentVolume>),
    /// The volume exists but cannot be recorded: DeleteVolume `volume_id` (a failure there is
    /// only logged: the intent stays, so the next attempt or the undo finds it), then fail.
    TakeBack { volume_id: String, note: String },
    /// Out of space on the node the scheduler chose: clear the selected node, then fail, so
    /// that the scheduler picks another. The intent stays; nothing was made.
    Reschedule { note: String },
    /// Back off and report; `infeasible` retries slowly. The intent stays: an attempt still in
    /// progress is repeated until it answers.
    Fail { note: String, infeasible: bool },
}

/// `can_reschedule`: topology is on and the claim has a selected node.
pub fn after_create(
    plan: &Plan,
    answer: Result<&csi::Volume, &Failure>,
    can_reschedule: bool,
    identity: &str,
) -> AfterCreate {
    let failure = match answer {
        Ok(created) => {
            return match volume::record(plan, created, identity) {
                Ok(pv) => AfterCreate::Record(Box::new(pv)),
                // Nothing to delete by: the name is asked for again, as after a failure.
                Err(e @ volume::AnswerError::NoVolumeId(_)) => {
                    AfterCreate::Fail { note: e.to_string(), infeasible: false }
                }
                Err(e) => AfterCreate::TakeBack {
                    volume_id: created.volume_id.clone(),
                    note: e.to_string(),
                },
            };
        }
        Err(failure) => failure,
    };
    let e = &failure.text;
    if failure.code == FailureCode::ResourceExhausted && can_reschedule {
        return AfterCreate::Reschedule {
            note: format!(
                "failed to provision volume {} on the selected node, asking the scheduler to choose another: {e}",
                plan.volume_name
            ),
        };
    }
    let infeasible = failure.class == ErrorClass::Infeasible;
    let note = if infeasible {
        format!("Volume provisioning failed with infeasible error. Retries will be delayed. {e}")
    } else {
        format!("failed to provision volume {}: {e}", plan.volume_name)
    };
    AfterCreate::Fail { note, infeasible }
}

/// What the undo of an abandoned volume does after its CreateVolume probe.
#[derive(Debug, Clone, PartialEq)]
pub enum Undo {
    /// The class retains volumes and the claim is being deleted: create this PV (it ends
    /// Released and stays), then drop the intent.
    Keep(Box<PersistentVolume>),
    /// DeleteVolume `volume_id`, then drop the intent.
    Delete { volume_id: String },
    /// Whether the volume exists is unknown (in progress, or it exists with other parameters):
    /// the intent stays and the note is reported.
    Unknown { note: String },
    /// The driver finished and made nothing: drop the intent.
    NothingMade,
}

/// `deleting`: the claim is being deleted (rather than, say, bound to another PV).
pub fn after_probe(
    plan: &Plan,
    answer: Result<&csi::Volume, &Failure>,
    deleting: bool,
    identity: &str,
) -> Undo {
    match answer {
        // Nothing to delete by: the intent stays, and the probe is asked again.
        Ok(created) if created.volume_id.is_empty() => Undo::Unknown {
            note: format!(
                "cannot delete volume {}: the driver answered CreateVolume with an empty volume_id",
                plan.volume_name
            ),
        },
        Ok(created) => {
            if plan.retain
                && deleting
                && let Ok(pv) = volume::record(plan, created, identity)
            {
                return Undo::Keep(Box::new(pv));
            }
            // An answer that cannot be recorded is deleted even under Retain: no PV could say
            // what it is.
            Undo::Delete { volume_id: created.volume_id.clone() }
        }
        Err(f) if f.code == FailureCode::AlreadyExists || f.class == ErrorClass::InProgress => {
            Undo::Unknown {
                note: format!(
                    "cannot find out whether volume {} exists, to delete it: {}",
                    plan.volume_name, f.text
                ),
            }
        }
        Err(_) => Undo::NothingMade,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{created as answer, plan};

    fn failure(class: ErrorClass, code: FailureCode) -> Failure {
        Failure { class, code, text: "boom".into() }
    }

    #[test]
    fn after_create_table() {
        use ErrorClass::*;
        use FailureCode::*;
        let plan = plan(false);
        let gib = 1 << 30;
        let name = &plan.volume_name;
        let fail = |note: String, infeasible| AfterCreate::Fail { note, infeasible };
        let cases: Vec<(Result<csi::Volume, Failure>, bool, AfterCreate)> = vec![
            // No ID: nothing to take back; CreateVolume is asked again.
            (
                Ok(csi::Volume { volume_id: String::new(), ..answer(gib) }),
                false,
                fail(format!("driver answered CreateVolume for {name} with an empty volume_id"), false),
            ),
            // A context no PV can hold: deleted again.
            (
                Ok(csi::Volume {
                    volume_context: [("k".to_string(), "x".repeat(300 * 1024))].into(),
                    ..answer(gib)
                }),
                false,
                AfterCreate::TakeBack {
                    volume_id: "vol-1".into(),
                    note: "driver created volume vol-1 with an answer the PV cannot hold (a volume_context of 307201 bytes, over 262144); it is being deleted".into(),
                },
            ),
            (
                Err(failure(Final, ResourceExhausted)),
                true,
                AfterCreate::Reschedule {
                    note: format!("failed to provision volume {name} on the selected node, asking the scheduler to choose another: boom"),
                },
            ),
            // No node to give back (Immediate binding, or topology off): an ordinary failure.
            (
                Err(failure(Final, ResourceExhausted)),
                false,
                fail(format!("failed to provision volume {name}: boom"), false),
            ),
            (
                Err(failure(InProgress, Other)),
                true,
                fail(format!("failed to provision volume {name}: boom"), false),
            ),
            (
                Err(failure(Infeasible, Other)),
                true,
                fail(
                    "Volume provisioning failed with infeasible error. Retries will be delayed. boom".into(),
                    true,
                ),
            ),
            (
                Ok(answer(gib / 2)),
                true,
                AfterCreate::TakeBack {
                    volume_id: "vol-1".into(),
                    note: format!("driver created volume vol-1 with {} bytes, less than the {gib} requested; it is being deleted", gib / 2),
                },
            ),
        ];
        for (i, (answer, reschedule, want)) in cases.into_iter().enumerate() {
            let got = after_create(&plan, answer.as_ref(), reschedule, "id");
            assert_eq!(got, want, "case {i}");
        }
        let AfterCreate::Record(pv) = after_create(&plan, Ok(&answer(gib)), true, "id") else {
            panic!("a volume of the requested size is recorded");
        };
        let csi = pv.spec.and_then(|s| s.csi).expect("a CSI PV");
        assert_eq!(csi.volume_handle, "vol-1");
    }

    #[test]
    fn a_clone_answered_without_its_source_is_taken_back() {
        let got = after_create(&plan(true), Ok(&answer(1 << 30)), false, "id");
        assert!(
            matches!(&got, AfterCreate::TakeBack { volume_id, .. } if volume_id == "vol-1"),
            "{got:?}"
        );
    }

    /// (plan, the probe's answer, the claim is being deleted, the undo; None: keep the volume)
    type ProbeCase<'a> = (&'a Plan, Result<csi::Volume, Failure>, bool, Option<Undo>);

    #[test]
    fn after_probe_table() {
        use ErrorClass::*;
        use FailureCode::*;
        let mut retain = plan(false);
        retain.retain = true;
        let delete = plan(false);
        let gib = 1 << 30;
        let unknown = Undo::Unknown {
            note: format!(
                "cannot find out whether volume {} exists, to delete it: boom",
                delete.volume_name
            ),
        };
        let delete_it = Undo::Delete { volume_id: "vol-1".into() };
        let cases: Vec<ProbeCase<'_>> = vec![
            (&delete, Ok(answer(gib)), true, Some(delete_it.clone())),
            // Retain keeps a volume only for a deleted claim; one bound elsewhere gets it deleted.
            (&retain, Ok(answer(gib)), false, Some(delete_it.clone())),
            (&retain, Ok(answer(gib)), true, None),
            // Too small to record, even under Retain: deleted.
            (&retain, Ok(answer(gib / 2)), true, Some(delete_it)),
            (&delete, Err(failure(InProgress, Other)), true, Some(unknown.clone())),
            (&delete, Err(failure(Final, AlreadyExists)), true, Some(unknown)),
            (&delete, Err(failure(Final, Other)), true, Some(Undo::NothingMade)),
            (&delete, Err(failure(Infeasible, Other)), true, Some(Undo::NothingMade)),
            // No ID to delete by: unknown, never DeleteVolume("").
            (
                &delete,
                Ok(csi::Volume { volume_id: String::new(), ..answer(gib) }),
                true,
                Some(Undo::Unknown {
                    note: format!(
                        "cannot delete volume {}: the driver answered CreateVolume with an empty volume_id",
                        delete.volume_name
                    ),
                }),
            ),
        ];
        for (i, (plan, answer, deleting, want)) in cases.into_iter().enumerate() {
            let got = after_probe(plan, answer.as_ref(), deleting, "id");
            match want {
                Some(want) => assert_eq!(got, want, "case {i}"),
                None => assert!(matches!(got, Undo::Keep(_)), "case {i}: {got:?}"),
            }
        }
    }
}
