//! The executor rules, one test each.

use std::time::Duration;

use serde_json::json;

use super::fake_driver::status;
use super::*;
use crate::model::names::FINALIZER_PROVISIONING;

#[tokio::test(start_paused = true)]
async fn the_intent_is_on_the_claim_before_create_volume() {
    let mut bench = Bench::new();
    bench.create(CLAIMS, claim(json!({})));
    bench.sync();
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Done);
    let creates = bench.driver.creates();
    assert_eq!(creates.len(), 1, "{creates:?}");
    assert_eq!(
        creates[0].1,
        json!([FINALIZER_PROVISIONING]),
        "the API held the intent when the driver was asked"
    );
    let claim = bench.get(CLAIMS, "c").expect("the claim");
    assert_eq!(claim["spec"]["volumeName"], json!("pvc-u1"));
    assert_eq!(claim["status"]["phase"], json!("Bound"));
    assert!(
        claim["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty()),
        "the intent goes with the bind: {claim}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pass_on_a_copy_older_than_our_write_waits_for_the_watch() {
    let mut bench = Bench::new();
    bench.create(CLAIMS, claim(json!({})));
    bench.sync();
    bench.claim_pass().await;
    let writes = bench.writes();
    // The watch has not brought our writes: the store still shows the claim unbound.
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Done);
    assert_eq!(bench.writes(), writes, "no write decided on the old copy");
    assert_eq!(bench.driver.creates().len(), 1);
    // Once the watch delivers, the pass finds nothing to do.
    bench.sync();
    bench.claim_pass().await;
    assert_eq!(bench.writes(), writes);
}

#[tokio::test(start_paused = true)]
async fn a_failed_create_volume_waits_until_the_claim_changes() {
    let mut bench = Bench::new();
    bench.create(CLAIMS, claim(json!({})));
    bench.sync();
    bench.driver.fail_next_create(status(tonic::Code::Internal));
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting);
    assert!(bench.events().iter().any(|(reason, _)| reason == "ProvisioningFailed"));
    // The watch brings our intent: the same version of the claim, so the backoff holds.
    bench.sync();
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting);
    assert_eq!(bench.driver.creates().len(), 1, "no second CreateVolume within the backoff");
    // The user changes the claim: looked at again at once.
    bench.api.state.lock().unwrap().update(
        CLAIMS,
        "c",
        json!({"metadata": {"labels": {"tier": "gold"}}}),
    );
    bench.sync();
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Done);
    assert_eq!(bench.driver.creates().len(), 2);
    assert_eq!(bench.get(CLAIMS, "c").expect("the claim")["status"]["phase"], json!("Bound"));
}

/// A claim held by a failed attempt costs no read of the API at its passes until the retry is
/// due: the gate looks at the hold before it asks for a live copy.
#[tokio::test(start_paused = true)]
async fn a_held_claims_passes_read_nothing_until_the_retry() {
    let mut bench = Bench::new();
    bench.create(CLAIMS, claim(json!({})));
    bench.sync();
    bench.driver.fail_next_create(status(tonic::Code::Internal));
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting);
    // The watch brings our intent: the version the attempt failed on.
    bench.sync();
    let before = bench.reads().len();
    for _ in 0..3 {
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting);
    }
    assert_eq!(bench.reads()[before..], [] as [String; 0], "no read while held");
    assert_eq!(bench.driver.creates().len(), 1);
    // The retry due: one read confirms the copy, then CreateVolume goes again.
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Done);
    let reads = bench.reads()[before..].to_vec();
    assert_eq!(reads, ["GET /api/v1/namespaces/ns/persistentvolumeclaims/c"], "{reads:?}");
    assert_eq!(bench.driver.creates().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_undo_that_cannot_tell_whether_the_volume_exists_keeps_the_intent() {
    let mut bench = Bench::new();
    // Deleted while its volume may be under way: the intent holds the claim.
    bench.create(
        CLAIMS,
        claim(json!({"metadata": {"finalizers": [FINALIZER_PROVISIONING],
                                  "deletionTimestamp": "2026-01-01T00:00:00Z"}})),
    );
    bench.sync();
    bench.driver.fail_next_create(status(tonic::Code::DeadlineExceeded));
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting);
    let claim_now = bench.get(CLAIMS, "c").expect("the claim is held");
    assert_eq!(claim_now["metadata"]["finalizers"], json!([FINALIZER_PROVISIONING]));
    assert!(bench.driver.deletes().is_empty());
    assert!(
        bench.events().iter().any(|(reason, note)| reason == "ProvisioningCleanupFailed"
            && note.contains("cannot find out whether volume pvc-u1 exists")),
        "{:?}",
        bench.events()
    );
    // The driver answers: the volume it made is deleted, then the claim may go.
    bench.driver.fail_next_create(status(tonic::Code::Internal));
    bench.api.state.lock().unwrap().update(
        CLAIMS,
        "c",
        json!({"metadata": {"labels": {"retry": "now"}}}),
    );
    bench.sync();
    bench.claim_pass().await;
    assert!(bench.get(CLAIMS, "c").is_none(), "a final answer (nothing made) lets the claim go");
    assert!(bench.driver.deletes().is_empty(), "nothing was made, nothing to delete");
}

