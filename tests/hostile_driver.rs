//! A hostile driver in the mode deploy/ ships (`--binder=external` beside kube-controller-
//! manager, deploy/ RBAC): hostpathplugin makes the volume, and the relay on its socket rewrites
//! CreateVolume's answer into what no PV can hold (`support::csi_relay::Fault::Rewrite`). Each
//! answer gets a Warning on the claim saying what was wrong with it, no PV with bad data, and no
//! orphan: the volume handed back under a bad ID is deleted by that ID or found again by its
//! name; a driver that answers so every time gets a retry with backoff, not a hot loop.

mod support;

use std::time::Duration;

use csi_pv_controller::csi::v1 as csi;
use prost::Message;
use serde_json::json;

use support::cluster::eventually;
use support::csi_relay::Fault;
use support::relayed::Beside;

const LIMIT: Duration = Duration::from_secs(90);

/// A rewrite of CreateVolume's answer.
type Rewrite = fn(&[u8]) -> Vec<u8>;

/// The driver's answer, changed by `change`.
fn rewritten(message: &[u8], change: fn(&mut csi::Volume)) -> Vec<u8> {
    let mut answer = csi::CreateVolumeResponse::decode(message).unwrap_or_default();
    if let Some(volume) = answer.volume.as_mut() {
        change(volume);
    }
    answer.encode_to_vec()
}

fn empty_id(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| v.volume_id.clear())
}

fn enormous_id(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| v.volume_id = "v".repeat(10_000))
}

fn smaller_than_asked(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| v.capacity_bytes = 1)
}

fn negative_capacity(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| v.capacity_bytes = i64::MIN)
}

fn huge_context(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| {
        v.volume_context.insert("blob".into(), "x".repeat(512 * 1024));
    })
}

fn invalid_topology(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| {
        v.accessible_topology =
            vec![csi::Topology { segments: [(String::new(), "a".to_string())].into() }];
    })
}

fn unknown_topology(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| {
        v.accessible_topology = vec![csi::Topology {
            segments: [("example.com/rack".to_string(), "r9".to_string())].into(),
        }];
    })
}

fn zero_capacity(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| v.capacity_bytes = 0)
}

fn no_topology(m: &[u8]) -> Vec<u8> {
    rewritten(m, |v| v.accessible_topology.clear())
}

/// Each malformed answer once: a Warning that says what was wrong, then the retry's true answer
/// bound, its PV holding the driver's real ID; the bad IDs asked to be deleted where there was
/// one; the driver holding one volume per claim at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_create_volume_answers_are_refused_with_a_warning() {
    let world = Beside::start("hostile-driver", &[], &[]).await;
    world.create_class("std", json!({})).await;
    // (claim, rewrite, what its Warning says, a DeleteVolume for the bad ID)
    let table: [(&str, Rewrite, &str, bool); 6] = [
        ("empty-id", empty_id, "invalid response: empty volume_id", false),
        ("enormous-id", enormous_id, "a volume_id of 10000 bytes", true),
        ("too-small", smaller_than_asked, "with 1 bytes, less than", true),
        ("negative", negative_capacity, "negative capacity_bytes -9223372036854775808", false),
        ("huge-context", huge_context, "a volume_context of 524292 bytes", true),
        ("bad-topology", invalid_topology, "is not a valid label", true),
    ];
    let relay = world.relay();
    for (claim, rewrite, says, deletes) in table {
        let deletes_before = relay.requests::<csi::DeleteVolumeRequest>("DeleteVolume").len();
        relay.inject("CreateVolume", Fault::Rewrite(rewrite));
        world.create_claim(claim, "std", "1Gi", json!({})).await;
        let said = eventually(LIMIT, || async {
            world.warnings(claim).await.into_iter().find(|w| w.contains(says))
        })
        .await;
        assert!(
            said.is_some(),
            "{claim}: no Warning saying {says:?}: {:?}\nsidecar log:\n{}",
            world.events(claim).await,
            world.sidecar.log_text()
        );
        let (_, pv) = world.bound(claim, LIMIT).await;
        let handle = pv.spec.and_then(|s| s.csi).map(|c| c.volume_handle).unwrap_or_default();
        let real = world.hostpath().state_volumes().into_iter().any(|v| v.id == handle);
        assert!(real, "{claim}: the PV's handle {handle:.80} is not a volume of the driver");
        let deleted: Vec<String> = relay
            .requests::<csi::DeleteVolumeRequest>("DeleteVolume")
            .into_iter()
            .skip(deletes_before)
            .map(|r| r.volume_id)
            .collect();
        assert_eq!(!deleted.is_empty(), deletes, "{claim}: DeleteVolume for {deleted:.80?}");
        assert!(
            deleted.iter().all(|id| !id.is_empty() && *id != handle),
            "{claim}: {deleted:.80?}"
        );
    }
    // Topology a PV can hold (unknown keys, none at all) is recorded as the driver gave it, and
    // a capacity of 0 ("not said") as the size asked for.
    let valid: [(&str, Rewrite); 3] = [
        ("unknown-topology", unknown_topology),
        ("no-topology", no_topology),
        ("zero-capacity", zero_capacity),
    ];
    for (claim, rewrite) in valid {
        relay.inject("CreateVolume", Fault::Rewrite(rewrite));
        world.create_claim(claim, "std", "1Gi", json!({})).await;
        world.bound(claim, LIMIT).await;
        assert!(
            world.warnings(claim).await.is_empty(),
            "{claim}: {:?}",
            world.warnings(claim).await
        );
    }
    let (_, zero) = world.bound("zero-capacity", LIMIT).await;
    let size = zero.spec.and_then(|s| s.capacity).and_then(|c| c.get("storage").cloned());
    assert_eq!(size.map(|q| q.0).as_deref(), Some("1Gi"), "capacity 0 records the request");
    let held = world.hostpath().state_volumes();
    assert_eq!(held.len(), table.len() + valid.len(), "one volume per claim: {held:?}");
    let pvs = world.driver_volumes_in_api().await;
    assert_eq!(pvs.len(), held.len(), "one PV per volume");
}

/// A driver that answers with an empty ID every time: retried with backoff (one call per
/// `--retry-interval-max` once backed off, not hundreds), the claim Pending with its Warning, no PV; once the driver answers
/// properly, one volume, bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_driver_that_always_answers_badly_is_retried_with_backoff() {
    let world = Beside::start("hostile-always", &[], &[]).await;
    world.create_class("std", json!({})).await;
    let relay = world.relay();
    relay.always("CreateVolume", Fault::Rewrite(empty_id));
    world.create_claim("data", "std", "1Gi", json!({})).await;
    let said = eventually(LIMIT, || async {
        world.warnings("data").await.into_iter().find(|w| w.contains("empty volume_id"))
    })
    .await;
    assert!(said.is_some(), "{:?}", world.events("data").await);
    let first = relay.calls("CreateVolume");
    tokio::time::sleep(Duration::from_secs(20)).await;
    let calls = relay.calls("CreateVolume") - first;
    // The world's backoff doubles from 200 ms to 2 s: once there, one call per 2 s, 10 in 20 s
    // and a few more at most (a hot loop makes hundreds).
    assert!((5..=14).contains(&calls), "{calls} CreateVolume calls in 20 s");
    assert!(world.driver_volumes_in_api().await.is_empty(), "no PV from an answer without an ID");
    assert_eq!(world.phase("data").await.as_deref(), Some("Pending"));
    relay.clear("CreateVolume");
    world.bound("data", LIMIT).await;
    assert_eq!(world.hostpath().state_volumes().len(), 1);
}
