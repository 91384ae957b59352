//! csi-driver-host-path's hostpathplugin (built by `make peers` from its source archive) on a
//! unix socket, as a real driver for the end-to-end suites, the demo and the benchmark.
//!
//! hostpathplugin v1.18.0 rewrites its `state.json` in place, so a SIGKILL in the middle of that
//! write leaves the file empty and the driver cannot start again. `kill` therefore stops the
//! process first (SIGSTOP, and waits until every thread has stopped), reads the file, lets the
//! process run on for a moment while the file does not parse, and only then sends SIGKILL: the crash
//! still comes at an instant the driver did not choose, but never inside that one write.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use csi_pv_controller::csi::CsiClient;

use super::peers::peer;
use super::signal;

/// The topology key hostpathplugin reports, with the node id as its value.
pub const TOPOLOGY_KEY: &str = "topology.hostpath.csi/node";

/// How hostpathplugin is started.
#[derive(Debug, Clone)]
pub struct HostpathConfig {
    pub driver_name: String,
    pub node_id: String,
    /// Extra flags, e.g. `--disable-controller-expansion`, `--max-volume-size=…`,
    /// `--capacity=kind=…`.
    pub flags: Vec<String>,
}

impl HostpathConfig {
    pub fn named(driver_name: &str) -> HostpathConfig {
        HostpathConfig {
            driver_name: driver_name.to_string(),
            node_id: "node-1".to_string(),
            flags: Vec::new(),
        }
    }
}

/// A running hostpathplugin; killed when dropped.
pub struct Hostpath {
    pub config: HostpathConfig,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub log: PathBuf,
    child: Option<tokio::process::Child>,
    starts: u32,
}

/// hostpathplugin backs each Block volume with a file in its state folder attached to a loop
/// device, detached only by DeleteVolume. A test that ends with Block volumes left would leave
/// them attached after its folder is gone, their disk space held until the machine restarts:
/// on drop, every loop device backed by a file of this driver's folder is detached.
impl Drop for Hostpath {
    fn drop(&mut self) {
        let Ok(out) = std::process::Command::new("losetup").arg("-a").output() else {
            return;
        };
        let ours = format!("({}/", self.state_dir.display());
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.contains(&ours)
                && let Some((device, _)) = line.split_once(':')
            {
                let _ = std::process::Command::new("losetup").args(["-d", device]).status();
            }
        }
    }
}

impl Hostpath {
    /// The driver's process id while it runs, for resource figures.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    /// Starts the driver with its socket and state under `dir` and waits until it answers Probe.
    pub async fn start(dir: &Path, config: HostpathConfig) -> Hostpath {
        let mut driver = Hostpath {
            config,
            dir: dir.to_path_buf(),
            socket: dir.join("hostpath.sock"),
            state_dir: dir.join("hostpath-state"),
            log: dir.join("hostpath-0.log"),
            child: None,
            starts: 0,
        };
        driver.launch().await;
        driver
    }

    async fn launch(&mut self) {
        std::fs::create_dir_all(&self.state_dir).expect("hostpath state folder");
        let _ = std::fs::remove_file(&self.socket);
        self.log = self.dir.join(format!("hostpath-{}.log", self.starts));
        self.starts += 1;
        let file = std::fs::File::create(&self.log).expect("hostpath log");
        let child = tokio::process::Command::new(peer("hostpathplugin"))
            .arg(format!("--endpoint=unix://{}", self.socket.display()))
            .arg(format!("--nodeid={}", self.config.node_id))
            .arg(format!("--drivername={}", self.config.driver_name))
            .arg(format!("--statedir={}", self.state_dir.display()))
            .arg("--v=3")
            .args(&self.config.flags)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start hostpathplugin");
        self.child = Some(child);
        let client = self.client();
        client.wait_ready(Some(Duration::from_secs(30))).await.unwrap_or_else(|e| {
            panic!(
                "hostpathplugin did not answer Probe: {e}\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )
        });
    }

    /// `unix:///…`, for `--csi-address` and csi-sanity.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub fn client(&self) -> CsiClient {
        CsiClient::new(&self.endpoint(), Duration::from_secs(10)).expect("socket address")
    }

