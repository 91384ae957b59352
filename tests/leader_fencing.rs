//! Two replicas under `--leader-election` while claims come and go, and a leader that may have
//! lost its Lease without knowing it: frozen (SIGSTOP) past its lease, or cut off from the
//! apiserver. Either way it must send no API write and no state-changing driver call once its
//! renew deadline has passed, and the standby must take over. Witnesses: the audit log (each
//! replica has its own ServiceAccount) and the driver (each call's peer process). On the fake
//! driver with our binder, and in the shipped mode beside kube-controller-manager on
//! hostpathplugin behind the relay.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use support::cluster::{World, eventually};
use support::control_plane::AuditedWrite;
use support::csi_relay::Fault;
use support::fake_driver::DriverConfig;
use support::proxy::Proxy;
use support::relayed::{Beside, Relayed};
use support::sidecar::Sidecar;

const LIMIT: Duration = Duration::from_secs(45);
const LEASE: Duration = Duration::from_secs(6);
const RENEW: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_secs(1);

/// The world's sidecar leads; a standby `replica-b` runs as another ServiceAccount.
struct Replicas {
    world: World,
    standby: Sidecar,
    leader: String,
    class: String,
}

fn election_args(namespace: &str) -> Vec<String> {
    vec![
        "--leader-election".to_string(),
        format!("--leader-election-namespace={namespace}"),
        format!("--leader-election-lease-duration={}s", LEASE.as_secs()),
        format!("--leader-election-renew-deadline={}s", RENEW.as_secs()),
        format!("--leader-election-retry-period={}s", RETRY.as_secs()),
    ]
}

async fn two_replicas(namespace: &str) -> Replicas {
    let args = election_args(namespace);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let world = World::start(namespace, DriverConfig::default(), &args).await;
    let (standby, leader, class) = standby_for(&world, namespace).await;
    Replicas { world, standby, leader, class }
}

/// Once the world's sidecar leads: a standby `replica-b` under another ServiceAccount, the
/// leader's identity, and the class the churn uses.
async fn standby_for<D>(world: &World<D>, namespace: &str) -> (Sidecar, String, String) {
    let leader = eventually(LIMIT, || world.lease_holder()).await;
    let leader = leader.unwrap_or_else(|| panic!("nobody leads:\n{}", world.sidecar.log_text()));
    let kubeconfig =
        support::sidecar::second_account(world.plane, namespace, namespace, "replica-b").await;
    let args = with_kubeconfig(&world.args, &kubeconfig);
    let mut standby =
        Sidecar::start_with_env(world.dir.path(), &args, &[("HOSTNAME", "replica-b")]);
    assert!(standby.wait_ready(LIMIT).await, "standby not ready:\n{}", standby.log_text());
    let class = world.create_class("churn", json!({})).await.metadata.name;
    (standby, leader, class.unwrap_or_default())
}

fn with_kubeconfig(args: &[String], kubeconfig: &std::path::Path) -> Vec<String> {
    args.iter()
        .map(|a| match a.starts_with("--kubeconfig=") {
            true => format!("--kubeconfig={}", kubeconfig.display()),
            false => a.clone(),
        })
        .collect()
}

