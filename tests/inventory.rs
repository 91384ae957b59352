//! The volume reconciler in the shipped mode (`--binder=external` beside kube-controller-
//! manager): the driver's volumes found adopted, in flight, orphaned or unknown, PVs found lost,
//! and an orphan deleted only with `--reconcile-delete-orphans`, only after the grace, and never
//! a volume in flight or adopted. On hostpathplugin, whose volume IDs are UUIDs of its own (so
//! nothing it lists can be attributed to a claim, and an orphan is "unknown"), and on the fake
//! driver with IDs that carry the CreateVolume name (`fake/<name>`, as disk-path IDs do). And
//! `reconcile` and `explain` taking the running controller's flags with `--flags-from`.

mod support;

use std::time::{Duration, Instant};

use csi_pv_controller::csi::v1 as csi;
use csi_pv_controller::runtime::crash_point::{self as point, ENV};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use support::cluster::{INTENT_JOURNAL, World, eventually};
use support::control_plane::{control_plane, fresh_plane};
use support::fake_driver::{Call, DriverConfig, FakeDriver};
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use support::relayed::Beside;
use support::sidecar::{Sidecar, sample};

const LIMIT: Duration = Duration::from_secs(90);
const GRACE: Duration = Duration::from_secs(4);

/// `csi-pv-controller reconcile <driver> --output json` with the admin kubeconfig: its JSON.
fn reconcile_json(
    kubeconfig: &std::path::Path,
    endpoint: &str,
    driver: &str,
    extra: &[&str],
) -> Value {
    let output = std::process::Command::new(support::sidecar::binary())
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--csi-address={endpoint}"))
        .args(extra)
        .args(["reconcile", driver, "--output", "json"])
        .output()
        .expect("cannot run reconcile");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "reconcile failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn state_of<'a>(report: &'a Value, id: &str) -> Option<&'a str> {
    report["volumes"].as_array()?.iter().find(|v| v["volumeId"] == id)?["state"].as_str()
}

/// Waits until the reconciler has begun `more` passes beyond those it had: each pass writes one
/// "volume reconciler pass" line, and begins only once the one before has done its deletions.
async fn reconciler_passes(sidecar: &Sidecar, more: usize) {
    let count = || sidecar.log_text().matches("volume reconciler pass:").count();
    let before = count();
    let done = eventually(LIMIT, || async { (count() >= before + more).then_some(()) }).await;
    assert!(done.is_some(), "not {more} more reconciler passes:\n{}", sidecar.log_text());
}

async fn metric(sidecar: &Sidecar, state: &str) -> Option<f64> {
    sample(&sidecar.metrics().await, &format!("csi_pv_controller_volumes{{state=\"{state}\"}}"))
}

