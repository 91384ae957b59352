//! The failure paths in the mode deploy/ ships: the sidecar with default flags
//! (`--binder=external`) and deploy/ RBAC beside kube-controller-manager's binder, expander and
//! protection controllers, in front of the real hostpathplugin. The faults hostpath cannot make
//! itself come from a relay on its socket (`support::csi_relay`): an error code, a hang, an
//! answer late or lost after the driver acted, a driver that dies after acting, a capability
//! rewritten. Each test checks the driver's own state, the objects and the events.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use csi_pv_controller::csi::v1 as csi;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use prost::Message;
use serde_json::{Value, json};
use tonic::Code;

use support::cluster::{INTENT_JOURNAL, World, eventually, finalizers, journal_entries};
use support::csi_relay::Fault;
use support::relayed::{Beside, Relayed};

const LIMIT: Duration = Duration::from_secs(90);
const GI: i64 = 1 << 30;
const INTENT_FINALIZER: &str = "csi-pv-controller.storage.k8s.io/provisioning";

fn create_names(world: &World<Relayed>) -> Vec<String> {
    world
        .relay()
        .requests::<csi::CreateVolumeRequest>("CreateVolume")
        .into_iter()
        .map(|r| r.name)
        .collect()
}

/// Waits until the driver holds exactly `count` volumes (its state file is the truth).
async fn driver_holds(world: &World<Relayed>, count: usize, what: &str) {
    world.driver_holds(count, what, LIMIT).await;
}

/// Waits until claim `name` and PV `volume` are gone from the API.
async fn gone(world: &World<Relayed>, name: &str, volume: &str) {
    let claim_gone = eventually(LIMIT, || async {
        world.claims().get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(claim_gone.is_some(), "claim {name} still there: {:?}", world.claims_left().await);
    assert!(world.volume_gone(volume, LIMIT).await, "PV {volume} still there");
}

fn warnings(events: &[(String, String, String)]) -> Vec<&(String, String, String)> {
    events.iter().filter(|(t, _, _)| t == "Warning").collect()
}

/// CreateVolume that hangs, is refused as infeasible, then as unavailable: each is an event on
/// the claim, the claim stays Pending with no PV, every attempt carries the same name, and the
/// driver ends with exactly one volume once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn driver_errors_are_events_and_retries_with_one_name() {
    let world = Beside::start("fault-errors", &[], &["--timeout=2s"]).await;
    world.create_class("std", json!({})).await;
    let relay = world.relay();
    relay.inject("CreateVolume", Fault::Hang);
    relay.inject("CreateVolume", Fault::Fail(Code::InvalidArgument, "pool is read-only".into()));
    relay.inject("CreateVolume", Fault::Fail(Code::Unavailable, "backend restarting".into()));
    world.create_claim("data", "std", "1Gi", json!({})).await;

    world.event("data", "ProvisioningFailed", "DeadlineExceeded", LIMIT).await;
    world.event("data", "ProvisioningFailed", "infeasible error", LIMIT).await;
    // As Go's gRPC writes a status, which alerts on upstream's events match.
    let unavailable = "rpc error: code = Unavailable desc = backend restarting";
    world.event("data", "ProvisioningFailed", unavailable, LIMIT).await;
    let (claim, pv) = world.bound("data", LIMIT).await;
    let name = format!("pvc-{}", claim.metadata.uid.clone().unwrap());
    assert_eq!(pv.metadata.name.as_deref(), Some(name.as_str()));

    let names = create_names(&world);
    assert_eq!(names.len(), 4, "three faults, one success: {names:?}");
    assert!(names.iter().all(|n| *n == name), "one name for every attempt: {names:?}");
    let state = world.hostpath().state_volumes();
    assert_eq!(state.len(), 1, "{state:?}");
    assert_eq!(state[0].name, name);
    assert_eq!(
        pv.spec.as_ref().and_then(|s| s.csi.as_ref()).map(|c| c.volume_handle.as_str()),
        Some(state[0].id.as_str())
    );
    // The intent goes with our binding write, or, when the cluster's binder bound the claim
    // first, on the pass that sees it bound.
    world
        .claim_until("data", "the intent's removal", LIMIT, |c| {
            finalizers(c).iter().all(|f| f != INTENT_FINALIZER)
        })
        .await;
    // The relay held the hung call: the driver saw only the last one.
    assert_eq!(relay.forwarded("CreateVolume"), 1);
}

/// The driver makes the volume and the answer is lost with the connection; later the driver
/// deletes it and dies before answering. The retries find the same volume: one volume made, one
/// deleted, nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answers_lost_after_the_driver_acted_make_one_volume_and_delete_it() {
    let world = Beside::start("fault-lost", &[], &[]).await;
    world.create_class("std", json!({})).await;
    let relay = world.relay();
    relay.inject("CreateVolume", Fault::DropAfter);
    world.create_claim("data", "std", "1Gi", json!({})).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let volume = pv.metadata.name.clone().unwrap();
    assert!(relay.forwarded("CreateVolume") >= 2, "the lost answer was asked for again");
    let state = world.hostpath().state_volumes();
    assert_eq!(state.len(), 1, "the retry found the volume the driver made: {state:?}");
    assert!(create_names(&world).iter().all(|n| *n == volume));

    relay.inject("DeleteVolume", Fault::DieAfter(Duration::from_secs(3)));
    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    gone(&world, "data", &volume).await;
    driver_holds(&world, 0, "after the deletion").await;
    assert!(relay.forwarded("DeleteVolume") >= 2, "DeleteVolume asked again after the outage");
    assert!(world.hostpath().data_entries().is_empty(), "{:?}", world.hostpath().data_entries());
}

