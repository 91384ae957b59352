//! Shared test support: the real peers, the fake CSI driver, csi-sanity, and the control plane.

#![allow(dead_code)]

pub mod cluster;
pub mod control_plane;
pub mod fake_driver;
pub mod hostpath;
pub mod kcm;
pub mod peers;
pub mod proxy;
pub mod sanity;
pub mod sidecar;
pub mod snapshots;
pub mod watchdog;
