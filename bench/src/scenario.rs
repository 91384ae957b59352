//! The scenarios, run against whichever stack is up. They only talk to the apiserver (and read the
//! driver's volume count), so both stacks are measured by the same code.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};

use crate::claims::{Seen, claim, grow, is_bound, is_expanded};
use crate::common::each;
use crate::driver::BenchDriver;
use crate::stats;

/// How many API requests the benchmark itself keeps in flight when it sets a scene up.
const SETUP_CONCURRENCY: usize = 64;
/// Event writes are counted once they stay unchanged this long after a burst...
const EVENT_SETTLE: Duration = Duration::from_secs(3);
/// ...or this long has passed.
const EVENT_SETTLE_LIMIT: Duration = Duration::from_secs(120);

pub const DYNAMIC_CLASS: &str = "bench-dynamic";
pub const STATIC_CLASS: &str = "bench-static";

fn volume(name: &str, driver: &str, class: &str, claim_ref: Option<Value>) -> PersistentVolume {
    let mut spec = json!({
        "storageClassName": class,
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "csi": {"driver": driver, "volumeHandle": name},
    });
    if let Some(r) = claim_ref {
        spec["claimRef"] = r;
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap_or_default()
}

/// The apiserver's request counter: writes and GETs by resource.
pub struct Counts {
    pub writes: BTreeMap<String, f64>,
    pub gets: BTreeMap<String, f64>,
}

impl Counts {
    /// What happened between `self` and `after`, per resource, for the log:
    /// "writes: persistentvolumes 3000, ...; GETs: ...".
    pub fn describe_since(&self, after: &Counts) -> String {
        let diff = |a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>| {
            b.iter()
                .map(|(k, v)| (k, v - a.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, d)| *d > 0.0)
                .map(|(k, d)| format!("{k} {d}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "writes: {}; GETs: {}",
            diff(&self.writes, &after.writes),
            diff(&self.gets, &after.gets)
        )
    }
}

pub async fn write_counts(client: &kube::Client) -> Result<Counts, String> {
    let request = http::Request::get("/metrics").body(Vec::new()).map_err(|e| e.to_string())?;
    let text =
        client.request_text(request).await.map_err(|e| format!("apiserver /metrics: {e}"))?;
    Ok(Counts { writes: stats::writes_by_resource(&text), gets: stats::gets_by_resource(&text) })
}

/// One claim through the stack before anything is timed: proves it is up and warms its caches.
pub async fn warm_up(
    client: &kube::Client,
    namespace: &str,
    expand: bool,
    limit: Duration,
) -> Result<(), String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let bound = Seen::watch(api.clone(), is_bound);
    let name = "warm-up".to_string();
    api.create(&PostParams::default(), &claim(&name, DYNAMIC_CLASS, "1Gi", None))
        .await
        .map_err(|e| format!("warm-up claim: {e}"))?;
    bound.all(std::slice::from_ref(&name), limit).await.map_err(|e| format!("warm-up: {e}"))?;
    if expand {
        // The watch starts with a list, so it sees the claim even if already expanded.
        let expanded = Seen::watch(api.clone(), is_expanded);
        grow(&api, &name).await?;
        expanded
            .all(std::slice::from_ref(&name), limit)
            .await
            .map_err(|e| format!("warm-up expansion: {e}"))?;
    }
    Ok(())
}

/// A burst: `n` claims created at once. Wall time until the last is Bound, and each claim's
/// creation → Bound latency, in seconds.
pub struct Burst {
    pub names: Vec<String>,
    pub seconds: f64,
    pub latencies: Vec<f64>,
}

pub async fn burst(
    client: &kube::Client,
    namespace: &str,
    class: &str,
    n: usize,
    limit: Duration,
) -> Result<Burst, String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let bound = Seen::watch(api.clone(), is_bound);
    let names: Vec<String> = (0..n).map(|i| format!("claim-{i:05}")).collect();
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let start = Instant::now();
    each(names.clone(), SETUP_CONCURRENCY, |name| {
        let (api, sent) = (api.clone(), sent.clone());
        async move {
            let object = claim(&name, class, "1Gi", None);
            sent.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), Instant::now());
            api.create(&PostParams::default(), &object)
                .await
                .map(|_| ())
                .map_err(|e| format!("create {name}: {e}"))
        }
    })
    .await?;
    let at = bound.all(&names, limit).await?;
    let sent = sent.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let last = at.values().max().copied().unwrap_or(start);
    let latencies = names
        .iter()
        .filter_map(|n| Some(at.get(n)?.duration_since(*sent.get(n)?).as_secs_f64()))
        .collect();
    Ok(Burst { names, seconds: last.duration_since(start).as_secs_f64(), latencies })
}