/// CreateVolume's answer comes after the sidecar gave up, and the user deletes the claim
/// meanwhile: the volume the driver made is deleted, in both intent modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_deleted_while_its_answer_is_late_leaves_nothing_in_both_intent_modes() {
    let first = Beside::start("fault-late", &[], &["--timeout=2s"]).await;
    let journal =
        World::start_relayed(first.plane, "fault-late-j", &[], &["--timeout=2s", INTENT_JOURNAL])
            .await;
    journal.register_node().await;
    for world in [&*first, &journal] {
        world.create_class("std", json!({})).await;
        world.relay().always("CreateVolume", Fault::AnswerLate(Duration::from_secs(4)));
        world.create_claim("doomed", "std", "1Gi", json!({})).await;
    }
    for world in [&*first, &journal] {
        driver_holds(world, 1, "the driver made the volume").await;
        let claim = world.claim("doomed").await.unwrap();
        let name = format!("pvc-{}", claim.metadata.uid.clone().unwrap());
        let journal_mode = world.args.iter().any(|a| a.starts_with("--intent-journal"));
        if journal_mode {
            assert!(!journal_entries(world.dir.path()).is_empty(), "the intent is in the journal");
        } else {
            assert!(finalizers(&claim).iter().any(|f| f == INTENT_FINALIZER), "{claim:?}");
        }
        world.event("doomed", "ProvisioningFailed", "DeadlineExceeded", LIMIT).await;
        world.claims().delete("doomed", &DeleteParams::default()).await.unwrap();
        world.relay().clear("CreateVolume");
        gone(world, "doomed", &name).await;
        driver_holds(world, 0, "the late volume is taken back").await;
        assert!(world.relay().forwarded("DeleteVolume") >= 1);
        assert!(world.driver_volumes_in_api().await.is_empty());
        if journal_mode {
            let left = eventually(LIMIT, || async {
                journal_entries(world.dir.path()).is_empty().then_some(())
            })
            .await;
            assert!(left.is_some(), "journal: {:?}", journal_entries(world.dir.path()));
        }
    }
}

