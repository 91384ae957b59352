//! The states the binder differential test loads, how it generates them, and the summary of an
//! end state that the two binders are compared on.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A small seeded generator: the same seed gives the same states.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }

    /// Picks by weight.
    fn pick<T: Clone>(&mut self, choices: &[(u64, T)]) -> T {
        let total: u64 = choices.iter().map(|(w, _)| w).sum();
        let mut roll = self.below(total);
        for (weight, value) in choices {
            if roll < *weight {
                return value.clone();
            }
            roll -= weight;
        }
        choices[0].1.clone()
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Which class an object names, within its state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Class {
    /// `<state>-a`: Immediate, an external provisioner nobody runs.
    Immediate,
    /// `<state>-b`: WaitForFirstConsumer.
    Delayed,
    /// `<state>-n`: `kubernetes.io/no-provisioner`.
    NoProvisioner,
    /// `<state>-x`: no such class.
    Missing,
}

impl Class {
    fn name(self, state: &str) -> String {
        let suffix = match self {
            Class::Immediate => "a",
            Class::Delayed => "b",
            Class::NoProvisioner => "n",
            Class::Missing => "x",
        };
        format!("{state}-{suffix}")
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Uid {
    Matching,
    Wrong,
    Empty,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClaimRef {
    None,
    /// Claim number `.0` of the state, with its UID, another or none.
    Claim(usize, Uid),
    /// A claim that does not exist.
    Ghost,
}

#[derive(Debug, Clone)]
pub struct ClaimSpec {
    pub class: Class,
    pub size: &'static str,
    pub modes: Vec<&'static str>,
    pub selector: bool,
    /// Pre-bound: PV number, or a PV that does not exist (`usize::MAX`).
    pub volume: Option<usize>,
    pub bind_completed: bool,
    pub bound_by_controller: bool,
    pub phase: Option<&'static str>,
    pub block: bool,
    /// `volumeAttributesClassName: gold` (the class need not exist for binding).
    pub vac: bool,
}

#[derive(Debug, Clone)]
pub struct VolumeSpec {
    pub class: Class,
    pub size: &'static str,
    pub modes: Vec<&'static str>,
    pub gold: bool,
    pub claim_ref: ClaimRef,
    pub reclaim: &'static str,
    pub phase: Option<&'static str>,
    pub bound_by_controller: bool,
    pub block: bool,
    pub vac: bool,
    /// An in-tree source (hostPath) rather than CSI; never with `vac`, which needs CSI.
    pub in_tree: bool,
}

#[derive(Debug, Clone)]
pub struct State {
    pub label: String,
    pub claims: Vec<ClaimSpec>,
    pub volumes: Vec<VolumeSpec>,
}

const SIZES: [(u64, &str); 3] = [(1, "1Gi"), (1, "2Gi"), (1, "5Gi")];

impl State {
    pub fn generate(r: &mut Lcg) -> State {
        let volumes = r.below(4) as usize;
        let claims = 1 + r.below(3) as usize;
        let classes = [
            (50, Class::Immediate),
            (15, Class::Delayed),
            (15, Class::NoProvisioner),
            (10, Class::Missing),
        ];
        let mut claim_specs: Vec<ClaimSpec> = (0..claims)
            .map(|_| {
                let volume = match r.below(10) {
                    0..=5 => None,
                    6..=8 if volumes > 0 => Some(r.below(volumes as u64) as usize),
                    _ => Some(usize::MAX),
                };
                ClaimSpec {
                    class: r.pick(&classes),
                    size: r.pick(&SIZES),
                    modes: r.pick(&[
                        (60, vec!["ReadWriteOnce"]),
                        (15, vec!["ReadWriteMany"]),
                        (10, vec!["ReadOnlyMany"]),
                        (10, vec!["ReadWriteOnce", "ReadOnlyMany"]),
                        (5, vec!["ReadWriteOncePod"]),
                    ]),
                    selector: r.chance(20),
                    bind_completed: r.chance(if volume.is_some() { 50 } else { 15 }),
                    bound_by_controller: r.chance(15),
                    phase: r.pick(&[
                        (50, None),
                        (15, Some("Pending")),
                        (25, Some("Bound")),
                        (10, Some("Lost")),
                    ]),
                    block: r.chance(10),
                    vac: r.chance(15),
                    volume,
                }
            })
            .collect();
        // Which of two claims a binder serves first is not part of its semantics: at most one
        // claim per state looks for a PV, and none is pre-bound to a PV it could take.
        if let Some(free) = claim_specs.iter().position(|c| c.volume.is_none()) {
            let mut i = 0;
            claim_specs.retain(|c| {
                i += 1;
                i - 1 == free || c.volume.is_some()
            });
            for c in &mut claim_specs {
                if c.volume.is_some() {
                    c.volume = Some(usize::MAX);
                }
            }
        }
        let claims = claim_specs.len();
        // Distinct sizes: "the smallest fitting PV" has one answer.
        let mut sizes = vec!["1Gi", "2Gi", "3Gi", "5Gi"];
        let volume_specs: Vec<VolumeSpec> = (0..volumes)
            .map(|_| VolumeSpec {
                class: r.pick(&classes),
                size: sizes.remove(r.below(sizes.len() as u64) as usize),
                modes: r.pick(&[
                    (50, vec!["ReadWriteOnce"]),
                    (25, vec!["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"]),
                    (15, vec!["ReadWriteMany"]),
                    (10, vec!["ReadOnlyMany"]),
                ]),
                gold: r.chance(30),
                claim_ref: match r.below(20) {
                    0..=8 => ClaimRef::None,
                    9..=13 => ClaimRef::Claim(r.below(claims as u64) as usize, Uid::Matching),
                    14..=15 => ClaimRef::Claim(r.below(claims as u64) as usize, Uid::Wrong),
                    16..=17 => ClaimRef::Claim(r.below(claims as u64) as usize, Uid::Empty),
                    _ => ClaimRef::Ghost,
                },
                reclaim: r.pick(&[(1, "Retain"), (1, "Delete")]),
                phase: r.pick(&[
                    (30, None),
                    (25, Some("Available")),
                    (25, Some("Bound")),
                    (15, Some("Released")),
                    (5, Some("Failed")),
                ]),
                bound_by_controller: r.chance(20),
                block: r.chance(10),
                vac: r.chance(15),
                in_tree: r.chance(10),
            })
            .collect();
        State { label: "generated".into(), claims: claim_specs, volumes: volume_specs }
            .without_races()
    }

    /// Which of two claims a binder serves first, and which PVs it has made Available by the
    /// time a claim looks, are not part of its semantics: kube-controller-manager's own runs of
    /// one state differ there. So no PV that a claimRef does not tie to one claim is named by
    /// two claims, and with a claim looking, every unclaimed PV starts Available.
    pub fn without_races(mut self) -> State {
        let (claim_specs, volume_specs) = (&mut self.claims, &mut self.volumes);
        // Two PVs pre-bound to one claim: kube-controller-manager takes whichever its index
        // (a Go map) yields first. One stays tied; the others name the claim with another UID.
        let mut tied_to = std::collections::BTreeSet::new();
        for v in volume_specs.iter_mut() {
            if let ClaimRef::Claim(i, Uid::Matching | Uid::Empty) = v.claim_ref
                && !tied_to.insert(i)
            {
                v.claim_ref = ClaimRef::Claim(i, Uid::Wrong);
            }
        }
        // A claim naming a PV whose claimRef names another claim: whether the binder sees the
        // claimRef's claim let go of it first (and the first claim take it) or not (and the first
        // claim Lost for a moment) is the order of its two workers. So that other claim names the
        // PV too: a plain double bind.
        for (k, v) in volume_specs.iter().enumerate() {
            if let ClaimRef::Claim(i, _) = v.claim_ref
                && claim_specs.iter().enumerate().any(|(j, c)| j != i && c.volume == Some(k))
            {
                claim_specs[i].volume = Some(k);
            }
        }
        let tied =
            |v: &VolumeSpec| matches!(v.claim_ref, ClaimRef::Claim(_, Uid::Matching | Uid::Empty));
        for (k, v) in volume_specs.iter().enumerate() {
            if tied(v) {
                continue;
            }
            let mut named = false;
            for c in claim_specs.iter_mut() {
                if c.volume == Some(k) {
                    if named {
                        c.volume = Some(usize::MAX);
                    }
                    named = true;
                }
            }
        }
        if claim_specs.iter().any(|c| c.volume.is_none()) {
            for v in volume_specs.iter_mut() {
                if v.claim_ref == ClaimRef::None {
                    v.phase = Some("Available");
                }
            }
        }
        self
    }

    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, c) in self.claims.iter().enumerate() {
            out.push_str(&format!("  claim c{i}: {c:?}\n"));
        }
        for (i, v) in self.volumes.iter().enumerate() {
            out.push_str(&format!("  pv v{i}: {v:?}\n"));
        }
        out
    }

    /// Creates the state's namespace `id`, classes, claims and PVs, statuses included.
    pub async fn load(&self, client: &kube::Client, id: &str) {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": id}})).unwrap();
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
        let classes = Api::<StorageClass>::all(client.clone());
        for (class, provisioner, mode) in [
            (Class::Immediate, "example.com/nobody", "Immediate"),
            (Class::Delayed, "example.com/nobody", "WaitForFirstConsumer"),
            (Class::NoProvisioner, "kubernetes.io/no-provisioner", "Immediate"),
        ] {
            let sc: StorageClass = serde_json::from_value(json!({
                "metadata": {"name": class.name(id)},
                "provisioner": provisioner,
                "volumeBindingMode": mode,
            }))
            .unwrap();
            classes.create(&PostParams::default(), &sc).await.unwrap();
        }
        let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), id);
        let mut uids = Vec::new();
        for (i, c) in self.claims.iter().enumerate() {
            let mut annotations = serde_json::Map::new();
            if c.bind_completed {
                annotations.insert("pv.kubernetes.io/bind-completed".into(), "yes".into());
            }
            if c.bound_by_controller {
                annotations.insert("pv.kubernetes.io/bound-by-controller".into(), "yes".into());
            }
            let mut spec = json!({
                "storageClassName": c.class.name(id),
                "accessModes": c.modes,
                "resources": {"requests": {"storage": c.size}},
                "volumeMode": if c.block { "Block" } else { "Filesystem" },
            });
            if c.selector {
                spec["selector"] = json!({"matchLabels": {"tier": "gold"}});
            }
            if c.vac {
                spec["volumeAttributesClassName"] = json!("gold");
            }
            if let Some(v) = c.volume {
                spec["volumeName"] = json!(volume_name(id, v));
            }
            let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": format!("c{i}"), "annotations": annotations},
                "spec": spec,
            }))
            .unwrap();
            let created = claims.create(&PostParams::default(), &claim).await.unwrap();
            uids.push(created.metadata.uid.unwrap());
            if let Some(phase) = c.phase {
                let status = json!({"status": {"phase": phase}});
                claims
                    .patch_status(&format!("c{i}"), &PatchParams::default(), &Patch::Merge(status))
                    .await
                    .unwrap();
            }
        }
        let volumes = Api::<PersistentVolume>::all(client.clone());
        for (i, v) in self.volumes.iter().enumerate() {
            let name = volume_name(id, i);
            let mut annotations = serde_json::Map::new();
            if v.bound_by_controller {
                annotations.insert("pv.kubernetes.io/bound-by-controller".into(), "yes".into());
            }
            let mut labels = serde_json::Map::new();
            if v.gold {
                labels.insert("tier".into(), "gold".into());
            }
            let mut spec = json!({
                "storageClassName": v.class.name(id),
                "accessModes": v.modes,
                "capacity": {"storage": v.size},
                "persistentVolumeReclaimPolicy": v.reclaim,
                "volumeMode": if v.block { "Block" } else { "Filesystem" },
            });
            if v.in_tree && !v.vac {
                // Not under /tmp: kube-controller-manager's in-tree hostPath deleter removes those.
                spec["hostPath"] = json!({"path": format!("/srv/differential/{name}")});
            } else {
                // A driver nobody here serves.
                spec["csi"] = json!({"driver": "elsewhere.csi.test", "volumeHandle": name});
            }
            if v.vac {
                spec["volumeAttributesClassName"] = json!("gold");
            }
            match &v.claim_ref {
                ClaimRef::None => {}
                ClaimRef::Claim(k, uid) => {
                    let mut r = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": id, "name": format!("c{k}")});
                    match uid {
                        Uid::Matching => r["uid"] = json!(uids[*k]),
                        Uid::Wrong => r["uid"] = json!("00000000-0000-0000-0000-00000000dead"),
                        Uid::Empty => {}
                    }
                    spec["claimRef"] = r;
                }
                ClaimRef::Ghost => {
                    spec["claimRef"] = json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": id, "name": "ghost", "uid": "00000000-0000-0000-0000-0000000000aa"});
                }
            }
            let pv: PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": name, "annotations": annotations, "labels": labels},
                "spec": spec,
            }))
            .unwrap();
            volumes.create(&PostParams::default(), &pv).await.unwrap();
            if let Some(phase) = v.phase {
                let status = json!({"status": {"phase": phase}});
                volumes
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await
                    .unwrap();
            }
        }
    }
}