/// hostpathplugin: the bound claim's volume is adopted; a volume made for a claim that is gone
/// (leaked, as when the claim went while the journal was lost) is unknown, because hostpath's
/// IDs carry no name, and it stays even with --reconcile-delete-orphans; a volume deleted
/// behind our back leaves its PV lost, with one VolumeMissing event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostpath_adopted_unknown_and_lost() {
    let args = [
        "--reconcile-period=1s",
        "--reconcile-grace=2s",
        "--reconcile-delete-orphans",
        "--reconcile-page-size=100",
    ];
    let world = Beside::start("inventory-hostpath", &[], &args).await;
    world.create_class("std", json!({})).await;
    world.create_claim("kept", "std", "1Gi", json!({})).await;
    world.create_claim("vanish", "std", "1Gi", json!({})).await;
    let kept = world.bound("kept", LIMIT).await.1.metadata.name.unwrap();
    let vanish = world.bound("vanish", LIMIT).await.1.metadata.name.unwrap();
    let hostpath = world.hostpath();
    let handle = |pv: &str| {
        hostpath.state_volumes().into_iter().find(|v| v.name == pv).map(|v| v.id).expect("volume")
    };
    let (kept_id, vanish_id) = (handle(&kept), handle(&vanish));
    let leaked_name = "pvc-11111111-2222-4333-8444-555555555555";
    let leaked = hostpath
        .client()
        .create_volume(csi::CreateVolumeRequest {
            name: leaked_name.into(),
            capacity_range: Some(csi::CapacityRange { required_bytes: 1 << 20, limit_bytes: 0 }),
            volume_capabilities: vec![mount_capability()],
            ..Default::default()
        })
        .await
        .expect("CreateVolume behind the sidecar's back")
        .volume_id;
    hostpath
        .client()
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: vanish_id.clone(),
            ..Default::default()
        })
        .await
        .expect("DeleteVolume behind the sidecar's back");

    let note = world.volume_event(&vanish, "VolumeMissing", LIMIT).await;
    let note =
        note.unwrap_or_else(|| panic!("no VolumeMissing event\n{}", world.sidecar.log_text()));
    assert!(note.contains(&vanish_id), "{note}");
    let counted = eventually(LIMIT, || async {
        (metric(&world.sidecar, "lost").await == Some(1.0)
            && metric(&world.sidecar, "unknown").await == Some(1.0)
            && metric(&world.sidecar, "adopted").await == Some(1.0))
        .then_some(())
    })
    .await;
    assert!(counted.is_some(), "metrics:\n{}", world.sidecar.metrics().await);
    // Four more passes (1 s apart, past the 2 s grace), with the flag: the unknown volume is
    // still there.
    reconciler_passes(&world.sidecar, 4).await;
    let ids: Vec<String> = hostpath.state_volumes().into_iter().map(|v| v.id).collect();
    assert!(ids.contains(&leaked) && ids.contains(&kept_id), "{ids:?}");
    assert!(world.sidecar.log_text().lines().all(|l| !l.contains("deleted an orphaned volume")));

    let report = reconcile_json(
        &world.plane.admin_kubeconfig,
        &world.relay().endpoint(),
        &world.driver_name,
        &["--reconcile-page-size=100"],
    );
    assert_eq!(state_of(&report, &kept_id), Some("adopted"), "{report}");
    assert_eq!(state_of(&report, &leaked), Some("unknown"), "{report}");
    assert_eq!(report["lostPersistentVolumes"], json!([vanish]), "{report}");
    assert_eq!(report["complete"], json!(true), "{report}");

    // hostpathplugin ignores paging: asked for 1, it hands one volume and no next token. The
    // listing starts again with no limit, and finds every volume, the one past the cut too.
    let asked_before = world.relay().requests::<csi::ListVolumesRequest>("ListVolumes").len();
    let report = reconcile_json(
        &world.plane.admin_kubeconfig,
        &world.relay().endpoint(),
        &world.driver_name,
        &["--reconcile-page-size=1"],
    );
    assert_eq!(state_of(&report, &kept_id), Some("adopted"), "{report}");
    assert_eq!(state_of(&report, &leaked), Some("unknown"), "{report}");
    assert_eq!(report["complete"], json!(true), "{report}");
    let asked: Vec<(i32, String)> = world
        .relay()
        .requests::<csi::ListVolumesRequest>("ListVolumes")
        .into_iter()
        .skip(asked_before)
        .map(|r| (r.max_entries, r.starting_token))
        .collect();
    assert_eq!(asked, [(1, String::new()), (0, String::new())], "a cut page, then the whole list");
}

fn mount_capability() -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode { mode: Mode::SingleNodeWriter as i32 }),
    }
}

fn listing_driver() -> DriverConfig {
    DriverConfig { list_volumes: true, ids_carry_names: true, ..DriverConfig::default() }
}