/// The driver checks the secret: with none the claim waits with an event naming it (no call);
/// with the wrong value the driver refuses; with the right one it is provisioned. No value ever
/// reaches an event or a log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn missing_and_wrong_secrets_are_events_and_never_shown() {
    const WRONG: &str = "wr0ng-p4ssw0rd";
    const RIGHT: &str = "r1ght-p4ssw0rd";
    fn needs_right(request: &[u8]) -> Option<(Code, String)> {
        let request = csi::CreateVolumeRequest::decode(request).ok()?;
        (request.secrets.get("password").map(String::as_str) != Some(RIGHT))
            .then(|| (Code::PermissionDenied, "credentials refused".to_string()))
    }
    let world = Beside::start("fault-secret", &[], &[]).await;
    let ns = world.namespace.clone();
    world
        .create_class(
            "locked",
            json!({"parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": "creds",
                "csi.storage.k8s.io/provisioner-secret-namespace": ns,
            }}),
        )
        .await;
    world.relay().always("CreateVolume", Fault::Check(needs_right));
    world.create_claim("data", "locked", "1Gi", json!({})).await;
    world.event("data", "ProvisioningFailed", &format!("secret {ns}/creds"), LIMIT).await;
    assert_eq!(world.relay().calls("CreateVolume"), 0, "no call without the secret");

    let secrets: Api<Secret> = Api::namespaced(world.client.clone(), &ns);
    let secret = |value: &str| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "creds"}, "stringData": {"password": value}
        }))
        .unwrap()
    };
    secrets.create(&PostParams::default(), &secret(WRONG)).await.unwrap();
    world.event("data", "ProvisioningFailed", "PermissionDenied", LIMIT).await;
    assert_eq!(world.phase("data").await.as_deref(), Some("Pending"));
    assert_eq!(world.hostpath().state_volumes().len(), 0);

    secrets.replace("creds", &PostParams::default(), &secret(RIGHT)).await.unwrap();
    world.bound("data", LIMIT).await;
    driver_holds(&world, 1, "provisioned with the right secret").await;
    let events = world.events("data").await;
    let log = world.sidecar.log_text();
    for value in [WRONG, RIGHT] {
        assert!(!log.contains(value), "a secret value in the log");
        assert!(events.iter().all(|(_, _, note)| !note.contains(value)), "{events:?}");
    }
}

/// The claim's (capacity, allocated size, resize status) for storage.
fn storage(claim: &PersistentVolumeClaim) -> (Option<String>, Option<String>, Option<String>) {
    let status = claim.status.clone().unwrap_or_default();
    let size = |m: Option<std::collections::BTreeMap<String, Quantity>>| {
        m.and_then(|m| m.get("storage").map(|q| q.0.clone()))
    };
    let resize = status.allocated_resource_statuses.and_then(|m| m.get("storage").cloned());
    (size(status.capacity), size(status.allocated_resources), resize)
}

/// The claim's condition types but kube-controller-manager's `Unused` (1.37's pvc-protection).
fn condition_types(claim: &PersistentVolumeClaim) -> Vec<String> {
    let conditions = claim.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    conditions.into_iter().map(|c| c.type_).filter(|t| t != "Unused").collect()
}

async fn request_size(world: &World<Relayed>, name: &str, size: &str) {
    let patch = json!({"spec": {"resources": {"requests": {"storage": size}}}});
    world.claims().patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

fn expand_sizes(world: &World<Relayed>) -> Vec<i64> {
    world
        .relay()
        .requests::<csi::ControllerExpandVolumeRequest>("ControllerExpandVolume")
        .iter()
        .map(|r| r.capacity_range.map_or(-1, |c| c.required_bytes))
        .collect()
}

async fn grown_claim(world: &World<Relayed>) {
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    world.create_claim("data", "grow", "1Gi", json!({})).await;
    world.bound("data", LIMIT).await;
}

/// A size the driver can never give (hostpathplugin's `--max-volume-size`, OutOfRange) is
/// infeasible: recorded on the claim and not retried in a loop. Lowering the request
/// (RecoverVolumeExpansionFailure) recovers, and the driver's volume has the new size.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_infeasible_expansion_waits_for_the_user_and_lowering_recovers() {
    let world = Beside::start(
        "fault-grow",
        &["--max-volume-size=8589934592", "--disable-node-expansion"],
        &["--retry-interval-max=10m"],
    )
    .await;
    grown_claim(&world).await;
    request_size(&world, "data", "100Gi").await;
    let claim = world
        .claim_until("data", "ControllerResizeInfeasible", LIMIT, |c| {
            storage(c).2.as_deref() == Some("ControllerResizeInfeasible")
        })
        .await;
    assert_eq!(storage(&claim).1.as_deref(), Some("100Gi"));
    assert!(condition_types(&claim).contains(&"ControllerResizeError".to_string()));
    world.event("data", "VolumeResizeFailed", "OutOfRange", LIMIT).await;
    // A later pass over the claim (a label is no new size): not asked again.
    world.nudge_claim("data", LIMIT).await;
    assert_eq!(expand_sizes(&world), [100 * GI], "an infeasible size is not retried in a loop");

    request_size(&world, "data", "4Gi").await;
    let claim = world
        .claim_until("data", "capacity 4Gi", LIMIT, |c| storage(c).0.as_deref() == Some("4Gi"))
        .await;
    assert_eq!(storage(&claim), (Some("4Gi".into()), Some("4Gi".into()), None));
    assert!(condition_types(&claim).is_empty(), "{:?}", condition_types(&claim));
    assert_eq!(expand_sizes(&world), [100 * GI, 4 * GI]);
    let state = world.hostpath().state_volumes();
    assert_eq!(state.iter().map(|v| v.size).collect::<Vec<_>>(), [4 * GI], "{state:?}");
    world.event("data", "VolumeResizeSuccessful", "", LIMIT).await;
}

