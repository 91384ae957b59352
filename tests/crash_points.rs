//! Crashes at each named place where one leaves distinguishable state (src/runtime/crash_point.rs),
//! hit on purpose, in the shipped mode: beside kube-controller-manager, hostpathplugin behind the
//! test relay. The sidecar is built with the `failpoints` feature and aborts (as kill -9 leaves
//! it) where `CSI_PV_CONTROLLER_CRASH_AT` says; "a call sent, its answer not read" is made by the
//! relay holding the driver's answer while the sidecar is killed. The claim is then kept, or
//! deleted while the sidecar is down, and the sidecar started again. The driver's own state is
//! the judge: the claim kept has exactly its one volume, the claim deleted has none; nothing else
//! is left, in both intent modes (finalizer and `--intent-journal`).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use csi_pv_controller::runtime::crash_point::{self as point, ENV};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use support::cluster::{INTENT_JOURNAL, World, eventually, journal_entries};
use support::csi_relay::Fault;
use support::relayed::{Beside, Relayed};
use support::sidecar::Sidecar;
use support::snapshots::{self, Snapshotter};

/// The restore protection's sweep, often enough for a test.
const SWEEP: &str = "--snapshot-orphan-sweep-interval=3s";
/// csi-provisioner's name for the restore protection, which we share.
const RESTORE_PROTECTION: &str =
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection";

const LIMIT: Duration = Duration::from_secs(90);
const GI: i64 = 1 << 30;

