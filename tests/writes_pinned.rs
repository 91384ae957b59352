//! What one claim costs the API, pinned exactly: claims provisioned, then deleted, one at a time
//! (so that no two claims' work meets and no write races another), on hostpathplugin beside
//! kube-controller-manager, in the shipped mode (`--binder=external`: its binder binds) and with
//! `--binder=driver` (its binder off: we bind). Counted from the audit log, every write to a claim
//! or a PV by writer and answer, and from the events, every event on the claim by reason.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

use support::cluster::{INTENT_JOURNAL, World, eventually};
use support::control_plane::{AuditedWrite, fresh_plane};
use support::hostpath::Hostpath;
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};

const LIMIT: Duration = Duration::from_secs(60);
const CLAIMS: usize = 4;
/// kube-controller-manager without its binder, as `--binder=driver` needs it.
const KCM_NO_BINDER: &str = "persistentvolume-expander-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller";

/// Writes to claims and PVs since `from`, by `<writer> <verb> <resource[/sub]> <code>`.
fn writes_since(world: &World<Hostpath>, from: usize) -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    for w in world.plane.audited_writes().into_iter().skip(from) {
        if w.resource != "persistentvolumeclaims" && w.resource != "persistentvolumes" {
            continue;
        }
        let writer = writer(world, &w);
        let resource = match w.subresource.is_empty() {
            true => w.resource.clone(),
            false => format!("{}/{}", w.resource, w.subresource),
        };
        *by.entry(format!("{writer} {} {resource} {}", w.verb, w.code)).or_default() += 1;
    }
    by
}

fn writer(world: &World<Hostpath>, w: &AuditedWrite) -> &'static str {
    if w.user == world.user {
        "ours"
    } else if w.user_agent.starts_with("kube-controller-manager/") {
        "kcm"
    } else {
        "test"
    }
}

/// The events on claim `name`, by `<reason>`, each counted with its series.
async fn events_on(world: &World<Hostpath>, name: &str) -> BTreeMap<String, i32> {
    let api: Api<Event> = Api::namespaced(world.client.clone(), &world.namespace);
    let mut by = BTreeMap::new();
    for e in api.list(&ListParams::default()).await.unwrap().items {
        if e.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(name) {
            continue;
        }
        let count = e.series.as_ref().map(|s| s.count).or(e.deprecated_count).unwrap_or(1);
        *by.entry(e.reason.unwrap_or_default()).or_default() += count;
    }
    by
}

/// Successful (2xx) writes by writer and the refused ones of each (409 and any other answer),
/// from `writes_since`'s lines; the test's own writes (the claim, its deletion, the nudge's
/// label) left out.
#[derive(Debug, Default, PartialEq, Eq)]
struct Cost {
    ours: usize,
    kcm: usize,
    ours_refused: usize,
    kcm_refused: usize,
    /// Of `ours`: PVs created.
    ours_created_pv: usize,
}

fn cost(lines: &BTreeMap<String, usize>) -> Cost {
    let mut c = Cost::default();
    for (line, n) in lines {
        let code: u16 = line.rsplit(' ').next().and_then(|c| c.parse().ok()).unwrap_or(0);
        let done = (200..300).contains(&code);
        if done && line.starts_with("ours create persistentvolumes ") {
            c.ours_created_pv += n;
        }
        match (line.split(' ').next(), done) {
            (Some("ours"), true) => c.ours += n,
            (Some("ours"), false) => c.ours_refused += n,
            (Some("kcm"), true) => c.kcm += n,
            (Some("kcm"), false) => c.kcm_refused += n,
            _ => {}
        }
    }
    c
}

/// Each claim's provisioning cost, its events, and its deletion cost, one claim at a time;
/// and the writes per claim that are kube-controller-manager's alone whatever the binder mode:
/// from 1.37 its pvc-protection controller sets a claim no pod uses `Unused`, one claim status
/// update.
async fn measure(
    name: &str,
    controllers: &str,
    args: &[&str],
) -> (usize, Vec<(Cost, BTreeMap<String, i32>, Cost)>) {
    let plane = fresh_plane();
    let _kcm = Kcm::start(plane, controllers);
    let world = World::start_hostpath(plane, name, &[], args).await;
    let unused_writes = usize::from(support::cluster::kcm_writes_unused(&world.client).await);
    world.register_node().await;
    world.create_class("fast", json!({})).await;
    let mut out = Vec::new();
    for i in 0..CLAIMS {
        let claim = format!("c{i}");
        let from = world.plane.audited_writes().len();
        world.create_claim(&claim, "fast", "1Gi", json!({})).await;
        world.bound(&claim, LIMIT).await;
        world.event(&claim, "ProvisioningSucceeded", "Successfully provisioned", LIMIT).await;
        // A later pass over the claim, done: any write it still had to make is in the log.
        world.nudge_claim(&claim, LIMIT).await;
        let writes = writes_since(&world, from);
        let events = events_on(&world, &claim).await;
        println!("{name} {claim}: provisioned with {writes:?}; events {events:?}");
        out.push((cost(&writes), events));
    }
    let mut costs = Vec::new();
    for (i, (provisioned, events)) in out.into_iter().enumerate() {
        let claim = format!("c{i}");
        let volume = world.claim(&claim).await.and_then(|c| c.spec?.volume_name).unwrap();
        let from = world.plane.audited_writes().len();
        world.claims().delete(&claim, &DeleteParams::default()).await.unwrap();
        assert!(world.volume_gone(&volume, LIMIT).await, "{}", world.sidecar.log_text());
        let gone =
            eventually(LIMIT, || async { world.claim(&claim).await.is_none().then_some(()) });
        assert!(gone.await.is_some(), "claim {claim} still there");
        let writes = writes_since(&world, from);
        println!("{name} {claim}: deleted with {writes:?}");
        costs.push((provisioned, events, cost(&writes)));
    }
    (unused_writes, costs)
}