/// An answer that says nothing final (Unavailable) records no error on the claim; the same
/// size is asked again until the driver answers, even once the user lowers the request (the
/// driver may already have grown the volume: an uncertain size is never lowered).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uncertain_expansion_errors_are_retried_until_they_pass() {
    let world = Beside::start("fault-grow-retry", &["--disable-node-expansion"], &[]).await;
    grown_claim(&world).await;
    world.relay().fail("ControllerExpandVolume", Code::Unavailable);
    request_size(&world, "data", "2Gi").await;
    let retried = eventually(LIMIT, || async { (expand_sizes(&world).len() >= 3).then_some(()) });
    assert!(retried.await.is_some(), "not retried:\n{}", world.sidecar.log_text());
    let claim = world.claim("data").await.unwrap();
    assert_eq!(storage(&claim).2.as_deref(), Some("ControllerResizeInProgress"));
    assert!(!condition_types(&claim).contains(&"ControllerResizeError".to_string()));
    world.event("data", "VolumeResizeFailed", "Unavailable", LIMIT).await;
    assert_eq!(world.hostpath().state_volumes()[0].size, GI, "the driver never saw a call");

    // Lowered while the outcome is uncertain (the driver may have grown it to 2Gi): the calls
    // after the change still ask for 2Gi, never less.
    let asked = expand_sizes(&world).len();
    request_size(&world, "data", "1536Mi").await;
    let later =
        eventually(LIMIT, || async { (expand_sizes(&world).len() > asked + 1).then_some(()) });
    assert!(later.await.is_some(), "not asked again:\n{}", world.sidecar.log_text());
    assert!(
        expand_sizes(&world).iter().all(|s| *s == 2 * GI),
        "lowered: {:?}",
        expand_sizes(&world)
    );
    let claim = world.claim("data").await.unwrap();
    assert_eq!(storage(&claim).1.as_deref(), Some("2Gi"), "allocatedResources kept");

    world.relay().clear("ControllerExpandVolume");
    world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| storage(c).0.as_deref() == Some("2Gi"))
        .await;
    assert!(expand_sizes(&world).iter().all(|s| *s == 2 * GI));
    assert_eq!(world.hostpath().state_volumes()[0].size, 2 * GI);
}

