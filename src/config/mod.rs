//! Command-line flags. Names and defaults follow external-provisioner / external-resizer
//! (csi-lib-utils standard flags) wherever the meaning is the same.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

pub mod args;
pub mod feature_gates;
pub mod features;
pub mod flags_from;
mod http;
pub mod merged;
mod settings;
pub use settings::provisioner_identity;
pub mod upstream;
pub use crate::provision::settings::{Settings, TopologyOptions};

#[derive(Debug, Clone, Parser)]
#[command(
    name = "csi-pv-controller",
    version,
    about = "Provisions, binds, expands and deletes the volumes of one CSI driver.",
    // As Go's flag package: a repeated flag takes its last value.
    args_override_self = true
)]
pub struct Config {
    /// The CSI driver's controller socket: unix:///path or a path.
    #[arg(help_heading = "Process", long, default_value = "/run/csi/socket")]
    pub csi_address: String,

    /// Deadline of every call to the CSI driver. Given in a list marked --args-of, it is the
    /// deadline of that sidecar's calls only (csi-provisioner: CreateVolume, DeleteVolume,
    /// GetCapacity; csi-resizer: ControllerExpandVolume, ControllerModifyVolume).
    #[arg(help_heading = "Process", long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// Deadline of ControllerExpandVolume, as csi-resizer v2.3 has it: a --timeout given for
    /// csi-resizer (in its marked list, or unmarked) overrides it. Unset: --timeout.
    #[arg(help_heading = "Process", long, value_parser = humantime::parse_duration)]
    pub resize_timeout: Option<Duration>,

    /// Deadline of ControllerModifyVolume, as csi-resizer v2.3 has it: a --timeout given for
    /// csi-resizer overrides it. Unset: --timeout.
    #[arg(help_heading = "Process", long, value_parser = humantime::parse_duration)]
    pub modify_timeout: Option<Duration>,

    /// Marks the args that follow as csi-provisioner's or csi-resizer's, for a container that
    /// takes both sidecars' args one list after the other: each list's --timeout then applies
    /// to that sidecar's calls. Every --http-endpoint is served either way.
    #[arg(help_heading = "Process", long = merged::MARKER, value_name = "csi-provisioner|csi-resizer")]
    pub args_of: Vec<String>,

    /// Each role's --timeout, from the lists marked --args-of.
    #[arg(skip)]
    pub role_timeouts: merged::RoleTimeouts,

    /// Every --http-endpoint / --metrics-address value with the role of the list marked
    /// --args-of it came in (None: unmarked): an address only one role named serves that
    /// role's series.
    #[arg(skip)]
    pub endpoint_roles: Vec<(Option<merged::Role>, String)>,

    /// How long to wait at start for the driver's socket to answer Probe before giving up with an
    /// error (0: wait forever, as upstream does).
    #[arg(help_heading = "Process", long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub csi_connect_timeout: Duration,

    /// Kubeconfig file; without it KUBECONFIG, ~/.kube/config or the in-cluster account is used.
    #[arg(help_heading = "Process", long)]
    pub kubeconfig: Option<PathBuf>,

    /// Address of the HTTP server for /healthz, /readyz, /healthz/leader-election and the
    /// metrics, e.g. :8080 or localhost:8080 (empty: no server). Given more than once (the two
    /// sidecars' ports), every address is served.
    #[arg(help_heading = "Process", long)]
    pub http_endpoint: Vec<String>,

    /// Take part in leader election on a Lease, so that only one replica acts.
    #[arg(help_heading = "Process", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub leader_election: bool,

    /// Namespace of the Lease (empty: $POD_NAMESPACE, else the service account's, else default).
    #[arg(help_heading = "Process", long, default_value = "")]
    pub leader_election_namespace: String,

    /// How long a standby waits, from when it sees the Lease's last change, before it takes the
    /// Lease over. Written into the Lease in whole seconds.
    #[arg(help_heading = "Process", long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub leader_election_lease_duration: Duration,

