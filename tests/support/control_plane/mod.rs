//! A real control plane for tests: etcd and kube-apiserver (built by `make peers`) on loopback
//! ports chosen at run time, TLS with an admin client certificate, RBAC authorization and
//! service-account signing keys. kube-controller-manager runs where a test starts it (`Kcm`).
//!
//! One shared control plane per test binary, started by the first test that asks for it (and
//! fresh ones for tests that need a cluster of their own, `fresh_plane`). Tests isolate
//! themselves by namespace and unique names. The processes are started from a thread that lives
//! as long as the test binary and get SIGKILL when it exits (PR_SET_PDEATHSIG), so they go away
//! also when a test panics or the binary is killed.

#![allow(dead_code)]

mod loopback;
mod owned;
mod pki;

use std::fs;
use std::io::Read as _;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::peers::peer;
use pki::make_pki;

// Each test binary uses a different part of these.
#[allow(unused_imports)]
pub use loopback::{http_get, http_get_status, http_get_with, http_ok, http_post};
#[allow(unused_imports)]
pub use owned::{OwnedPlane, runtime};

/// The Services' range (`--service-cluster-ip-range`), a documentation range that is routed
/// nowhere: the `kubernetes` Service gets its first address, which a node whose pods call the
/// apiserver puts on its pods' bridge (`node::ServiceRelay`).
pub const SERVICE_RANGE: &str = "203.0.113.0/24";
/// The `kubernetes` Service's ClusterIP in `SERVICE_RANGE`.
pub const KUBERNETES_SERVICE_IP: &str = "203.0.113.1";

/// How long the apiserver may take to report /readyz on a busy 2-core machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The running control plane's coordinates. Its processes belong to a background thread.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// Holds `audit.log`: one JSON line per write request (metadata only), for counting writes.
    pub dir: PathBuf,
    pub server: String,
    pub ca_file: PathBuf,
    /// Kubeconfig of `admin` in group system:masters.
    pub admin_kubeconfig: PathBuf,
}

static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// The test binary's control plane, started on first use. Panics (failing the test) if a peer is
/// missing or the apiserver does not become ready.
pub fn control_plane() -> &'static ControlPlane {
    let result = PLANE.get_or_init(|| start_on_own_thread(PlaneOptions::TESTS));
    match result {
        Ok(plane) => plane,
        Err(e) => panic!("control plane did not start: {e}"),
    }
}

/// A control plane of the calling test's own, alive until the test binary exits: for a cluster
/// whose kube-controller-manager the test starts and stops, with the protection finalizers on
/// as in a real cluster.
pub fn fresh_plane() -> &'static ControlPlane {
    let options =
        PlaneOptions { audit: true, protection_finalizers: true, service_accounts: false };
    match start_on_own_thread(options) {
        Ok(plane) => Box::leak(Box::new(plane)),
        Err(e) => panic!("control plane did not start: {e}"),
    }
}

/// As `fresh_plane`, for a cluster whose pods call the apiserver with their ServiceAccount's
/// token (a driver's controller pod).
pub fn fresh_plane_for_pods() -> &'static ControlPlane {
    let options = PlaneOptions { audit: true, protection_finalizers: true, service_accounts: true };
    match start_on_own_thread(options) {
        Ok(plane) => Box::leak(Box::new(plane)),
        Err(e) => panic!("control plane did not start: {e}"),
    }
}

fn start_on_own_thread(options: PlaneOptions) -> Result<ControlPlane, String> {
    {
        let (tx, rx) = std::sync::mpsc::channel();
        // The thread that spawns the processes must outlive every test: PR_SET_PDEATHSIG fires
        // when the spawning *thread* exits.
        std::thread::Builder::new()
            .name("control-plane".into())
            .spawn(move || {
                let started = launch(options);
                let children_alive = started.is_ok();
                let (plane, children) = match started {
                    Ok((plane, children, _)) => (Ok(plane), children),
                    Err(e) => (Err(e), Vec::new()),
                };
                let _ = tx.send(plane);
                if children_alive {
                    let _children = children; // kept until the process exits
                    loop {
                        std::thread::park();
                    }
                }
            })
            .expect("cannot spawn the control-plane thread");
        rx.recv().unwrap_or_else(|_| Err("control-plane thread died".into()))
    }
}