/// How the sidecar goes down.
#[derive(Clone, Copy, Debug)]
enum Crash {
    /// At this crash point.
    At(&'static str),
    /// Killed once the driver has acted on this call, before its answer reaches the sidecar.
    AnswerUnread(&'static str),
}

/// Starts the sidecar again with the world's flags; with `at`, set to crash there.
async fn restart(world: &mut World<Relayed>, at: Option<&str>) {
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    let env: Vec<(&str, &str)> = at.map(|at| (ENV, at)).into_iter().collect();
    world.sidecar = Sidecar::start_with_env(world.dir.path(), &world.args, &env);
    assert!(world.sidecar.wait_ready(LIMIT).await, "{}", world.sidecar.log_text());
}

/// Arms `crash` before the action that should meet it.
async fn arm(world: &mut World<Relayed>, crash: Crash) {
    match crash {
        Crash::At(at) => restart(world, Some(at)).await,
        Crash::AnswerUnread(method) => {
            world.relay().inject(method, Fault::AnswerLate(Duration::from_secs(600)));
        }
    }
}

/// Waits until `crash` has happened: the process aborted at its point, or (the answer held by
/// the relay) the driver acted, and then kills it.
async fn went_down(
    world: &mut World<Relayed>,
    crash: Crash,
    acted: impl Fn(&World<Relayed>) -> bool,
) {
    match crash {
        Crash::At(at) => {
            let exited = tokio::time::timeout(LIMIT, world.sidecar.child.wait()).await;
            assert!(
                exited.is_ok(),
                "no crash at {at} (is the binary built with --features failpoints, as make integration builds it?):\n{}",
                world.sidecar.log_text()
            );
            let log = world.sidecar.log_text();
            assert!(log.contains(&format!("crash point {at}: aborting")), "{log}");
        }
        Crash::AnswerUnread(method) => {
            let done = eventually(LIMIT, || async { acted(world).then_some(()) }).await;
            assert!(done.is_some(), "the driver never acted on {method}");
            let _ = world.sidecar.child.start_kill();
            let _ = world.sidecar.child.wait().await;
        }
    }
}

/// The driver's volumes named `name`.
fn held(world: &World<Relayed>, name: &str) -> usize {
    world.hostpath().state_volumes().iter().filter(|v| v.name == name).count()
}

/// A claim of class `std` crashed at `crash` while being provisioned; deleted while the sidecar
/// is down when `delete`; then the end state, against the driver.
async fn provision_through(world: &mut World<Relayed>, claim: &str, crash: Crash, delete: bool) {
    arm(world, crash).await;
    let created = world.create_claim(claim, "std", "1Gi", json!({})).await;
    let name = format!("pvc-{}", created.metadata.uid.clone().unwrap());
    let made = matches!(crash, Crash::AnswerUnread(_));
    went_down(world, crash, |w| held(w, &name) == 1).await;
    if made {
        assert_eq!(held(world, &name), 1, "the driver made the volume before the crash");
    }
    if delete {
        world.claims().delete(claim, &DeleteParams::default()).await.unwrap();
    }
    restart(world, None).await;
    let what = format!("{crash:?}, claim {}", if delete { "deleted while down" } else { "kept" });
    if delete {
        let gone = eventually(LIMIT, || async {
            let claim_gone = world.claims().get_opt(claim).await.ok()?.is_none();
            let volume_gone = world.volumes().get_opt(&name).await.ok()?.is_none();
            (claim_gone && volume_gone && held(world, &name) == 0).then_some(())
        })
        .await;
        assert!(
            gone.is_some(),
            "{what}: left claim {:?}, PV {:?}, driver {:?}\n{}",
            world.claims_left().await,
            world.volumes().get_opt(&name).await.ok().flatten().map(|_| &name),
            world.hostpath().state_volumes(),
            world.sidecar.log_text()
        );
    } else {
        let (_, pv) = world.bound(claim, LIMIT).await;
        assert_eq!(pv.metadata.name.as_deref(), Some(name.as_str()), "{what}");
        assert_eq!(held(world, &name), 1, "{what}: one volume, no duplicate");
    }
}

/// Every provisioning crash, kept and deleted while down, in one intent mode; at the end the
/// driver holds exactly the kept claims' volumes.
async fn provisioning_crashes(world: &mut World<Relayed>) {
    world.create_class("std", json!({})).await;
    let crashes = crashes_of("provision-", "CreateVolume");
    let mut kept = 0;
    for (i, crash) in crashes.into_iter().enumerate() {
        for delete in [false, true] {
            let claim = format!("c{i}-{}", if delete { "deleted" } else { "kept" });
            provision_through(world, &claim, crash, delete).await;
            kept += usize::from(!delete);
        }
    }
    let state = world.hostpath().state_volumes();
    assert_eq!(state.len(), kept, "no orphan: {state:?}");
    assert_eq!(world.driver_volumes_in_api().await.len(), kept);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn provisioning_crash_points_with_the_intent_finalizer() {
    let mut world = Beside::start("crash-fin", &[], &[]).await;
    provisioning_crashes(&mut world).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn provisioning_crash_points_with_the_intent_journal() {
    let mut world = Beside::start("crash-journal", &[], &[INTENT_JOURNAL]).await;
    provisioning_crashes(&mut world).await;
    let entries =
        eventually(LIMIT, || async { journal_entries(world.dir.path()).is_empty().then_some(()) });
    assert!(entries.await.is_some(), "journal left: {:?}", journal_entries(world.dir.path()));
}

/// Restores from a VolumeSnapshot, crashed before the intent (the snapshot already protected),
/// with the intent recorded, and with CreateVolume's answer unread; the claim and the snapshot are both deleted while the sidecar is down
/// (snapshot-controller lets a deleted claim's snapshot go at once). Our restore protection
/// holds the snapshot, so the restarted sidecar can ask CreateVolume again, find the volume and
/// delete it; then the snapshot goes. A restore kept through a crash is bound, and its snapshot,
/// deleted while down, goes once it is.
async fn restore_crashes(world: &mut Beside) {
    let socket = world.hostpath().socket.clone();
    let snapshotter = Snapshotter::start(world.plane, &socket, world.dir.path()).await;
    let snapshot_class = format!("{}-snaps", world.namespace);
    snapshots::create_class(&world.client, &snapshot_class, &world.driver_name).await;
    let snapshots = snapshots::snapshots(&world.client, &world.namespace);
    world.create_class("std", json!({})).await;
    world.create_claim("origin", "std", "1Gi", json!({})).await;
    world.bound("origin", LIMIT).await;
    let cases = [
        // Protected, no intent yet: the claim is gone at once; the sweep takes the protection off.
        (Crash::At(point::BEFORE_INTENT), true),
        (Crash::At(point::BEFORE_CREATE), true),
        (Crash::AnswerUnread("CreateVolume"), true),
        (Crash::At(point::AFTER_CREATE), false),
    ];
    for (i, (crash, delete)) in cases.into_iter().enumerate() {
        let snap = format!("snap{i}");
        let taken = snapshots::take(
            &world.client,
            &world.namespace,
            &snap,
            &snapshot_class,
            "origin",
            LIMIT,
        );
        assert!(
            taken.await.is_some(),
            "snapshot never ready:
{}",
            snapshotter.log_text()
        );
        arm(world, crash).await;
        let source = json!({"spec": {"dataSource": {
            "apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": snap}}});
        let claim = format!("r{i}");
        let created = world.create_claim(&claim, "std", "1Gi", source).await;
        let name = format!("pvc-{}", created.metadata.uid.clone().unwrap());
        went_down(world, crash, |w| held(w, &name) == 1).await;
        if matches!(crash, Crash::At(point::BEFORE_INTENT)) {
            assert_eq!(held(world, &name), 0, "no CreateVolume before the intent");
        }
        let protected = snapshots.get(&snap).await.unwrap();
        assert!(
            protected.metadata.finalizers.iter().flatten().any(|f| f == RESTORE_PROTECTION),
            "{crash:?}: {:?}",
            protected.metadata.finalizers
        );
        if delete {
            world.claims().delete(&claim, &DeleteParams::default()).await.unwrap();
        }
        snapshots.delete(&snap, &DeleteParams::default()).await.unwrap();
        restart(world, None).await;
        let what = format!("{crash:?}, claim {}", if delete { "deleted" } else { "kept" });
        if !delete {
            let (_, pv) = world.bound(&claim, LIMIT).await;
            assert_eq!(pv.metadata.name.as_deref(), Some(name.as_str()), "{what}");
        }
        let settled = eventually(LIMIT, || async {
            let snapshot_gone = snapshots.get_opt(&snap).await.ok()?.is_none();
            let claim_gone = world.claims().get_opt(&claim).await.ok()?.is_none();
            let volumes = held(world, &name);
            (snapshot_gone && (claim_gone == delete) && volumes == usize::from(!delete))
                .then_some(())
        })
        .await;
        assert!(
            settled.is_some(),
            "{what}: snapshot {:?}, claims {:?}, driver {:?}\n{}\n{}",
            snapshots.get_opt(&snap).await.ok().flatten().map(|s| s.metadata),
            world.claims_left().await,
            world.hostpath().state_volumes(),
            world.sidecar.log_text(),
            snapshotter.log_text()
        );
    }
    // The origin and the kept restore; every snapshot deleted in the driver too.
    let state = world.hostpath().state_volumes();
    assert_eq!(state.len(), 2, "no orphan: {state:?}");
    let snapshots_gone =
        eventually(LIMIT, || async { (world.hostpath().state_snapshots() == 0).then_some(()) });
    assert!(snapshots_gone.await.is_some(), "snapshots left in the driver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restore_crashes_with_the_snapshot_deleted_while_down_with_the_intent_finalizer() {
    let mut world = Beside::start("crash-rfin", &[], &[SWEEP]).await;
    restore_crashes(&mut world).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restore_crashes_with_the_snapshot_deleted_while_down_with_the_intent_journal() {
    let mut world = Beside::start("crash-rjournal", &[], &[INTENT_JOURNAL, SWEEP]).await;
    restore_crashes(&mut world).await;
    let entries =
        eventually(LIMIT, || async { journal_entries(world.dir.path()).is_empty().then_some(()) });
    assert!(entries.await.is_some(), "journal left: {:?}", journal_entries(world.dir.path()));
}

fn capacity(claim: &PersistentVolumeClaim) -> Option<String> {
    let status = claim.status.as_ref()?;
    status.capacity.as_ref()?.get("storage").map(|q| q.0.clone())
}

/// Deletion: crashed before DeleteVolume, with its answer unread, and after it; expansion:
/// with ControllerExpandVolume's answer unread, after it, and after the PV's new capacity. After
/// the restart each volume is gone from the driver and the API, or has its new size in the
/// driver, the PV and the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletion_and_expansion_crash_points() {
    let mut world = Beside::start("crash-del", &["--disable-node-expansion"], &[]).await;
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    for (i, crash) in crashes_of("delete-", "DeleteVolume").into_iter().enumerate() {
        let claim = format!("d{i}");
        world.create_claim(&claim, "grow", "1Gi", json!({})).await;
        let (_, pv) = world.bound(&claim, LIMIT).await;
        let name = pv.metadata.name.clone().unwrap();
        arm(&mut world, crash).await;
        world.claims().delete(&claim, &DeleteParams::default()).await.unwrap();
        went_down(&mut world, crash, |w| held(w, &name) == 0).await;
        restart(&mut world, None).await;
        assert!(world.volume_gone(&name, LIMIT).await, "{crash:?}: PV {name} left");
        assert_eq!(held(&world, &name), 0, "{crash:?}");
    }
    assert!(world.hostpath().state_volumes().is_empty());

    let expansions = crashes_of("expand-", "ControllerExpandVolume");
    for (i, crash) in expansions.iter().copied().enumerate() {
        let claim = format!("e{i}");
        world.create_claim(&claim, "grow", "1Gi", json!({})).await;
        let (_, pv) = world.bound(&claim, LIMIT).await;
        let name = pv.metadata.name.clone().unwrap();
        arm(&mut world, crash).await;
        let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
        world.claims().patch(&claim, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
        let grown = |w: &World<Relayed>| {
            w.hostpath().state_volumes().iter().any(|v| v.name == name && v.size == 2 * GI)
        };
        went_down(&mut world, crash, grown).await;
        restart(&mut world, None).await;
        world
            .claim_until(&claim, "capacity 2Gi", LIMIT, |c| capacity(c).as_deref() == Some("2Gi"))
            .await;
        let pv = world.volumes().get(&name).await.unwrap();
        let pv_size = pv.spec.and_then(|s| s.capacity).and_then(|c| c.get("storage").cloned());
        assert_eq!(pv_size.map(|q| q.0).as_deref(), Some("2Gi"), "{crash:?}");
        assert!(grown(&world), "{crash:?}: {:?}", world.hostpath().state_volumes());
    }
    assert_eq!(world.hostpath().state_volumes().len(), expansions.len());
}

/// The crashes of one operation: the binary's crash points named `<prefix>…` (`point::ALL`, so
/// that a point added there is tested here without another list), each observed when hit
/// (`went_down` reads the process's own "crash point …: aborting"), and a kill while the
/// driver's answer to `method` is held.
fn crashes_of(prefix: &str, method: &'static str) -> Vec<Crash> {
    let points = point::ALL.iter().filter(|p| p.starts_with(prefix)).map(|p| Crash::At(p));
    let crashes: Vec<Crash> = points.chain([Crash::AnswerUnread(method)]).collect();
    assert!(crashes.len() >= 3, "{prefix}: {crashes:?}");
    crashes
}

/// Every crash point the code stops at is in `point::ALL`, and belongs to one of the operations
/// whose tests above go through their points: none is missed by a test.
#[test]
fn every_crash_point_is_in_a_tested_operation() {
    let mut used = Vec::new();
    let mut files = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for call in text.split("crash_point::here(crate::runtime::crash_point::").skip(1) {
                used.push(call.split(')').next().unwrap_or_default().to_string());
            }
        }
    }
    // The points' names and values as src/runtime/crash_point.rs declares them.
    let declared =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/runtime/crash_point.rs"));
    let declared: BTreeMap<String, String> = declared
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (name, value) = l.strip_prefix("pub const ")?.split_once(": &str = \"")?;
            Some((name.to_string(), value.strip_suffix("\";")?.to_string()))
        })
        .collect();
    let by_name = |name: &str| declared.get(name).map(String::as_str).unwrap_or("undeclared");
    assert_eq!(used.len(), point::ALL.len(), "call sites {used:?}");
    for name in &used {
        assert!(point::ALL.contains(&by_name(name)), "{name} is not in point::ALL");
    }
    for at in point::ALL {
        let tested = ["provision-", "delete-", "expand-"].iter().any(|p| at.starts_with(p));
        assert!(tested, "crash point {at} belongs to no tested operation");
    }
}