fn volume_name(state: &str, i: usize) -> String {
    if i == usize::MAX { format!("{state}-missing") } else { format!("{state}-v{i}") }
}

/// One state's end, as `object field → value`, in terms that do not depend on the plane (UIDs
/// named by the claim they belong to).
pub type Summary = BTreeMap<String, String>;

/// The summaries of states `ids`, read from the API.
pub async fn summarize(client: &kube::Client, ids: &[String]) -> BTreeMap<String, Summary> {
    let mut out: BTreeMap<String, Summary> =
        ids.iter().map(|id| (id.clone(), Summary::new())).collect();
    let claims = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut uid_names = BTreeMap::new();
    let mut bound_claims = BTreeSet::new();
    for c in &claims {
        let ns = c.metadata.namespace.clone().unwrap_or_default();
        let name = c.metadata.name.clone().unwrap_or_default();
        uid_names.insert(c.metadata.uid.clone().unwrap_or_default(), (ns.clone(), name.clone()));
        let Some(summary) = out.get_mut(&ns) else {
            continue;
        };
        let mut v = serde_json::to_value(c).unwrap_or_default();
        let key = format!("claim {name}");
        if v["status"]["phase"] == "Bound" {
            // Whether the binder handed a claim to a provisioner before it found the PV it ended
            // on is timing: kube-controller-manager does it in some runs of one state, when its
            // claim worker comes before its volume worker made that PV Available.
            if let Some(a) = v["metadata"]["annotations"].as_object_mut() {
                a.remove("volume.kubernetes.io/storage-provisioner");
                a.remove("volume.beta.kubernetes.io/storage-provisioner");
            }
            bound_claims.insert((ns.clone(), name.clone()));
        }
        put(summary, &key, "phase", &v["status"]["phase"]);
        put(summary, &key, "volumeName", &v["spec"]["volumeName"]);
        put(summary, &key, "capacity", &v["status"]["capacity"]);
        put(summary, &key, "status.accessModes", &v["status"]["accessModes"]);
        put(summary, &key, "annotations", &v["metadata"]["annotations"]);
        put(summary, &key, "finalizers", &v["metadata"]["finalizers"]);
    }
    let volumes = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for pv in &volumes {
        let name = pv.metadata.name.clone().unwrap_or_default();
        let Some((state, short)) = name.split_once('-') else {
            continue;
        };
        let Some(summary) = out.get_mut(state) else {
            continue;
        };
        let v = serde_json::to_value(pv).unwrap_or_default();
        let key = format!("pv {short}");
        put(summary, &key, "phase", &v["status"]["phase"]);
        put(summary, &key, "annotations", &v["metadata"]["annotations"]);
        put(summary, &key, "finalizers", &v["metadata"]["finalizers"]);
        let message = v["status"]["message"].as_str().is_some_and(|m| !m.is_empty());
        summary.insert(format!("{key} message"), if message { "set" } else { "-" }.into());
        let claim_ref = &v["spec"]["claimRef"];
        let described = if claim_ref.is_null() {
            "-".to_string()
        } else {
            let name = claim_ref["name"].as_str().unwrap_or_default();
            let uid = match claim_ref["uid"].as_str() {
                None | Some("") => "no uid".to_string(),
                Some(uid) => match uid_names.get(uid) {
                    Some((_, n)) => format!("uid of {n}"),
                    None => "a uid of no claim".to_string(),
                },
            };
            format!("{name} ({uid})")
        };
        summary.insert(format!("{key} claimRef"), described);
    }
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut reasons: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for e in &events {
        let o = &e.involved_object;
        let name = o.name.clone().unwrap_or_default();
        let (state, key) = match o.kind.as_deref() {
            Some("PersistentVolumeClaim") => {
                let ns = o.namespace.clone().unwrap_or_default();
                let handed = e.reason.as_deref() == Some("ExternalProvisioning");
                if handed && bound_claims.contains(&(ns.clone(), name.clone())) {
                    continue;
                }
                (ns, format!("claim {name}"))
            }
            Some("PersistentVolume") => match name.split_once('-') {
                Some((state, short)) => (state.to_string(), format!("pv {short}")),
                None => continue,
            },
            _ => continue,
        };
        reasons.entry((state, key)).or_default().insert(e.reason.clone().unwrap_or_default());
    }
    for ((state, key), set) in reasons {
        if let Some(summary) = out.get_mut(&state) {
            summary.insert(format!("{key} events"), set.into_iter().collect::<Vec<_>>().join(","));
        }
    }
    out
}

