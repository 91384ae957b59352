//! A sidecar beside a fake driver, running with only deploy/ RBAC, plus the API helpers the
//! provisioning tests share.

#![allow(dead_code)]

mod fields;
mod waits;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use super::control_plane::{ControlPlane, control_plane};
use super::fake_driver::{DriverConfig, FakeDriver};
use super::hostpath::{Hostpath, HostpathConfig};
use super::sidecar::{Sidecar, apply_deploy_rbac};

// Each test binary uses a different part of these.
#[allow(unused_imports)]
pub use fields::{annotations, finalizers, merge};
#[allow(unused_imports)]
pub use waits::{all_bound, eventually};

/// Whether the plane's kube-controller-manager writes the `Unused` claim condition: its
/// pvc-protection controller does from 1.37, one claim status write per claim.
pub async fn kcm_writes_unused(client: &kube::Client) -> bool {
    let version = client.apiserver_version().await.unwrap();
    version.minor.parse::<u32>().unwrap_or(0) >= 37
}

/// One test's world: its namespace, its own driver name (so parallel tests never act on each
/// other's claims), the driver (our fake by default, or hostpathplugin) and the sidecar.
pub struct World<D = FakeDriver> {
    pub plane: &'static ControlPlane,
    pub dir: tempfile::TempDir,
    pub client: kube::Client,
    pub namespace: String,
    pub driver_name: String,
    pub driver: D,
    pub sidecar: Sidecar,
    pub kubeconfig: PathBuf,
    pub args: Vec<String>,
    /// The ServiceAccount's username, as the audit log shows it.
    pub user: String,
}

impl World<FakeDriver> {
    /// `name` is a DNS label; it names the namespace, the driver and the RBAC objects. On the
    /// test binary's shared control plane, which runs no kube-controller-manager.
    pub async fn start(name: &str, config: DriverConfig, extra_args: &[&str]) -> World {
        // No kube-controller-manager binds here: this sidecar binds its driver's claims
        // itself, unless the test chooses another binder.
        let mut args: Vec<&str> = extra_args.to_vec();
        if !extra_args.iter().any(|a| a.starts_with("--bind")) {
            args.push("--binder=driver");
        }
        World::start_fake_on(control_plane(), name, config, &args).await
    }

    /// The fake driver (named `<name>.csi.test`) and the sidecar with `extra_args` only, on
    /// `plane`: beside kube-controller-manager when the plane runs one, in the shipped mode.
    pub async fn start_fake_on(
        plane: &'static ControlPlane,
        name: &str,
        config: DriverConfig,
        extra_args: &[&str],
    ) -> World {
        let dir = tempfile::tempdir().unwrap();
        let driver_name = format!("{name}.csi.test");
        let driver = FakeDriver::start(
            &dir.path().join("csi.sock"),
            DriverConfig { name: driver_name.clone(), ..config },
        )
        .await
        .unwrap();
        let endpoint = driver.endpoint();
        World::assemble(plane, name, dir, driver_name, driver, &endpoint, extra_args).await
    }
}

impl World<Hostpath> {
    /// hostpathplugin named `<name>.csi.test` beside the sidecar, on `plane`; the sidecar's
    /// flags are `extra_args` only (so by default kube-controller-manager binds).
    pub async fn start_hostpath(
        plane: &'static ControlPlane,
        name: &str,
        flags: &[&str],
        extra_args: &[&str],
    ) -> World<Hostpath> {
        Self::start_hostpath_on(plane, name, "node-1", flags, extra_args).await
    }

    /// As `start_hostpath`, the driver reporting node id `node` (a real node's name).
    pub async fn start_hostpath_on(
        plane: &'static ControlPlane,
        name: &str,
        node: &str,
        flags: &[&str],
        extra_args: &[&str],
    ) -> World<Hostpath> {
        let driver_name = format!("{name}.csi.test");
        Self::start_hostpath_as(plane, name, &driver_name, node, flags, extra_args).await
    }

    /// As `start_hostpath_on`, hostpathplugin registered as `driver_name` (e.g. a CSI
    /// migration target).
    pub async fn start_hostpath_as(
        plane: &'static ControlPlane,
        name: &str,
        driver_name: &str,
        node: &str,
        flags: &[&str],
        extra_args: &[&str],
    ) -> World<Hostpath> {
        let dir = tempfile::tempdir().unwrap();
        let driver_name = driver_name.to_string();
        let driver = Hostpath::start(
            dir.path(),
            HostpathConfig {
                flags: flags.iter().map(|f| f.to_string()).collect(),
                node_id: node.to_string(),
                ..HostpathConfig::named(&driver_name)
            },
        )
        .await;
        let endpoint = driver.endpoint();
        World::assemble(plane, name, dir, driver_name, driver, &endpoint, extra_args).await
    }
}

