//! Claims and classes as the benchmarks create them, and a watch that records when each claim
//! of a namespace first met a condition (Bound, grown). Shared by the scenarios and the storm.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::Notify;

/// An Immediate class of `driver` that deletes its volumes and may grow them.
pub fn class(name: &str, driver: &str) -> StorageClass {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": driver,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": true,
    }))
    .unwrap_or_default()
}

/// A ReadWriteOnce claim of `class` for `size`, naming `volume` when given.
pub fn claim(name: &str, class: &str, size: &str, volume: Option<&str>) -> PersistentVolumeClaim {
    let mut spec = json!({
        "storageClassName": class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    });
    if let Some(v) = volume {
        spec["volumeName"] = json!(v);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap_or_default()
}

pub fn is_bound(c: &PersistentVolumeClaim) -> bool {
    c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

pub fn is_expanded(c: &PersistentVolumeClaim) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .is_some_and(|q| q.0 == "2Gi")
}

/// Raises the request of `name` to 2Gi.
pub async fn grow(api: &Api<PersistentVolumeClaim>, name: &str) -> Result<(), String> {
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| format!("raise {name}: {e}"))
}

/// The first instant each claim of a namespace was seen to satisfy a condition, from a watch.
pub struct Seen {
    at: Arc<Mutex<HashMap<String, Instant>>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Seen {
    /// When `name` was first seen satisfying the condition.
    pub fn get(&self, name: &str) -> Option<Instant> {
        self.at.lock().unwrap_or_else(|p| p.into_inner()).get(name).copied()
    }

    /// How many of `names` have been seen.
    pub fn count(&self, names: &[String]) -> usize {
        let at = self.at.lock().unwrap_or_else(|p| p.into_inner());
        names.iter().filter(|n| at.contains_key(n.as_str())).count()
    }

    pub fn watch(
        api: Api<PersistentVolumeClaim>,
        test: fn(&PersistentVolumeClaim) -> bool,
    ) -> Seen {
        let at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let changed = Arc::new(Notify::new());
        let (at2, changed2) = (at.clone(), changed.clone());
        let task = tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default()).applied_objects();
            futures::pin_mut!(events);
            while let Some(next) = events.next().await {
                let Ok(claim) = next else { continue };
                if test(&claim)
                    && let Some(name) = claim.metadata.name
                {
                    let mut at = at2.lock().unwrap_or_else(|p| p.into_inner());
                    at.entry(name).or_insert_with(Instant::now);
                    changed2.notify_one();
                }
            }
        });
        Seen { at, changed, task }
    }

    /// Waits until every name in `names` has been seen; their instants, or an error naming how
    /// many are missing.
    pub async fn all(
        &self,
        names: &[String],
        limit: Duration,
    ) -> Result<HashMap<String, Instant>, String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            {
                let at = self.at.lock().unwrap_or_else(|p| p.into_inner());
                let missing = names.iter().filter(|n| !at.contains_key(*n)).count();
                if missing == 0 {
                    return Ok(names
                        .iter()
                        .filter_map(|n| Some((n.clone(), *at.get(n)?)))
                        .collect());
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!(
                        "{missing} of {} claims not there after {limit:?}",
                        names.len()
                    ));
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), self.changed.notified()).await;
        }
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        self.task.abort();
    }
}