fn put(summary: &mut Summary, key: &str, field: &str, value: &Value) {
    let text = match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    summary.insert(format!("{key} {field}"), text);
}

/// The fields where two summaries differ, one line each.
pub fn diff(upstream: &Summary, ours: &Summary) -> String {
    let keys: BTreeSet<&String> = upstream.keys().chain(ours.keys()).collect();
    keys.into_iter()
        .filter(|k| upstream.get(*k) != ours.get(*k))
        .map(|k| {
            format!(
                "  {k}: {} | {}",
                upstream.get(k).map_or("(none)", String::as_str),
                ours.get(k).map_or("(none)", String::as_str)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn claim(class: Class, size: &'static str, volume: Option<usize>) -> ClaimSpec {
    ClaimSpec {
        class,
        size,
        modes: vec!["ReadWriteOnce"],
        selector: false,
        volume,
        bind_completed: false,
        bound_by_controller: false,
        phase: None,
        block: false,
        vac: false,
    }
}

fn volume(class: Class, size: &'static str, claim_ref: ClaimRef) -> VolumeSpec {
    VolumeSpec {
        class,
        size,
        modes: vec!["ReadWriteOnce"],
        gold: false,
        claim_ref,
        reclaim: "Retain",
        phase: None,
        bound_by_controller: false,
        block: false,
        vac: false,
        in_tree: false,
    }
}

/// The cases a generator may take long to hit.
pub fn hand_written() -> Vec<State> {
    let bound = |c: ClaimSpec| ClaimSpec { bind_completed: true, phase: Some("Bound"), ..c };
    let state = |label: &str, claims: Vec<ClaimSpec>, volumes: Vec<VolumeSpec>| {
        State { label: label.into(), claims, volumes }.without_races()
    };
    vec![
        state(
            "smallest fitting PV is chosen",
            vec![claim(Class::Immediate, "2Gi", None)],
            ["5Gi", "2Gi", "1Gi"]
                .into_iter()
                .map(|size| VolumeSpec {
                    phase: Some("Available"),
                    ..volume(Class::Immediate, size, ClaimRef::None)
                })
                .collect(),
        ),
        state(
            "misbound: the PV names the claim with another UID",
            vec![bound(claim(Class::Immediate, "1Gi", Some(0)))],
            vec![VolumeSpec {
                phase: Some("Bound"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Claim(0, Uid::Wrong))
            }],
        ),
        state(
            "bound claim whose PV is gone: Lost",
            vec![bound(claim(Class::Immediate, "1Gi", Some(usize::MAX)))],
            vec![],
        ),
        state(
            "pre-bound PV without UID, claim free",
            vec![claim(Class::Immediate, "1Gi", None)],
            vec![volume(Class::Immediate, "1Gi", ClaimRef::Claim(0, Uid::Empty))],
        ),
        state(
            "claim pre-bound to a PV of another class",
            vec![claim(Class::Immediate, "1Gi", Some(0))],
            vec![volume(Class::NoProvisioner, "1Gi", ClaimRef::None)],
        ),
        state(
            "claim pre-bound to a PV too small",
            vec![claim(Class::Immediate, "5Gi", Some(0))],
            vec![volume(Class::Immediate, "1Gi", ClaimRef::None)],
        ),
        state(
            "Released Delete PV of an in-tree source: Failed",
            vec![],
            vec![VolumeSpec {
                in_tree: true,
                reclaim: "Delete",
                phase: Some("Released"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Ghost)
            }],
        ),
        state(
            "Released Delete PV of another CSI driver: left to its provisioner",
            vec![],
            vec![VolumeSpec {
                reclaim: "Delete",
                phase: Some("Released"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Ghost)
            }],
        ),
        state(
            "Bound PV whose claim is gone, Retain: Released",
            vec![],
            vec![VolumeSpec {
                phase: Some("Bound"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Ghost)
            }],
        ),
        state(
            "selector: only the labelled PV",
            vec![ClaimSpec { selector: true, ..claim(Class::Immediate, "1Gi", None) }],
            vec![
                volume(Class::Immediate, "1Gi", ClaimRef::None),
                VolumeSpec { gold: true, ..volume(Class::Immediate, "2Gi", ClaimRef::None) },
            ],
        ),
        state(
            "WaitForFirstConsumer claim with a fitting PV waits",
            vec![claim(Class::Delayed, "1Gi", None)],
            vec![volume(Class::Delayed, "1Gi", ClaimRef::None)],
        ),
        state(
            "block claim, filesystem PV",
            vec![ClaimSpec { block: true, ..claim(Class::Immediate, "1Gi", None) }],
            vec![volume(Class::Immediate, "1Gi", ClaimRef::None)],
        ),
        state(
            "attributes class copied into the claim's status on bind",
            vec![ClaimSpec { vac: true, ..claim(Class::Immediate, "1Gi", None) }],
            vec![VolumeSpec { vac: true, ..volume(Class::Immediate, "1Gi", ClaimRef::None) }],
        ),
        state(
            "attributes classes differ: no match",
            vec![ClaimSpec { vac: true, ..claim(Class::Immediate, "1Gi", None) }],
            vec![volume(Class::Immediate, "1Gi", ClaimRef::None)],
        ),
        state(
            "pre-bound both ways, Released: bound again",
            vec![bound(claim(Class::Immediate, "1Gi", Some(0)))],
            vec![VolumeSpec {
                phase: Some("Released"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Claim(0, Uid::Matching))
            }],
        ),
        state(
            "PV pre-bound to a claim by name only, Delete, claim gone",
            vec![],
            vec![VolumeSpec {
                reclaim: "Delete",
                phase: Some("Available"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Ghost)
            }],
        ),
        state("missing class, no PV", vec![claim(Class::Missing, "1Gi", None)], vec![]),
        state(
            "no-provisioner class, no PV",
            vec![claim(Class::NoProvisioner, "1Gi", None)],
            vec![],
        ),
        state(
            "Lost claim whose PV is back",
            vec![ClaimSpec {
                phase: Some("Lost"),
                ..bound(claim(Class::Immediate, "1Gi", Some(0)))
            }],
            vec![VolumeSpec {
                phase: Some("Bound"),
                ..volume(Class::Immediate, "1Gi", ClaimRef::Claim(0, Uid::Matching))
            }],
        ),
    ]
}