/// Claims come and go until stopped: every 300 ms one more, and the one from 1.5 s ago is
/// deleted, so the leader always has provisioning and deletion to do. Returns how many were made.
fn churn<D>(
    world: &World<D>,
    class: &str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    let (claims, class) = (world.claims(), class.to_string());
    tokio::spawn(async move {
        let mut made = 0usize;
        while !stop.load(Ordering::SeqCst) {
            let claim = serde_json::from_value(json!({
                "metadata": {"name": format!("churn-{made}")},
                "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}},
            }))
            .expect("claim");
            let _ = claims.create(&Default::default(), &claim).await;
            if made >= 5 {
                let name = format!("churn-{}", made - 5);
                let _ = claims.delete(&name, &Default::default()).await;
            }
            made += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        made
    })
}

/// Waits until a claim the churn makes from now on is Bound: whoever leads now is at work.
async fn later_claim_bound<D>(world: &World<D>) {
    let index = |name: Option<&str>| name?.strip_prefix("churn-")?.parse::<usize>().ok();
    let claims = || async { world.claims().list(&Default::default()).await.ok().map(|l| l.items) };
    let listed = claims().await.unwrap_or_default();
    let newest = listed.iter().filter_map(|c| index(c.metadata.name.as_deref())).max();
    let bound = eventually(LIMIT, || async {
        claims()
            .await?
            .iter()
            .any(|c| {
                index(c.metadata.name.as_deref()) > newest
                    && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            })
            .then_some(())
    });
    assert!(bound.await.is_some(), "no claim made from {newest:?} on was bound");
}

/// Every claim left is bound (by the new leader).
async fn settled<D>(world: &World<D>) -> bool {
    eventually(LIMIT, || async {
        let list = world.claims().list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .all(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .then_some(())
    })
    .await
    .is_some()
}

/// The writes of the world's sidecar, and those the apiserver received at or after `since`.
fn writes_of_leader<D>(
    world: &World<D>,
    since: SystemTime,
) -> (Vec<AuditedWrite>, Vec<AuditedWrite>) {
    let since = Timestamp::try_from(since).expect("time");
    let all: Vec<_> =
        world.plane.audited_writes().into_iter().filter(|w| w.user == world.user).collect();
    let late = all.iter().filter(|w| w.received.is_some_and(|t| t >= since)).cloned().collect();
    (all, late)
}

/// Every driver call: when, and the calling process.
type Calls = Vec<(SystemTime, Option<i32>)>;

/// The world's leader, churning, is frozen (SIGSTOP) once `hold` has run, until replica-b has
/// taken the Lease and bound a claim; resumed, it must send no API write and no driver call
/// (`calls`), and exit 1, while replica-b settles the claims.
async fn frozen_and_resumed<D>(
    world: &mut World<D>,
    (standby, leader, class): (&Sidecar, &str, &str),
    hold: impl AsyncFnOnce(&World<D>),
    calls: impl Fn(&World<D>) -> Calls,
) {
    let old_pid = world.sidecar.child.id().expect("the leader runs");
    let stop = Arc::new(AtomicBool::new(false));
    let claims = churn(world, class, stop.clone());
    later_claim_bound(world).await;
    hold(world).await;

    // SAFETY: signals to our own child process.
    support::signal(old_pid, libc::SIGSTOP);
    let paused = Instant::now();
    let taken = eventually(LIMIT, || async {
        (world.lease_holder().await.as_deref() == Some("replica-b")).then(|| paused.elapsed())
    })
    .await;
    let taken =
        taken.unwrap_or_else(|| panic!("the standby never took over:\n{}", standby.log_text()));
    // Still frozen while the new leader binds: it resumes into a world that moved on.
    later_claim_bound(world).await;
    let resumed = SystemTime::now();
    support::signal(old_pid, libc::SIGCONT);
    let exit = tokio::time::timeout(Duration::from_secs(10), world.sidecar.child.wait()).await;
    later_claim_bound(world).await;
    stop.store(true, Ordering::SeqCst);
    let made = claims.await.unwrap_or_default();
    let settled = settled(world).await;

    let old_log = world.sidecar.log_text();
    let (all, late) = writes_of_leader(world, resumed);
    let old = |pid: &Option<i32>| *pid == Some(old_pid as i32);
    let calls = calls(world);
    let old_calls = calls.iter().filter(|(_, pid)| old(pid)).count();
    let late_calls: Vec<_> = calls.iter().filter(|(at, pid)| old(pid) && *at >= resumed).collect();
    println!(
        "{}: {made} claims made; {leader} led with {} writes and {old_calls} driver calls before the pause; \
         replica-b took over {:.1} s into the pause; after resuming: {} writes, {} driver calls",
        world.namespace,
        all.len(),
        taken.as_secs_f64(),
        late.len(),
        late_calls.len()
    );
    assert!(!all.is_empty() && old_calls > 0, "the old leader acted before the pause:\n{old_log}");
    assert!(late.is_empty(), "the old leader wrote after it resumed: {late:#?}\n{old_log}");
    assert!(
        late_calls.is_empty(),
        "the old leader called the driver after it resumed: {late_calls:?}\n{old_log}"
    );
    assert!(
        taken <= LEASE + RETRY.mul_f64(1.2) + Duration::from_secs(1),
        "the standby took {taken:?} to take over"
    );
    let code = exit
        .unwrap_or_else(|_| panic!("the old leader did not exit after resuming:\n{old_log}"))
        .expect("wait")
        .code();
    assert_eq!(code, Some(1), "the old leader exits with an error:\n{old_log}");
    assert!(settled, "the new leader did not settle the claims:\n{}", standby.log_text());
}

/// The leader is frozen past its renew deadline and the lease duration; the standby takes over
/// about a lease duration later. When the old leader runs again it sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_makes_no_write_and_no_driver_call_after_it_resumes() {
    let Replicas { mut world, standby, leader, class } = two_replicas("paused-leader").await;
    let calls = |w: &World| w.driver.callers().into_iter().map(|(at, pid, _)| (at, pid)).collect();
    frozen_and_resumed(&mut world, (&standby, &leader, &class), async |_| {}, calls).await;
}

/// The leader loses the apiserver (its connections go through a relay that is cut) while claims
/// come and go. It cannot renew, so it steps down at its renew deadline and exits; the relay
/// comes back after the deadline but before the lease would expire, and the old leader, had it
/// kept going, could write again then. Not one write of it arrives after the deadline, and the
/// standby takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_apiserver_steps_down_at_its_renew_deadline() {
    let Replicas { mut world, standby, leader, class } = two_replicas("cut-leader").await;
    cut_off(&mut world, (&standby, &leader, &class)).await;
}