    /// The leader stops acting when no renewal has succeeded for this long.
    #[arg(help_heading = "Process", long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub leader_election_renew_deadline: Duration,

    /// How often the leader renews the Lease and a standby looks at it.
    #[arg(help_heading = "Process", long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub leader_election_retry_period: Duration,

    /// Sustained requests per second to the Kubernetes API. Negative (the default): no
    /// client-side limit, as client-go's -1; the apiserver's API Priority and Fairness paces us.
    /// One client here does the work of csi-provisioner, csi-resizer and the PV binder; set 5
    /// (and burst 10) for their per-client limit.
    #[arg(help_heading = "Process", long, default_value_t = -1.0, allow_negative_numbers = true)]
    pub kube_api_qps: f32,

    /// Requests allowed at once above a positive --kube-api-qps.
    #[arg(help_heading = "Process", long, default_value_t = 10)]
    pub kube_api_burst: u32,

    /// How many objects are worked on concurrently.
    #[arg(help_heading = "Process", long, default_value_t = 100)]
    pub worker_threads: usize,

    /// How many ControllerExpandVolume calls may run at once (csi-resizer's --workers).
    #[arg(help_heading = "Resizer", long, default_value_t = 10)]
    pub workers: usize,

    /// Path of the Prometheus metrics on --http-endpoint (as csi-provisioner's --metrics-path).
    #[arg(help_heading = "Process", long, default_value = "/metrics")]
    pub metrics_path: String,

    /// First delay before retrying a failed operation on an object; doubles on each failure.
    #[arg(help_heading = "Process", long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub retry_interval_start: Duration,

    /// Longest delay between retries of a failed operation on an object.
    #[arg(help_heading = "Process", long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub retry_interval_max: Duration,

    /// Prefix of the names of provisioned volumes and their PVs: <prefix>-<claim UID>.
    #[arg(help_heading = "Provisioner", long, default_value = "pvc")]
    pub volume_name_prefix: String,

    /// -1: the whole claim UID in volume names; N: the UID without dashes, cut to N characters.
    #[arg(help_heading = "Provisioner", long, default_value_t = -1, allow_negative_numbers = true)]
    pub volume_name_uuid_length: i64,

    /// Filesystem type for volumes whose StorageClass names none (empty: none).
    #[arg(help_heading = "Provisioner", long, default_value = "")]
    pub default_fstype: String,

    /// Add csi.storage.k8s.io/pvc/name, pvc/namespace and pv/name to CreateVolume parameters.
    #[arg(help_heading = "Provisioner", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub extra_create_metadata: bool,

    /// Refuse to restore a snapshot into a claim of another volumeMode than the snapshot's
    /// source, unless its VolumeSnapshotContent is annotated
    /// snapshot.storage.kubernetes.io/allow-volume-mode-change="true".
    #[arg(help_heading = "Provisioner", long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub prevent_volume_mode_conversion: bool,

    /// csi-provisioner's: with delayed binding, ask the driver for the selected node's topology
    /// segment only, instead of every node's with the selected one preferred.
    #[arg(help_heading = "Provisioner", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub strict_topology: bool,

    /// csi-provisioner's: with immediate binding and no allowedTopologies, ask the driver for
    /// the topology segments of every node it is on; false sends no requirement.
    #[arg(help_heading = "Provisioner", long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub immediate_topology: bool,

    /// csi-resizer's: add csi.storage.k8s.io/pvc/name, pvc/namespace and pv/name to
    /// ControllerModifyVolume's mutable parameters.
    #[arg(help_heading = "Resizer", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub extra_modify_metadata: bool,

    /// Mark the PV read-only for the driver when the claim's only access mode is ReadOnlyMany.
    #[arg(help_heading = "Provisioner", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub controller_publish_readonly: bool,

    /// kube-controller-manager's --pvclaimbinder-sync-period: how often the periodic pass runs.
    /// When we bind, it looks at every claim and PV again, as that binder does; beside the
    /// cluster's binder, at those not settled yet (not Bound). It also sweeps the intent journal.
    #[arg(help_heading = "Binder", long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub pvclaimbinder_sync_period: Duration,

