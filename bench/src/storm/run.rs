//! One stack through the storm on a fresh control plane, hostpathplugin and a backend with
//! limits in front of it (the test relay): the calm figures first (tenant B's claims, a
//! deletion and a resize with nothing else going on), then the storm (tenant A's burst, B's
//! claims during it, the deletion and the resize in its middle), sampled every second.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde::{Deserialize, Serialize};

use crate::claims::{self, Seen, claim, is_bound, is_expanded};
use crate::common::each;
use crate::stack::{Placement, Stack, StackKind, Throttle};
use crate::support::control_plane::{OwnedPlane, PlaneOptions, create_namespace};
use crate::support::csi_relay::{Capacity, CsiRelay};
use crate::support::hostpath::{Hostpath, HostpathConfig};

pub const DRIVER: &str = "storm.csi.k8s.io";
const CLASS: &str = "storm";
const CREATE: &str = "CreateVolume";
const SETUP_CONCURRENCY: usize = 64;

/// What a run is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub tenant_a: usize,
    pub tenant_b: usize,
    pub b_every: Duration,
    pub deletes: usize,
    pub resizes: usize,
    /// When the deletion and the resize start, after the burst's first claim.
    pub middle: Duration,
    pub capacity: (usize, f64, Duration),
    /// How long the storm may take before the run reports what it finished.
    pub limit: Duration,
}

impl Plan {
    pub fn capacity(&self) -> Capacity {
        let (knee, per_second, latency) = self.capacity;
        Capacity { knee, per_second, latency }
    }
}

/// One stack as run: which, and with how many workers.
#[derive(Debug, Clone, Serialize)]
pub struct Contender {
    pub label: String,
    pub kind: StackKind,
    pub workers: u32,
}

/// One second of the storm, as the backend saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    pub seconds: f64,
    pub in_flight: usize,
    pub created: usize,
    pub refused: usize,
}

/// What one stack did.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Outcome {
    pub label: String,
    pub samples: Vec<Sample>,
    /// Seconds until all of tenant A's claims were Bound; None past the limit.
    pub a_all_bound: Option<f64>,
    pub a_bound: usize,
    /// Volumes the backend created during the storm, and per second of it.
    pub created: usize,
    pub goodput: f64,
    pub refused: usize,
    pub b_calm: Vec<f64>,
    pub b_storm: Vec<f64>,
    /// The same claims, creation to kube-controller-manager's hand-over (upstream's binder,
    /// which both stacks wait on in this mode).
    pub b_calm_handed: Vec<f64>,
    pub b_storm_handed: Vec<f64>,
    pub deletes_calm: Option<f64>,
    pub resizes_calm: Option<f64>,
    pub deletes_storm: Option<f64>,
    pub resizes_storm: Option<f64>,
}

/// kube-controller-manager's binder handed the claim to a provisioner.
fn handed(c: &PersistentVolumeClaim) -> bool {
    let annotations = c.metadata.annotations.as_ref();
    annotations.is_some_and(|a| a.contains_key("volume.kubernetes.io/storage-provisioner"))
}

async fn create(api: &Api<PersistentVolumeClaim>, names: &[String]) -> Result<(), String> {
    each(names.to_vec(), SETUP_CONCURRENCY, |name| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &claim(&name, CLASS, "1Gi", None))
                .await
                .map(|_| ())
                .map_err(|e| format!("create {name}: {e}"))
        }
    })
    .await
}

/// The last of `names` to be seen, once all are, waiting at most until `deadline`.
async fn last_of(seen: &Seen, names: &[String], deadline: Instant) -> Option<Instant> {
    let at = seen.all(names, deadline.saturating_duration_since(Instant::now())).await.ok()?;
    at.into_values().max()
}

