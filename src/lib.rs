//! csi-pv-controller: one process beside a CSI driver that provisions, binds, expands and
//! deletes the driver's volumes.

#![forbid(unsafe_code)]

pub mod args;
pub mod binder;
pub mod capacity;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod crash_point;
pub mod csi;
pub mod expand;
pub mod feature_gates;
pub mod fence;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod freshness;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod model;
pub mod modify;
pub mod names;
pub mod provision;
pub mod queue;
pub mod resync;
pub mod rollback;