/// The counter once the events that trail a burst have landed: both stacks send events after
/// the writes they report, and under a QPS limit ours wait for spare tokens. Read when two reads
/// EVENT_SETTLE apart agree on the event writes, at most EVENT_SETTLE_LIMIT after the first.
pub async fn settled_write_counts(client: &kube::Client) -> Result<Counts, String> {
    let events = |c: &Counts| c.writes.get("events").copied().unwrap_or(0.0);
    let deadline = Instant::now() + EVENT_SETTLE_LIMIT;
    let mut last = write_counts(client).await?;
    loop {
        tokio::time::sleep(EVENT_SETTLE).await;
        let now = write_counts(client).await?;
        if events(&now) == events(&last) || Instant::now() >= deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// Raises the request of `names` to 2Gi at once; seconds until every claim reports 2Gi.
pub async fn expand(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
    limit: Duration,
) -> Result<f64, String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let expanded = Seen::watch(api.clone(), is_expanded);
    let start = Instant::now();
    each(names.to_vec(), SETUP_CONCURRENCY, |name| {
        let api = api.clone();
        async move { grow(&api, &name).await }
    })
    .await?;
    let at = expanded.all(names, limit).await?;
    let last = at.values().max().copied().unwrap_or(start);
    Ok(last.duration_since(start).as_secs_f64())
}

/// Deletes `names` at once; seconds until no PV of `driver` remains but `keep` and the driver
/// holds only `keep.len()` volumes.
pub async fn delete(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
    driver: &BenchDriver,
    keep: usize,
    limit: Duration,
) -> Result<f64, String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let (volumes, writer) = reflector::store::<PersistentVolume>();
    let task = tokio::spawn(
        reflector(writer, watcher(Api::all(client.clone()), watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    let _abort = AbortOnDrop(task);
    volumes.wait_until_ready().await.map_err(|e| format!("PV store: {e}"))?;
    let start = Instant::now();
    each(names.to_vec(), SETUP_CONCURRENCY, |name| {
        let api = api.clone();
        async move {
            api.delete(&name, &DeleteParams::default())
                .await
                .map(|_| ())
                .map_err(|e| format!("delete {name}: {e}"))
        }
    })
    .await?;
    let deadline = start + limit;
    loop {
        let pvs = volumes.state().len();
        let in_driver = driver.volume_count().await?;
        if pvs <= keep && in_driver <= keep {
            return Ok(start.elapsed().as_secs_f64());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "after {limit:?}: {pvs} PVs and {in_driver} driver volumes left (want {keep})"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `count` available PVs of `driver` in the static class (before the stack starts), already in
/// phase Available as a PV controller leaves them: the clock then times binding, not the first
/// controller's pass over new PVs (at 20 QPS, KCM needs 500 s to mark 10,000 PVs Available).
pub async fn create_available_volumes(
    client: &kube::Client,
    driver: &str,
    count: usize,
) -> Result<(), String> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    each((0..count).collect(), SETUP_CONCURRENCY, |i| {
        let api = api.clone();
        let name = format!("static-{i:05}");
        let pv = volume(&name, driver, STATIC_CLASS, None);
        async move {
            api.create(&PostParams::default(), &pv)
                .await
                .map_err(|e| format!("create PV {name}: {e}"))?;
            let available = json!({"status": {"phase": "Available"}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&available))
                .await
                .map(|_| ())
                .map_err(|e| format!("{name} status: {e}"))
        }
    })
    .await
}

/// `count` claim/PV pairs already bound, as the PV controller leaves them (both phases Bound,
/// the claim's bind annotations and capacity), so that no controller has anything to write.
pub async fn create_bound_pairs(
    client: &kube::Client,
    namespace: &str,
    driver: &str,
    count: usize,
) -> Result<(), String> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    each((0..count).collect(), SETUP_CONCURRENCY, |i| {
        let (claims, pvs) = (claims.clone(), pvs.clone());
        async move {
            let (claim_name, pv_name) = (format!("bound-{i:05}"), format!("bound-pv-{i:05}"));
            let mut object = claim(&claim_name, DYNAMIC_CLASS, "1Gi", Some(&pv_name));
            object.metadata.annotations =
                Some([("pv.kubernetes.io/bind-completed".to_string(), "yes".to_string())].into());
            let created = claims
                .create(&PostParams::default(), &object)
                .await
                .map_err(|e| format!("create {claim_name}: {e}"))?;
            let claim_ref = json!({
                "kind": "PersistentVolumeClaim", "apiVersion": "v1",
                "namespace": namespace, "name": claim_name,
                "uid": created.metadata.uid, "resourceVersion": created.metadata.resource_version,
            });
            pvs.create(
                &PostParams::default(),
                &volume(&pv_name, driver, DYNAMIC_CLASS, Some(claim_ref)),
            )
            .await
            .map_err(|e| format!("create {pv_name}: {e}"))?;
            let bound = json!({"status": {"phase": "Bound"}});
            pvs.patch_status(&pv_name, &PatchParams::default(), &Patch::Merge(&bound))
                .await
                .map_err(|e| format!("{pv_name} status: {e}"))?;
            let status = json!({"status": {
                "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
            }});
            claims
                .patch_status(&claim_name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .map(|_| ())
                .map_err(|e| format!("{claim_name} status: {e}"))
        }
    })
    .await
}

/// The apiserver's own write ceiling on this machine: `clients` separate connections, each with
/// `in_flight` writers, patch the status of their own claim (a merge patch that changes a
/// condition's message every time, so that every write reaches etcd: the same path as a
/// controller's status writes) for `window`.
pub async fn write_ceiling(
    clients: Vec<kube::Client>,
    namespace: &str,
    in_flight: usize,
    window: Duration,
) -> Result<Ceiling, String> {
    let mut writers = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
        for w in 0..in_flight {
            let name = format!("ceiling-{c:03}-{w:03}");
            // A class nobody serves: no controller runs during this scenario anyway.
            claims
                .create(&PostParams::default(), &claim(&name, "unserved", "1Gi", None))
                .await
                .map_err(|e| format!("create {name}: {e}"))?;
            writers.push((claims.clone(), name));
        }
    }
    let deadline = Instant::now() + window;
    let tasks: Vec<_> = writers
        .into_iter()
        .map(|(claims, name)| {
            tokio::spawn(async move {
                let mut written = 0u64;
                while Instant::now() < deadline {
                    let status = json!({"status": {"conditions": [{
                        "type": "Bench", "status": "True", "message": format!("write {written}"),
                    }]}});
                    let patch = Patch::Merge(&status);
                    if claims.patch_status(&name, &PatchParams::default(), &patch).await.is_ok() {
                        written += 1;
                    }
                }
                written
            })
        })
        .collect();
    let started = Instant::now();
    let mut total = 0u64;
    for task in tasks {
        total += task.await.map_err(|e| format!("writer: {e}"))?;
    }
    Ok(Ceiling { writes: total, seconds: started.elapsed().as_secs_f64() })
}

/// Status writes the ceiling's writers made, and over how long.
pub struct Ceiling {
    pub writes: u64,
    pub seconds: f64,
}
