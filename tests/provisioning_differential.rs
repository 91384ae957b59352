//! Finishing the binding beside kube-controller-manager's binder (docs/binder.md §5), against
//! that binder as ground truth. On one control plane, kube-controller-manager's storage
//! controllers run beside csi-pv-controller and hostpathplugin, which provision generated claims
//! and write their bindings. On a second plane, kube-controller-manager alone gets the same
//! classes and claims and, once it has handed each claim over, the PV we made for it, as a
//! provisioner that never binds would leave it; there the binder binds alone. The claims and
//! PVs each plane ends with are compared field by field, in both intent modes (the journal,
//! as deploy/ runs it, and the claim finalizer).
//!
//! `PROVISIONING_DIFF_SEED` replays one set of claims (the seed is printed).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use support::cluster::{INTENT_JOURNAL, World, eventually};
use support::control_plane::fresh_plane;
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};

const LIMIT: Duration = Duration::from_secs(120);
const CLAIMS: usize = 16;

/// A small deterministic generator (64-bit LCG), so that a failing seed can be replayed.
struct Lcg(u64);

impl Lcg {
    fn pick<'a, T>(&mut self, choices: &'a [T]) -> &'a T {
        self.0 =
            self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        &choices[((self.0 >> 33) % choices.len() as u64) as usize]
    }
}

/// The classes, VolumeAttributesClasses and claims of one namespace, as JSON to create on
/// either plane.
struct Objects {
    namespace: String,
    classes: Vec<Value>,
    attributes: Vec<Value>,
    claims: Vec<Value>,
}

fn generate(random: &mut Lcg, namespace: &str, driver: &str) -> Objects {
    let class = |suffix: &str, extra: Value| {
        let mut c = json!({
            "metadata": {"name": format!("{namespace}-{suffix}")},
            "provisioner": driver,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        });
        support::cluster::merge(&mut c, extra);
        c
    };
    let classes = vec![
        class("del", json!({})),
        class("keep", json!({"reclaimPolicy": "Retain"})),
        class("opts", json!({"mountOptions": ["noatime"], "allowVolumeExpansion": true})),
    ];
    let attributes = vec![json!({
        "metadata": {"name": format!("{namespace}-gold")},
        "driverName": driver,
        "parameters": {"iops": "3000"},
    })];
    let claims = (0..CLAIMS)
        .map(|i| {
            let class = *random.pick(&["del", "keep", "opts"]);
            // Small: a Block volume of hostpathplugin is a file of that size on the disk.
            let size = *random.pick(&["64Mi", "1500Ki", "100Mi", "40Mi"]);
            let modes: Vec<&str> = if *random.pick(&[true, false]) {
                vec!["ReadWriteOnce"]
            } else {
                vec!["ReadWriteOncePod"]
            };
            let mode = *random.pick(&["Filesystem", "Filesystem", "Block"]);
            let gold = *random.pick(&[false, false, true]);
            let mut claim = json!({
                "metadata": {"name": format!("c{i:02}")},
                "spec": {
                    "storageClassName": format!("{namespace}-{class}"),
                    "accessModes": modes,
                    "volumeMode": mode,
                    "resources": {"requests": {"storage": size}},
                }
            });
            if gold {
                claim["spec"]["volumeAttributesClassName"] = json!(format!("{namespace}-gold"));
            }
            claim
        })
        .collect();
    Objects { namespace: namespace.to_string(), classes, attributes, claims }
}

async fn create<K>(api: &Api<K>, object: &Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(object.clone()).unwrap();
    api.create(&PostParams::default(), &typed).await.unwrap();
}

/// Creates `objects` on a plane; the namespace too when `with_namespace`.
async fn load(client: &kube::Client, objects: &Objects, with_namespace: bool) {
    if with_namespace {
        let ns = json!({"metadata": {"name": objects.namespace}});
        create(&Api::<Namespace>::all(client.clone()), &ns).await;
    }
    for c in &objects.classes {
        create(&Api::<StorageClass>::all(client.clone()), c).await;
    }
    for a in &objects.attributes {
        create(&Api::<VolumeAttributesClass>::all(client.clone()), a).await;
    }
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &objects.namespace);
    for c in &objects.claims {
        create(&claims, c).await;
    }
}

async fn claims_of(client: &kube::Client, namespace: &str) -> Vec<PersistentVolumeClaim> {
    let api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace);
    api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default()
}

