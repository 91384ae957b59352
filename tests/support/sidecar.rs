//! Running the csi-pv-controller binary as a separate process, as it runs in a pod.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};

use super::control_plane::{ControlPlane, free_port, http_get, http_ok};
use super::signal;

/// The tests' log filter: our passes at debug, and each CSI call with its payloads, which the
/// sidecar writes at -v=5 as csi-lib-utils does.
const TEST_LOG: &str = "info,csi_pv_controller=debug,csi_pv_controller::csi::client=trace";

/// The binary under test: Cargo tells integration tests where it is; the demo example is told by
/// $SIDECAR_BIN (the Makefile sets it).
pub fn binary() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_csi-pv-controller") {
        Some(path) => PathBuf::from(path),
        None => std::env::var_os("SIDECAR_BIN")
            .map(PathBuf::from)
            .expect("set SIDECAR_BIN to the csi-pv-controller binary"),
    }
}

/// `csi-pv-controller explain` with `args`, as an operator runs it: with `kubeconfig`, and the
/// driver at `csi_address` when given. Its standard output; panics if it fails.
pub fn explain(kubeconfig: &Path, csi_address: Option<&str>, args: &[&str]) -> String {
    let mut command = std::process::Command::new(binary());
    command.arg(format!("--kubeconfig={}", kubeconfig.display()));
    if let Some(address) = csi_address {
        command.arg(format!("--csi-address={address}"));
    }
    let output = command.arg("explain").args(args).output().expect("cannot run explain");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "explain {args:?} failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

/// The value of one series in a `/metrics` text, named with its labels in the order the
/// exposition writes them (`workqueue_adds_total{name="claims"}`).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The sidecar process; killed when dropped.
pub struct Sidecar {
    pub child: tokio::process::Child,
    pub http_port: u16,
    pub log: PathBuf,
}

impl Sidecar {
    /// Starts the binary with `--http-endpoint` on a free port and the given flags.
    pub fn start(log_dir: &Path, args: &[String]) -> Sidecar {
        Self::start_with_env(log_dir, args, &[])
    }

    /// As `start`, with extra environment variables (e.g. HOSTNAME, the leader identity).
    pub fn start_with_env(log_dir: &Path, args: &[String], env: &[(&str, &str)]) -> Sidecar {
        Self::launch(log_dir, args, env, Some(TEST_LOG))
    }

    /// As deployed: no RUST_LOG, so that `-v` alone sets the verbosity; `env` as the pod's
    /// manifest sets it (e.g. NAMESPACE for `--enable-capacity`).
    pub fn start_as_deployed(log_dir: &Path, args: &[String], env: &[(&str, &str)]) -> Sidecar {
        Self::launch(log_dir, args, env, None)
    }

    fn launch(
        log_dir: &Path,
        args: &[String],
        env: &[(&str, &str)],
        rust_log: Option<&str>,
    ) -> Sidecar {
        let http_port = free_port();
        let log = log_dir.join(format!("sidecar-{http_port}.log"));
        let file = std::fs::File::create(&log).expect("cannot create sidecar log");
        let mut command = tokio::process::Command::new(binary());
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let child = command
            .arg(format!("--http-endpoint=127.0.0.1:{http_port}"))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start csi-pv-controller");
        Sidecar { child, http_port, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The passes the sidecar finished over one object, `key` being `claim=<namespace>/<name>`
    /// or `volume=<name>`: its "pass done" lines (debug, in the tests' filter), written once a
    /// pass's actions are done.
    pub fn passes(&self, key: &str) -> usize {
        let text = self.log_text();
        let done = |l: &&str| l.contains("\"pass done\"") && l.split_whitespace().any(|w| w == key);
        text.lines().filter(done).count()
    }

    /// Waits until the sidecar has begun `more` periodic passes (`--pvclaimbinder-sync-period`)
    /// beyond those it had begun: each writes one "periodic pass" debug line.
    pub async fn periodic_passes(&self, more: usize, limit: Duration) {
        let count = || self.log_text().matches("\"periodic pass\"").count();
        let before = count();
        let done = super::cluster::eventually(limit, || async {
            (count() >= before + more).then_some(())
        });
        if done.await.is_none() {
            panic!("not {more} more periodic passes within {limit:?}:\n{}", self.log_text());
        }
    }

    /// Waits until the sidecar has made a pass over `key` beyond the `before` it had made: the
    /// later event after which a wrong action it could have taken would have been taken.
    pub async fn passed_again(&self, key: &str, before: usize, limit: Duration) {
        let again = super::cluster::eventually(limit, || async {
            (self.passes(key) > before).then_some(())
        });
        if again.await.is_none() {
            panic!("no pass over {key} within {limit:?}:\n{}", self.log_text());
        }
    }

    /// Polls /readyz until it answers 200; false after `limit` or if the process exits.
    pub async fn wait_ready(&mut self, limit: Duration) -> bool {
        self.wait_for("/readyz", limit).await
    }

    /// Polls `path` until it answers 200; false after `limit` or if the process exits.
    pub async fn wait_for(&mut self, path: &'static str, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if self.answers(path).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// Whether `path` answers 200 right now.
    pub async fn answers(&self, path: &'static str) -> bool {
        let port = self.http_port;
        tokio::task::spawn_blocking(move || http_ok(port, path)).await.unwrap_or(false)
    }

    /// The text of /metrics.
    pub async fn metrics(&self) -> String {
        let port = self.http_port;
        tokio::task::spawn_blocking(move || http_get(port, "/metrics"))
            .await
            .ok()
            .flatten()
            .expect("/metrics did not answer 200")
    }

    pub async fn healthy(&self) -> bool {
        self.answers("/healthz").await
    }

    /// Sends SIGTERM and returns the exit code, failing if it takes longer than `limit`.
    pub async fn terminate(&mut self, limit: Duration) -> Option<i32> {
        let pid = self.child.id().expect("sidecar already reaped");
        // SAFETY: sending a signal to our own child process.
        signal(pid, libc::SIGTERM);
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .expect("sidecar did not stop after SIGTERM")
            .expect("wait failed");
        status.code()
    }
}

/// The fake driver in a fresh folder and the sidecar beside it on `kubeconfig` with `extra`
/// flags (not waited for).
/// A test's own plane made ready for a burst: namespace `name`, the sidecar beside a fake
/// driver with `extra` args (ready), and an Immediate, Delete StorageClass `name` of that driver.
pub async fn ready_in_namespace(
    kubeconfig: &Path,
    name: &str,
    extra: &[&str],
) -> (kube::Client, tempfile::TempDir, super::fake_driver::FakeDriver, Sidecar) {
    let client = super::control_plane::client_from_kubeconfig(kubeconfig).await;
    super::control_plane::create_namespace(&client, name).await;
    let (dir, driver, mut sidecar) = start_beside_fake(kubeconfig, extra).await;
    let ready = sidecar.wait_ready(std::time::Duration::from_secs(60)).await;
    assert!(ready, "not ready:\n{}", sidecar.log_text());
    let class = serde_json::json!({
        "metadata": {"name": name},
        "provisioner": driver.config().name,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    });
    let class: k8s_openapi::api::storage::v1::StorageClass =
        serde_json::from_value(class).expect("a StorageClass");
    let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> =
        kube::Api::all(client.clone());
    classes.create(&Default::default(), &class).await.expect("class");
    (client, dir, driver, sidecar)
}

pub async fn start_beside_fake(
    kubeconfig: &Path,
    extra: &[&str],
) -> (tempfile::TempDir, super::fake_driver::FakeDriver, Sidecar) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let driver = super::fake_driver::FakeDriver::start(
        &dir.path().join("csi.sock"),
        super::fake_driver::DriverConfig::default(),
    )
    .await
    .expect("fake driver");
    let mut args = vec![
        format!("--csi-address={}", driver.endpoint()),
        format!("--kubeconfig={}", kubeconfig.display()),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let sidecar = Sidecar::start(dir.path(), &args);
    (dir, driver, sidecar)
}

/// The deploy/ RBAC files: what every deployment needs, then the secrets and capacity parts,
/// which the suites exercise too.
/// The repository's root: the crate's folder, or its parent for the benchmark's crate.
pub fn repo_root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    match crate_dir.join("deploy").is_dir() {
        true => crate_dir.to_path_buf(),
        false => crate_dir.parent().unwrap_or(crate_dir).to_path_buf(),
    }
}

const RBAC_FILES: [&str; 3] = ["rbac.yaml", "rbac-secrets.yaml", "rbac-capacity.yaml"];

/// Applies deploy/'s RBAC, moved into `namespace` and with names made unique by `suffix`, so
/// that tests sharing one control plane do not collide. Returns the ServiceAccount's name.
pub async fn apply_deploy_rbac(plane: &ControlPlane, namespace: &str, suffix: &str) -> String {
    let client = plane.client().await;
    super::control_plane::create_namespace(&client, namespace).await;
    let text: String = RBAC_FILES
        .iter()
        .map(|file| {
            let path = format!("{}/deploy/rbac/{file}", repo_root().display());
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            format!("{text}\n---\n")
        })
        .collect();
    let mut account_name = None;
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = serde_yaml_ng::Value::deserialize(document)
            .expect("invalid YAML in deploy/rbac/*.yaml");
        if value.is_null() {
            continue;
        }
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let json = serde_json::to_value(&value).expect("YAML to JSON");
        let pp = PostParams::default();
        match kind.as_str() {
            "ServiceAccount" => {
                let mut sa: ServiceAccount = serde_json::from_value(json).unwrap();
                sa.metadata.namespace = Some(namespace.into());
                account_name = sa.metadata.name.clone();
                Api::<ServiceAccount>::namespaced(client.clone(), namespace)
                    .create(&pp, &sa)
                    .await
                    .unwrap();
            }
            "ClusterRole" => {
                let mut role: ClusterRole = serde_json::from_value(json).unwrap();
                role.metadata.name = role.metadata.name.map(|n| format!("{n}-{suffix}"));
                Api::<ClusterRole>::all(client.clone()).create(&pp, &role).await.unwrap();
            }
            "ClusterRoleBinding" => {
                let mut binding: ClusterRoleBinding = serde_json::from_value(json).unwrap();
                binding.metadata.name = binding.metadata.name.map(|n| format!("{n}-{suffix}"));
                binding.role_ref.name = format!("{}-{suffix}", binding.role_ref.name);
                for subject in binding.subjects.iter_mut().flatten() {
                    subject.namespace = Some(namespace.into());
                }
                Api::<ClusterRoleBinding>::all(client.clone()).create(&pp, &binding).await.unwrap();
            }
            "Role" => {
                let mut role: Role = serde_json::from_value(json).unwrap();
                role.metadata.namespace = Some(namespace.into());
                Api::<Role>::namespaced(client.clone(), namespace)
                    .create(&pp, &role)
                    .await
                    .unwrap();
            }
            "RoleBinding" => {
                let mut binding: RoleBinding = serde_json::from_value(json).unwrap();
                binding.metadata.namespace = Some(namespace.into());
                for subject in binding.subjects.iter_mut().flatten() {
                    subject.namespace = Some(namespace.into());
                }
                Api::<RoleBinding>::namespaced(client.clone(), namespace)
                    .create(&pp, &binding)
                    .await
                    .unwrap();
            }
            other => panic!("deploy/rbac/rbac.yaml: unexpected kind {other:?}"),
        }
    }
    account_name.expect("deploy/rbac/rbac.yaml has no ServiceAccount")
}

/// Another ServiceAccount `name` in `namespace` with the same rights as the one
/// [`apply_deploy_rbac`] made there with `suffix`: a second replica the audit log can tell
/// apart. Returns its kubeconfig.
pub async fn second_account(
    plane: &ControlPlane,
    namespace: &str,
    suffix: &str,
    name: &str,
) -> PathBuf {
    let client = plane.client().await;
    let pp = PostParams::default();
    let subject =
        serde_json::json!([{"kind": "ServiceAccount", "name": name, "namespace": namespace}]);
    let cluster_binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("csi-pv-controller-role-{suffix}-{name}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": format!("csi-pv-controller-runner-{suffix}")},
        "subjects": subject,
    }))
    .expect("ClusterRoleBinding");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&pp, &cluster_binding)
        .await
        .expect("cannot bind the second account");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("csi-pv-controller-leader-election-{name}"), "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "csi-pv-controller-leader-election"},
        "subjects": subject,
    }))
    .expect("RoleBinding");
    Api::<RoleBinding>::namespaced(client, namespace)
        .create(&pp, &binding)
        .await
        .expect("cannot bind the second account's Lease role");
    let token = plane.service_account_token(namespace, name).await;
    plane.token_kubeconfig(&format!("{namespace}-{name}"), &token)
}

use serde::Deserialize as _;