/// A driver whose IDs carry names: an orphan made as it happens (CreateVolume answered, the
/// process killed before the PV, the claim deleted while it was down, the intent journal lost)
/// is named by the dry run, deleted with the flag only after the grace, and alone: the volume in
/// flight (its claim waits for a consumer), the adopted ones and the unknown one stay, and the
/// PV whose volume went is lost, not deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fake_orphan_deleted_only_with_the_flag_after_the_grace() {
    let plane = fresh_plane();
    let _kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
    let grace = format!("--reconcile-grace={}s", GRACE.as_secs());
    let args = [INTENT_JOURNAL, "--reconcile-period=1s", grace.as_str()];
    let mut world = World::start_fake_on(plane, "inventory-fake", listing_driver(), &args).await;
    world.create_class("std", json!({})).await;
    world.create_class("late", json!({"volumeBindingMode": "WaitForFirstConsumer"})).await;
    world.create_claim("kept", "std", "1Gi", json!({})).await;
    world.create_claim("vanish", "std", "1Gi", json!({})).await;
    let kept = world.bound("kept", LIMIT).await.1.metadata.name.unwrap();
    let vanish = world.bound("vanish", LIMIT).await.1.metadata.name.unwrap();
    let waiting = world.create_claim("waiting", "late", "1Gi", json!({})).await;
    let in_flight = format!("fake/pvc-{}", waiting.metadata.uid.clone().unwrap());
    world.driver.add_volume(&in_flight, "made, its answer not yet read", 1 << 30);
    world.driver.add_volume("vendor-disk-7", "someone else's", 1 << 30);
    assert!(world.driver.remove_volume(&format!("fake/{vanish}")));

    world.restart_with(&[], &[(ENV, point::AFTER_CREATE)]).await;
    let dropped = world.create_claim("dropped", "std", "1Gi", json!({})).await;
    let orphan = format!("fake/pvc-{}", dropped.metadata.uid.clone().unwrap());
    let exited = tokio::time::timeout(LIMIT, world.sidecar.child.wait()).await;
    assert!(exited.is_ok(), "no crash after CreateVolume:\n{}", world.sidecar.log_text());
    world.claims().delete("dropped", &DeleteParams::default()).await.unwrap();
    let journal = world.dir.path().join("intents");
    std::fs::remove_dir_all(&journal).expect("the journal is lost");
    std::fs::create_dir_all(&journal).expect("an empty journal");
    let claim_gone = eventually(LIMIT, || async {
        world.claims().get_opt("dropped").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(claim_gone.is_some(), "claim dropped still there");

    // The dry run names it once the grace has passed, and deletes nothing.
    world.restart_with(&[], &[]).await;
    let named = eventually(LIMIT, || async {
        let log = world.sidecar.log_text();
        log.lines().any(|l| l.contains("would delete") && l.contains(&orphan)).then_some(())
    })
    .await;
    assert!(named.is_some(), "no dry-run line for {orphan}:\n{}", world.sidecar.log_text());
    assert!(world.driver.calls_of("DeleteVolume").is_empty());
    let report = reconcile_json(
        &world.plane.admin_kubeconfig,
        &world.driver.endpoint(),
        &world.driver_name,
        &["--reconcile-page-size=2"],
    );
    assert_eq!(state_of(&report, &orphan), Some("orphaned"), "{report}");
    assert_eq!(state_of(&report, &in_flight), Some("in_flight"), "{report}");
    assert_eq!(state_of(&report, "vendor-disk-7"), Some("unknown"), "{report}");
    assert_eq!(state_of(&report, &format!("fake/{kept}")), Some("adopted"), "{report}");
    assert_eq!(report["lostPersistentVolumes"], json!([vanish]), "{report}");

    // With the flag: a new process remembers nothing, so the grace runs again from its first pass.
    let started = Instant::now();
    world.restart_with(&["--reconcile-delete-orphans"], &[]).await;
    let deleted = eventually(LIMIT, || async {
        world.driver.volumes().iter().all(|v| v.id != orphan).then_some(started.elapsed())
    })
    .await;
    let after =
        deleted.unwrap_or_else(|| panic!("orphan not deleted:\n{}", world.sidecar.log_text()));
    assert!(after >= GRACE, "deleted {after:?} after the start, within the {GRACE:?} grace");
    // Two more passes: the one that deleted is done, and the next deletes nothing more.
    reconciler_passes(&world.sidecar, 2).await;
    let deletes: Vec<String> = world
        .driver
        .calls_of("DeleteVolume")
        .into_iter()
        .filter_map(|c| match c {
            Call::DeleteVolume(r) => Some(r.volume_id),
            _ => None,
        })
        .collect();
    assert_eq!(deletes, std::slice::from_ref(&orphan), "only the orphan is deleted");
    let ids: Vec<String> = world.driver.volumes().into_iter().map(|v| v.id).collect();
    for stays in [in_flight.as_str(), "vendor-disk-7", &format!("fake/{kept}")] {
        assert!(ids.iter().any(|i| i == stays), "{stays} was deleted: {ids:?}");
    }
    assert!(world.volumes().get_opt(&vanish).await.unwrap().is_some(), "the lost PV stays");
    let note = world.volume_event(&vanish, "VolumeMissing", LIMIT).await;
    assert!(note.is_some(), "no VolumeMissing event for the lost PV");
    let text = world.sidecar.metrics().await;
    assert_eq!(sample(&text, "csi_pv_controller_orphans_deleted_total"), Some(1.0), "{text}");
}

/// 10,000 volumes listed in pages of 500 with a 20 ms pause: 20 ListVolumes calls, each asking
/// for 500 from the token the last one gave, at no more than one call per pause; the process's
/// peak memory is printed and bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_volumes_cost_paged_paced_calls_and_bounded_memory() {
    let plane = control_plane();
    let dir = tempfile::tempdir().unwrap();
    let config = DriverConfig { name: "inventory-scale.csi.test".into(), ..listing_driver() };
    let driver = FakeDriver::start(&dir.path().join("csi.sock"), config).await.unwrap();
    for n in 0..10_000 {
        driver.add_volume(&format!("fake/pvc-{n:08x}-0000-4000-8000-{n:012x}"), "", 1 << 30);
    }
    let started = Instant::now();
    // Reaped by wait4 (wait_with_peak_memory), which also reads its peak memory.
    #[allow(clippy::zombie_processes)]
    let mut child = std::process::Command::new(support::sidecar::binary())
        .arg(format!("--kubeconfig={}", plane.admin_kubeconfig.display()))
        .arg(format!("--csi-address={}", driver.endpoint()))
        .args(["--reconcile-page-size=500", "--reconcile-page-interval=20ms"])
        .args(["reconcile", "inventory-scale.csi.test", "--output", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("cannot run reconcile");
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().expect("stdout"), &mut out).expect("read");
    let (status, peak_kib) = support::wait_with_peak_memory(child.id());
    let elapsed = started.elapsed();
    assert_eq!(status, 0, "reconcile exited {status}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    let volumes = report["volumes"].as_array().expect("volumes");
    assert_eq!(volumes.len(), 10_000);
    assert!(volumes.iter().all(|v| v["state"] == "orphaned"), "no claim exists for any");
    let pages: Vec<(i32, String)> = driver
        .calls_of("ListVolumes")
        .into_iter()
        .filter_map(|c| match c {
            Call::ListVolumes(r) => Some((r.max_entries, r.starting_token)),
            _ => None,
        })
        .collect();
    let expected: Vec<(i32, String)> = (0..20)
        .map(|p| (500, if p == 0 { String::new() } else { (p * 500).to_string() }))
        .collect();
    assert_eq!(pages, expected);
    assert!(elapsed >= Duration::from_millis(19 * 20), "19 pauses between 20 pages");
    println!(
        "10,000 volumes: {} ListVolumes calls, {:?} in all, peak memory {} KiB",
        pages.len(),
        elapsed,
        peak_kib
    );
    assert!(peak_kib < 128 * 1024, "peak memory {peak_kib} KiB");
}

/// `explain` and `reconcile` with `--flags-from`: the controller's flags taken from its pod's
/// container args (its in-pod `--kubeconfig` left out) or from a file, the typed ones winning.
/// Each read flag is one the command's answer depends on: reconcile reaches the driver only
/// through the read `--csi-address`, and explain names the volume it would create with the
/// read `--volume-name-prefix`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_shot_commands_take_the_controllers_flags() {
    let world = Beside::start("inventory-flags", &[], &[]).await;
    let ns = world.namespace.clone();
    world.create_class("std", json!({})).await;
    world.create_claim("kept", "std", "1Gi", json!({})).await;
    let kept = world.bound("kept", LIMIT).await.1.metadata.name.unwrap();
    let endpoint = world.relay().endpoint();
    let args = json!([
        format!("--csi-address={endpoint}"),
        "--kubeconfig=/var/run/not-here/kubeconfig",
        "--volume-name-prefix=frompod",
        "-v=2",
    ]);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "controller"},
        "spec": {"containers": [
            {"name": "hostpath", "image": "registry.k8s.io/sig-storage/hostpathplugin:v1.18.0"},
            {"name": "csi-pv-controller", "image": "csi-pv-controller:test", "args": args},
        ]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(world.client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    // The kubeconfig from the environment, as in a shell: nothing typed hides the pod's.
    let one_shot = |args: &[&str]| {
        let output = std::process::Command::new(support::sidecar::binary())
            .env("KUBECONFIG", &world.plane.admin_kubeconfig)
            .args(args)
            .output()
            .expect("cannot run the binary");
        let (out, err) = (output.stdout, output.stderr);
        let (out, err) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
        assert!(output.status.success(), "{args:?} failed: {out}{err}");
        (out.to_string(), err.to_string())
    };

    let from_pod = format!("--flags-from=pod/{ns}/controller");
    let (out, err) = one_shot(&["reconcile", &world.driver_name, "--output=json", &from_pod]);
    assert!(err.contains(&format!("--csi-address={endpoint}")), "{err}");
    assert!(!err.contains("not-here"), "the pod's kubeconfig was taken: {err}");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let adopted = report["volumes"].as_array().map(|v| v.len());
    assert_eq!(adopted, Some(1), "{report}");
    assert_eq!(report["volumes"][0]["state"], "adopted", "{report}");
    assert_eq!(report["volumes"][0]["persistentVolume"], json!(kept), "{report}");

    // A claim handed to a driver nobody runs, explained by the flags of a file and of the pod.
    world.create_class("nobody", json!({"provisioner": "nobody.csi.test"})).await;
    world.create_claim("handed", "nobody", "1Gi", json!({})).await;
    let handed = world
        .claim_until("handed", "handed over", LIMIT, |c| {
            c.annotations().contains_key("volume.kubernetes.io/storage-provisioner")
        })
        .await;
    let uid = handed.metadata.uid.clone().unwrap_or_default();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("args");
    std::fs::write(&file, "args:\n  - --volume-name-prefix=fromfile\n  - --timeout=10s\n").unwrap();
    let from_file = format!("--flags-from={}", file.display());
    let claim = format!("{ns}/handed");
    let plain = one_shot(&["explain", &claim]).0;
    assert!(plain.contains(&format!("CreateVolume pvc-{uid}")), "{plain}");
    let filed = one_shot(&["explain", &claim, &from_file]).0;
    assert!(filed.contains(&format!("CreateVolume fromfile-{uid}")), "{filed}");
    let podded = one_shot(&["explain", &claim, &from_pod]).0;
    assert!(podded.contains(&format!("CreateVolume frompod-{uid}")), "{podded}");
    // Typed before the subcommand, a flag wins over the pod's.
    let typed = one_shot(&["--volume-name-prefix=typed", "explain", &claim, &from_pod]).0;
    assert!(typed.contains(&format!("CreateVolume typed-{uid}")), "{typed}");
}

/// ListVolumes' answer with its next token rewritten by the relay: "1" every time.
fn same_token(message: &[u8]) -> Vec<u8> {
    use prost::Message;
    let mut page = csi::ListVolumesResponse::decode(message).unwrap_or_default();
    page.next_token = "1".into();
    page.encode_to_vec()
}

/// A token never handed out before, every time: "01", "001", … (hostpathplugin reads each as 1).
fn fresh_token(message: &[u8]) -> Vec<u8> {
    use prost::Message;
    static ISSUED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    let width = ISSUED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let mut page = csi::ListVolumesResponse::decode(message).unwrap_or_default();
    page.next_token = format!("{:0>width$}", 1);
    page.encode_to_vec()
}

/// A driver whose pages repeat their token, and one whose tokens never end, in the shipped
/// mode: each listing stops in a bounded number of calls (2, and the 10,000-page bound) and
/// says it may be incomplete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostpath_pages_that_repeat_or_never_end_stop() {
    use support::csi_relay::Fault;
    let world = Beside::start("inventory-pages", &[], &[]).await;
    world.create_class("std", json!({})).await;
    for name in ["a", "b"] {
        world.create_claim(name, "std", "1Gi", json!({})).await;
        world.bound(name, LIMIT).await;
    }
    let args = ["--reconcile-page-size=1", "--reconcile-page-interval=0s"];
    let endpoint = world.relay().endpoint();
    for (rewrite, calls) in [(same_token as fn(&[u8]) -> Vec<u8>, 2), (fresh_token, 10_000)] {
        world.relay().always("ListVolumes", Fault::Rewrite(rewrite));
        let before = world.relay().calls("ListVolumes");
        let report =
            reconcile_json(&world.plane.admin_kubeconfig, &endpoint, &world.driver_name, &args);
        assert_eq!(report["complete"], json!(false), "{report}");
        assert_eq!(world.relay().calls("ListVolumes") - before, calls);
    }
}