/// hostpathplugin reports online expansion; the relay makes it an offline-only driver. While a
/// pod uses the claim the driver refuses (FailedPrecondition) and is not asked again; once the
/// pod is gone the expansion goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_offline_only_driver_is_not_asked_while_the_claim_is_in_use() {
    fn offline_only(answer: &[u8]) -> Vec<u8> {
        use csi::plugin_capability::{Type, volume_expansion};
        let mut answer = csi::GetPluginCapabilitiesResponse::decode(answer).unwrap_or_default();
        for capability in &mut answer.capabilities {
            if let Some(Type::VolumeExpansion(e)) = &mut capability.r#type {
                e.r#type = volume_expansion::Type::Offline as i32;
            }
        }
        answer.encode_to_vec()
    }
    let mut world = Beside::start("fault-offline", &["--disable-node-expansion"], &[]).await;
    world.relay().always("GetPluginCapabilities", Fault::Rewrite(offline_only));
    world.kill_and_restart();
    assert!(world.sidecar.wait_ready(LIMIT).await, "{}", world.sidecar.log_text());
    grown_claim(&world).await;
    let pods = world.pod_using("user", "data").await;
    // What an offline-only driver answers for a published volume.
    world.relay().fail("ControllerExpandVolume", Code::FailedPrecondition);

    request_size(&world, "data", "2Gi").await;
    let note = "only supports offline expansion and volume is currently in-use";
    world.event("data", "VolumeResizeFailed", note, LIMIT).await;
    let claim = world.claim("data").await.unwrap();
    assert!(condition_types(&claim).contains(&"ControllerResizeError".to_string()));
    assert_eq!(storage(&claim).2.as_deref(), Some("ControllerResizeInProgress"));
    world.nudge_claim("data", LIMIT).await;
    assert_eq!(expand_sizes(&world).len(), 1, "not asked again while a pod uses the claim");

    pods.delete("user", &DeleteParams::default().grace_period(0)).await.unwrap();
    world.relay().clear("ControllerExpandVolume");
    let claim = world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| storage(c).0.as_deref() == Some("2Gi"))
        .await;
    assert!(condition_types(&claim).is_empty(), "{:?}", condition_types(&claim));
    assert_eq!(expand_sizes(&world), [2 * GI, 2 * GI]);
    assert_eq!(world.hostpath().state_volumes()[0].size, 2 * GI);
}

/// ControllerModifyVolume that cannot answer (Unavailable) leaves the change in progress and is
/// retried; when the driver answers, the claim's current class is the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_modify_the_driver_cannot_answer_is_in_progress_and_retried() {
    let world = Beside::start(
        "fault-vac",
        &["--enable-controller-modify-volume", "--accepted-mutable-parameter-names=iops"],
        &[],
    )
    .await;
    let ns = world.namespace.clone();
    for (name, iops) in [("fast", "3000"), ("faster", "6000")] {
        world.create_attributes_class(name, json!({"iops": iops})).await;
    }
    world.create_class("std", json!({})).await;
    let spec = json!({"spec": {"volumeAttributesClassName": format!("{ns}-fast")}});
    world.create_claim("data", "std", "1Gi", spec).await;
    world.bound("data", LIMIT).await;

    world.relay().fail("ControllerModifyVolume", Code::Unavailable);
    let patch = json!({"spec": {"volumeAttributesClassName": format!("{ns}-faster")}});
    world.claims().patch("data", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    world.event("data", "VolumeModifyFailed", "Unavailable", LIMIT).await;
    let retried = eventually(LIMIT, || async {
        (world.relay().calls("ControllerModifyVolume") >= 2).then_some(())
    });
    assert!(retried.await.is_some(), "not retried:\n{}", world.sidecar.log_text());
    let status = serde_json::to_value(world.claim("data").await.unwrap().status).unwrap();
    assert_eq!(status["modifyVolumeStatus"]["status"], json!("InProgress"), "{status}");
    assert_eq!(status["currentVolumeAttributesClassName"], json!(format!("{ns}-fast")));

    world.relay().clear("ControllerModifyVolume");
    let settled = world
        .claim_until("data", "the new current class", LIMIT, |c| {
            let s = serde_json::to_value(&c.status).unwrap_or_default();
            s["currentVolumeAttributesClassName"] == json!(format!("{ns}-faster"))
                && s.get("modifyVolumeStatus").is_none_or(Value::is_null)
        })
        .await;
    assert!(settled.status.is_some());
    let events = world.events("data").await;
    assert!(
        warnings(&events).iter().all(|(_, reason, _)| reason == "VolumeModifyFailed"),
        "{events:?}"
    );
}

