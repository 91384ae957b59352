//! The two stacks under test and the processes they are made of.
//!
//! - upstream: kube-controller-manager with the PV binder, the expander and both protection
//!   controllers; csi-provisioner and csi-resizer on the driver's socket.
//! - ours: kube-controller-manager with the two protection controllers only; csi-pv-controller
//!   as the binder (`--bind-all`).
//! - beside: kube-controller-manager as upstream's (binder, expander, both protection
//!   controllers); csi-pv-controller with default flags (`--binder=external`): what a managed
//!   cluster gets.
//!
//! Every process is started from the benchmark's main thread (see `OwnedPlane::start` on why
//! that thread), logs to the run's folder, and is killed when its `Proc` is dropped.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde::Serialize;

use crate::support::control_plane::{ControlPlane, spawn, tail};
use crate::support::peers::peer;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum StackKind {
    Upstream,
    Ours,
    Beside,
}

impl fmt::Display for StackKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StackKind::Upstream => "upstream",
            StackKind::Ours => "ours",
            StackKind::Beside => "beside",
        })
    }
}

/// Client-side throttling for every component of a stack: each one's own default, or one
/// figure for all.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Throttle {
    Defaults,
    Equal {
        qps: u32,
        burst: u32,
    },
    /// Every client-side limiter off (client-go's QPS -1, ours too): the design alone, paced
    /// only by the apiserver.
    Off,
    /// The same total budget for each stack: every upstream role (binder, provisioner, resizer)
    /// at `qps`/`burst`, and csi-pv-controller at that times the roles it takes over (3 as the
    /// binder, 2 beside kube-controller-manager's binder).
    Budget {
        qps: u32,
        burst: u32,
    },
    /// No client-side limit, as `Off`, while `cores` other processes keep the machine's cores
    /// busy for the whole scenario.
    Busy {
        cores: usize,
    },
}

impl Throttle {
    /// The client flags of a process that does the work of `roles` upstream roles.
    pub fn flags(self, roles: u32) -> Vec<String> {
        let limit = |qps: u32, burst: u32| {
            vec![format!("--kube-api-qps={qps}"), format!("--kube-api-burst={burst}")]
        };
        match self {
            Throttle::Defaults => vec![],
            Throttle::Off | Throttle::Busy { .. } => vec!["--kube-api-qps=-1".into()],
            Throttle::Equal { qps, burst } => limit(qps, burst),
            Throttle::Budget { qps, burst } => limit(qps * roles, burst * roles),
        }
    }
}

impl fmt::Display for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Throttle::Defaults => f.write_str("each component's default QPS/burst"),
            Throttle::Equal { qps, burst } => write!(f, "all at QPS {qps}/burst {burst}"),
            Throttle::Off => f.write_str("no client-side limit anywhere"),
            Throttle::Busy { cores } => {
                write!(f, "no client-side limit, {cores} busy-looping processes beside")
            }
            Throttle::Budget { qps, burst } => {
                write!(f, "QPS {qps}/burst {burst} per upstream role, ours the sum of its roles")
            }
        }
    }
}

/// Worker counts: csi-provisioner's default is 100, as is ours; csi-resizer gets the same.
pub const WORKERS: u32 = 100;

/// One child process, killed on drop.
pub struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn start(
        name: &'static str,
        program: &Path,
        args: &[String],
        dir: &Path,
    ) -> Result<Proc, String> {
        let log = dir.join(format!("{name}.log"));
        let mut command = Command::new(program);
        command.args(args).env_remove("RUST_LOG");
        let child = spawn(command, &log)?;
        Ok(Proc { name, child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error naming the process and quoting its log's tail if it has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                Err(format!("{} exited with {status}:\n{}", self.name, tail(&self.log)))
            }
            _ => Ok(()),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running stack.
pub struct Stack {
    pub procs: Vec<Proc>,
    /// kube-controller-manager's HTTPS port (/metrics).
    pub kcm_port: u16,
}

/// A loopback port nothing listens on now.
fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// Where a stack runs: the driver's socket, the run's folder, where the beside stack keeps its
/// intent journal (else in the run's folder, beside etcd's data), and kube-controller-manager's
/// controllers beyond the storage ones (a node's, when pods run).
pub struct Placement<'a> {
    pub socket: &'a Path,
    pub dir: &'a Path,
    pub journal_root: Option<&'a Path>,
    pub extra_controllers: &'a [&'a str],
    /// csi-provisioner's --worker-threads and csi-resizer's --workers (ours: --worker-threads);
    /// None for WORKERS.
    pub workers: Option<u32>,
}