#[tokio::test(start_paused = true)]
async fn no_delete_volume_while_the_live_claim_holds_the_volume() {
    let mut bench = Bench::new();
    bench.create(
        CLAIMS,
        claim(json!({"spec": {"volumeName": "pvc-u1"}, "status": {"phase": "Bound"}})),
    );
    bench.create(VOLUMES, volume(json!({"status": {"phase": "Released"}})));
    // The stores see the PV Released and its claim gone: a cache that is wrong.
    let volumes: Vec<PersistentVolume> = typed(&bench.api, VOLUMES);
    relist(&mut bench.volumes, volumes.iter().map(Compact::of).collect());
    for pv in typed::<PersistentVolume>(&bench.api, VOLUMES) {
        bench.controller.index_volume(&pv);
    }
    let outcome = bench.controller.sync_volume("pvc-u1").await.expect("a pass");
    assert_eq!(outcome, super::super::Outcome::Done);
    assert!(bench.driver.deletes().is_empty(), "the live claim still holds it");
    assert!(bench.events().is_empty(), "held by the re-check, not refused: {:?}", bench.events());
    assert!(bench.get(VOLUMES, "pvc-u1").is_some());
    // The claim really goes: then the volume is deleted.
    bench.api.state.lock().unwrap().update(
        CLAIMS,
        "c",
        json!({"metadata": {"deletionTimestamp": "2026-01-02T00:00:00Z"}}),
    );
    assert!(bench.get(CLAIMS, "c").is_none());
    bench.controller.sync_volume("pvc-u1").await.expect("a pass");
    assert_eq!(bench.driver.deletes(), vec!["h-1".to_string()]);
}

/// A failed CreateVolume holds the claim off for its backoff, then the same version is tried
/// again: the first backoff (1 s) after an error that may pass, the longest (300 s here) after
/// one that needs the input changed (infeasible).
#[tokio::test(start_paused = true)]
async fn a_backoff_expires_and_the_same_claim_is_tried_again() {
    // (code, still held after, tried again after a further)
    let cases = [
        (tonic::Code::Internal, Duration::from_millis(500), Duration::from_secs(1)),
        (tonic::Code::InvalidArgument, Duration::from_secs(60), Duration::from_secs(241)),
    ];
    for (code, held, further) in cases {
        let mut bench = Bench::new();
        bench.create(CLAIMS, claim(json!({})));
        bench.sync();
        bench.driver.fail_next_create(status(code));
        assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting);
        bench.sync();
        tokio::time::advance(held).await;
        assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting, "{code:?}");
        assert_eq!(bench.driver.creates().len(), 1, "{code:?}: held");
        tokio::time::advance(further).await;
        assert_eq!(bench.claim_pass().await, super::super::Outcome::Done, "{code:?}");
        assert_eq!(bench.driver.creates().len(), 2, "{code:?}: tried again");
        let bound = bench.get(CLAIMS, "c").expect("the claim");
        assert_eq!(bound["status"]["phase"], json!("Bound"));
    }
}

