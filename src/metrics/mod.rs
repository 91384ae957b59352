//! Prometheus metrics, served on `--http-endpoint` at `/metrics`. The names operators already
//! chart are upstream's (csi-lib-utils' `csi_sidecar_operations_seconds`, client-go's workqueue
//! series); the rest are ours: claim created → Bound, resize started → done, API writes.

pub mod exposition;
mod process;

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// csi-lib-utils' buckets for CSI calls, in seconds.
const CSI_BUCKETS: [f64; 13] =
    [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0];
/// Buckets for whole operations (bind, resize), in seconds.
const OPERATION_BUCKETS: [f64; 14] =
    [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct CsiLabels {
    pub driver_name: String,
    /// The full gRPC path, e.g. `/csi.v1.Controller/CreateVolume`.
    pub method_name: String,
    /// The code's name, e.g. `OK`, `DeadlineExceeded`.
    pub grpc_status_code: String,
    /// For a driver that serves in-tree plugins through CSI migration only, as csi-lib-utils
    /// labels it: "true" for a call about a migrated volume, "false" for any other.
    pub migrated: Option<&'static str>,
}

impl prometheus_client::encoding::EncodeLabelSet for CsiLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        let mut labels = vec![
            ("driver_name", self.driver_name.as_str()),
            ("method_name", self.method_name.as_str()),
            ("grpc_status_code", self.grpc_status_code.as_str()),
        ];
        if let Some(migrated) = self.migrated {
            labels.push(("migrated", migrated));
        }
        labels.as_slice().encode(encoder)
    }
}

/// Passes one key got in one resync period: a settled key 1, a retried one a few.
const PASS_BUCKETS: [f64; 8] = [1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 100.0, 1000.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: String,
}

/// One share of a work queue's fair order: the lane and the namespace.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShareLabels {
    pub name: String,
    pub lane: String,
    pub namespace: String,
}

/// One budget of driver calls (the driver, or one topology segment of it).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabels {
    pub budget: String,
}

/// A refused driver call: its budget and its gRPC code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub budget: String,
    pub grpc_status_code: String,
}

/// sig-storage-lib-external-provisioner's labels: the claim's class and data source kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisionLabels {
    pub class: String,
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub queue: String,
    pub class: String,
}

/// The volume reconciler's states: adopted, in_flight, orphaned, unknown (the driver's volumes)
/// and lost (PVs whose volume the driver does not list).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

/// Which kind of pass panicked: claim, volume, class, capacity, reconciler, periodic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PassLabels {
    pub pass: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// e.g. `persistentvolumeclaims/status`.
    pub resource: String,
    /// create, update, patch, delete.
    pub verb: String,
}

