use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::json;

use super::*;
use crate::model::names::{ANN_ALPHA_SELECTED_NODE, ANN_SELECTED_NODE};

const KEY: &str = "topology.hostpath.csi/node";
const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

fn topology(node: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(KEY.to_string(), node.to_string())])
}

fn claim(uid: &str, selected: Option<&str>, size: &str) -> PersistentVolumeClaim {
    let annotations = selected.map(|n| json!({ANN_SELECTED_NODE: n})).unwrap_or(json!({}));
    serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": uid, "annotations": annotations},
        "spec": {"storageClassName": "local", "resources": {"requests": {"storage": size}}},
    }))
    .expect("claim")
}

fn class(mode: &str, allowed: serde_json::Value) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": "local"}, "provisioner": "hostpath.csi.k8s.io",
        "volumeBindingMode": mode, "allowedTopologies": allowed,
    }))
    .expect("class")
}

fn lease(holder: &str, seconds: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_string()),
        lease_duration_seconds: Some(seconds),
        ..Default::default()
    }
}

/// Every node's instance: its Lease read at `seen`, and what it publishes as free.
struct Fleet {
    topologies: Vec<BTreeMap<String, String>>,
    leases: Vec<LeaseSpec>,
    seen: Vec<Instant>,
    free: Vec<Option<u128>>,
}

impl Fleet {
    fn new(start: Instant) -> Fleet {
        Fleet {
            topologies: NODES.iter().map(|n| topology(n)).collect(),
            leases: NODES.iter().map(|n| lease(n, 15)).collect(),
            seen: vec![start; NODES.len()],
            free: vec![None; NODES.len()],
        }
    }

    fn instances(&self) -> Vec<Instance<'_>> {
        (0..NODES.len())
            .map(|i| Instance {
                node: NODES[i],
                topology: &self.topologies[i],
                lease: LeaseSeen { record: &self.leases[i], since: self.seen[i] },
                free_bytes: self.free[i],
            })
            .collect()
    }
}

fn scope<'a>(node: &'a str, topology: &'a BTreeMap<String, String>) -> Scope<'a> {
    Scope { node, topology, immediate_binding: true, ownership: Ownership::Rendezvous }
}

fn turn(
    node: &str,
    fleet: &Fleet,
    c: &PersistentVolumeClaim,
    sc: &StorageClass,
    now: Instant,
) -> ClaimTurn {
    let own = topology(node);
    claim_turn(scope(node, &own), c, sc, &fleet.instances(), now, 0, 0.5)
}

#[test]
fn a_claim_that_names_a_node_is_that_nodes_alone() {
    let start = Instant::now();
    let fleet = Fleet::new(start);
    let immediate = class("Immediate", json!([]));
    let wffc = class("WaitForFirstConsumer", json!([]));
    let rows: &[(&str, Option<&str>, &StorageClass, ClaimTurn)] = &[
        ("names this node", Some("n1"), &wffc, ClaimTurn::Provision),
        ("names this node, Immediate", Some("n1"), &immediate, ClaimTurn::Provision),
        ("names another", Some("n2"), &wffc, ClaimTurn::OtherNode("n2".into())),
        ("names another, Immediate", Some("n3"), &immediate, ClaimTurn::OtherNode("n3".into())),
        ("not scheduled yet", None, &wffc, ClaimTurn::Unscheduled),
        ("an empty name is no name", Some(""), &wffc, ClaimTurn::Unscheduled),
    ];
    for (what, selected, sc, want) in rows {
        assert_eq!(turn("n1", &fleet, &claim("u", *selected, "1Gi"), sc, start), *want, "{what}");
    }
    let mut alpha = claim("u", None, "1Gi");
    alpha.metadata.annotations =
        Some([(ANN_ALPHA_SELECTED_NODE.to_string(), "n2".to_string())].into_iter().collect());
    assert_eq!(
        turn("n1", &fleet, &alpha, &wffc, start),
        ClaimTurn::OtherNode("n2".into()),
        "the alpha name too"
    );
    let own = topology("n1");
    let off = Scope { immediate_binding: false, ..scope("n1", &own) };
    let got =
        claim_turn(off, &claim("u", None, "1Gi"), &immediate, &fleet.instances(), start, 0, 0.5);
    assert_eq!(got, ClaimTurn::ImmediateBindingOff);
}