fn reasons(events: &BTreeMap<String, i32>, of: &[&str]) -> BTreeMap<String, i32> {
    events.iter().filter(|(r, _)| of.contains(&r.as_str())).map(|(r, n)| (r.clone(), *n)).collect()
}

/// Beside kube-controller-manager's binder: five successful writes per claim (its hand-over
/// annotation, the PV we create, and the binding's claim, claim status and PV status, which the
/// binder and we race to write, each going to the first: the loser's are refused, docs/binder.md §5); five per
/// deletion (the two protection finalizers, Released, again whoever is first, our finalizer and
/// the PV's deletion). Our events: Provisioning and ProvisioningSucceeded, once each. From 1.37,
/// one more per claim, kube-controller-manager's `Unused` condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shipped_mode_five_writes_per_claim_and_per_deletion() {
    assert_beside_binder("pin-external", &[INTENT_JOURNAL], 5, 1).await;
}

/// The same beside kube-controller-manager's binder with the intent on a finalizer, as
/// deploy/swap/ runs it: two writes more per claim, the finalizer on and off. One claim at a
/// time, the idle binder binds first, so the finalizer leaves with a write of its own rather
/// than with our binding's (in a burst it often rides on ours, docs/binding.md). The deletion
/// as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shipped_finalizer_mode_seven_writes_per_claim_five_per_deletion() {
    assert_beside_binder("pin-finalizer", &[], 7, 3).await;
}

/// Beside kube-controller-manager's binder: `writes` per claim (besides its `Unused` write),
/// at least `ours_at_least` of them ours, and the deletion's five.
async fn assert_beside_binder(name: &str, args: &[&str], writes: usize, ours_at_least: usize) {
    let (unused_writes, costs) = measure(name, KCM_STORAGE_CONTROLLERS, args).await;
    for (provisioned, events, deleted) in costs {
        let total = provisioned.ours + provisioned.kcm;
        assert_eq!(total, writes + unused_writes, "provisioned: {provisioned:?}");
        // The PV (and the finalizer, where it is the intent) is ours and the hand-over
        // annotation the binder's; each of the binding's three writes (claim, claim status, PV
        // status) goes to whoever is first, so they may split either way, and the loser of
        // each is refused at most once.
        assert_eq!(provisioned.ours_created_pv, 1, "{provisioned:?}");
        assert!(provisioned.ours >= ours_at_least && provisioned.kcm >= 1, "{provisioned:?}");
        assert!(provisioned.ours_refused <= 3, "ours refused: {provisioned:?}");
        // Ours: the PV's deletion and our finalizer's removal; the protection finalizers are
        // kube-controller-manager's; Released goes to whoever is first (docs/binder.md §5).
        assert_eq!(deleted.ours + deleted.kcm, 5, "deleted: {deleted:?}");
        assert!((2..=3).contains(&deleted.ours), "deleted: {deleted:?}");
        assert!(deleted.ours_refused <= 1, "deleted: {deleted:?}");
        let ours = reasons(&events, &["Provisioning", "ProvisioningSucceeded"]);
        assert_eq!(
            ours,
            BTreeMap::from([("Provisioning".into(), 1), ("ProvisioningSucceeded".into(), 1)])
        );
        assert!(events.get("ExternalProvisioning").is_some_and(|n| *n >= 1), "{events:?}");
        assert_eq!(events.len(), 3, "no other event: {events:?}");
    }
}

/// Binding ourselves (`--binder=driver`, kube-controller-manager's binder off): five writes per
/// claim, all ours and none refused (the PV, the claim's finalizer and binding, the claim's and
/// the PV's status); five per deletion (Released, our finalizer and the PV's deletion, and
/// kube-controller-manager's protection controllers, whose PV update may also be refused, 409
/// or 404, when it comes late: theirs, not counted). From 1.37, one claim status update per claim
/// is kube-controller-manager's, its `Unused` condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn driver_mode_five_writes_per_claim_and_per_deletion() {
    let args = [INTENT_JOURNAL, "--binder=driver"];
    let (unused_writes, costs) = measure("pin-driver", KCM_NO_BINDER, &args).await;
    for (provisioned, events, deleted) in costs {
        assert_eq!(
            provisioned,
            Cost { ours: 5, kcm: unused_writes, ours_created_pv: 1, ..Cost::default() },
            "provisioned"
        );
        assert_eq!((deleted.ours, deleted.kcm, deleted.ours_refused), (3, 2, 0), "{deleted:?}");
        let want =
            BTreeMap::from([("Provisioning".into(), 1), ("ProvisioningSucceeded".into(), 1)]);
        assert_eq!(events, want);
    }
}