    /// A 1Gi volume made directly in the driver, as an admin (or an old in-tree plugin) made
    /// one before writing its PV by hand: its ID.
    pub async fn make_volume(&self, name: &str) -> String {
        use csi_pv_controller::csi::v1 as csi;
        let request = csi::CreateVolumeRequest {
            name: name.to_string(),
            capacity_range: Some(csi::CapacityRange { required_bytes: 1 << 30, limit_bytes: 0 }),
            volume_capabilities: csi_pv_controller::provision::request::volume_capabilities(
                &[csi::volume_capability::access_mode::Mode::SingleNodeWriter],
                false,
                None,
                &[],
            ),
            ..Default::default()
        };
        self.client().create_volume(request).await.expect("CreateVolume").volume_id
    }

    /// The driver's own account of its volumes (ListVolumes), by volume id.
    pub async fn volume_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .client()
            .list_volumes()
            .await
            .expect("ListVolumes")
            .into_iter()
            .map(|v| v.volume_id)
            .collect();
        ids.sort();
        ids
    }

    /// The volumes' folders (filesystem) or image files (block) the driver keeps on disk.
    pub fn data_entries(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.state_dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n != "state.json")
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// What kubelet's registration of the driver on its node leaves in the API: a Node labelled
    /// with hostpathplugin's topology key, and its CSINode naming the driver. Either may exist
    /// already.
    pub async fn register_node(&self, client: &kube::Client) -> Result<(), String> {
        let id = &self.config.node_id;
        register_node_as(client, &self.config.driver_name, id, id).await
    }
    /// kill -9 at a moment its state file is whole (see the module comment).
    pub async fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            // SAFETY: signals to our own child process.
            let state = self.state_dir.join("state.json");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                signal(pid, libc::SIGSTOP);
                // The signal is delivered later than kill(2) returns: read the file only once
                // every thread has stopped, or the write could begin after the read.
                while Instant::now() < deadline && !all_threads_stopped(pid) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                if parses(&state) || Instant::now() >= deadline {
                    break;
                }
                // Stopped inside the write: let it finish the write, then stop it again.
                signal(pid, libc::SIGCONT);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            signal(pid, libc::SIGKILL);
        }
        let _ = child.wait().await;
    }

    /// Starts again with the same socket, state and flags.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.launch().await;
    }
}

/// Node `node` with `driver` registered on it as kubelet leaves them: the Node labelled with
/// hostpathplugin's topology key at `topology` (and its hostname), its CSINode naming the driver
/// with that key. Either may exist already.
pub async fn register_node_as(
    client: &kube::Client,
    driver: &str,
    node: &str,
    topology: &str,
) -> Result<(), String> {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::storage::v1::CSINode;
    use kube::api::{Api, PostParams};
    let labels = serde_json::json!({TOPOLOGY_KEY: topology, "kubernetes.io/hostname": node});
    let node_object: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": node, "labels": labels}}))
            .map_err(|e| e.to_string())?;
    let csi_node: CSINode = serde_json::from_value(serde_json::json!({
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": driver, "nodeID": node, "topologyKeys": [TOPOLOGY_KEY]}]},
    }))
    .map_err(|e| e.to_string())?;
    let pp = PostParams::default();
    let absent_ok = |result: Result<(), kube::Error>, what: &str| match result {
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
        other => other.map_err(|e| format!("{what} {node}: {e}")),
    };
    absent_ok(Api::<Node>::all(client.clone()).create(&pp, &node_object).await.map(drop), "Node")?;
    absent_ok(Api::<CSINode>::all(client.clone()).create(&pp, &csi_node).await.map(drop), "CSINode")
}