#[test]
fn every_instance_names_the_same_single_owner_and_owners_spread() {
    let start = Instant::now();
    let fleet = Fleet::new(start);
    let sc = class("Immediate", json!([]));
    let mut owned = BTreeMap::<&str, usize>::new();
    for k in 0..1000 {
        let c = claim(&format!("uid-{k}"), None, "1Gi");
        let turns: Vec<ClaimTurn> = NODES.iter().map(|n| turn(n, &fleet, &c, &sc, start)).collect();
        let takers: Vec<&str> = NODES
            .iter()
            .zip(&turns)
            .filter(|(_, t)| **t == ClaimTurn::TakeOwnership { after: Duration::ZERO })
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(takers.len(), 1, "claim {k}: {turns:?}");
        for t in &turns {
            if let ClaimTurn::OwnedBy { node, recheck_at } = t {
                assert_eq!(node, takers[0], "claim {k}: the others wait on the taker");
                assert_eq!(*recheck_at, start + Duration::from_secs(15), "until its Lease lapses");
            }
        }
        *owned.entry(takers[0]).or_default() += 1;
    }
    for node in NODES {
        let n = owned.get(node).copied().unwrap_or(0);
        assert!((170..=330).contains(&n), "{node} owns {n} of 1000: {owned:?}");
    }
}

/// The first owner of a claim, as n1's instance sees it.
fn owner_of(
    fleet: &Fleet,
    c: &PersistentVolumeClaim,
    sc: &StorageClass,
    now: Instant,
) -> Option<String> {
    NODES.iter().find_map(|n| match turn(n, fleet, c, sc, now) {
        ClaimTurn::TakeOwnership { .. } => Some(n.to_string()),
        _ => None,
    })
}

#[test]
fn a_lapsed_owner_is_passed_over_and_a_renewing_one_is_not() {
    let start = Instant::now();
    let sc = class("Immediate", json!([]));
    let c = claim("uid-7", None, "1Gi");
    let mut fleet = Fleet::new(start);
    let first = owner_of(&fleet, &c, &sc, start).expect("an owner");
    let i = NODES.iter().position(|n| *n == first).expect("a node");
    let later = start + Duration::from_secs(20);
    // The others renewed (their records changed, seen anew); the first one's stood still.
    for j in 0..NODES.len() {
        if j != i {
            fleet.seen[j] = later;
        }
    }
    let next = owner_of(&fleet, &c, &sc, later).expect("a next owner");
    assert_ne!(next, first, "a Lease unchanged for its whole duration is lapsed");
    // The first one renews: it comes first again.
    fleet.seen[i] = later;
    assert_eq!(owner_of(&fleet, &c, &sc, later), Some(first.clone()));
    // The lapsed instance itself does not take a claim while its own Lease is lapsed.
    fleet.seen[i] = start;
    assert!(!matches!(turn(&first, &fleet, &c, &sc, later), ClaimTurn::TakeOwnership { .. }));
    // A released Lease (no holder) is not live, whenever it was seen.
    fleet.seen[i] = later;
    fleet.leases[i].holder_identity = None;
    assert_ne!(owner_of(&fleet, &c, &sc, later), Some(first));
}

#[test]
fn topology_and_room_choose_among_the_live() {
    let start = Instant::now();
    let c = claim("uid-1", None, "10Gi");
    let only_n3 =
        class("Immediate", json!([{"matchLabelExpressions": [{"key": KEY, "values": ["n3"]}]}]));
    let fleet = Fleet::new(start);
    assert_eq!(owner_of(&fleet, &c, &only_n3, start).as_deref(), Some("n3"));
    for n in ["n1", "n2", "n4"] {
        assert_eq!(
            turn(n, &fleet, &c, &only_n3, start),
            ClaimTurn::OwnedBy { node: "n3".into(), recheck_at: start + Duration::from_secs(15) },
        );
    }
    let nowhere =
        class("Immediate", json!([{"matchLabelExpressions": [{"key": KEY, "values": ["n9"]}]}]));
    assert_eq!(
        turn("n1", &fleet, &c, &nowhere, start),
        ClaimTurn::NoInstanceCanServe(NoServer::OutsideAllowedTopologies { live: 4 })
    );
    let mut small = Fleet::new(start);
    small.free = vec![Some(1 << 30), Some(2 << 30), None, Some(20 << 30)];
    let anywhere = class("Immediate", json!([]));
    let owner = owner_of(&small, &c, &anywhere, start).expect("an owner");
    assert!(
        owner == "n3" || owner == "n4",
        "only n3 (publishes nothing) and n4 have room: {owner}"
    );
    small.free = vec![Some(1 << 30), Some(2 << 30), Some(3 << 30), Some(4 << 30)];
    assert_eq!(
        turn("n1", &small, &c, &anywhere, start),
        ClaimTurn::NoInstanceCanServe(NoServer::NoRoom { live: 4, most_free: 4 << 30 })
    );
}