/// A released PV whose volume is still attached to a node: never deleted while the
/// attachment lasts, however long that is; deleted once it goes.
#[tokio::test(start_paused = true)]
async fn an_attached_volume_is_not_deleted_while_the_attachment_lasts() {
    let mut bench = Bench::new();
    bench.create(VOLUMES, volume(json!({"status": {"phase": "Released"}})));
    bench.sync();
    let attachment: k8s_openapi::api::storage::v1::VolumeAttachment =
        serde_json::from_value(json!({
            "metadata": {"name": "csi-1"},
            "spec": {"attacher": DRIVER, "nodeName": "node-1",
                     "source": {"persistentVolumeName": "pvc-u1"}}
        }))
        .expect("an attachment");
    relist(&mut bench.attachments, vec![attachment]);
    for _ in 0..3 {
        bench.controller.sync_volume("pvc-u1").await.expect("a pass");
        assert!(bench.driver.deletes().is_empty(), "attached to node-1: not deleted");
        tokio::time::advance(Duration::from_secs(600)).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        bench.events().iter().any(|(reason, note)| reason == "VolumeDelete"
            && note.contains("still attached to node node-1, waiting for detach")),
        "{:?}",
        bench.events()
    );
    assert!(bench.get(VOLUMES, "pvc-u1").is_some());
    // Detached: deleted.
    relist(&mut bench.attachments, Vec::new());
    bench.controller.sync_volume("pvc-u1").await.expect("a pass");
    assert_eq!(bench.driver.deletes(), vec!["h-1".to_string()]);
}

/// A failed ControllerExpandVolume holds passes on that size off until its backoff is over,
/// then the same size is asked again and the PV and the claim grow.
#[tokio::test(start_paused = true)]
async fn a_failed_resize_waits_out_its_backoff() {
    let mut bench = Bench::new();
    bench.create(
        CLAIMS,
        claim(json!({
            "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"volumeName": "pvc-u1", "resources": {"requests": {"storage": "2Gi"}}},
            "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                       "capacity": {"storage": "1Gi"}}
        })),
    );
    bench.create(
        VOLUMES,
        volume(json!({
            "metadata": {"annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}},
            "status": {"phase": "Bound"}
        })),
    );
    bench.sync();
    bench.driver.fail_next_expand(status(tonic::Code::Internal));
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting);
    assert_eq!(bench.driver.expands(), vec![2 << 30]);
    bench.sync();
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(bench.claim_pass().await, super::super::Outcome::Waiting);
    assert_eq!(bench.driver.expands().len(), 1, "no second call within the backoff");
    tokio::time::advance(Duration::from_secs(1)).await;
    bench.claim_pass().await;
    assert_eq!(bench.driver.expands().len(), 2, "asked again once it is over");
    let pv = bench.get(VOLUMES, "pvc-u1").expect("the PV");
    assert_eq!(pv["spec"]["capacity"]["storage"], json!("2Gi"));
}

/// A class's provisioner secret the API cannot give (503) is `SecretUnreadable`, retried; one
/// the API says does not exist is `SecretMissing`; created, the claim is provisioned. Neither
/// reaches the driver.
#[tokio::test(start_paused = true)]
async fn an_unreadable_secret_is_not_a_missing_one() {
    let mut bench = Bench::with(|s| s.waiting_condition_after = Duration::ZERO);
    bench.create(
        CLASSES,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "locked"}, "provisioner": DRIVER,
               "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
               "parameters": {"csi.storage.k8s.io/provisioner-secret-name": "s",
                              "csi.storage.k8s.io/provisioner-secret-namespace": "ns"}}),
    );
    bench.create(CLAIMS, claim(json!({"spec": {"storageClassName": "locked"}})));
    bench.api.state.lock().unwrap().unavailable.push("/secrets/s".into());
    bench.sync();
    let reason = |bench: &Bench| {
        let claim = bench.get(CLAIMS, "c").expect("the claim");
        let conditions = claim["status"]["conditions"].as_array().cloned().unwrap_or_default();
        conditions.iter().find_map(|c| c["reason"].as_str().map(str::to_string))
    };
    let mut causes = Vec::new();
    for (step, fix) in ["unreadable", "missing", "created"].iter().enumerate() {
        if step > 0 {
            tokio::time::advance(Duration::from_secs(300)).await;
        }
        let outcome = bench.claim_pass().await;
        bench.sync();
        causes.push((*fix, outcome, reason(&bench)));
        match *fix {
            "unreadable" => bench.api.state.lock().unwrap().unavailable.clear(),
            "missing" => {
                bench.create(
                    "/api/v1/namespaces/ns/secrets",
                    json!({"apiVersion": "v1", "kind": "Secret",
                           "metadata": {"name": "s", "namespace": "ns"}, "data": {}}),
                );
            }
            _ => {}
        }
    }
    use super::super::Outcome::{Done, Waiting};
    assert_eq!(
        causes,
        [
            ("unreadable", Waiting, Some("SecretUnreadable".to_string())),
            ("missing", Waiting, Some("SecretMissing".to_string())),
            ("created", Done, Some("SecretMissing".to_string())),
        ]
    );
    // Bound: the next pass takes the condition off.
    bench.claim_pass().await;
    assert_eq!(reason(&bench), None);
    assert_eq!(bench.get(CLAIMS, "c").expect("the claim")["status"]["phase"], json!("Bound"));
    let notes: Vec<String> = bench.events().into_iter().map(|(_, note)| note).collect();
    assert!(notes.iter().any(|n| n.contains("cannot read secret ns/s")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("does not exist")), "{notes:?}");
    assert_eq!(bench.driver.creates().len(), 1, "the driver asked once, with the secret there");
}