/// Declares the series once each: the field, its type and how it is made, its name and help.
/// The struct, its registration and its construction all come from this one list.
///
/// `controller_persistentvolume*` are the provisioner library's series (what csi-provisioner
/// exports), same names and labels: a provision counts once its PV is saved, a deletion once
/// DeleteVolume is done. `leader_election_master_status` is client-go's gauge (1 while this
/// replica leads the Lease `name`); `csistoragecapacities_*` are csi-provisioner's capacity
/// gauges, at the last round.
macro_rules! series {
    ($($(#[$doc:meta])* $field:ident: $kind:ty = $make:expr, $name:literal, $help:literal;)*) => {
        pub struct Metrics {
            registry: Registry,
            $($(#[$doc])* pub $field: $kind,)*
            process: process::Process,
        }

        impl Metrics {
            fn new() -> Self {
                let mut registry = Registry::default();
                $(let $field: $kind = $make; registry.register($name, $help, $field.clone());)*
                let process = process::Process::register(&mut registry);
                Metrics { registry, $($field,)* process }
            }
        }
    };
}

/// A family whose histograms have the buckets `make` gives.
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn histograms<L: Clone + std::hash::Hash + Eq>(make: fn() -> Histogram) -> Histograms<L> {
    Family::new_with_constructor(make)
}

series! {
    csi_operations: Histograms<CsiLabels> = histograms(csi_histogram), "csi_sidecar_operations_seconds", "Duration of CSI calls, by method and gRPC status code";
    queue_depth: Family<QueueLabels, Gauge> = Family::default(), "workqueue_depth", "Keys waiting in a work queue";
    queue_adds: Family<QueueLabels, Counter> = Family::default(), "workqueue_adds", "Keys added to a work queue";
    queue_retries: Family<QueueLabels, Counter> = Family::default(), "workqueue_retries", "Retries scheduled after a failed pass";
    queue_seconds: Histograms<QueueLabels> = histograms(queue_histogram), "workqueue_queue_duration_seconds", "How long a key waits in a work queue before a worker takes it";
    work_seconds: Histograms<QueueLabels> = histograms(queue_histogram), "workqueue_work_duration_seconds", "How long a worker takes over one key";
    queue_unfinished: Family<QueueLabels, Gauge<f64, AtomicU64>> = Family::default(), "workqueue_unfinished_work_seconds", "Seconds of work under way that no worker has finished, summed over the keys being worked on";
    queue_longest: Family<QueueLabels, Gauge<f64, AtomicU64>> = Family::default(), "workqueue_longest_running_processor_seconds", "Seconds the longest-running worker of the queue has been at its key";
    queue_share_waiting: Family<ShareLabels, Gauge> = Family::default(), "csi_pv_controller_queue_waiting", "Keys waiting in a work queue, by lane (existing volumes, scheduled claims, other) and namespace: the shares its fair order serves in turn";
    driver_limit: Family<BudgetLabels, Gauge<f64, AtomicU64>> = Family::default(), "csi_pv_controller_driver_concurrency_limit", "How many driver calls of the budget may be in flight at once, as the adaptive limit now sets it";
    driver_in_flight: Family<BudgetLabels, Gauge> = Family::default(), "csi_pv_controller_driver_in_flight", "Driver calls of the budget in flight now";
    driver_waiting: Family<BudgetLabels, Gauge> = Family::default(), "csi_pv_controller_driver_waiting", "Driver calls of the budget waiting for the limit to let them through";
    driver_refusals: Family<RefusalLabels, Counter> = Family::default(), "csi_pv_controller_driver_refusals", "Driver calls the backend refused as overloaded (ResourceExhausted, Unavailable), by budget and code";
    passes_per_key: Histograms<QueueLabels> = histograms(pass_histogram), "csi_pv_controller_passes_per_key", "Passes each key of a work queue got in one resync period, observed per key at every resync";
    sync_failures: Family<FailureLabels, Counter> = Family::default(), "csi_pv_controller_sync_failures", "Passes that failed, by work queue and by what the failure means for the next try: final and in_progress (backoff), infeasible and refused (slow), conflict (soon)";
    panics: Family<PassLabels, Counter> = Family::default(), "csi_pv_controller_panics", "Passes that ended in a panic (a bug: the object is named in the log and an Event), by kind of pass; each is retried with backoff and the worker goes on";
    write_conflicts: Family<QueueLabels, Counter> = Family::default(), "csi_pv_controller_write_conflicts", "Passes whose write met a newer version of the object (HTTP 409), by work queue";
    claim_bound: Histogram = operation_histogram(), "csi_pv_controller_claim_bound_seconds", "From a claim's creation to its binding by this process";
    resize_done: Histogram = operation_histogram(), "csi_pv_controller_resize_seconds", "From the start of a resize (Resizing) to the controller's part done";
    api_writes: Family<WriteLabels, Counter> = Family::default(), "csi_pv_controller_api_writes", "Writes to the Kubernetes API made by this process, by resource and verb";
    provisioned: Family<ProvisionLabels, Counter> = Family::default(), "controller_persistentvolumeclaim_provision", "Volumes provisioned, by storage class and data source kind";
    provision_failed: Family<ProvisionLabels, Counter> = Family::default(), "controller_persistentvolumeclaim_provision_failed", "Provisioning attempts that failed (at the driver or before it: parameters, secrets, topology), by storage class and data source kind";
    provision_seconds: Histograms<ProvisionLabels> = histograms(default_histogram), "controller_persistentvolumeclaim_provision_duration_seconds", "From CreateVolume to the PV saved, for provisions that succeeded";
    deleted: Family<ClassLabels, Counter> = Family::default(), "controller_persistentvolume_delete", "Volumes deleted in the driver, by storage class";
    delete_failed: Family<ClassLabels, Counter> = Family::default(), "controller_persistentvolume_delete_failed", "DeleteVolume attempts that failed, by storage class";
    delete_seconds: Histograms<ClassLabels> = histograms(default_histogram), "controller_persistentvolume_delete_duration_seconds", "DeleteVolume calls that succeeded";
    leader: Family<QueueLabels, Gauge> = Family::default(), "leader_election_master_status", "1 while this replica holds the leader election Lease of that name, else 0";
    leader_slowpath: Family<QueueLabels, Counter> = Family::default(), "leader_election_slowpath", "Renewals of the Lease of that name that had to read it first, because the write on the Lease as last written failed";
    fenced: Family<QueueLabels, Counter> = Family::default(), "csi_pv_controller_fenced", "API writes and CSI calls refused because this replica's leadership may have lapsed";
    capacity_goal: Family<NoLabels, Gauge> = Family::default(), "csistoragecapacities_desired_goal", "CSIStorageCapacity objects that should exist (classes times topology segments)";
    capacity_current: Family<NoLabels, Gauge> = Family::default(), "csistoragecapacities_desired_current", "CSIStorageCapacity objects that should exist and do";
    capacity_obsolete: Family<NoLabels, Gauge> = Family::default(), "csistoragecapacities_obsolete", "CSIStorageCapacity objects that exist but are no longer wanted";
    volumes: Family<StateLabels, Gauge> = Family::default(), "csi_pv_controller_volumes", "What the last volume reconciler pass found: the driver's volumes by state (adopted, in_flight, orphaned, unknown), and PVs whose volume the driver does not list (lost)";
    orphans_deleted: Counter = Counter::default(), "csi_pv_controller_orphans_deleted", "Orphaned volumes the volume reconciler deleted in the driver";
    list_volumes_pages: Counter = Counter::default(), "csi_pv_controller_list_volumes_pages", "ListVolumes pages the volume reconciler read";
    build_info: Family<BuildLabels, Gauge> = build_info(), "csi_pv_controller_build_info", "Always 1: the version and commit this binary was built from";
}

/// A family's only series, made when first set (the label set is empty).
type NoLabels = Vec<(String, String)>;

/// The version and commit of this build (build.rs reads the commit from git).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub commit: String,
}

fn build_info() -> Family<BuildLabels, Gauge> {
    let family = Family::<BuildLabels, Gauge>::default();
    let labels = BuildLabels {
        version: format!("v{}", env!("CARGO_PKG_VERSION")),
        commit: env!("CSI_PV_CONTROLLER_COMMIT").to_string(),
    };
    family.get_or_create(&labels).set(1);
    family
}

fn csi_histogram() -> Histogram {
    Histogram::new(CSI_BUCKETS)
}

/// client-go's workqueue buckets: 10 ns to 10 s, by tens, as Go multiplies them out.
fn queue_histogram() -> Histogram {
    Histogram::new(exposition::go_exponential_buckets(10e-9, 10.0, 10))
}

/// Prometheus' default buckets, which the provisioner library's duration histograms use.
const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

fn operation_histogram() -> Histogram {
    Histogram::new(OPERATION_BUCKETS)
}

fn pass_histogram() -> Histogram {
    Histogram::new(PASS_BUCKETS)
}

impl Metrics {
    /// What a capacity round found: objects wanted, wanted and present, present but unwanted.
    pub fn capacity(&self, goal: usize, current: usize, obsolete: usize) {
        // Families without labels, empty until the first round: csi-provisioner registers
        // these only with --enable-capacity.
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.capacity_goal.get_or_create(&Vec::new()).set(gauge(goal));
        self.capacity_current.get_or_create(&Vec::new()).set(gauge(current));
        self.capacity_obsolete.get_or_create(&Vec::new()).set(gauge(obsolete));
    }

    /// A work queue named `labels` exists: client-go makes each of its series then, at zero,
    /// so that a dashboard sees the queue before its first retry.
    pub fn queue_created(&self, labels: &QueueLabels) {
        let _ = self.queue_depth.get_or_create(labels);
        let _ = self.queue_adds.get_or_create(labels);
        let _ = self.queue_retries.get_or_create(labels);
        let _ = self.queue_seconds.get_or_create(labels);
        let _ = self.work_seconds.get_or_create(labels);
        let _ = self.queue_unfinished.get_or_create(labels);
        let _ = self.queue_longest.get_or_create(labels);
    }

    /// What a volume reconciler pass found, by state; `lost` is left as it was when the
    /// listing could not tell.
    pub fn volumes(&self, counts: &[(&str, usize)]) {
        for (state, n) in counts {
            let labels = StateLabels { state: state.to_string() };
            self.volumes.get_or_create(&labels).set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    pub fn orphan_deleted(&self) {
        self.orphans_deleted.inc();
    }

    pub fn list_volumes_page(&self) {
        self.list_volumes_pages.inc();
    }

    /// A provision ended with its PV saved, `elapsed` after CreateVolume was sent.
    pub fn provisioned(&self, class: &str, source: &str, elapsed: Duration) {
        let labels = ProvisionLabels { class: class.to_string(), source: source.to_string() };
        self.provisioned.get_or_create(&labels).inc();
        self.provision_seconds.get_or_create(&labels).observe(elapsed.as_secs_f64());
    }

    /// A provisioning attempt failed, at the driver or before it.
    pub fn provision_failed_attempt(&self, class: &str, source: &str) {
        let labels = ProvisionLabels { class: class.to_string(), source: source.to_string() };
        self.provision_failed.get_or_create(&labels).inc();
    }

    /// A pass over a key of `queue` failed with an error of `class`.
    pub fn sync_failure(&self, queue: &str, class: &str) {
        let labels = FailureLabels { queue: queue.to_string(), class: class.to_string() };
        self.sync_failures.get_or_create(&labels).inc();
    }

    /// A pass of kind `pass` panicked (runtime::panics).
    pub fn panicked(&self, pass: &str) {
        self.panics.get_or_create(&PassLabels { pass: pass.to_string() }).inc();
    }

    /// The fence refused a side effect of `kind` (`api`, `csi`).
    pub fn fenced(&self, kind: &str) {
        self.fenced.get_or_create(&QueueLabels { name: kind.to_string() }).inc();
    }

    /// A DeleteVolume of a reclaimed PV ended.
    pub fn delete(&self, class: &str, ok: bool, elapsed: Duration) {
        let labels = ClassLabels { class: class.to_string() };
        let series = (&self.deleted, &self.delete_seconds);
        count_outcome(series, &self.delete_failed, &labels, ok, elapsed);
    }

    /// One CSI call ended; `migrated`: it was about a volume of an in-tree plugin served
    /// through CSI migration.
    pub fn csi_call(
        &self,
        driver: &str,
        method: &str,
        code: tonic::Code,
        elapsed: Duration,
        migrated: bool,
    ) {
        let code = format!("{code:?}");
        let migration_driver = crate::migration::Plugin::by_csi_driver(driver).is_some();
        self.csi_operations
            .get_or_create(&CsiLabels {
                driver_name: driver.to_string(),
                method_name: format!("/csi.v1.{}/{method}", service_of(method)),
                grpc_status_code: go_code_name(&code),
                migrated: migration_driver.then_some(if migrated { "true" } else { "false" }),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The OpenMetrics text of every series (prometheus-client's own encoding).
    pub fn encode(&self) -> String {
        self.process.refresh();
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }

    /// What a scrape of an address serving `scope` gets: Prometheus' text format as the Go
    /// sidecars write it (`exposition`).
    pub fn scrape(&self, scope: exposition::Scope) -> String {
        exposition::to_prometheus_text(&self.encode(), scope)
    }
}

/// An operation ended: counted and timed when `ok`, else counted as failed.
fn count_outcome<L: Clone + std::hash::Hash + Eq>(
    (done, seconds): (&Family<L, Counter>, &Histograms<L>),
    failed: &Family<L, Counter>,
    labels: &L,
    ok: bool,
    elapsed: Duration,
) {
    if ok {
        done.get_or_create(labels).inc();
        seconds.get_or_create(labels).observe(elapsed.as_secs_f64());
    } else {
        failed.get_or_create(labels).inc();
    }
}

/// grpc-go's name of `code`, as upstream's conditions and metrics record it.
pub fn code_name(code: tonic::Code) -> String {
    go_code_name(&format!("{code:?}"))
}

/// grpc-go's name of a status code: tonic spells two differently.
fn go_code_name(debug: &str) -> String {
    match debug {
        "Ok" => "OK".into(),
        "Cancelled" => "Canceled".into(),
        other => other.into(),
    }
}

/// The CSI service a method belongs to.
fn service_of(method: &str) -> &'static str {
    match method {
        "Probe" | "GetPluginInfo" | "GetPluginCapabilities" => "Identity",
        m if m.starts_with("Node") => "Node",
        _ => "Controller",
    }
}

/// Seconds from `since` to now; None if the clock says it has not happened yet.
pub fn seconds_since(since: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<f64> {
    let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(since.0);
    let seconds = elapsed.as_secs_f64();
    (seconds >= 0.0).then_some(seconds)
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// The resource (with subresource) an API path names: `/api/v1/namespaces/ns/pods/p/status` →
/// `pods/status`.
pub fn resource_of(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.first() {
        Some(&"api") => parts.get(2..),
        Some(&"apis") => parts.get(3..),
        _ => None,
    }
    .unwrap_or_default();
    let rest = match rest {
        ["namespaces", _, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    match rest {
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [resource, ..] => resource.to_string(),
        [] => "unknown".to_string(),
    }
}

/// The verb of a write, from the HTTP method; None for reads.
pub fn verb_of(method: &axum::http::Method) -> Option<&'static str> {
    match *method {
        axum::http::Method::POST => Some("create"),
        axum::http::Method::PUT => Some("update"),
        axum::http::Method::PATCH => Some("patch"),
        axum::http::Method::DELETE => Some("delete"),
        _ => None,
    }
}
#[cfg(test)]
mod tests;