#[test]
fn with_no_live_instance_the_claim_says_whose_lease_is_missing() {
    let start = Instant::now();
    let fleet = Fleet::new(start);
    let later = start + Duration::from_secs(60);
    let c = claim("uid-1", None, "1Gi");
    let sc = class("Immediate", json!([]));
    assert_eq!(
        turn("n1", &fleet, &c, &sc, later),
        ClaimTurn::NoInstanceCanServe(NoServer::OwnLeaseLapsed)
    );
    let own = topology("n9");
    let stranger = claim_turn(scope("n9", &own), &c, &sc, &fleet.instances(), later, 0, 0.5);
    assert_eq!(stranger, ClaimTurn::NoInstanceCanServe(NoServer::NoLiveInstance));
}

#[test]
fn race_mode_waits_as_upstream_and_takes_only_what_fits_here() {
    let start = Instant::now();
    let fleet = Fleet::new(start);
    let base = Duration::from_secs(20);
    let max = Duration::from_secs(60);
    let rows: &[(u32, f64, Duration)] = &[
        (0, 0.0, Duration::ZERO),
        (0, 0.5, Duration::from_secs(10)),
        (1, 0.5, Duration::from_secs(20)),
        (2, 0.5, Duration::from_secs(30)),
        (9, 1.0, max),
        (u32::MAX, 0.99, max.mul_f64(0.99)),
        (0, 7.0, base),
    ];
    for (attempt, jitter, want) in rows {
        assert_eq!(
            race_delay(base, max, *attempt, *jitter),
            *want,
            "attempt {attempt}, jitter {jitter}"
        );
    }
    let own = topology("n2");
    let race = Scope { ownership: Ownership::Race { base, max }, ..scope("n2", &own) };
    let c = claim("uid-1", None, "1Gi");
    let got =
        claim_turn(race, &c, &class("Immediate", json!([])), &fleet.instances(), start, 1, 0.25);
    assert_eq!(got, ClaimTurn::TakeOwnership { after: Duration::from_secs(10) });
    let elsewhere =
        class("Immediate", json!([{"matchLabelExpressions": [{"key": KEY, "values": ["n1"]}]}]));
    let got = claim_turn(race, &c, &elsewhere, &fleet.instances(), start, 0, 0.25);
    assert_eq!(got, ClaimTurn::NotHere);
}

#[test]
fn the_ranking_is_pinned_so_every_build_agrees() {
    // Two instances of different builds must rank alike: these values are part of the protocol.
    assert_eq!(score("", ""), score("", ""));
    assert_ne!(score("uid-1", "n1"), score("uid-1", "n2"));
    assert_ne!(score("uid-1n", "1"), score("uid-1", "n1"), "the separator keeps the parts apart");
    assert_eq!(score("8f2c0a6e-0000-4000-8000-000000000001", "node-a"), PINNED);
}

const PINNED: u64 = 10_214_702_372_336_085_662;

#[test]
fn a_volume_is_acted_on_only_by_the_node_its_affinity_selects() {
    let pv = |affinity: serde_json::Value| -> PersistentVolume {
        serde_json::from_value(
            json!({"metadata": {"name": "pv"}, "spec": {"nodeAffinity": affinity}}),
        )
        .expect("pv")
    };
    let on = |node: &str| {
        pv(json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": [node]}]}]}}))
    };
    let own = topology("n1");
    let s = scope("n1", &own);
    assert_eq!(volume_turn(s, &on("n1")), VolumeTurn::ThisNode);
    assert_eq!(volume_turn(s, &on("n2")), VolumeTurn::OtherNode);
    assert_eq!(volume_turn(s, &pv(json!(null))), VolumeTurn::NoAffinity);
    assert_eq!(
        volume_turn(s, &pv(json!({"required": {"nodeSelectorTerms": []}}))),
        VolumeTurn::NoAffinity
    );
}