/// The world's leader, restarted to reach the apiserver through a relay, churning, is cut off:
/// it must step down at its renew deadline and exit 1, with no write after that deadline, even
/// when the relay comes back before its lease would expire; replica-b takes over and settles.
async fn cut_off<D>(world: &mut World<D>, (standby, leader, class): (&Sidecar, &str, &str)) {
    // The leader again, with the same identity, through the relay.
    let address =
        world.plane.server.trim_start_matches("https://").parse().expect("apiserver address");
    let relay = Proxy::start(address).await;
    let direct = std::fs::read_to_string(&world.kubeconfig).expect("kubeconfig");
    let relayed = world.dir.path().join("relayed.kubeconfig");
    std::fs::write(
        &relayed,
        direct.replace(&world.plane.server, &format!("https://127.0.0.1:{}", relay.port)),
    )
    .expect("kubeconfig");
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    world.sidecar = Sidecar::start(world.dir.path(), &with_kubeconfig(&world.args, &relayed));
    let leads = eventually(LIMIT, || async {
        world.sidecar.log_text().contains("became leader").then_some(())
    })
    .await;
    assert!(
        leads.is_some(),
        "the relayed leader did not lead again:\n{}",
        world.sidecar.log_text()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let claims = churn(world, class, stop.clone());
    later_claim_bound(world).await;

    relay.cut();
    let cut = Instant::now();
    let deadline = SystemTime::now() + RENEW;
    let exited = tokio::time::timeout(Duration::from_secs(15), world.sidecar.child.wait()).await;
    let stepped_down = cut.elapsed();
    tokio::time::sleep((RENEW + Duration::from_secs(1)).saturating_sub(cut.elapsed())).await;
    relay.restore();
    let taken = eventually(LIMIT, || async {
        (world.lease_holder().await.as_deref() == Some("replica-b")).then(|| cut.elapsed())
    })
    .await;
    later_claim_bound(world).await;
    stop.store(true, Ordering::SeqCst);
    let made = claims.await.unwrap_or_default();
    let settled = settled(world).await;

    let old_log = world.sidecar.log_text();
    let (all, late) = writes_of_leader(world, deadline);
    println!(
        "{}: {made} claims made; {leader} led with {} writes; cut off, it stepped down after {:.1} s; \
         replica-b took over {:.1} s after the cut; writes of the old leader after its deadline: {}",
        world.namespace,
        all.len(),
        stepped_down.as_secs_f64(),
        taken.unwrap_or_default().as_secs_f64(),
        late.len()
    );
    let code = exited
        .unwrap_or_else(|_| panic!("the cut-off leader did not step down:\n{old_log}"))
        .expect("wait")
        .code();
    assert_eq!(code, Some(1), "it exits with an error:\n{old_log}");
    assert!(
        stepped_down <= RENEW + Duration::from_secs(1),
        "it stepped down {stepped_down:?} after the cut"
    );
    assert!(!all.is_empty(), "the leader wrote before the cut");
    assert!(late.is_empty(), "the old leader wrote after its deadline: {late:#?}\n{old_log}");
    let taken =
        taken.unwrap_or_else(|| panic!("the standby never took over:\n{}", standby.log_text()));
    assert!(
        taken <= LEASE + RETRY.mul_f64(1.2) + Duration::from_secs(1),
        "the standby took {taken:?} to take over"
    );
    assert!(settled, "the new leader did not settle the claims:\n{}", standby.log_text());
}

/// The same pause in the shipped mode: beside kube-controller-manager's binder, on hostpathplugin
/// behind the relay (which records each call's process). The leader is frozen in the middle of a
/// CreateVolume, its answer held by the relay, so that it resumes with work in hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn beside_the_binder_a_paused_leader_makes_no_write_and_no_driver_call_after_it_resumes() {
    let namespace = "paused-beside";
    // A CSI timeout longer than the pause: resumed, the process has the held answer in hand.
    let mut args = election_args(namespace);
    args.push("--timeout=60s".to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut world = Beside::start(namespace, &[], &args).await;
    let (standby, leader, class) = standby_for(&world, namespace).await;
    let hold = async |w: &World<Relayed>| {
        let before = w.relay().calls("CreateVolume");
        w.relay().inject("CreateVolume", Fault::AnswerLate(Duration::from_secs(2)));
        let sent = eventually(LIMIT, || async {
            (w.relay().calls("CreateVolume") > before).then_some(())
        });
        assert!(sent.await.is_some(), "no CreateVolume:\n{}", w.sidecar.log_text());
    };
    let calls = |w: &World<Relayed>| {
        w.relay().callers().into_iter().map(|(at, pid, _)| (at, pid)).collect()
    };
    frozen_and_resumed(&mut world.world, (&standby, &leader, &class), hold, calls).await;
}

/// The cut in the shipped mode: beside kube-controller-manager's binder on hostpathplugin, the
/// leader's apiserver connections cut while claims come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn beside_the_binder_a_leader_cut_off_from_the_apiserver_steps_down_at_its_renew_deadline() {
    let namespace = "cut-beside";
    let args = election_args(namespace);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut world = Beside::start(namespace, &[], &args).await;
    let (standby, leader, class) = standby_for(&world, namespace).await;
    cut_off(&mut world.world, (&standby, &leader, &class)).await;
}