impl ControlPlane {
    /// A new admin client, bound to the calling test's runtime.
    pub async fn client(&self) -> kube::Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// Writes a kubeconfig that authenticates with `token` and returns its path.
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        write_kubeconfig(&path, &self.server, &self.ca_file, name, &format!("token: {token}"))
            .expect("cannot write kubeconfig");
        path
    }

    /// Creates `namespace` (if needed) and a ServiceAccount in it, and mints a token for it with
    /// the TokenRequest API (no kube-controller-manager is needed for that).
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let client = self.client().await;
        create_namespace(&client, namespace).await;
        let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
        let account = ServiceAccount {
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            ..Default::default()
        };
        create_if_absent(&accounts, &account).await;
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(3600),
                audiences: vec![],
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name} failed: {e}"));
        answer.status.expect("TokenRequest without status").token
    }
}

pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("unreadable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("bad kubeconfig");
    kube::Client::try_from(config).expect("cannot build client")
}

pub async fn create_namespace(client: &kube::Client, name: &str) {
    let ns = Namespace {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        ..Default::default()
    };
    create_if_absent(&Api::all(client.clone()), &ns).await;
}

/// Creates `object`; one that already exists is fine (tests share the control plane).
pub async fn create_if_absent<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {}
        Err(e) => panic!("cannot create {:?}: {e}", object.meta().name),
    }
}

/// A kubeconfig for `server` trusting `ca`, with one user whose credentials are `user_fields`
/// (YAML lines under `user:`).
fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    user: &str,
    user_fields: &str,
) -> std::io::Result<()> {
    let fields: String = user_fields.lines().map(|l| format!("    {l}\n")).collect();
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: {user}\n  user:\n{fields}contexts:\n- name: {user}\n  context: {{cluster: test, user: {user}}}\ncurrent-context: {user}\n",
        ca.display()
    );
    fs::write(path, yaml)
}

/// A port that was free a moment ago on every address. It is taken below the kernel's ephemeral
/// range (32768 and up), where the port 0 trick would pick: there, any outgoing connection of
/// the test's processes may take it as its source port before the server meant for it listens,
/// and a Go sidecar that cannot listen exits.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 10_000;
    const SPAN: u32 = 32_768 - FIRST;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Binaries of one run start apart; each from its own place, so two rarely try the same port.
    let start = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (FIRST + (start + n) % SPAN) as u16;
        if TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between {FIRST} and {}", FIRST + SPAN)
}