    /// csi-provisioner's: publish CSIStorageCapacity objects from GetCapacity, in the namespace
    /// of env NAMESPACE (owned per --capacity-ownerref-level, from env POD_NAME).
    #[arg(help_heading = "Provisioner", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub enable_capacity: bool,

    /// Owner of the capacity objects, counted up from the pod: -1 none, 0 the pod, 1 its
    /// StatefulSet or DaemonSet, 2 a Deployment.
    #[arg(help_heading = "Provisioner", long, default_value_t = 1, allow_negative_numbers = true)]
    pub capacity_ownerref_level: i32,

    /// How long a claim of the driver may wait before a condition on its status
    /// (csi-pv-controller.storage.k8s.io/Provisioning) says why: the binder's hand-over, a first
    /// consumer, a node, capacity, a data source, a secret or the driver. Written only when the
    /// cause changes and removed once the claim is Bound; a claim that waits less gets none.
    #[arg(help_heading = "Provisioner", long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub waiting_condition_after: Duration,

    /// How often every capacity object is asked for again.
    #[arg(help_heading = "Provisioner", long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub capacity_poll_interval: Duration,

    /// Publish capacity for Immediate classes too, not only WaitForFirstConsumer ones.
    #[arg(help_heading = "Provisioner", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub capacity_for_immediate_binding: bool,

    /// GetCapacity calls at once.
    #[arg(help_heading = "Provisioner", long, default_value_t = 1)]
    pub capacity_threads: usize,

    /// The capacity objects' own client budget (csi-provisioner's).
    #[arg(
        help_heading = "Provisioner",
        long,
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub kube_api_capacity_qps: f32,

    #[arg(help_heading = "Provisioner", long, default_value_t = 5)]
    pub kube_api_capacity_burst: u32,

    /// csi-resizer's --resync-period: how often every claim and PV is queued again, whatever its
    /// state.
    #[arg(help_heading = "Resizer", long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub resync_period: Duration,

    /// csi-provisioner's: how often the restore protection is taken off VolumeSnapshots that no
    /// claim needs any more (left by a crash); 0 turns the sweep off.
    #[arg(help_heading = "Provisioner", long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub snapshot_orphan_sweep_interval: Duration,

    /// Who binds claims to PVs: external (kube-controller-manager's PV binder, as in every
    /// cluster that runs it: we provision what it hands to the driver and never bind), driver
    /// (we bind this driver's claims; its binder must be off) or all (we bind every claim).
    #[arg(help_heading = "Binder", long, default_value = "external")]
    pub binder: crate::binder::Binder,

    /// With --binder=external: keep each provisioning intent (the promise that a volume being
    /// created is never left behind) in a file in this directory instead of a finalizer on the
    /// claim, saving two claim writes per volume. The directory must outlive the process (an
    /// emptyDir does: it survives a container restart). Unused by the binding modes, whose
    /// finalizer rides on writes they make anyway.
    #[arg(help_heading = "Provisioner", long, value_name = "DIR")]
    pub intent_journal: Option<std::path::PathBuf>,

    /// Bind every claim and PV in the cluster, not only this driver's: for clusters that run
    /// kube-controller-manager with its PV binder switched off. The same as --binder=all.
    #[arg(help_heading = "Binder", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub bind_all: bool,

    /// After a driver answers "volume in use" (FailedPrecondition) to an expansion, wait until
    /// no pod uses the claim before asking again. Needs pods list; false for online drivers.
    #[arg(help_heading = "Resizer", long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub handle_volume_inuse_error: bool,

    /// Feature gates as the Go sidecars take them (Name=true,...): AnnotateFsResize (off by
    /// default, as in csi-resizer); gates that are GA upstream are accepted when on.
    #[arg(help_heading = "Process", long, default_value = "")]
    pub feature_gates: crate::config::feature_gates::FeatureGates,

