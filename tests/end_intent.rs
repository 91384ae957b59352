//! `end-intent`: the supported way to end one provisioning intent of the intent journal by hand.
//! It ends the named claim's intent and no other, says which claim it is with --dry-run and
//! changes nothing then, names a UID the journal does not hold, and refuses while a controller
//! holds the journal.

use std::process::{Command, Output};

use csi_pv_controller::journal::{self, Journal};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

fn claim(name: &str, uid: &str) -> PersistentVolumeClaim {
    let mut claim = PersistentVolumeClaim::default();
    claim.metadata.namespace = Some("team".into());
    claim.metadata.name = Some(name.into());
    claim.metadata.uid = Some(uid.into());
    claim
}

fn end_intent(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_csi-pv-controller"))
        .arg(format!("--intent-journal={}", dir.display()))
        .arg("end-intent")
        .args(args)
        .output()
        .expect("cannot run end-intent")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn open_uids(dir: &std::path::Path) -> Vec<String> {
    let mut uids: Vec<String> = journal::intents_in(dir)
        .expect("a readable journal")
        .iter()
        .filter_map(|c| c.metadata.uid.clone())
        .collect();
    uids.sort();
    uids
}

#[tokio::test]
async fn one_intent_ends_by_hand_and_no_other() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let held = Journal::open(dir.path()).expect("a journal");
    held.record(&claim("data", "u1")).await.expect("recorded");
    held.record(&claim("logs", "u2")).await.expect("recorded");

    // Held by a running controller: refused, nothing changed.
    let refused = end_intent(dir.path(), &["u1"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(text(&refused).contains("stop the csi-pv-controller"), "{}", text(&refused));
    drop(held);
    assert_eq!(open_uids(dir.path()), ["u1", "u2"]);

    let dry = end_intent(dir.path(), &["u1", "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(
        text(&dry).contains("would end the intent of claim team/data (UID u1)"),
        "{}",
        text(&dry)
    );
    assert_eq!(open_uids(dir.path()), ["u1", "u2"]);

    let ended = end_intent(dir.path(), &["u1"]);
    assert!(ended.status.success(), "{}", text(&ended));
    assert!(
        text(&ended).contains("ended the intent of claim team/data (UID u1)"),
        "{}",
        text(&ended)
    );
    assert_eq!(open_uids(dir.path()), ["u2"]);

    let unknown = end_intent(dir.path(), &["u9"]);
    assert!(!unknown.status.success(), "{}", text(&unknown));
    assert!(text(&unknown).contains("no open intent for claim UID u9"), "{}", text(&unknown));
    assert_eq!(open_uids(dir.path()), ["u2"]);
}
