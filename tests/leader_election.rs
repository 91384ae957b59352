//! Two replicas under `--leader-election` against the real kube-apiserver: only the holder of the
//! Lease acts; when it is killed the standby takes over and finishes a provision the leader left
//! half done; on SIGTERM the Lease is given up.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::json;
use support::cluster::{World, eventually};
use support::fake_driver::{DriverConfig, Fault};
use support::sidecar::Sidecar;

const NAMESPACE: &str = "leader";
const LIMIT: Duration = Duration::from_secs(45);

async fn holder(world: &World) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(world.client.clone(), NAMESPACE);
    let name = format!("csi-pv-controller-{}", world.driver_name.replace('.', "-"));
    leases
        .get_opt(&name)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Log lines in which a replica acted: a decision about a claim or a volume-changing call.
fn actions(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            l.contains("binder decided")
                || l.contains("method=\"CreateVolume\"")
                || l.contains("method=\"DeleteVolume\"")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_from_a_killed_leader_and_finishes_its_work() {
    let mut world = World::start(
        NAMESPACE,
        DriverConfig::default(),
        &[
            "--leader-election",
            &format!("--leader-election-namespace={NAMESPACE}"),
            "--leader-election-lease-duration=4s",
            "--leader-election-renew-deadline=3s",
            "--leader-election-retry-period=1s",
        ],
    )
    .await;
    let first = eventually(LIMIT, || holder(&world)).await;
    let first = first.unwrap_or_else(|| panic!("nobody leads:\n{}", world.sidecar.log_text()));
    assert_ne!(first, "replica-b");

    let mut standby =
        Sidecar::start_with_env(world.dir.path(), &world.args, &[("HOSTNAME", "replica-b")]);
    assert!(
        standby.wait_ready(LIMIT).await,
        "a standby is ready once its caches are warm:\n{}",
        standby.log_text()
    );

    world.create_class("fast", json!({})).await;
    world.create_claim("one", "fast", "1Gi", json!({})).await;
    world.bound("one", LIMIT).await;
    assert_eq!(holder(&world).await.as_deref(), Some(first.as_str()));

    // The leader starts CreateVolume for a second claim and dies before it answers.
    world.driver.inject("CreateVolume", Fault::Hang);
    world.create_claim("two", "fast", "1Gi", json!({})).await;
    let asked = eventually(LIMIT, || async {
        (world.driver.calls_of("CreateVolume").len() == 2).then_some(())
    })
    .await;
    assert!(
        asked.is_some(),
        "second CreateVolume never came:\n{}",
        world.sidecar.log_text()
    );
    let _ = world.sidecar.child.start_kill();
    let _ = world.sidecar.child.wait().await;
    world.driver.release();

    let found = eventually(LIMIT, || async {
        let claim = world.claim("two").await?;
        (claim.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;
    assert!(
        found.is_some(),
        "the standby did not finish the claim:\n{}",
        standby.log_text()
    );
    assert_eq!(holder(&world).await.as_deref(), Some("replica-b"));
    assert_eq!(
        world.driver.volumes().len(),
        2,
        "one volume per claim: {:?}",
        world.driver.volumes()
    );

    // The standby did nothing before it led.
    let log = standby.log_text();
    let became = log
        .find("became leader")
        .unwrap_or_else(|| panic!("standby never led:\n{log}"));
    let before = actions(&log[..became]);
    assert!(
        before.is_empty(),
        "the standby acted before leading: {before:?}"
    );
    assert!(
        !actions(&log[became..]).is_empty(),
        "the new leader did the work"
    );

    // SIGTERM: exit 0 and the Lease is given up at once, not left to expire.
    assert_eq!(standby.terminate(Duration::from_secs(20)).await, Some(0));
    assert_eq!(
        holder(&world).await,
        None,
        "lease still held after a clean exit"
    );
}

const PAUSED: &str = "paused-leader";
const LEASE: Duration = Duration::from_secs(6);
const RETRY: Duration = Duration::from_secs(1);

async fn holder_in(world: &World, namespace: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(world.client.clone(), namespace);
    let name = format!("csi-pv-controller-{}", world.driver_name.replace('.', "-"));
    leases
        .get_opt(&name)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// The leader is frozen (SIGSTOP) past its renew deadline while claims come and go; the
/// standby takes over about a lease duration later. When the old leader runs again it must
/// not send one API write nor one state-changing driver call: the audit log (each replica has
/// its own ServiceAccount) and the driver (each call's peer process) are the witnesses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_makes_no_write_and_no_driver_call_after_it_resumes() {
    use std::time::SystemTime;
    let mut world = World::start(
        PAUSED,
        DriverConfig::default(),
        &[
            "--leader-election",
            &format!("--leader-election-namespace={PAUSED}"),
            &format!("--leader-election-lease-duration={}s", LEASE.as_secs()),
            "--leader-election-renew-deadline=4s",
            &format!("--leader-election-retry-period={}s", RETRY.as_secs()),
        ],
    )
    .await;
    let first = eventually(LIMIT, || holder_in(&world, PAUSED)).await;
    let first = first.unwrap_or_else(|| panic!("nobody leads:\n{}", world.sidecar.log_text()));
    let old_pid = world.sidecar.child.id().expect("the leader runs") as i32;

    let kubeconfig =
        support::sidecar::second_account(world.plane, PAUSED, PAUSED, "replica-b").await;
    let args: Vec<String> = world
        .args
        .iter()
        .map(|a| match a.starts_with("--kubeconfig=") {
            true => format!("--kubeconfig={}", kubeconfig.display()),
            false => a.clone(),
        })
        .collect();
    let mut standby =
        Sidecar::start_with_env(world.dir.path(), &args, &[("HOSTNAME", "replica-b")]);
    assert!(
        standby.wait_ready(LIMIT).await,
        "standby not ready:\n{}",
        standby.log_text()
    );
    let class = world.create_class("churn", json!({})).await.metadata.name;

    // Claims come and go the whole time: every 300 ms one more, and the one from 1.5 s ago is
    // deleted, so both replicas always have provisioning and deletion to do.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (claims, stop, class) = (world.claims(), stop.clone(), class.clone());
        tokio::spawn(async move {
            let mut made = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let claim = serde_json::from_value(json!({
                    "metadata": {"name": format!("churn-{made}")},
                    "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Gi"}}},
                }))
                .expect("claim");
                let _ = claims.create(&Default::default(), &claim).await;
                if made >= 5 {
                    let _ = claims
                        .delete(&format!("churn-{}", made - 5), &Default::default())
                        .await;
                }
                made += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            made
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Freeze the leader past its renew deadline and the lease duration.
    // SAFETY: signals to our own child process.
    unsafe { libc::kill(old_pid, libc::SIGSTOP) };
    let paused = Instant::now();
    let taken = eventually(LIMIT, || async {
        (holder_in(&world, PAUSED).await.as_deref() == Some("replica-b")).then(|| paused.elapsed())
    })
    .await;
    let taken =
        taken.unwrap_or_else(|| panic!("the standby never took over:\n{}", standby.log_text()));
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(paused.elapsed())).await;
    let resumed = SystemTime::now();
    unsafe { libc::kill(old_pid, libc::SIGCONT) };
    let exit = tokio::time::timeout(Duration::from_secs(10), world.sidecar.child.wait()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let made = churn.await.unwrap_or_default();

    // The new leader settles everything: each claim left is bound.
    let settled = eventually(LIMIT, || async {
        let list = world.claims().list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .all(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .then_some(())
    })
    .await;
    let old_log = world.sidecar.log_text();
    let writes = world.plane.audited_writes();
    let resumed_at = k8s_openapi::jiff::Timestamp::try_from(resumed).expect("time");
    let by_old: Vec<_> = writes.iter().filter(|w| w.user == world.user).collect();
    let late: Vec<_> = by_old
        .iter()
        .filter(|w| w.received.is_some_and(|t| t >= resumed_at))
        .collect();
    let calls = world.driver.callers();
    let old_calls = calls
        .iter()
        .filter(|(_, pid, _)| *pid == Some(old_pid))
        .count();
    let late_calls: Vec<_> = calls
        .iter()
        .filter(|(at, pid, _)| *pid == Some(old_pid) && *at >= resumed)
        .collect();
    let refused = old_log.matches("leadership may have lapsed").count();
    println!(
        "{made} claims made; {first} led with {} writes and {old_calls} driver calls before the pause; \
         replica-b took over {:.1} s into the pause; after resuming: {} writes, {} driver calls, {refused} side effects refused",
        by_old.len(),
        taken.as_secs_f64(),
        late.len(),
        late_calls.len()
    );
    assert!(
        !by_old.is_empty() && old_calls > 0,
        "the old leader acted before the pause: callers {:?}\n{old_log}",
        calls
            .iter()
            .map(|(_, pid, m)| (*pid, *m))
            .collect::<Vec<_>>()
    );
    assert!(
        late.is_empty(),
        "the old leader wrote after it resumed: {late:#?}\n{old_log}"
    );
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
    assert_eq!(
        code,
        Some(1),
        "the old leader exits with an error:\n{old_log}"
    );
    assert!(
        settled.is_some(),
        "the new leader did not settle the claims:\n{}",
        standby.log_text()
    );
}