async fn all_bound(client: &kube::Client, namespace: &str) -> Option<Vec<PersistentVolumeClaim>> {
    let claims = claims_of(client, namespace).await;
    let bound = claims.len() == CLAIMS
        && claims
            .iter()
            .all(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"));
    bound.then_some(claims)
}

/// The PV as a provisioner that never binds leaves it: created pre-bound to the claim of the
/// same name on the other plane, with none of what binding or the API server writes.
fn as_created(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> PersistentVolume {
    let mut v = serde_json::to_value(pv).unwrap();
    v["status"] = Value::Null;
    let meta = v["metadata"].as_object_mut().unwrap();
    for field in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
        meta.remove(field);
    }
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        a.remove("pv.kubernetes.io/bound-by-controller");
    }
    if let Some(f) = meta.get_mut("finalizers").and_then(Value::as_array_mut) {
        f.retain(|f| f != "kubernetes.io/pv-protection");
    }
    let r = &mut v["spec"]["claimRef"];
    r["uid"] = json!(claim.metadata.uid);
    r["resourceVersion"] = json!(claim.metadata.resource_version);
    serde_json::from_value(v).unwrap()
}

/// A namespace's claims and their PVs as `object field → value`, in terms that do not depend on
/// the plane (a PV is named by its claim, a UID by whether it is its claim's).
async fn summarize(client: &kube::Client, namespace: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let claims = claims_of(client, namespace).await;
    let volumes = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let text = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for claim in &claims {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let c = serde_json::to_value(claim).unwrap();
        let pv = volumes.iter().find(|pv| {
            pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some_and(|r| {
                r.namespace.as_deref() == Some(namespace) && r.name.as_deref() == Some(&name)
            })
        });
        let pv_name = pv.and_then(|pv| pv.metadata.name.clone());
        let named = claim.spec.as_ref().and_then(|s| s.volume_name.clone());
        let mut put = |field: &str, value: String| {
            out.insert(format!("claim {name} {field}"), value);
        };
        put("volumeName is its PV", (named.is_some() && named == pv_name).to_string());
        for (field, pointer) in [
            ("phase", "/status/phase"),
            ("capacity", "/status/capacity"),
            ("status.accessModes", "/status/accessModes"),
            ("currentVolumeAttributesClassName", "/status/currentVolumeAttributesClassName"),
            ("annotations", "/metadata/annotations"),
            ("finalizers", "/metadata/finalizers"),
        ] {
            put(field, text(c.pointer(pointer).unwrap_or(&Value::Null)));
        }
        // Conditions without their times, which are each plane's own.
        let mut conditions = c.pointer("/status/conditions").cloned().unwrap_or(Value::Null);
        for condition in conditions.as_array_mut().into_iter().flatten() {
            if let Some(fields) = condition.as_object_mut() {
                fields.remove("lastTransitionTime");
                fields.remove("lastProbeTime");
            }
        }
        put("conditions", text(&conditions));
        let Some(pv) = pv else {
            continue;
        };
        let v = serde_json::to_value(pv).unwrap();
        let mut put = |field: &str, value: String| {
            out.insert(format!("pv of {name} {field}"), value);
        };
        for (field, pointer) in [
            ("phase", "/status/phase"),
            ("message", "/status/message"),
            ("annotations", "/metadata/annotations"),
            ("finalizers", "/metadata/finalizers"),
            ("claimRef.kind", "/spec/claimRef/kind"),
            ("claimRef.apiVersion", "/spec/claimRef/apiVersion"),
            ("volumeAttributesClassName", "/spec/volumeAttributesClassName"),
        ] {
            put(field, text(v.pointer(pointer).unwrap_or(&Value::Null)));
        }
        let uid = v.pointer("/spec/claimRef/uid").and_then(Value::as_str);
        put("claimRef.uid is its claim's", (uid == claim.metadata.uid.as_deref()).to_string());
    }
    out
}

