//! Telling that kube-controller-manager's PV binder is running while this process binds too.
//!
//! Only that binder writes PersistentVolume status in kube-controller-manager (the phases of
//! syncVolume), and the apiserver records each writer in `managedFields` under the name its
//! client gives (`kube-controller-manager`). So a PV status written by that manager after we
//! started means two binders share this cluster's claims.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// The field manager kube-controller-manager's writes are recorded under.
pub const CLUSTER_BINDER_MANAGER: &str = "kube-controller-manager";

/// Whether the PV with this metadata had its status written by kube-controller-manager at or
/// after `since`. managedFields keep whole seconds, so the second of `since` counts.
pub fn cluster_binder_wrote(meta: &ObjectMeta, since: &Time) -> bool {
    meta.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(CLUSTER_BINDER_MANAGER)
            && entry.subresource.as_deref() == Some("status")
            && entry.time.as_ref().is_some_and(|t| t.0.as_second() >= since.0.as_second())
    })
}

/// The log line when it does.
pub fn alarm(volume: &str, binder: &str) -> String {
    format!(
        "kube-controller-manager's PV binder wrote the status of PersistentVolume {volume} while this process binds too (--binder={binder}): two binders can give one claim two volumes, and a volume its claim never used can be released and deleted. Either switch kube-controller-manager's binder off (--controllers=...,-persistentvolume-binder-controller) or run csi-pv-controller with --binder=external, the default"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(entries: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(json!({"name": "v", "managedFields": entries})).unwrap()
    }

    fn time(s: &str) -> Time {
        serde_json::from_value(json!(s)).unwrap()
    }

    #[test]
    fn only_the_cluster_binders_status_writes_since_start_count() {
        let since = time("2026-11-23T12:00:00.600Z");
        let entry = |manager: &str, sub: Option<&str>, at: &str| {
            let mut e = json!({"manager": manager, "operation": "Update", "time": at});
            if let Some(s) = sub {
                e["subresource"] = json!(s);
            }
            e
        };
        let table = [
            (
                "binder wrote the phase after start",
                json!([entry(CLUSTER_BINDER_MANAGER, Some("status"), "2026-11-23T12:00:05Z")]),
                true,
            ),
            (
                "in the second we started (managedFields keep whole seconds)",
                json!([entry(CLUSTER_BINDER_MANAGER, Some("status"), "2026-11-23T12:00:00Z")]),
                true,
            ),
            (
                "before start (the cluster's binder was on before)",
                json!([entry(CLUSTER_BINDER_MANAGER, Some("status"), "2026-11-23T11:00:00Z")]),
                false,
            ),
            (
                "pv-protection's finalizer, not status",
                json!([entry(CLUSTER_BINDER_MANAGER, None, "2026-11-23T12:00:05Z")]),
                false,
            ),
            (
                "our own status write",
                json!([entry("csi-pv-controller", Some("status"), "2026-11-23T12:00:05Z")]),
                false,
            ),
            ("no managed fields", json!([]), false),
        ];
        for (case, entries, want) in table {
            assert_eq!(cluster_binder_wrote(&meta(entries), &since), want, "{case}");
        }
    }

    #[test]
    fn the_alarm_says_what_to_change() {
        let line = alarm("pv-1", "driver");
        assert!(line.contains("pv-1") && line.contains("--binder=external"));
    }
}