    /// Log format: text, or json (one object per line).
    #[arg(help_heading = "Process", long, alias = "logging-format", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// Log verbosity as klog's -v: 0–1 info, 2–4 debug, 5 and up trace. RUST_LOG, when set,
    /// takes precedence.
    #[arg(help_heading = "Process", short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,

    /// How often the volume reconciler compares the driver's volumes (ListVolumes) with the
    /// PVs, claims and intents, reporting orphaned volumes and lost PVs (0: never). Needs the
    /// driver's LIST_VOLUMES.
    #[arg(help_heading = "Volume reconciler", long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub reconcile_period: Duration,

    /// Delete orphaned volumes (named by us for a claim that no longer exists, with no PV and
    /// no intent) once they were orphaned on two passes --reconcile-grace apart. Without it the
    /// reconciler names what it would delete (a dry run).
    #[arg(help_heading = "Volume reconciler", long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::config::args::go_bool)]
    pub reconcile_delete_orphans: bool,

    /// How long a volume must stay orphaned before it is deleted (or named by the dry run).
    #[arg(help_heading = "Volume reconciler", long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub reconcile_grace: Duration,

    /// Volumes asked for per ListVolumes page.
    #[arg(help_heading = "Volume reconciler", long, default_value_t = 500, value_parser = clap::value_parser!(i32).range(1..))]
    pub reconcile_page_size: i32,