impl World<Hostpath> {
    /// The driver's Node and CSINode, as kubelet registers them (`Hostpath::register_node`).
    pub async fn register_node(&self) {
        self.driver
            .register_node(&self.client)
            .await
            .unwrap_or_else(|e| panic!("cannot register the driver's node: {e}"));
    }
}

impl<D> World<D> {
    /// `csi-pv-controller uninstall <driver>` as an operator runs it (admin kubeconfig, the
    /// world's namespace for the Lease), with `extra` args: its exit code and its output.
    pub fn uninstall(&self, extra: &[&str]) -> (Option<i32>, String) {
        let output = std::process::Command::new(super::sidecar::binary())
            .arg(format!("--kubeconfig={}", self.plane.admin_kubeconfig.display()))
            .arg(format!("--leader-election-namespace={}", self.namespace))
            .arg("uninstall")
            .arg(&self.driver_name)
            .args(extra)
            .output()
            .expect("cannot run uninstall");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code(), text)
    }

    /// The namespace, deploy/ RBAC and a token for it, and the sidecar on `endpoint`.
    pub(super) async fn assemble(
        plane: &'static ControlPlane,
        name: &str,
        dir: tempfile::TempDir,
        driver_name: String,
        driver: D,
        endpoint: &str,
        extra_args: &[&str],
    ) -> World<D> {
        let client = plane.client().await;
        let account = apply_deploy_rbac(plane, name, name).await;
        let token = plane.service_account_token(name, &account).await;
        let kubeconfig = plane.token_kubeconfig(name, &token);
        let mut args = vec![
            format!("--csi-address={endpoint}"),
            format!("--kubeconfig={}", kubeconfig.display()),
            "--retry-interval-start=200ms".to_string(),
            "--retry-interval-max=2s".to_string(),
        ];
        // `{dir}` stands for the world's directory, which outlives sidecar restarts.
        let home = dir.path().display().to_string();
        args.extend(extra_args.iter().map(|a| a.replace("{dir}", &home)));
        let mut sidecar = Sidecar::start(dir.path(), &args);
        assert!(
            sidecar.wait_ready(Duration::from_secs(60)).await,
            "sidecar not ready:\n{}",
            sidecar.log_text()
        );
        World {
            plane,
            dir,
            client,
            namespace: name.to_string(),
            driver_name,
            driver,
            sidecar,
            kubeconfig,
            args,
            user: format!("system:serviceaccount:{name}:{account}"),
        }
    }

    /// Calls of `method` a kill cut short: sent by some run of the sidecar in this world and
    /// never answered in its log (the test filter writes each call and its end). Read once
    /// the live sidecar is idle, it counts only what the kills interrupted.
    pub fn interrupted_calls(&self, method: &str) -> usize {
        let sent = format!("\"CSI call\" method=\"{method}\"");
        let ended = [
            format!("\"CSI call succeeded\" method=\"{method}\""),
            format!("\"CSI call failed\" method=\"{method}\""),
        ];
        let mut open = 0usize;
        for entry in std::fs::read_dir(self.dir.path()).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !(name.starts_with("sidecar-") && name.ends_with(".log")) {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
            let answered: usize = ended.iter().map(|e| count(e)).sum();
            open += count(&sent).saturating_sub(answered);
        }
        open
    }

    /// Stops the sidecar and starts it again with the world's flags plus `extra`, and `env`
    /// (not waiting for readiness).
    pub async fn restart_with(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        let _ = self.sidecar.child.start_kill();
        let _ = self.sidecar.child.wait().await;
        let mut args = self.args.clone();
        args.extend(extra.iter().map(|a| a.to_string()));
        self.sidecar = Sidecar::start_with_env(self.dir.path(), &args, env);
    }

    /// kill -9, then start again with the same flags (not waiting for readiness).
    pub fn kill_and_restart(&mut self) {
        let _ = self.sidecar.child.start_kill();
        self.sidecar = Sidecar::start(self.dir.path(), &self.args);
    }

    /// Who holds the sidecars' Lease in this namespace (`--leader-election-namespace`), if anyone.
    pub async fn lease_holder(&self) -> Option<String> {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let name = format!("csi-pv-controller-{}", self.driver_name.replace('.', "-"));
        leases.get_opt(&name).await.ok()??.spec?.holder_identity.filter(|h| !h.is_empty())
    }

    pub fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Whether the PV `name` is gone within `limit` (an API error is not an answer).
    pub async fn volume_gone(&self, name: &str, limit: Duration) -> bool {
        eventually(limit, || async {
            self.volumes().get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await
        .is_some()
    }

    pub fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// Creates `pv` (a static PV, as an admin would).
    pub async fn create_volume(&self, pv: &PersistentVolume) -> PersistentVolume {
        let created = self.volumes().create(&PostParams::default(), pv).await;
        created.unwrap_or_else(|e| panic!("create PV {:?}: {e}", pv.metadata.name))
    }

    /// Deletes PV `name`, as an admin would.
    pub async fn delete_volume(&self, name: &str) {
        let deleted = self.volumes().delete(name, &DeleteParams::default()).await;
        if let Err(e) = deleted {
            panic!("delete PV {name}: {e}");
        }
    }

    /// A StorageClass of this world's driver; `extra` is merged over the defaults.
    pub async fn create_class(&self, name: &str, extra: Value) -> StorageClass {
        let mut class = json!({
            "metadata": {"name": format!("{}-{name}", self.namespace)},
            "provisioner": self.driver_name,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        });
        merge(&mut class, extra);
        let class: StorageClass = serde_json::from_value(class).unwrap();
        Api::<StorageClass>::all(self.client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap()
    }

    /// A claim of `class` (the world's class name) asking for `size`; `extra` merges over it.
    pub async fn create_claim(
        &self,
        name: &str,
        class: &str,
        size: &str,
        extra: Value,
    ) -> PersistentVolumeClaim {
        let mut claim = json!({
            "metadata": {"name": name},
            "spec": {
                "storageClassName": format!("{}-{class}", self.namespace),
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": size}},
            }
        });
        merge(&mut claim, extra);
        let claim: PersistentVolumeClaim = serde_json::from_value(claim).unwrap();
        self.claims().create(&PostParams::default(), &claim).await.unwrap()
    }

    /// A claim of `class` that clones claim `source` of this namespace.
    pub async fn create_clone(
        &self,
        name: &str,
        class: &str,
        size: &str,
        source: &str,
    ) -> PersistentVolumeClaim {
        let spec =
            json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": source}}});
        self.create_claim(name, class, size, spec).await
    }

    /// `count` claims `<prefix>-NN` of `class`, 1Gi each, created at once; their names.
    pub async fn create_claims(&self, prefix: &str, class: &str, count: usize) -> Vec<String> {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:02}")).collect();
        futures::future::join_all(
            names.iter().map(|n| self.create_claim(n, class, "1Gi", json!({}))),
        )
        .await;
        names
    }

    /// A pod `pod` whose volume is claim `claim`, as a user's workload (no kubelet runs it);
    /// the pods of the namespace, to delete it with.
    pub async fn pod_using(&self, pod: &str, claim: &str) -> Api<Pod> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let spec: Pod = serde_json::from_value(json!({
            "metadata": {"name": pod},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}],
            },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &spec).await.unwrap();
        pods
    }

    /// Labels claim `name` (a change that queues it), and waits for the sidecar's next pass over
    /// it is done: after it, a wrong action the sidecar could take on the claim would have been taken.
    /// The resourceVersion our label write gave the claim.
    pub async fn nudge_claim(&self, name: &str, limit: Duration) -> Option<String> {
        let key = format!("claim={}/{name}", self.namespace);
        let before = self.sidecar.passes(&key);
        let label = json!({"metadata": {"labels": {"nudged": before.to_string()}}});
        let patch = kube::api::Patch::Merge(label);
        let params = kube::api::PatchParams::default();
        let written = self.claims().patch(name, &params, &patch).await.unwrap();
        self.sidecar.passed_again(&key, before, limit).await;
        written.metadata.resource_version
    }

    /// As `nudge_claim`, for PV `name`.
    pub async fn nudge_volume(&self, name: &str, limit: Duration) {
        let key = format!("volume={name}");
        let before = self.sidecar.passes(&key);
        let label = json!({"metadata": {"labels": {"nudged": before.to_string()}}});
        let patch = kube::api::Patch::Merge(label);
        self.volumes().patch(name, &kube::api::PatchParams::default(), &patch).await.unwrap();
        self.sidecar.passed_again(&key, before, limit).await;
    }

    pub async fn claim(&self, name: &str) -> Option<PersistentVolumeClaim> {
        self.claims().get_opt(name).await.unwrap()
    }

    pub async fn phase(&self, name: &str) -> Option<String> {
        self.claim(name).await.and_then(|c| c.status?.phase)
    }

    /// Waits until claim `name` is Bound and returns it with its PV.
    pub async fn bound(
        &self,
        name: &str,
        limit: Duration,
    ) -> (PersistentVolumeClaim, PersistentVolume) {
        let found = eventually(limit, || async {
            let claim = self.claim(name).await?;
            if claim.status.as_ref()?.phase.as_deref() != Some("Bound") {
                return None;
            }
            let volume = claim.spec.as_ref()?.volume_name.clone()?;
            let pv = self.volumes().get_opt(&volume).await.ok()??;
            Some((claim, pv))
        })
        .await;
        match found {
            Some(found) => found,
            None => panic!(
                "claim {name} not Bound within {limit:?}; events: {:?}\nsidecar log:\n{}",
                self.events(name).await,
                self.sidecar.log_text()
            ),
        }
    }

    /// Waits until `check` holds for claim `name`, then returns it; panics with the story so
    /// far (status, events, sidecar log), `what` naming what never happened.
    pub async fn claim_until(
        &self,
        name: &str,
        what: &str,
        limit: Duration,
        check: impl Fn(&PersistentVolumeClaim) -> bool,
    ) -> PersistentVolumeClaim {
        let found = eventually(limit, || async {
            let c = self.claim(name).await?;
            check(&c).then_some(c)
        })
        .await;
        match found {
            Some(c) => c,
            None => panic!(
                "claim {name}: {what} did not happen; claim status {:?}\nevents {:?}\nsidecar log:\n{}",
                self.claim(name).await.and_then(|c| c.status),
                self.events(name).await,
                self.sidecar.log_text()
            ),
        }
    }

    /// (type, reason, note) of the events about object `name` in this namespace.
    pub async fn events(&self, name: &str) -> Vec<(String, String, String)> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = api.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// The Warnings about object `name` in this namespace, each as "reason: note".
    pub async fn warnings(&self, name: &str) -> Vec<String> {
        let events = self.events(name).await;
        let warnings = events.into_iter().filter(|(t, _, _)| t == "Warning");
        warnings.map(|(_, reason, note)| format!("{reason}: {note}")).collect()
    }

    /// Waits for an event about `name` with `reason` whose note contains `text`.
    pub async fn event(&self, name: &str, reason: &str, text: &str, limit: Duration) -> String {
        let found = eventually(limit, || async {
            self.events(name)
                .await
                .into_iter()
                .find(|(_, r, n)| r == reason && n.contains(text))
                .map(|(_, _, n)| n)
        })
        .await;
        match found {
            Some(note) => note,
            None => panic!(
                "no {reason} event containing {text:?} for {name}; events: {:?}\nsidecar log:\n{}",
                self.events(name).await,
                self.sidecar.log_text()
            ),
        }
    }

    /// The note of an event with `reason` about PV `name` (PV events live in "default"),
    /// waiting up to `limit` for it.
    pub async fn volume_event(&self, name: &str, reason: &str, limit: Duration) -> Option<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), "default");
        eventually(limit, || async {
            api.list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reason.as_deref() == Some(reason)
                })
                .map(|e| e.note.unwrap_or_default())
        })
        .await
    }

    /// The claims of this namespace still there, with their finalizers (what holds them).
    pub async fn claims_left(&self) -> Vec<(String, Vec<String>)> {
        self.claims()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                (c.metadata.name.unwrap_or_default(), c.metadata.finalizers.unwrap_or_default())
            })
            .collect()
    }

    /// PVs of this world's driver.
    pub async fn driver_volumes_in_api(&self) -> Vec<PersistentVolume> {
        self.volumes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|pv| {
                pv.spec.as_ref().and_then(|s| s.csi.as_ref()).map(|c| c.driver.as_str())
                    == Some(self.driver_name.as_str())
            })
            .collect()
    }

    /// Audited writes made by the sidecar that concern claim `claim` (its events, the claim
    /// itself) or PV `volume`.
    pub fn writes_for(&self, claim: &str, volume: &str) -> Vec<String> {
        self.plane
            .audited_writes()
            .into_iter()
            .filter(|w| w.user == self.user)
            .filter(|w| {
                (w.resource == "persistentvolumeclaims"
                    && w.namespace == self.namespace
                    && w.name == claim)
                    || (w.resource == "persistentvolumes" && w.name == volume)
                    || (w.resource == "events"
                        && w.namespace == self.namespace
                        && w.name.starts_with(&format!("{claim}.")))
            })
            .map(|w| {
                format!("{} {}/{} {} -> {}", w.verb, w.resource, w.subresource, w.name, w.code)
            })
            .collect()
    }
}

/// The intent journal in the world's directory: the same one after every restart.
pub const INTENT_JOURNAL: &str = "--intent-journal={dir}/intents";

/// The UIDs of the claims with an intent open in the world's journal (`INTENT_JOURNAL`).
pub fn journal_entries(dir: &std::path::Path) -> Vec<String> {
    let open = csi_pv_controller::journal::intents_in(&dir.join("intents"));
    let open = open.unwrap_or_else(|e| panic!("cannot read the intent journal: {e}"));
    open.iter().filter_map(|c| c.metadata.uid.clone()).collect()
}
