//! Shared test support: the real peers, the fake CSI driver, csi-sanity, and the control plane.

#![allow(dead_code)]

pub mod cluster;
pub mod control_plane;
pub mod csi_relay;
pub mod driver_pod;
pub mod fake_driver;
pub mod hostpath;
pub mod kcm;
pub mod node;
pub mod owned_beside;
pub mod peers;
pub mod prometheus;
pub mod proxy;
pub mod relayed;
pub mod sanity;
pub mod sidecar;
pub mod snapshots;
pub mod upstream;
pub mod watchdog;

/// Sends `signal` to process `pid` (a peer or the sidecar under test): the tests' one use of
/// unsafe code besides `wait_with_peak_memory` and the parent-death signal in
/// `control_plane::spawn`.
#[allow(unsafe_code)]
pub fn signal(pid: u32, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, signal) };
}

/// Waits for the child `pid` (spawned, not yet waited for): its exit code and its peak resident
/// memory in KiB, as wait4 reports them. The one other use of unsafe code here.
#[allow(unsafe_code, dead_code)]
pub fn wait_with_peak_memory(pid: u32) -> (i32, i64) {
    let pid = pid as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child, with pointers to live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4 failed");
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
}