/// Deletes `names` and grows `grow` at once: seconds until the deleted claims' PVs are gone,
/// and until the grown claims report 2Gi.
async fn delete_and_grow(
    client: &kube::Client,
    api: &Api<PersistentVolumeClaim>,
    (names, grow): (&[String], &[String]),
    deadline: Instant,
) -> Result<(Option<f64>, Option<f64>), String> {
    let mut volumes = Vec::new();
    for name in names {
        let claim = api.get(name).await.map_err(|e| format!("read {name}: {e}"))?;
        volumes.extend(claim.spec.and_then(|s| s.volume_name));
    }
    let (pvs, writer) = reflector::store::<PersistentVolume>();
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    let reflect = tokio::spawn(
        reflector(writer, watcher(pv_api, watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    pvs.wait_until_ready().await.map_err(|e| format!("PV store: {e}"))?;
    let grown_at = Seen::watch(api.clone(), is_expanded);
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
    each(grow.to_vec(), SETUP_CONCURRENCY, |name| {
        let api = api.clone();
        async move { claims::grow(&api, &name).await }
    })
    .await?;
    let deleted = async {
        loop {
            let left = volumes
                .iter()
                .filter(|v| pvs.get(&reflector::ObjectRef::new(v.as_str())).is_some())
                .count();
            if left == 0 {
                return Some(start.elapsed().as_secs_f64());
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let grown = async {
        let last = last_of(&grown_at, grow, deadline).await?;
        Some(last.saturating_duration_since(start).as_secs_f64())
    };
    let (deleted, grown) = tokio::join!(deleted, grown);
    reflect.abort();
    Ok((deleted, grown))
}

/// Creates tenant B's claims one every `every`, starting `first` from now; each claim's
/// seconds from creation to Bound, and to the binder's hand-over, for those that got there
/// before `deadline`.
async fn trickle(
    api: &Api<PersistentVolumeClaim>,
    (count, first, every): (usize, Duration, Duration),
    prefix: &str,
    deadline: Instant,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let clock = Seen::watch(api.clone(), is_bound);
    let handover = Seen::watch(api.clone(), handed);
    let start = Instant::now();
    let mut sent = Vec::new();
    for i in 0..count {
        tokio::time::sleep_until((start + first + every * i as u32).into()).await;
        let name = format!("{prefix}-{i:02}");
        api.create(&PostParams::default(), &claim(&name, CLASS, "1Gi", None))
            .await
            .map_err(|e| format!("create {name}: {e}"))?;
        sent.push((name, Instant::now()));
    }
    let names: Vec<String> = sent.iter().map(|(n, _)| n.clone()).collect();
    last_of(&clock, &names, deadline).await;
    let since = |c: &Seen| -> Vec<f64> {
        sent.iter()
            .filter_map(|(n, at)| Some(c.get(n)?.saturating_duration_since(*at).as_secs_f64()))
            .collect()
    };
    Ok((since(&clock), since(&handover)))
}

/// Runs `who` through the plan. Processes start from the calling (main) thread.
pub fn run(
    runtime: &tokio::runtime::Runtime,
    who: &Contender,
    plan: &Plan,
    sidecar: &Path,
) -> Result<Outcome, String> {
    let plane = OwnedPlane::start(PlaneOptions {
        audit: false,
        protection_finalizers: true,
        service_accounts: false,
    })?;
    let dir = plane.plane.dir.join("storm");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (client, hostpath, relay) = runtime.block_on(async {
        let client = plane.plane.client().await;
        for ns in ["tenant-a", "tenant-b", "tenant-c"] {
            create_namespace(&client, ns).await;
        }
        let classes: Api<StorageClass> = Api::all(client.clone());
        classes
            .create(&PostParams::default(), &claims::class(CLASS, DRIVER))
            .await
            .map_err(|e| format!("class: {e}"))?;
        let config = HostpathConfig {
            flags: vec!["--disable-node-expansion".into()],
            ..HostpathConfig::named(DRIVER)
        };
        let hostpath = Hostpath::start(&dir, config).await;
        hostpath.register_node(&client).await?;
        let relay = CsiRelay::start(&dir.join("backend.sock"), &hostpath.socket);
        relay.limit(CREATE, plan.capacity());
        Ok::<_, String>((client, hostpath, relay))
    })?;
    let placement = Placement {
        socket: &relay.socket,
        dir: &dir,
        journal_root: None,
        extra_controllers: &[],
        workers: Some(who.workers),
    };
    let mut stack = Stack::start(who.kind, Throttle::Defaults, &plane.plane, sidecar, &placement)?;
    let outcome = runtime.block_on(storm(&client, &relay, who, plan));
    let alive = stack.check_alive();
    drop(stack);
    drop(relay);
    drop(hostpath);
    let outcome = outcome.and_then(|o| alive.map(|_| o));
    if let Err(e) = &outcome {
        eprintln!("    {}: {e}", who.label);
    }
    outcome
}

async fn storm(
    client: &kube::Client,
    relay: &CsiRelay,
    who: &Contender,
    plan: &Plan,
) -> Result<Outcome, String> {
    let ns = |n: &str| Api::<PersistentVolumeClaim>::namespaced(client.clone(), n);
    let (a, b, c) = (ns("tenant-a"), ns("tenant-b"), ns("tenant-c"));
    let setup_limit = Instant::now() + Duration::from_secs(600);
    // The existing volumes: one set to delete and grow calmly, one for the storm.
    let existing = (plan.deletes + plan.resizes) * 2;
    let names: Vec<String> = (0..existing).map(|i| format!("c-{i:04}")).collect();
    let c_bound = Seen::watch(c.clone(), is_bound);
    create(&c, &names).await?;
    last_of(&c_bound, &names, setup_limit).await.ok_or("tenant C's claims were not all Bound")?;
    let (calm, stormy) = names.split_at(existing / 2);
    let (calm_delete, calm_grow) = calm.split_at(plan.deletes);
    let (storm_delete, storm_grow) = stormy.split_at(plan.deletes);
    println!("    {}: {} existing claims Bound", who.label, existing);

    let mut out = Outcome { label: who.label.clone(), ..Outcome::default() };
    (out.deletes_calm, out.resizes_calm) =
        delete_and_grow(client, &c, (calm_delete, calm_grow), setup_limit).await?;
    let calm_every = Duration::from_secs(1);
    (out.b_calm, out.b_calm_handed) =
        trickle(&b, (plan.tenant_b, Duration::ZERO, calm_every), "calm", setup_limit).await?;
    println!(
        "    calm: deletes {:?} s, resizes {:?} s, tenant B {:?}",
        out.deletes_calm, out.resizes_calm, out.b_calm
    );

    let (created0, refused0) = (relay.answered_ok(CREATE), relay.refused_count(CREATE));
    let start = Instant::now();
    let deadline = start + plan.limit;
    let a_names: Vec<String> = (0..plan.tenant_a).map(|i| format!("a-{i:05}")).collect();
    let a_bound = Seen::watch(a.clone(), is_bound);
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let samples = samples.clone();
        let (relay_in_flight, every) = (relay_probe(relay), Duration::from_secs(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let (in_flight, created, refused) = relay_in_flight();
                let sample = Sample {
                    seconds: start.elapsed().as_secs_f64(),
                    in_flight,
                    created: created.saturating_sub(created0),
                    refused: refused.saturating_sub(refused0),
                };
                samples.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
            }
        })
    };
    let burst = create(&a, &a_names);
    let b_first = Duration::from_secs(5);
    let tenant_b = trickle(&b, (plan.tenant_b, b_first, plan.b_every), "storm", deadline);
    let middle = async {
        tokio::time::sleep(plan.middle).await;
        delete_and_grow(client, &c, (storm_delete, storm_grow), deadline).await
    };
    let all_a = async {
        let last = last_of(&a_bound, &a_names, deadline).await;
        last.map(|t| t.saturating_duration_since(start).as_secs_f64())
    };
    let (burst, tenant_b, middle, all_a) = tokio::join!(burst, tenant_b, middle, all_a);
    sampler.abort();
    burst?;
    (out.b_storm, out.b_storm_handed) = tenant_b?;
    (out.deletes_storm, out.resizes_storm) = middle?;
    out.a_all_bound = all_a;
    out.a_bound = a_bound.count(&a_names);
    out.samples = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    out.created = relay.answered_ok(CREATE) - created0;
    out.refused = relay.refused_count(CREATE) - refused0;
    let span = out.a_all_bound.unwrap_or(plan.limit.as_secs_f64());
    out.goodput = out.created as f64 / span.max(1e-9);
    Ok(out)
}

/// A function reading the backend's calls in flight, volumes created and calls refused.
fn relay_probe(relay: &CsiRelay) -> impl Fn() -> (usize, usize, usize) + Send + 'static {
    let handle = relay.handle();
    move || (handle.in_flight(CREATE), handle.answered_ok(CREATE), handle.refused_count(CREATE))
}
