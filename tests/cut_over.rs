//! The switch a storage team makes, as a rolling update with surge runs it, in the mode deploy/
//! ships (beside kube-controller-manager's binder, hostpathplugin): for a while the old pod and
//! the new one both run, each with `--leader-election`. csi-pv-controller holds csi-provisioner's
//! and csi-resizer's Leases as well as its own, so in either direction only one provisioner and
//! one resizer act at any instant: every CreateVolume and ControllerExpandVolume is sent once, by
//! whoever holds the Leases (our calls counted at the relay, theirs in their `-v=5` logs).

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use support::cluster::{World, eventually};
use support::relayed::{Beside, Relayed};
use support::sidecar::Sidecar;
use support::upstream::Upstream;

const LIMIT: Duration = Duration::from_secs(90);
const NAMESPACE: &str = "cut-over";
const GI: i64 = 1 << 30;

/// Short Leases on both sides, so that a killed holder's Lease expires within seconds.
const ELECTION: [&str; 5] = [
    "--leader-election",
    "--leader-election-namespace=cut-over",
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=1s",
];

fn upstream(world: &World<Relayed>, tag: &str) -> Upstream {
    let socket = world.hostpath().socket.clone();
    Upstream::start(&world.plane.admin_kubeconfig, &socket, world.dir.path(), tag, &ELECTION)
}