/// A clone's source is held while the copy is in flight: its CreateVolume reaches the driver,
/// whose answer the relay holds 4 s, and the source is deleted meanwhile. A watch opened before
/// sees the source go only after that answer was let through (the cloning-protection finalizer
/// held it), and the clone is Bound with the source's volume copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clone_source_is_held_while_the_copy_is_in_flight() {
    const HOLD: Duration = Duration::from_secs(4);
    let world = Beside::start("fault-clone", &[], &[]).await;
    world.create_class("std", json!({})).await;
    world.create_claim("origin", "std", "1Gi", json!({})).await;
    world.bound("origin", LIMIT).await;

    let params = WatchParams::default().fields("metadata.name=origin");
    let stream = world.claims().watch(&params, "0").await.expect("cannot watch the source");
    let deleted = Arc::new(Mutex::new(None));
    let sink = deleted.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(WatchEvent::Deleted(_)) = event {
                *sink.lock().unwrap() = Some(SystemTime::now());
            }
        }
    });

    let creates = || {
        let calls = world.relay().callers().into_iter();
        calls.filter(|(_, _, m)| m == "CreateVolume").map(|(at, _, _)| at).collect::<Vec<_>>()
    };
    let before = creates().len();
    world.relay().inject("CreateVolume", Fault::AnswerLate(HOLD));
    world.create_clone("copy", "std", "1Gi", "origin").await;
    let sent = eventually(LIMIT, || async { creates().get(before).copied() });
    let sent = sent.await.expect("the clone's CreateVolume");
    world.claims().delete("origin", &DeleteParams::default()).await.unwrap();
    world.bound("copy", LIMIT).await;
    let gone = eventually(LIMIT, || async { *deleted.lock().unwrap() }).await;
    let gone =
        gone.unwrap_or_else(|| panic!("the source never went:\n{}", world.sidecar.log_text()));
    let held = gone.duration_since(sent).unwrap_or_default();
    assert!(held >= HOLD, "the source went {held:?} after the copy started, before its answer");
    let copies = world.relay().requests::<csi::CreateVolumeRequest>("CreateVolume");
    let copy = copies.last().expect("the clone's request");
    assert!(copy.volume_content_source.is_some(), "the clone's request copies the source");
}

/// kill -9, then a new process at once, ten times over, with the intent journal: each new one
/// may find the journal's lock still held by the one dying, waits for it, and takes over; none
/// exits for it. Then a start while the lock is held (by the test, as a holder slow to exit):
/// it waits with a log line, stays alive, and takes over once let go. A claim made after is
/// Bound, one volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_right_after_kill_9_takes_the_intent_journal_over() {
    let mut world = Beside::start("restart-at-once", &[], &[INTENT_JOURNAL]).await;
    world.create_class("std", json!({})).await;
    for round in 0..10 {
        assert!(
            world.sidecar.wait_ready(LIMIT).await,
            "round {round}: the sidecar did not become ready:\n{}",
            world.sidecar.log_text()
        );
        world.kill_and_restart();
    }
    assert!(world.sidecar.wait_ready(LIMIT).await, "{}", world.sidecar.log_text());
    // The dying holder's moment, made long: the test holds the lock as a process still exiting
    // would, while a new sidecar starts; it waits, says so, and takes over once let go.
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    let lock = std::fs::File::options()
        .write(true)
        .open(world.dir.path().join("intents/intents.lock"))
        .unwrap();
    lock.try_lock().expect("the killed sidecar let go of the lock");
    world.restart_with(&[], &[]).await;
    let waiting = eventually(LIMIT, || async {
        world.sidecar.log_text().contains("waiting for it to exit").then_some(())
    })
    .await;
    assert!(
        waiting.is_some(),
        "no wait for the holder:
{}",
        world.sidecar.log_text()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(world.sidecar.child.try_wait().unwrap().is_none(), "{}", world.sidecar.log_text());
    drop(lock);
    assert!(world.sidecar.wait_ready(LIMIT).await, "{}", world.sidecar.log_text());
    assert!(world.sidecar.log_text().contains("taken over from the process that held it"));
    world.create_claim("after", "std", "1Gi", json!({})).await;
    world.bound("after", LIMIT).await;
    assert_eq!(world.hostpath().state_volumes().len(), 1);
    let mut waited = 0;
    for entry in std::fs::read_dir(world.dir.path()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("sidecar-") && name.ends_with(".log") {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            assert!(!text.contains("another process holds it"), "{name}:\n{text}");
            waited += usize::from(text.contains("waiting for it to exit"));
        }
    }
    eprintln!("{waited} of 11 starts waited for the lock's holder to exit");
    assert!(waited >= 1, "the held start waited");
}
