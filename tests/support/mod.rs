//! Shared test support: the real peers, the fake CSI driver, csi-sanity, and the control plane.

#![allow(dead_code)]

pub mod cluster;
pub mod control_plane;
pub mod csi_relay;
pub mod fake_driver;
pub mod hostpath;
pub mod kcm;
pub mod peers;
pub mod proxy;
pub mod relayed;
pub mod sanity;
pub mod sidecar;
pub mod snapshots;
pub mod upstream;
pub mod watchdog;

/// Sends `signal` to process `pid` (a peer or the sidecar under test): the tests' one use of
/// unsafe code besides the parent-death signal in `control_plane::spawn`.
#[allow(unsafe_code)]
pub fn signal(pid: u32, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, signal) };
}
