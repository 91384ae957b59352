//! An end state in terms the two binders are compared on, and the difference of two.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ListParams};
use serde_json::Value;

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
        // What the binder copies from the PV it binds (its VolumeAttributesClass).
        let current = &v["status"]["currentVolumeAttributesClassName"];
        put(summary, &key, "status.currentVolumeAttributesClassName", current);
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