    /// Pause between two ListVolumes pages, so that a driver with many volumes is not hammered.
    #[arg(help_heading = "Volume reconciler", long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub reconcile_page_interval: Duration,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// One-shot commands instead of running the controller.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Print where a claim stands and what the next pass would do: the binder's decision and
    /// why each PV was or was not chosen, provisioning's next step and why the claim waits,
    /// its resize and its VolumeAttributesClass change. With --all: one line per claim that
    /// is not settled.
    Explain {
        /// <namespace>/<claim>
        claim: Option<String>,
        /// Every claim that is not settled, one line each.
        #[arg(long, default_value_t = false)]
        all: bool,
        /// Take the running controller's flags: pod/<namespace>/<name>[/<container>] (its
        /// container's args; not its --kubeconfig) or a file (a JSON list, or one arg per line,
        /// as a manifest's args list). Flags typed before the subcommand win.
        #[arg(long, value_name = "SOURCE")]
        flags_from: Option<flags_from::FlagsSource>,
    },
    /// One pass of the volume reconciler for DRIVER (--csi-address): each of the driver's
    /// volumes as adopted, in flight, orphaned or unknown, and each lost PV. Changes nothing.
    Reconcile {
        /// The driver's name, as GetPluginInfo gives it.
        driver: String,
        /// table or json.
        #[arg(long, default_value = "table")]
        output: String,
        /// As explain's --flags-from: the running controller's flags, from its pod or a file.
        #[arg(long, value_name = "SOURCE")]
        flags_from: Option<flags_from::FlagsSource>,
    },
    /// Before moving back to csi-provisioner: remove our provisioning finalizer from the claims
    /// of DRIVER wherever that cannot leave a volume behind, and name the others. Stop every
    /// csi-pv-controller of the driver first; a current Lease refuses the run.
    Uninstall {
        /// The driver's name (its claims carry volume.kubernetes.io/storage-provisioner=DRIVER).
        driver: String,
        /// Remove the finalizer from claims being deleted whose volume no PV records too (check
        /// the driver for the volumes named in the report first).
        #[arg(long)]
        force: bool,
        /// Report only; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// End one provisioning intent in the intent journal (--intent-journal) by hand, once the
    /// volume it may have made is known not to exist in the driver, or is recorded in a
    /// PersistentVolume. The controller that holds the journal must be stopped first.
    EndIntent {
        /// The claim's UID, as the controller's log line names it.
        uid: String,
        /// Say which claim it is; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Why the flags could not be read.
#[derive(Debug)]
pub enum FlagError {
    /// clap's own answer: --help and --version (exit 0), or a value it cannot parse.
    Clap(clap::Error),
    /// Our words: an upstream flag we refuse, or a flag nobody knows (exit 2).
    Refused(String),
    /// Flags upstream refuses together, with upstream's exit status.
    Conflict { message: String, exit: u8 },
}

/// The flags as read, with what to say of them at start.
#[derive(Debug)]
pub struct Read {
    pub config: Config,
    /// Flags or gates taken with no effect (info).
    pub notes: Vec<String>,
    /// Flags given more than once with different values (warning).
    pub warnings: Vec<String>,
}

/// The flags as the process reads them: Go's spellings (`-flag`, `args::go_style`), the two
/// sidecars' lists merged (`merged`), the upstream flags that have no flag of ours
/// (`upstream`), then clap.
pub fn from_args<I>(argv: I) -> Result<Read, FlagError>
where
    I: IntoIterator<Item = std::ffi::OsString>,
{
    use clap::CommandFactory;
    let command = Config::command();
    let takes_value = |name: &str| takes_value(&command, name);
    let merged =
        merged::merge(crate::config::args::go_style(argv), takes_value).map_err(|r| match r {
            merged::Refusal { message, exit: 2 } => FlagError::Refused(message),
            merged::Refusal { message, exit } => FlagError::Conflict { message, exit },
        })?;
    let translated = upstream::translate(merged.argv).map_err(FlagError::Refused)?;
    let mut config =
        Config::try_parse_from(translated.argv).map_err(|e| match upstream::unknown_flag(&e) {
            Some(message) => FlagError::Refused(message),
            None => FlagError::Clap(e),
        })?;
    config.role_timeouts = merged.timeouts;
    config.endpoint_roles = merged.endpoints;
    let mut notes = merged.notes;
    notes.extend(translated.ignored);
    notes.extend(config.feature_gates.no_effect.iter().cloned());
    Ok(Read { config, notes, warnings: merged.warnings })
}

/// The command line `typed` with the flags `read` from `source` (`flags_from::rebuild`), ready
/// for `from_args`.
pub fn with_flags_from(
    typed: Vec<std::ffi::OsString>,
    read: Vec<String>,
    source: &flags_from::FlagsSource,
) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let command = Config::command();
    let takes = |name: &str| name == merged::MARKER || takes_value(&command, name);
    flags_from::rebuild(typed, read, source.left_out(), takes)
}

impl Command {
    /// The subcommand's `--flags-from`, if it has one.
    pub fn flags_from(&self) -> Option<&flags_from::FlagsSource> {
        match self {
            Command::Explain { flags_from, .. } | Command::Reconcile { flags_from, .. } => {
                flags_from.as_ref()
            }
            Command::Uninstall { .. } | Command::EndIntent { .. } => None,
        }
    }
}

/// Whether `--name` takes the next argument as its value when none follows `=`: ours as clap
/// defines them (`command`), the upstream ones as `upstream` reads them.
fn takes_value(command: &clap::Command, name: &str) -> bool {
    if let Some(kind) = upstream::takes_value(name) {
        return kind;
    }
    command.get_arguments().any(|a| {
        a.get_long() == Some(name)
            && a.get_action().takes_values()
            && a.get_num_args().is_none_or(|n| n.min_values() > 0)
    })
}

/// A flag value that parses but makes no sense.
#[derive(Debug, thiserror::Error)]
#[error("invalid flag --{flag}: {reason}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub reason: String,
}

impl Config {
    /// Checks what the parser cannot: ranges and combinations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |flag, reason: &str| Err(ConfigError { flag, reason: reason.to_string() });
        if self.timeout.is_zero() {
            return bad("timeout", "must be greater than 0");
        }
        if self.resize_timeout.is_some_and(|t| t.is_zero()) {
            return bad("resize-timeout", "must be greater than 0");
        }
        if self.modify_timeout.is_some_and(|t| t.is_zero()) {
            return bad("modify-timeout", "must be greater than 0");
        }
        if !self.kube_api_qps.is_finite() || self.kube_api_qps == 0.0 {
            return bad(
                "kube-api-qps",
                "must be a number greater than 0, or negative for no client-side limit",
            );
        }
        if self.kube_api_burst == 0 {
            return bad("kube-api-burst", "must be at least 1");
        }
        if self.workers == 0 {
            return bad("workers", "must be greater than 0");
        }
        if !self.metrics_path.starts_with('/')
            || ["/healthz", "/readyz", "/healthz/leader-election"]
                .contains(&self.metrics_path.as_str())
        {
            return bad(
                "metrics-path",
                "must start with / and not be /healthz, /readyz or /healthz/leader-election",
            );
        }
        if self.worker_threads == 0 {
            return bad("worker-threads", "must be at least 1");
        }
        if self.retry_interval_start.is_zero() {
            return bad("retry-interval-start", "must be greater than 0");
        }
        if self.retry_interval_max < self.retry_interval_start {
            return bad("retry-interval-max", "must not be shorter than --retry-interval-start");
        }
        if self.volume_name_prefix.is_empty() {
            return bad("volume-name-prefix", "must not be empty");
        }
        if self.volume_name_uuid_length < -1 {
            return bad("volume-name-uuid-length", "must be -1 or at least 0");
        }
        if self.bind_all && self.binder == crate::binder::Binder::Driver {
            return bad("bind-all", "means --binder=all and cannot go with --binder=driver");
        }
        if self.pvclaimbinder_sync_period.is_zero() {
            return bad("pvclaimbinder-sync-period", "must be greater than 0");
        }
        if self.capacity_poll_interval.is_zero() {
            return bad("capacity-poll-interval", "must be greater than 0");
        }
        if self.capacity_ownerref_level < -1 {
            return bad("capacity-ownerref-level", "must be -1 (no owner) or more");
        }
        if !self.kube_api_capacity_qps.is_finite() || self.kube_api_capacity_qps == 0.0 {
            return bad(
                "kube-api-capacity-qps",
                "must be a number greater than 0, or negative for no client-side limit",
            );
        }
        if self.resync_period.is_zero() {
            return bad("resync-period", "must be greater than 0");
        }
        if self.leader_election
            && let Err(e) = self.lease_timing().check()
        {
            return bad("leader-election-lease-duration", &e.to_string());
        }
        if let Some(path) = &self.kubeconfig
            && !path.is_file()
        {
            return bad("kubeconfig", &format!("{} is not a readable file", path.display()));
        }
        crate::csi::socket_path(&self.csi_address)
            .map_err(|e| ConfigError { flag: "csi-address", reason: e.to_string() })?;
        self.http_addresses()?;
        Ok(())
    }

