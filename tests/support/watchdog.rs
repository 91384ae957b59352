//! Invariants watched for the whole of a test, not only at its end: a double bind lasts a few
//! seconds before one binder undoes it, so a final look would miss it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ListParams};

/// Polls claims (of one namespace) and PVs every 100 ms and records every double bind: a PV
/// Bound with a claimRef to a claim (same UID) whose `spec.volumeName` names another PV.
pub struct DoubleBindWatch {
    seen: Arc<Mutex<Vec<String>>>,
    /// (looks that read both lists, looks that failed to).
    looks: Arc<Mutex<(usize, usize)>>,
    task: tokio::task::JoinHandle<()>,
}

impl DoubleBindWatch {
    pub fn start(client: kube::Client, namespace: &str) -> DoubleBindWatch {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
        let volumes: Api<PersistentVolume> = Api::all(client);
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let record = seen.clone();
        let looks: Arc<Mutex<(usize, usize)>> = Arc::default();
        let counted = looks.clone();
        let namespace = namespace.to_string();
        let task = tokio::spawn(async move {
            loop {
                match (
                    claims.list(&ListParams::default()).await,
                    volumes.list(&ListParams::default()).await,
                ) {
                    (Ok(c), Ok(v)) => {
                        counted.lock().unwrap().0 += 1;
                        let found = double_binds(&namespace, &c.items, &v.items);
                        if !found.is_empty() {
                            record.lock().unwrap().extend(found);
                        }
                    }
                    // A look that failed saw nothing: counted, so that a watch that never
                    // looked cannot pass for one that found nothing.
                    _ => counted.lock().unwrap().1 += 1,
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        DoubleBindWatch { seen, looks, task }
    }

    /// Stops watching; every double bind seen, once each. Panics unless most looks read both
    /// lists (at least 10, and no more than a tenth failed).
    pub fn stop(self) -> Vec<String> {
        self.task.abort();
        let (ok, failed) = *self.looks.lock().unwrap();
        assert!(
            ok >= 10 && failed * 10 <= ok + failed,
            "the double-bind watch looked {ok} times, and failed to {failed} times"
        );
        let mut seen = self.seen.lock().unwrap().clone();
        seen.sort();
        seen.dedup();
        seen
    }
}

pub fn double_binds(
    namespace: &str,
    claims: &[PersistentVolumeClaim],
    volumes: &[PersistentVolume],
) -> Vec<String> {
    let by_uid: HashMap<&str, &PersistentVolumeClaim> =
        claims.iter().filter_map(|c| Some((c.metadata.uid.as_deref()?, c))).collect();
    volumes
        .iter()
        .filter(|pv| pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .filter_map(|pv| {
            let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
            if r.namespace.as_deref() != Some(namespace) {
                return None;
            }
            let claim = by_uid.get(r.uid.as_deref()?)?;
            let named = claim.spec.as_ref()?.volume_name.as_deref()?;
            let pv_name = pv.metadata.name.as_deref()?;
            (!named.is_empty() && named != pv_name).then(|| {
                format!(
                    "PV {pv_name} Bound to claim {}/{} which names PV {named}",
                    namespace,
                    claim.metadata.name.as_deref().unwrap_or_default()
                )
            })
        })
        .collect()
}
