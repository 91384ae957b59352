//! Whether a write decided on one copy of an object may still go on a newer one.
//!
//! Our patches carry the resourceVersion they were decided from, so the API refuses them when
//! the object changed meanwhile. Most changes by others (labels a tool keeps setting, a status
//! condition...) would refuse a write whose decision they cannot touch, and a write that waits
//! for a rate-limit token long enough meets such a change every time. A newer copy that differs
//! only where no decision of ours looks lets the same patch go on the newer version; anything
//! else means deciding again.

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// What to do with a patch before it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rebase {
    /// Send it as built: the newest copy is the one decided on (or no newer one is known, or
    /// the patch has no precondition).
    AsIs,
    /// Send it preconditioned on this newer version: only labels changed.
    Onto(String),
    /// The object changed where a decision looks: decide again.
    Stale,
}

/// `patch` was built from `decided`; `newest` is the newest copy known now.
pub fn rebase<K>(patch: &Value, decided: &K, newest: Option<&K>) -> Rebase
where
    K: Metadata<Ty = ObjectMeta> + Clone + PartialEq,
{
    let Some(precondition) = patch.pointer("/metadata/resourceVersion").and_then(Value::as_str)
    else {
        return Rebase::AsIs;
    };
    let Some(newest) = newest else {
        return Rebase::AsIs;
    };
    let (Some(sent), Some(now)) = (number(Some(precondition)), version(newest)) else {
        return Rebase::AsIs;
    };
    if now <= sent {
        return Rebase::AsIs;
    }
    if decision_view(decided) == decision_view(newest) {
        Rebase::Onto(now.to_string())
    } else {
        Rebase::Stale
    }
}

/// Sets the patch's precondition to `version`.
pub fn precondition(patch: &mut Value, version: &str) {
    if let Some(metadata) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("resourceVersion".into(), Value::from(version));
    }
}

/// The object as our decisions read it: everything but labels and the bookkeeping that changes
/// with every write.
fn decision_view<K>(object: &K) -> K
where
    K: Metadata<Ty = ObjectMeta> + Clone,
{
    let mut view = object.clone();
    let metadata = view.metadata_mut();
    metadata.labels = None;
    metadata.resource_version = None;
    metadata.managed_fields = None;
    metadata.generation = None;
    view
}

/// A claim status patch that carries the whole `status.conditions` list (a merge patch replaces
/// lists), decided on `decided`, made to keep what others wrote since: when `newest` is a newer
/// version, every condition the patch kept as it was is taken as `newest` has it (gone if gone
/// there), and every condition `newest` has that `decided` did not is added. What the patch
/// adds, changes or removes stays as decided. Other controllers own conditions too
/// (kube-controller-manager's pvc-protection writes `Unused` from Kubernetes 1.37), and a list
/// rebuilt from a stale copy would drop them.
pub fn keep_others_conditions(
    patch: &mut Value,
    decided: &k8s_openapi::api::core::v1::PersistentVolumeClaim,
    newest: &k8s_openapi::api::core::v1::PersistentVolumeClaim,
) {
    if !matches!((version(decided), version(newest)), (Some(d), Some(n)) if n > d) {
        return;
    }
    let Some(list) = patch.pointer_mut("/status/conditions").and_then(Value::as_array_mut) else {
        return;
    };
    let as_values = |claim: &k8s_openapi::api::core::v1::PersistentVolumeClaim| -> Vec<Value> {
        let conditions = claim.status.as_ref().and_then(|s| s.conditions.as_ref());
        conditions.into_iter().flatten().filter_map(|c| serde_json::to_value(c).ok()).collect()
    };
    let type_of = |c: &Value| c.get("type").and_then(Value::as_str).map(str::to_string);
    let (before, now) = (as_values(decided), as_values(newest));
    let find = |list: &[Value], kind: &str| -> Option<Value> {
        list.iter().find(|c| type_of(c).as_deref() == Some(kind)).cloned()
    };
    let mut kept: Vec<Value> = Vec::with_capacity(list.len());
    for entry in list.iter() {
        let Some(kind) = type_of(entry) else {
            kept.push(entry.clone());
            continue;
        };
        let unchanged = find(&before, &kind).is_some_and(|b| b == *entry);
        match (unchanged, find(&now, &kind)) {
            (true, Some(current)) => kept.push(current),
            (true, None) => {}
            (false, _) => kept.push(entry.clone()),
        }
    }
    for condition in now {
        let Some(kind) = type_of(&condition) else { continue };
        let known = find(&before, &kind).is_some() || find(&kept, &kind).is_some();
        if !known {
            kept.push(condition);
        }
    }
    *list = kept;
}