async fn grow(world: &World<Relayed>, claim: &str, size: &str) {
    let patch = json!({"spec": {"resources": {"requests": {"storage": size}}}});
    world.claims().patch(claim, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

/// The size the driver has for the volume of `claim`.
async fn driver_size_of(world: &World<Relayed>, claim: &str) -> Option<i64> {
    let uid = world.claim(claim).await?.metadata.uid?;
    let name = format!("pvc-{uid}");
    world.hostpath().state_volumes().into_iter().find(|v| v.name == name).map(|v| v.size)
}

/// The driver has grown the volume of `claim` to `bytes`, and the resizer has recorded it on
/// the claim (FileSystemResizePending: hostpath grows on the node too). A resizer stopped
/// between the two leaves the resize to whoever leads next, which asks the driver again.
async fn grown(world: &World<Relayed>, claim: &str, bytes: i64) -> bool {
    eventually(LIMIT, || async {
        let recorded = world
            .claim(claim)
            .await?
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "FileSystemResizePending");
        (recorded && driver_size_of(world, claim).await == Some(bytes)).then_some(())
    })
    .await
    .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_surge_in_either_direction_never_has_two_provisioners_or_resizers() {
    let mut world = Beside::start(NAMESPACE, &[], &ELECTION).await;
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    // Start from the upstream stack: the sidecar the world started goes away (and gives its
    // Leases up) before it has anything to do.
    assert_eq!(world.sidecar.terminate(Duration::from_secs(20)).await, Some(0));
    let mut old = upstream(&world, "old");
    let story = |world: &World<Relayed>, up: &Upstream, ours: &Sidecar| {
        format!(
            "driver {:?}\nupstream:\n{}\nours:\n{}",
            world.hostpath().state_volumes(),
            up.log_text(),
            ours.log_text()
        )
    };
    world.create_claim("a", "grow", "1Gi", json!({})).await;
    world.bound("a", LIMIT).await;

    // The new pod: we start while the old sidecars lead, and wait.
    let mut ours =
        Sidecar::start_with_env(world.dir.path(), &world.args, &[("HOSTNAME", "new-pod")]);
    assert!(ours.wait_ready(LIMIT).await, "{}", ours.log_text());
    let waiting = eventually(LIMIT, || async {
        ours.log_text().contains("csi-provisioner's Lease is held by another process").then_some(())
    })
    .await;
    assert!(waiting.is_some(), "we never saw csi-provisioner lead:\n{}", ours.log_text());
    world.create_claim("b", "grow", "1Gi", json!({})).await;
    world.bound("b", LIMIT).await;
    grow(&world, "a", "2Gi").await;
    assert!(grown(&world, "a", 2 * GI).await, "{}", story(&world, &old, &ours));
    let relay = world.relay();
    assert_eq!(relay.forwarded("CreateVolume"), 0, "{}", story(&world, &old, &ours));
    assert_eq!(relay.forwarded("ControllerExpandVolume"), 0, "{}", story(&world, &old, &ours));
    assert!(!ours.log_text().contains("became leader"), "{}", ours.log_text());
    assert_eq!((old.calls("CreateVolume"), old.calls("ControllerExpandVolume")), (2, 1));

    // The old pod goes: its Leases expire, and we take over.
    old.kill();
    let led =
        eventually(LIMIT, || async { ours.log_text().contains("became leader").then_some(()) });
    assert!(led.await.is_some(), "{}", story(&world, &old, &ours));
    world.create_claim("c", "grow", "1Gi", json!({})).await;
    world.bound("c", LIMIT).await;
    grow(&world, "b", "2Gi").await;
    assert!(grown(&world, "b", 2 * GI).await, "{}", story(&world, &old, &ours));
    assert_eq!(relay.forwarded("CreateVolume"), 1, "{}", story(&world, &old, &ours));
    assert_eq!(relay.forwarded("ControllerExpandVolume"), 1, "{}", story(&world, &old, &ours));

    // Back: the new pod runs the Go sidecars again, which wait while we hold their Leases.
    let back = upstream(&world, "back");
    world.create_claim("d", "grow", "1Gi", json!({})).await;
    world.bound("d", LIMIT).await;
    grow(&world, "c", "2Gi").await;
    assert!(grown(&world, "c", 2 * GI).await, "{}", story(&world, &back, &ours));
    assert_eq!(relay.forwarded("CreateVolume"), 2, "{}", story(&world, &back, &ours));
    assert_eq!(relay.forwarded("ControllerExpandVolume"), 2, "{}", story(&world, &back, &ours));
    assert_eq!((back.calls("CreateVolume"), back.calls("ControllerExpandVolume")), (0, 0));

    // Our pod goes (SIGTERM gives every Lease up), uninstall, and the sidecars take over.
    assert_eq!(ours.terminate(Duration::from_secs(20)).await, Some(0), "{}", ours.log_text());
    let (code, text) = world.uninstall(&[]);
    assert_eq!(code, Some(0), "{text}");
    world.create_claim("e", "grow", "1Gi", json!({})).await;
    world.bound("e", LIMIT).await;
    grow(&world, "d", "2Gi").await;
    assert!(grown(&world, "d", 2 * GI).await, "{}", story(&world, &back, &ours));
    assert_eq!((back.calls("CreateVolume"), back.calls("ControllerExpandVolume")), (1, 1));
    assert_eq!(relay.forwarded("CreateVolume"), 2);

    // One volume per claim, each made once.
    let mut names: Vec<String> = Vec::new();
    for claim in ["a", "b", "c", "d", "e"] {
        let uid = world.claim(claim).await.and_then(|c| c.metadata.uid).unwrap();
        names.push(format!("pvc-{uid}"));
    }
    let mut made: Vec<String> =
        world.hostpath().state_volumes().into_iter().map(|v| v.name).collect();
    names.sort();
    made.sort();
    assert_eq!(made, names);
}

/// client-go judges another holder's Lease by the duration written in it, and so do we: a Go
/// sidecar that leads with a 20 s Lease, killed outright, keeps it for 20 s against our own
/// 4 s (taken after 4 s, two provisioners could act at once while it only paused).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_go_sidecar_with_a_longer_lease_than_ours_keeps_it_for_all_of_it() {
    const NS: &str = "cut-over-long";
    let ours_election = [
        "--leader-election",
        &format!("--leader-election-namespace={NS}"),
        "--leader-election-lease-duration=4s",
        "--leader-election-renew-deadline=3s",
        "--leader-election-retry-period=1s",
    ];
    let mut world = Beside::start(NS, &[], &ours_election).await;
    assert_eq!(world.sidecar.terminate(Duration::from_secs(20)).await, Some(0));
    let theirs = [
        "--leader-election",
        &format!("--leader-election-namespace={NS}"),
        "--leader-election-lease-duration=20s",
        "--leader-election-renew-deadline=15s",
        "--leader-election-retry-period=2s",
    ];
    let socket = world.hostpath().socket.clone();
    let mut old =
        Upstream::start(&world.plane.admin_kubeconfig, &socket, world.dir.path(), "long", &theirs);
    world.create_class("std", json!({})).await;
    world.create_claim("a", "std", "1Gi", json!({})).await;
    world.bound("a", LIMIT).await;
    assert_eq!(old.calls("CreateVolume"), 1, "csi-provisioner leads");

    let mut ours = Sidecar::start_with_env(world.dir.path(), &world.args, &[("HOSTNAME", "new")]);
    let waiting = eventually(LIMIT, || async {
        ours.log_text().contains("csi-provisioner's Lease is held by another process").then_some(())
    })
    .await;
    assert!(waiting.is_some(), "we never saw csi-provisioner lead:\n{}", ours.log_text());
    old.kill();
    let killed = std::time::Instant::now();
    let led =
        eventually(LIMIT, || async { ours.log_text().contains("became leader").then_some(()) });
    assert!(led.await.is_some(), "{}", ours.log_text());
    let after = killed.elapsed();
    // Its last renewal came at most one retry period (2 s) before the kill.
    assert!(after >= Duration::from_secs(17), "took its 20 s Lease {after:?} after the kill");
    // client-go's LeaderElection event on each Lease taken, as the Go sidecars record it.
    let events: Api<Event> = Api::namespaced(world.client.clone(), NS);
    let recorded = eventually(LIMIT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        let leases: std::collections::BTreeSet<String> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("LeaderElection"))
            .filter(|e| e.message.as_deref() == Some("new became leader"))
            .filter(|e| e.involved_object.kind.as_deref() == Some("Lease"))
            .filter_map(|e| e.involved_object.name)
            .collect();
        (leases.len() == 3).then_some(leases)
    })
    .await;
    assert!(recorded.is_some(), "no 'new became leader' event on each of the three Leases");
    assert!(ours.wait_ready(LIMIT).await);
    world.create_claim("b", "std", "1Gi", json!({})).await;
    world.bound("b", LIMIT).await;
    assert_eq!(world.relay().forwarded("CreateVolume"), 1, "ours made b");
}