    /// Who binds: `--binder`, or `all` with `--bind-all`.
    pub fn binder(&self) -> crate::binder::Binder {
        if self.bind_all { crate::binder::Binder::All } else { self.binder }
    }

    /// `--volume-name-uuid-length` as an optional cut (-1 = none).
    pub fn uuid_length(&self) -> Option<usize> {
        usize::try_from(self.volume_name_uuid_length).ok()
    }

    /// The tracing filter for `-v`.
    pub fn log_level(&self) -> &'static str {
        match self.verbosity {
            0 | 1 => "info",
            2..=4 => "info,csi_pv_controller=debug",
            _ => "info,csi_pv_controller=trace",
        }
    }

    /// The per-key retry backoff (`--retry-interval-start`, `--retry-interval-max`).
    pub fn backoff(&self) -> crate::runtime::queue::Backoff {
        crate::runtime::queue::Backoff {
            start: self.retry_interval_start,
            max: self.retry_interval_max,
        }
    }

    pub fn lease_timing(&self) -> crate::leader::Timing {
        crate::leader::Timing {
            lease_duration: self.leader_election_lease_duration,
            renew_deadline: self.leader_election_renew_deadline,
            retry_period: self.leader_election_retry_period,
        }
    }

    /// `--csi-connect-timeout` as an optional limit (0 = none).
    pub fn connect_limit(&self) -> Option<Duration> {
        (!self.csi_connect_timeout.is_zero()).then_some(self.csi_connect_timeout)
    }
}

#[cfg(test)]
mod tests;
