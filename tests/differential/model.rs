//! The states the binder differential test loads, how it generates them, and the summary of an
//! end state that the two binders are compared on.

mod cases;
mod summary;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

pub use cases::hand_written;
pub use summary::{Summary, diff, summarize};

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