/// Spawns `command` so that it is killed when this test binary exits, with its output in `log`.
/// The text of `logs`, each under its path, each cut to its last `tail` lines when given.
pub fn logs_text(logs: &[PathBuf], tail: Option<usize>) -> String {
    logs.iter()
        .map(|l| {
            let text = fs::read_to_string(l).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = tail.map_or(0, |t| lines.len().saturating_sub(t));
            format!("--- {}\n{}", l.display(), lines[from..].join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn spawn(mut command: Command, log: &Path) -> Result<Child, String> {
    let out = fs::File::create(log).map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    command.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))
}

pub fn tail(log: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(log) {
        let _ = f.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Waits for `ready` to hold, failing early with the log if `child` exits.
fn wait_for(
    what: &str,
    child: &mut Child,
    log: &Path,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < START_TIMEOUT {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{what} exited with {status}:\n{}", tail(log)));
        }
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!("{what} not ready after {START_TIMEOUT:?}:\n{}", tail(log)))
}

/// One request (a write, or a GET) the apiserver audited.
#[derive(Debug, Clone)]
pub struct AuditedWrite {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i64,
    pub user_agent: String,
    /// When the apiserver received it.
    pub received: Option<k8s_openapi::jiff::Timestamp>,
}

impl ControlPlane {
    /// Every write audited so far.
    ///
    /// Panics when the log cannot be read or holds no completed request: every plane's own
    /// set-up writes some, so an empty read means a plane without auditing or a broken log, and
    /// a count taken from it would prove nothing.
    pub fn audited_writes(&self) -> Vec<AuditedWrite> {
        self.audited().into_iter().filter(|e| e.verb != "get").collect()
    }

    /// Every single-object read (GET) audited so far.
    pub fn audited_reads(&self) -> Vec<AuditedWrite> {
        self.audited().into_iter().filter(|e| e.verb == "get").collect()
    }

    /// Every request audited so far, writes and reads (see `audited_writes`).
    fn audited(&self) -> Vec<AuditedWrite> {
        let path = self.dir.join("audit.log");
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("the audit log {} cannot be read: {e}", path.display()));
        let writes: Vec<AuditedWrite> = text
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|e| e["stage"] == "ResponseComplete")
            .map(|e| {
                let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                AuditedWrite {
                    user: s(&e["user"]["username"]),
                    verb: s(&e["verb"]),
                    resource: s(&e["objectRef"]["resource"]),
                    subresource: s(&e["objectRef"]["subresource"]),
                    namespace: s(&e["objectRef"]["namespace"]),
                    name: s(&e["objectRef"]["name"]),
                    code: e["responseStatus"]["code"].as_i64().unwrap_or_default(),
                    user_agent: s(&e["userAgent"]),
                    received: e["requestReceivedTimestamp"].as_str().and_then(|t| t.parse().ok()),
                }
            })
            .collect();
        assert!(!writes.is_empty(), "the audit log {} holds no completed request", path.display());
        writes
    }
}

/// What differs between the tests' shared control plane and the benchmark's fresh ones.
#[derive(Debug, Clone, Copy)]
pub struct PlaneOptions {
    /// Audit every write into `audit.log` (blocking mode: it slows the apiserver down).
    pub audit: bool,
    /// Keep the StorageObjectInUseProtection admission plugin (on in real clusters). Only when
    /// kube-controller-manager's protection controllers run, or nothing removes the finalizers.
    pub protection_finalizers: bool,
    /// Mount ServiceAccount tokens into pods (the ServiceAccount admission), for pods that call
    /// the apiserver; kube-controller-manager must then make the "default" accounts.
    pub service_accounts: bool,
}

impl PlaneOptions {
    pub const TESTS: PlaneOptions =
        PlaneOptions { audit: true, protection_finalizers: false, service_accounts: false };
}

/// A fresh folder for this plane, after removing those of earlier runs whose process is gone.
/// Named `<pid>-<n>`: one process may start several planes.
fn work_dir() -> Result<PathBuf, String> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let base = std::env::temp_dir().join("csi-pv-controller-control-planes");
    if let Ok(entries) = fs::read_dir(&base) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = base.join(format!("{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("pki")).map_err(|e| e.to_string())?;
    Ok(dir)
}

type Launched = (ControlPlane, Vec<Child>, ((std::ffi::OsString, Vec<std::ffi::OsString>), u16));

/// Starts a plane, again when a port it was given was taken meanwhile: `free_port` releases
/// the port before etcd or kube-apiserver binds it, and an outgoing connection of anything on
/// the machine may get it in between.
fn launch(options: PlaneOptions) -> Result<Launched, String> {
    let mut attempt = 1;
    loop {
        match launch_once(options) {
            Err(e) if e.contains("address already in use") && attempt < 3 => {
                eprintln!("control plane: a port was taken meanwhile; starting again ({e:.200})");
                attempt += 1;
            }
            other => return other,
        }
    }
}

fn launch_once(options: PlaneOptions) -> Result<Launched, String> {
    let etcd_bin = peer("etcd");
    let apiserver_bin = peer("kube-apiserver");
    let dir = work_dir()?;
    let pki = make_pki(&dir.join("pki")).map_err(|e| format!("certificates: {e}"))?;

    let etcd_port = free_port();
    let peer_port = free_port();
    let etcd_log = dir.join("etcd.log");
    let mut etcd = Command::new(etcd_bin);
    etcd.arg("--name=test")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
        .arg(format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
        .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"))
        .arg(format!("--initial-cluster=test=http://127.0.0.1:{peer_port}"))
        .arg("--unsafe-no-fsync=true")
        .arg("--log-level=warn");
    let mut etcd = spawn(etcd, &etcd_log)?;
    wait_for("etcd", &mut etcd, &etcd_log, || http_ok(etcd_port, "/health"))?;

    let api_port = free_port();
    let api_log = dir.join("kube-apiserver.log");
    // Writes and single reads (not lists or watches), metadata only: enough to count what a
    // client changed and what it read, and cheap.
    let audit_policy = dir.join("audit-policy.yaml");
    fs::write(
        &audit_policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
         - level: Metadata\n  verbs: [get, create, update, patch, delete, deletecollection]\n\
         - level: None\n",
    )
    .map_err(|e| e.to_string())?;
    let mut apiserver = Command::new(apiserver_bin);
    apiserver
        .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={api_port}"))
        .arg("--advertise-address=127.0.0.1")
        // A loopback advertise address fails the kubernetes Service endpoint reconciler.
        .arg("--endpoint-reconciler-type=none")
        .arg(format!("--cert-dir={}", dir.join("pki").display()))
        .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
        .arg(format!("--tls-private-key-file={}", pki.server_key.display()))
        .arg(format!("--client-ca-file={}", pki.ca.display()))
        .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
        .arg(format!("--service-account-key-file={}", pki.sa_public.display()))
        .arg(format!("--service-account-signing-key-file={}", pki.sa_private.display()))
        .arg("--authorization-mode=RBAC")
        // As kubeadm sets it: CSI node plugins (deploy/'s hostpathplugin) are privileged.
        .arg("--allow-privileged=true")
        // dataSourceRef.namespace is dropped on create without this alpha gate; with it, a
        // claim can name a source in another namespace, which the sidecar must refuse.
        .arg("--feature-gates=CrossNamespaceVolumeDataSource=true")
        // No ServiceAccount controller creates "default" accounts for Pods; without
        // kube-controller-manager nothing would remove the protection finalizers either.
        // kube-controller-manager makes each namespace's "default" ServiceAccount; a plane whose
        // pods call the apiserver needs their tokens mounted, so the admission that mounts them.
        .arg(match (options.protection_finalizers, options.service_accounts) {
            (_, true) => "--disable-admission-plugins=",
            (true, false) => "--disable-admission-plugins=ServiceAccount",
            (false, false) => {
                "--disable-admission-plugins=ServiceAccount,StorageObjectInUseProtection"
            }
        })
        .arg(format!("--service-cluster-ip-range={SERVICE_RANGE}"))
        // For a test node's kubelet (exec, logs): the admin certificate, which kubelet trusts
        // through the plane's CA, and the node's name, which resolves to loopback (kubelet
        // reports no loopback address, and its other addresses are not to be dialled).
        .arg(format!("--kubelet-client-certificate={}", pki.admin_cert.display()))
        .arg(format!("--kubelet-client-key={}", pki.admin_key.display()))
        .arg("--kubelet-preferred-address-types=Hostname")
        .arg("--v=1");
    if options.audit {
        apiserver
            .arg(format!("--audit-policy-file={}", audit_policy.display()))
            .arg(format!("--audit-log-path={}", dir.join("audit.log").display()))
            .arg("--audit-log-mode=blocking");
    }
    let how =
        (apiserver.get_program().to_owned(), apiserver.get_args().map(ToOwned::to_owned).collect());
    let mut apiserver = spawn(apiserver, &api_log)?;

    let server = format!("https://127.0.0.1:{api_port}");
    let admin_kubeconfig = dir.join("admin.kubeconfig");
    let credentials = format!(
        "client-certificate: {}\nclient-key: {}",
        pki.admin_cert.display(),
        pki.admin_key.display()
    );
    write_kubeconfig(&admin_kubeconfig, &server, &pki.ca, "admin", &credentials)
        .map_err(|e| e.to_string())?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // One client for all polls: it dials lazily, so it can exist before the apiserver answers.
    let client = runtime.block_on(client_from_kubeconfig(&admin_kubeconfig));
    let readyz = || {
        runtime.block_on(async {
            let request = http::Request::get("/readyz").body(Vec::new()).map_err(|_| ())?;
            tokio::time::timeout(Duration::from_secs(5), client.request_text(request))
                .await
                .map_err(|_| ())?
                .map_err(|_| ())
        })
    };
    wait_for("kube-apiserver", &mut apiserver, &api_log, || {
        readyz().is_ok_and(|body| body.trim() == "ok")
    })?;

    let plane = ControlPlane { dir, server, ca_file: pki.ca, admin_kubeconfig };
    Ok((plane, vec![etcd, apiserver], (how, etcd_port)))
}