/// No file yet (no volume was ever made) is whole too.
/// Whether every thread of `pid` is in the stopped state (or the process is gone).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name's closing parenthesis.
        match stat.rsplit_once(')') {
            Some((_, rest)) => {
                matches!(rest.trim_start().chars().next(), Some('T' | 't' | 'Z' | 'X') | None)
            }
            None => true,
        }
    })
}

fn parses(state: &Path) -> bool {
    match std::fs::read(state) {
        Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes).is_ok(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// One volume as hostpathplugin records it in its state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateVolume {
    pub name: String,
    pub id: String,
    pub size: i64,
    pub path: String,
}

impl Hostpath {
    /// The volumes in the driver's own state file (empty when it has none yet).
    pub fn state_volumes(&self) -> Vec<StateVolume> {
        let state = self.state();
        state["Volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| StateVolume {
                name: v["VolName"].as_str().unwrap_or_default().to_string(),
                id: v["VolID"].as_str().unwrap_or_default().to_string(),
                size: v["VolSize"].as_i64().unwrap_or_default(),
                path: v["VolPath"].as_str().unwrap_or_default().to_string(),
            })
            .collect()
    }

    /// How many snapshots the driver's state file holds.
    pub fn state_snapshots(&self) -> usize {
        self.state()["Snapshots"].as_array().map_or(0, Vec::len)
    }

    /// The driver's state file, parsed. hostpathplugin rewrites it in place, so a read can
    /// meet it half written: read again until it parses, rather than take a torn file for an
    /// empty driver. No file yet: no volume was ever made.
    fn state(&self) -> serde_json::Value {
        let path = self.state_dir.join("state.json");
        for _ in 0..200 {
            match std::fs::read(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return serde_json::Value::Null;
                }
                Ok(bytes) => {
                    if let Ok(state) = serde_json::from_slice(&bytes) {
                        return state;
                    }
                }
                Err(_) => {}
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("hostpathplugin's state file {} did not parse for 2 s", path.display())
    }
}

/// A file of csi-driver-host-path's source tree (e.g. `deploy/kubernetes-1.34/test-driver.yaml`),
/// read from the source archive hostpathplugin is built from: the one peers/hostpath/source
/// names, in $PEER_SOURCES (default: shared/peers beside the clone).
pub fn source_file(path: &str) -> String {
    let root = super::sidecar::repo_root();
    let pinned = std::fs::read_to_string(root.join("peers/hostpath/source"))
        .unwrap_or_else(|e| panic!("peers/hostpath/source: {e}"));
    let field =
        |k: &str| pinned.lines().find_map(|l| l.strip_prefix(&format!("{k}="))).unwrap_or_default();
    let sources = std::env::var_os("PEER_SOURCES")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/peers"));
    let archive = sources.join(field("archive"));
    let member = format!("csi-driver-host-path-{}/{path}", field("version"));
    let out = std::process::Command::new("tar")
        .arg("-xzOf")
        .arg(&archive)
        .arg(&member)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tar on {}: {e}", archive.display()));
    assert!(
        out.status.success(),
        "cannot read {member} from {}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{member} is not UTF-8: {e}"))
}

/// The args of container `name` (csi-provisioner, csi-resizer) in csi-driver-host-path's own
/// `deploy/kubernetes-1.34` manifest, verbatim, and that container's securityContext.
pub fn container_args(name: &str) -> (Vec<String>, serde_yaml_ng::Value) {
    let text = source_file("deploy/kubernetes-1.34/hostpath/csi-hostpath-plugin.yaml");
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(document)
            .unwrap_or_else(|e| panic!("csi-hostpath-plugin.yaml: {e}"));
        let containers = &value["spec"]["template"]["spec"]["containers"];
        let Some(container) = containers
            .as_sequence()
            .and_then(|c| c.iter().find(|c| c["name"].as_str() == Some(name)))
        else {
            continue;
        };
        let args = container["args"].as_sequence().cloned().unwrap_or_default();
        let args = args.iter().filter_map(|a| a.as_str().map(str::to_string)).collect();
        return (args, container["securityContext"].clone());
    }
    panic!("csi-hostpath-plugin.yaml has no container {name}")
}
