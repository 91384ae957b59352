//! A control plane owned by one test or one benchmark run, which can kill and restart its
//! apiserver and compact etcd.

use std::fs;
use std::process::{Child, Command};

use super::{ControlPlane, PlaneOptions, http_post, launch, spawn};

/// A control plane of its own (the benchmark starts one per run): its processes are killed and
/// its folder removed when this is dropped.
pub struct OwnedPlane {
    pub plane: ControlPlane,
    children: Vec<Child>,
    /// How kube-apiserver was started, to start it again.
    apiserver: (std::ffi::OsString, Vec<std::ffi::OsString>),
    etcd_port: u16,
}

/// The runtime a test that owns its plane runs its async part on (the plane's processes belong
/// to the test's own thread, see [`OwnedPlane::start`]).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

impl OwnedPlane {
    /// A plane for one test: audited or not, no protection finalizers.
    pub fn for_test(audit: bool) -> OwnedPlane {
        OwnedPlane::start(PlaneOptions {
            audit,
            protection_finalizers: false,
            service_accounts: false,
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts etcd and kube-apiserver. The processes get SIGKILL when the *calling thread* exits
    /// (PR_SET_PDEATHSIG), so call this from a thread that outlives the plane, e.g. `main`.
    pub fn start(options: PlaneOptions) -> Result<OwnedPlane, String> {
        launch(options).map(|(plane, children, (apiserver, etcd_port))| OwnedPlane {
            plane,
            children,
            apiserver,
            etcd_port,
        })
    }

    /// Compacts etcd's history up to its current revision (through etcd's JSON gateway), so
    /// that a watch resumed from any older resourceVersion is answered 410 Gone. Returns the
    /// revision.
    pub fn compact_etcd(&self) -> Result<i64, String> {
        // "L3JlZ2lzdHJ5" is "/registry": any read answers with the current revision.
        let range =
            http_post(self.etcd_port, "/v3/kv/range", r#"{"key":"L3JlZ2lzdHJ5","limit":1}"#)
                .ok_or("etcd range failed")?;
        let answer: serde_json::Value = serde_json::from_str(&range).map_err(|e| e.to_string())?;
        let revision: i64 = answer["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or(format!("no revision in {range}"))?;
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        http_post(self.etcd_port, "/v3/kv/compaction", &body).ok_or("etcd compaction failed")?;
        Ok(revision)
    }

    /// Kills kube-apiserver (SIGKILL); etcd keeps running.
    pub fn kill_apiserver(&mut self) {
        if let Some(apiserver) = self.children.get_mut(1) {
            let _ = apiserver.kill();
            let _ = apiserver.wait();
        }
    }

    /// Starts kube-apiserver again as it was first started (same port, certificates and
    /// audit log); does not wait for it to be ready.
    pub fn restart_apiserver(&mut self) -> Result<(), String> {
        self.kill_apiserver();
        let (program, args) = &self.apiserver;
        let mut command = Command::new(program);
        command.args(args);
        let child = spawn(command, &self.plane.dir.join("kube-apiserver-restarted.log"))?;
        match self.children.get_mut(1) {
            Some(slot) => *slot = child,
            None => self.children.push(child),
        }
        Ok(())
    }

    /// The apiserver's process id, for resource figures.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.children.get(1).map(Child::id)
    }

    /// etcd's process id, for resource figures.
    pub fn etcd_pid(&self) -> Option<u32> {
        self.children.first().map(Child::id)
    }
}

impl Drop for OwnedPlane {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.plane.dir);
    }
}