fn version<K: Metadata<Ty = ObjectMeta>>(object: &K) -> Option<u64> {
    number(object.metadata().resource_version.as_deref())
}

fn number(version: Option<&str>) -> Option<u64> {
    version?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    fn claim(rv: &str, labels: &[(&str, &str)], volume: Option<&str>) -> PersistentVolumeClaim {
        let mut c = crate::fixtures::pvc("c").version(rv);
        for (key, value) in labels {
            c = c.label(key, value);
        }
        c.with(json!({"spec": {"volumeName": volume}})).build()
    }

    #[test]
    fn table() {
        let patch = json!({"metadata": {"resourceVersion": "10"}, "spec": {"volumeName": "pv"}});
        let decided = claim("10", &[("tick", "1")], None);
        let cases = [
            ("no newer copy known", None, Rebase::AsIs),
            ("the same version", Some(claim("10", &[("tick", "1")], None)), Rebase::AsIs),
            (
                "an older copy (the watch behind our own write)",
                Some(claim("9", &[], None)),
                Rebase::AsIs,
            ),
            (
                "only a label changed",
                Some(claim("12", &[("tick", "2")], None)),
                Rebase::Onto("12".into()),
            ),
            ("labels removed", Some(claim("13", &[], None)), Rebase::Onto("13".into())),
            ("bound meanwhile", Some(claim("12", &[("tick", "1")], Some("other"))), Rebase::Stale),
        ];
        for (what, newest, expected) in cases {
            assert_eq!(rebase(&patch, &decided, newest.as_ref()), expected, "{what}");
        }
    }

    #[test]
    fn a_patch_without_precondition_goes_as_built() {
        let patch = json!({"metadata": {"annotations": {"a": "b"}}});
        let newest = claim("12", &[], Some("x"));
        assert_eq!(rebase(&patch, &claim("10", &[], None), Some(&newest)), Rebase::AsIs);
    }

    #[test]
    fn a_deleted_claim_is_not_the_same() {
        let patch = json!({"metadata": {"resourceVersion": "10"}});
        let mut deleting = claim("11", &[], None);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(rebase(&patch, &claim("10", &[], None), Some(&deleting)), Rebase::Stale);
    }

    /// Others' conditions survive a whole-list write decided on an older copy; ours stay as
    /// decided; an older or equal copy changes nothing (the watch behind our own write).
    #[test]
    fn others_conditions_are_kept_and_ours_stay_as_decided() {
        let condition = |kind: &str, status: &str| json!({"type": kind, "status": status});
        let with = |rv: &str, conditions: Value| {
            crate::fixtures::pvc("c")
                .version(rv)
                .with(json!({"status": {"conditions": conditions}}))
                .build()
        };
        let decided =
            with("10", json!([condition("Resizing", "True"), condition("Unused", "True")]));
        // Ours: Resizing removed, ModifyingVolume added; Unused kept as it was.
        let patch = || {
            json!({"status": {"conditions": [
                condition("Unused", "True"), condition("ModifyingVolume", "True")
            ]}})
        };
        let rows = [
            (
                "Unused changed and Checked added meanwhile",
                with(
                    "12",
                    json!([
                        condition("Resizing", "True"),
                        condition("Unused", "False"),
                        condition("Checked", "True")
                    ]),
                ),
                json!([
                    condition("Unused", "False"),
                    condition("ModifyingVolume", "True"),
                    condition("Checked", "True")
                ]),
            ),
            (
                "Unused removed meanwhile",
                with("12", json!([condition("Resizing", "True")])),
                json!([condition("ModifyingVolume", "True")]),
            ),
            (
                "an older copy",
                with("9", json!([condition("Checked", "True")])),
                json!([condition("Unused", "True"), condition("ModifyingVolume", "True")]),
            ),
            (
                "the same version",
                with("10", json!([condition("Checked", "True")])),
                json!([condition("Unused", "True"), condition("ModifyingVolume", "True")]),
            ),
        ];
        for (what, newest, want) in rows {
            let mut p = patch();
            keep_others_conditions(&mut p, &decided, &newest);
            assert_eq!(p["status"]["conditions"], want, "{what}");
        }
        // A patch that does not carry the list is left alone.
        let mut other = json!({"status": {"phase": "Bound"}});
        keep_others_conditions(&mut other, &decided, &with("12", json!([condition("X", "True")])));
        assert_eq!(other, json!({"status": {"phase": "Bound"}}));
    }

    #[test]
    fn precondition_is_replaced() {
        let mut patch = json!({"metadata": {"resourceVersion": "10", "finalizers": []}});
        precondition(&mut patch, "12");
        assert_eq!(patch, json!({"metadata": {"resourceVersion": "12", "finalizers": []}}));
    }
}
