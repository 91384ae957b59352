//! What a node leaves on the machine, and how it is taken away: the pods' processes and their
//! shims, mounts under kubelet's root and containerd's folders, loop devices over files there,
//! the pods' bridge, kubelet's cgroups and the kernel settings kubelet writes. Run when a node
//! is dropped and before one starts, for a run that was killed before it could clean up.

use std::fs;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::KUBELET_ROOT;
use super::config::BRIDGE;

/// Says that kubelet's root was made by these tests: one made otherwise belongs to a real node,
/// which the tests never touch. Kept beside the lock, as kubelet empties its root of files it
/// does not know.
fn marker() -> PathBuf {
    std::env::temp_dir().join("csi-pv-controller-node.root-made-here")
}

/// The kernel settings kubelet sets at start (unless told to only check them).
const SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Takes the machine-wide node lock, waiting for another test binary's node to go, and makes
/// sure kubelet's root, if there is one, is the tests'.
pub fn lock_machine() -> fs::File {
    let path = std::env::temp_dir().join("csi-pv-controller-node.lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open the node lock {}: {e}", path.display()));
    // SAFETY: flock on a descriptor this function owns; it blocks until the lock is free.
    #[allow(unsafe_code)]
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "cannot lock {}", path.display());
    let root = Path::new(KUBELET_ROOT);
    if root.exists() && !marker().exists() {
        panic!(
            "{KUBELET_ROOT} exists and was not made by these tests: a real kubelet's root is \
             never used or removed here"
        );
    }
    file
}

/// Makes kubelet's root, marked as the tests' (after `remove_leftovers`, which takes the mark).
pub fn make_root() {
    fs::write(marker(), format!("{KUBELET_ROOT} made by csi-pv-controller's test node\n"))
        .expect("marker");
    fs::create_dir_all(KUBELET_ROOT).expect("kubelet root");
}

/// The kernel settings as they were before kubelet ran.
pub struct Saved(Vec<(PathBuf, String)>);

impl Saved {
    pub fn take() -> Saved {
        Saved(
            SYSCTLS
                .iter()
                .map(|s| Path::new("/proc/sys").join(s))
                .filter_map(|p| fs::read_to_string(&p).ok().map(|v| (p, v)))
                .collect(),
        )
    }

    pub fn restore(&self) {
        for (path, value) in &self.0 {
            if fs::read_to_string(path).ok().as_deref() != Some(value) {
                let _ = fs::write(path, value);
            }
        }
    }
}

/// Where csi-driver-host-path's manifest keeps its volumes on the node.
pub const HOSTPATH_DATA: &str = "/var/lib/csi-hostpath-data";

/// Where deploy/ keeps our intent journal on the node (its hostPath), which the driver pod's
/// tests use too.
pub const JOURNAL_DIR: &str = "/var/lib/csi-pv-controller/hostpath.csi.k8s.io";

/// Kills the pods' processes (every process in kubelet's cgroups) and the runc shims that
/// served a test node.
pub fn stop_pods() {
    for _ in 0..3 {
        let mut pids = Vec::new();
        for root in kubepods_cgroups() {
            collect_procs(&root, &mut pids);
        }
        pids.extend(test_shims());
        if pids.is_empty() {
            return;
        }
        for pid in &pids {
            super::super::signal(*pid, libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// Everything a test node left: its processes, mounts, loop devices, bridge, cgroups and
/// kubelet's root. Safe to call when there is nothing.
pub fn remove_leftovers() {
    stop_pods();
    unmount_all();
    detach_loops();
    super::service_relay::remove_address();
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        let _ = Command::new("ip").args(["link", "delete", BRIDGE]).status();
    }
    for root in kubepods_cgroups() {
        remove_cgroup_tree(&root);
    }
    // csi-driver-host-path's plugin pod keeps its volumes here, on the node (its manifest's
    // hostPath).
    let _ = fs::remove_dir_all(HOSTPATH_DATA);
    let _ = fs::remove_dir_all(JOURNAL_DIR);
    // Its parent too, when nothing else is in it.
    if let Some(parent) = Path::new(JOURNAL_DIR).parent() {
        let _ = fs::remove_dir(parent);
    }
    let root = Path::new(KUBELET_ROOT);
    let left: Vec<String> = mount_points().into_iter().filter(|m| ours(m)).collect();
    if !left.is_empty() {
        eprintln!("test node: mounts left, {KUBELET_ROOT} kept: {left:?}");
    } else if marker().exists() {
        if let Err(e) = fs::remove_dir_all(root)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("test node: cannot remove {KUBELET_ROOT}: {e}");
            return;
        }
        let _ = fs::remove_file(marker());
    }
}

/// A path a test node mounts on: under kubelet's root, or under a node folder of a test
/// control plane (containerd's root file systems, shm and network namespaces).
fn ours(mount_point: &str) -> bool {
    let planes = std::env::temp_dir().join("csi-pv-controller-control-planes");
    mount_point.starts_with(&format!("{HOSTPATH_DATA}/"))
        || mount_point == KUBELET_ROOT
        || mount_point.starts_with(&format!("{KUBELET_ROOT}/"))
        || (mount_point.starts_with(&format!("{}/", planes.display()))
            && mount_point.contains("/node-"))
}

fn mount_points() -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(|m| m.replace("\\040", " ")))
        .collect()
}

/// Unmounts every mount of ours, deepest first, lazily (a pod's process may still hold one).
fn unmount_all() {
    for _ in 0..5 {
        let mut mine: Vec<String> = mount_points().into_iter().filter(|m| ours(m)).collect();
        if mine.is_empty() {
            return;
        }
        mine.sort_by_key(|m| std::cmp::Reverse(m.matches('/').count()));
        mine.dedup();
        for point in mine {
            let Ok(path) = std::ffi::CString::new(point) else { continue };
            // SAFETY: umount2 reads a NUL-terminated path that lives across the call.
            #[allow(unsafe_code)]
            unsafe {
                libc::umount2(path.as_ptr(), libc::MNT_DETACH)
            };
        }
    }
}

/// Detaches loop devices whose backing file is under kubelet's root or a test node's folder
/// (kubelet holds a block volume's device through one).
fn detach_loops() {
    let Ok(out) = Command::new("losetup").arg("-a").output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((device, rest)) = line.split_once(':') else { continue };
        let backing = rest.rsplit_once('(').map(|(_, f)| f.trim_end_matches(')')).unwrap_or("");
        if ours(backing) {
            let _ = Command::new("losetup").args(["-d", device]).status();
        }
    }
}

/// kubelet's top cgroup (`kubepods`) in every cgroup v1 hierarchy and the unified one.
fn kubepods_cgroups() -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir("/sys/fs/cgroup") else { return Vec::new() };
    entries.flatten().map(|e| e.path().join("kubepods")).filter(|p| p.is_dir()).collect()
}

fn collect_procs(dir: &Path, pids: &mut Vec<u32>) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect_procs(&entry.path(), pids);
            }
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

/// runc shims started by a test node's containerd: their `-address` names a socket in a test
/// control plane's node folder.
fn test_shims() -> Vec<u32> {
    let planes = std::env::temp_dir().join("csi-pv-controller-control-planes");
    let planes = planes.display().to_string();
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let args = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args = String::from_utf8_lossy(&args);
            args.contains("containerd-shim-runc-v2") && args.contains(&planes)
        })
        .collect()
}
