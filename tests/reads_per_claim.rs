//! What our process reads from the apiserver, counted from the audit log (every GET it sends,
//! by its user agent), in the shipped mode: beside kube-controller-manager's binder, on
//! hostpathplugin. A claim provisioned costs a fixed handful of reads; a claim held by a failed
//! attempt's backoff costs none at its periodic passes, however often they come (the gate looks
//! at the hold before it asks for a live copy, `model::gate`).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use support::cluster::eventually;
use support::relayed::Beside;

const CLAIMS: usize = 10;

/// Our process's GETs after the first `from` audited reads, by resource.
fn our_reads(world: &Beside, from: usize) -> BTreeMap<String, usize> {
    let mut by_resource = BTreeMap::new();
    for read in world.plane.audited_reads().into_iter().skip(from) {
        if read.user_agent.starts_with("csi-pv-controller/") {
            *by_resource.entry(read.resource).or_default() += 1;
        }
    }
    by_resource
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_costs_a_handful_of_reads_and_a_held_one_none() {
    // The periodic pass every second; a failed attempt held two minutes.
    let args = [
        "--pvclaimbinder-sync-period=1s",
        "--retry-interval-start=120s",
        "--retry-interval-max=300s",
    ];
    let world = Beside::start("reads", &[], &args).await;
    world.create_class("plain", json!({})).await;

    let from = world.plane.audited_reads().len();
    for i in 0..CLAIMS {
        world.create_claim(&format!("c{i}"), "plain", "1Gi", json!({})).await;
    }
    for i in 0..CLAIMS {
        world.bound(&format!("c{i}"), Duration::from_secs(90)).await;
    }
    let provisioned = our_reads(&world, from);
    let total: usize = provisioned.values().sum();
    println!("GETs for {CLAIMS} claims provisioned and bound: {total} ({provisioned:?})");
    assert!(total <= 2 * CLAIMS, "more than two GETs per claim: {provisioned:?}");
    // And per claim, not only on average: no claim, nor its PV, read more than twice.
    let mut by_object = BTreeMap::<(String, String), usize>::new();
    for read in world.plane.audited_reads().into_iter().skip(from) {
        if read.user_agent.starts_with("csi-pv-controller/") {
            *by_object.entry((read.resource, read.name)).or_default() += 1;
        }
    }
    let most = by_object.iter().max_by_key(|(_, n)| **n);
    assert!(most.is_none_or(|(_, n)| *n <= 2), "one object read more than twice: {most:?}");

    // A claim whose class names a Secret that does not exist: refused, and held.
    let ns = world.namespace.clone();
    let secret = json!({"parameters": {
        "csi.storage.k8s.io/provisioner-secret-name": "absent",
        "csi.storage.k8s.io/provisioner-secret-namespace": ns,
    }});
    world.create_class("secret", secret).await;
    world.create_claim("held", "secret", "1Gi", json!({})).await;
    let refused = eventually(Duration::from_secs(60), || async {
        let events = world.events("held").await;
        events.iter().any(|(_, reason, _)| reason == "ProvisioningFailed").then_some(())
    })
    .await;
    assert!(refused.is_some(), "no ProvisioningFailed: {:?}", world.events("held").await);
    // Let the watch bring the claim's last version, then count ten periodic passes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let key = format!("claim={ns}/held");
    let (from, passes) = (world.plane.audited_reads().len(), world.sidecar.passes(&key));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let held = our_reads(&world, from);
    let passes = world.sidecar.passes(&key) - passes;
    println!("GETs in 10 s, {passes} passes over a held claim: {held:?}");
    assert!(passes >= 5, "the periodic pass did not come: {passes} passes");
    assert!(held.is_empty(), "a held claim was read: {held:?}");
    assert_eq!(world.phase("held").await.as_deref(), Some("Pending"));
}