/// external-provisioner#1469: a pass on a copy of the claim older than what happened since (the
/// cluster's binder bound it, the user deleted it, its PV and volume went, all while the watch
/// lagged) provisions it again and leaves a second volume. Here the pass acts only on the claim
/// as the API has it: gone, or bound to another PV, it makes no volume.
#[tokio::test(start_paused = true)]
async fn a_stale_copy_of_a_claim_since_bound_or_gone_makes_no_volume() {
    for (case, now) in [
        ("deleted and gone", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})),
        (
            "bound to another PV",
            json!({"spec": {"volumeName": "pv-other"}, "status": {"phase": "Bound"},
                   "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}}}),
        ),
    ] {
        let mut bench = Bench::new();
        bench.create(CLAIMS, claim(json!({})));
        bench.sync();
        // What the watch has not brought yet.
        bench.api.state.lock().unwrap().update(CLAIMS, "c", now);
        // The intent's write meets the claim as it is (a 404 is a failed pass, retried).
        let key: ClaimKey = ObjectRef::new("c").within("ns");
        let _ = bench.controller.sync_claim(&key).await;
        assert!(bench.driver.creates().is_empty(), "{case}: {:?}", bench.driver.creates());
        let made = bench
            .writes()
            .into_iter()
            .filter(|w| w.starts_with("POST") && w.contains("persistentvolumes"))
            .count();
        assert_eq!(made, 0, "{case}: no PV: {:?}", bench.writes());
    }
}

/// The same with the intent journal, which writes nothing on the claim before CreateVolume: the
/// stale pass may make the volume, but its intent outlives the pass, and once the watch brings
/// the claim's end the sweep takes the volume back. Nothing is left.
#[tokio::test(start_paused = true)]
async fn with_the_journal_a_stale_copy_of_a_claim_gone_leaves_no_volume() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(crate::journal::Journal::open(dir.path()).unwrap());
    let mut bench = Bench::with(|s| s.journal = Some(journal.clone()));
    bench.create(CLAIMS, claim(json!({})));
    bench.sync();
    let gone = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
    bench.api.state.lock().unwrap().update(CLAIMS, "c", gone);
    let key: ClaimKey = ObjectRef::new("c").within("ns");
    let _ = bench.controller.sync_claim(&key).await;
    bench.sync();
    bench.controller.sweep_journal().await;
    let (made, deleted) = (bench.driver.creates().len(), bench.driver.deletes().len());
    assert_eq!((made, deleted), (1, 1), "the volume the stale pass made is deleted");
    assert!(journal.is_empty(), "the intent ends with its volume");
    assert!(typed::<PersistentVolume>(&bench.api, VOLUMES).is_empty(), "no PV left");
}

/// A pass's future stays small enough for a task's stack in a debug build: the steps' own
/// futures live on the heap (`Controller::drive`).
#[tokio::test(start_paused = true)]
async fn a_claim_pass_fits_a_task_stack() {
    let bench = Bench::new();
    let key: super::super::ClaimKey = kube::runtime::reflector::ObjectRef::new("c").within("ns");
    let pass = bench.controller.sync_claim(&key);
    let size = std::mem::size_of_val(&pass);
    println!("a claim pass's future: {size} bytes");
    assert!(size < 64 * 1024, "{size} bytes");
}