fn differences(upstream: &BTreeMap<String, String>, ours: &BTreeMap<String, String>) -> String {
    let keys: std::collections::BTreeSet<&String> = upstream.keys().chain(ours.keys()).collect();
    keys.into_iter()
        .filter(|k| upstream.get(*k) != ours.get(*k))
        .map(|k| format!("  {k}: {:?} | {:?}", upstream.get(k), ours.get(k)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits for the summaries of a plane to stop changing for three seconds.
async fn settled(client: &kube::Client, namespace: &str) -> BTreeMap<String, String> {
    let mut last = summarize(client, namespace).await;
    let mut quiet = 0;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = summarize(client, namespace).await;
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
        if quiet >= 3 {
            break;
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bindings_we_finish_are_the_binders_own() {
    let seed = std::env::var("PROVISIONING_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()));
    println!("PROVISIONING_DIFF_SEED={seed}");
    let mut random = Lcg(seed);

    // Ours: kube-controller-manager's storage controllers beside two sidecars, one per intent
    // mode, each with its own hostpathplugin and driver name.
    let ours = fresh_plane();
    let _kcm = Kcm::start(ours, KCM_STORAGE_CONTROLLERS);
    let modify = ["--enable-controller-modify-volume", "--accepted-mutable-parameter-names=iops"];
    let journal = World::start_hostpath(ours, "pdiff-journal", &modify, &[INTENT_JOURNAL]).await;
    // Both drivers run as node-1, whose CSINode can register only the first: the second asks
    // for no topology (`--immediate-topology=false`) and the driver places the volume.
    let finalizer =
        World::start_hostpath(ours, "pdiff-final", &modify, &["--immediate-topology=false"]).await;
    journal.register_node().await;
    let mut sets = Vec::new();
    for world in [&journal, &finalizer] {
        let objects = generate(&mut random, &world.namespace, &world.driver_name);
        load(&world.client, &objects, false).await;
        sets.push((world, objects));
    }

    // The binder alone, on a plane of its own.
    let alone = fresh_plane();
    let _kcm_alone = Kcm::start(alone, KCM_STORAGE_CONTROLLERS);
    let client = alone.client().await;
    for (_, objects) in &sets {
        load(&client, objects, true).await;
    }

    for (world, objects) in &sets {
        let ns = &objects.namespace;
        let bound = eventually(LIMIT, || all_bound(&world.client, ns)).await;
        let bound = bound.unwrap_or_else(|| {
            panic!("{ns}: not every claim Bound; sidecar log:\n{}", world.sidecar.log_text())
        });
        // Each claim handed over on the binder's plane gets the PV we made for its twin.
        let handed = eventually(LIMIT, || async {
            let claims = claims_of(&client, ns).await;
            let all = claims.len() == CLAIMS
                && claims.iter().all(|c| {
                    c.metadata.annotations.as_ref().is_some_and(|a| {
                        a.get("volume.kubernetes.io/storage-provisioner")
                            == Some(&world.driver_name)
                    })
                });
            all.then_some(claims)
        })
        .await
        .expect("kube-controller-manager did not hand every claim over");
        let volumes = Api::<PersistentVolume>::all(client.clone());
        for twin in &handed {
            let name = twin.metadata.name.as_deref().unwrap_or_default();
            let ours = bound.iter().find(|c| c.metadata.name.as_deref() == Some(name)).unwrap();
            let pv_name = ours.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap();
            let pv = world.volumes().get(&pv_name).await.unwrap();
            volumes.create(&PostParams::default(), &as_created(&pv, twin)).await.unwrap();
        }
        let theirs = eventually(LIMIT, || all_bound(&client, ns)).await;
        assert!(theirs.is_some(), "{ns}: the binder alone did not bind every claim");
        let (upstream, mine) = (settled(&client, ns).await, settled(&world.client, ns).await);
        assert!(upstream.len() >= CLAIMS * 10, "{ns}: summary too short: {upstream:?}");
        assert!(
            upstream == mine,
            "{ns} (seed {seed}): the binder alone | ours beside it:\n{}",
            differences(&upstream, &mine)
        );
        // And on our plane the claims' bindings were ours to write, not the binder's.
        let status_writes = |by_us: bool| {
            ours.audited_writes()
                .iter()
                .filter(|w| w.namespace == *ns && w.code < 300)
                .filter(|w| w.resource == "persistentvolumeclaims" && w.subresource == "status")
                .filter(|w| (w.user == world.user) == by_us)
                .filter(|w| by_us || w.user_agent.starts_with("kube-controller-manager/"))
                .count()
        };
        let (mine_bound, binder_bound) = (status_writes(true), status_writes(false));
        assert!(
            mine_bound * 2 >= CLAIMS && mine_bound + binder_bound >= CLAIMS,
            "{ns}: claims marked Bound by us {mine_bound}, by the binder {binder_bound}"
        );
        println!(
            "{ns}: {CLAIMS} claims, {} fields, equal; marked Bound by us {mine_bound}, by the binder {binder_bound}",
            upstream.len()
        );
    }
}