impl Stack {
    /// Starts `kind` against `plane` as `at` says.
    pub fn start(
        kind: StackKind,
        throttle: Throttle,
        plane: &ControlPlane,
        sidecar: &Path,
        at: &Placement,
    ) -> Result<Stack, String> {
        let (socket, dir, journal_root) = (at.socket, at.dir, at.journal_root);
        let workers = at.workers.unwrap_or(WORKERS);
        let kubeconfig = format!("--kubeconfig={}", plane.admin_kubeconfig.display());
        let controllers = match kind {
            StackKind::Upstream | StackKind::Beside => {
                "persistentvolume-binder-controller,persistentvolume-expander-controller,\
                 persistentvolumeclaim-protection-controller,persistentvolume-protection-controller"
            }
            StackKind::Ours => {
                "persistentvolumeclaim-protection-controller,persistentvolume-protection-controller"
            }
        };
        // Its /metrics (with a self-signed certificate, open to anonymous reads) tells the
        // binder's requests from the sidecars'.
        let kcm_port = free_port()?;
        let controllers: Vec<&str> =
            controllers.split(',').chain(at.extra_controllers.iter().copied()).collect();
        let mut kcm_args = vec![
            kubeconfig.clone(),
            format!("--controllers={}", controllers.join(",")),
            "--leader-elect=false".into(),
            format!("--secure-port={kcm_port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--cert-dir={}", dir.join("kcm-certs").display()),
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
            "--use-service-account-credentials=false".into(),
        ];
        // Its binder is a role of its own; the protection controllers are the same in every stack.
        kcm_args.extend(throttle.flags(1));
        let mut procs = vec![Proc::start(
            "kube-controller-manager",
            &peer("kube-controller-manager"),
            &kcm_args,
            dir,
        )?];
        let csi_address = format!("--csi-address={}", socket.display());
        match kind {
            StackKind::Upstream => {
                // csi-provisioner and csi-resizer take the same flags but for their worker count.
                for (name, flag) in
                    [("csi-provisioner", "--worker-threads"), ("csi-resizer", "--workers")]
                {
                    let mut args = vec![
                        csi_address.clone(),
                        kubeconfig.clone(),
                        "--leader-election=false".into(),
                        format!("{flag}={workers}"),
                    ];
                    args.extend(throttle.flags(1));
                    procs.push(Proc::start(name, &peer(name), &args, dir)?);
                }
            }
            StackKind::Ours | StackKind::Beside => {
                let mut args = vec![
                    format!("--csi-address=unix://{}", socket.display()),
                    kubeconfig,
                    format!("--worker-threads={workers}"),
                ];
                if kind == StackKind::Ours {
                    // kube-controller-manager runs without its binder here: we are the binder.
                    args.push("--bind-all".into());
                } else {
                    // As deploy/ runs it: provisioning intents in files, not claim finalizers.
                    let journal = match journal_root {
                        Some(root) => root.join(format!("intents-{}", std::process::id())),
                        None => dir.join("intents"),
                    };
                    let _ = std::fs::remove_dir_all(&journal);
                    args.push(format!("--intent-journal={}", journal.display()));
                }
                // Provisioner and resizer, and the binder when kube-controller-manager's is off.
                let roles = if kind == StackKind::Ours { 3 } else { 2 };
                args.extend(throttle.flags(roles));
                procs.push(Proc::start("csi-pv-controller", sidecar, &args, dir)?);
            }
        }
        Ok(Stack { procs, kcm_port })
    }

    /// The processes that replace each other: csi-provisioner + csi-resizer, or ours.
    pub fn sidecars(&self) -> impl Iterator<Item = &Proc> {
        self.procs.iter().filter(|p| p.name != "kube-controller-manager")
    }

    pub fn kube_controller_manager(&self) -> impl Iterator<Item = &Proc> {
        self.procs.iter().filter(|p| p.name == "kube-controller-manager")
    }

    pub fn check_alive(&mut self) -> Result<(), String> {
        self.procs.iter_mut().try_for_each(Proc::check_alive)
    }
}
