//! csi-pv-controller: one process beside a CSI driver that provisions, binds, expands and
//! deletes the driver's volumes.
//!
//! The pipeline, in one picture:
//!
//! ```text
//!  kube-apiserver ──watch──▶ cluster::stores (claims, PVs compact; classes, ...)
//!        ▲                         │ every change, and the periodic passes (resync)
//!        │                         ▼
//!        │                 controller::intake  ──▶ controller::workers (one key at a time)
//!        │                                              │
//!        │                                              ▼
//!        │                                    controller::dispatch: binder, then
//!        │                                    provisioning, then expansion / modify
//!        │                                              │ objects + driver capabilities + time
//!        │                                              ▼
//!        │                  decide (pure): binder, provision, expand, modify, resync, model
//!        │                                              │ an action
//!        │                                              ▼
//!        └──────── controller::writes ◀──── the executor ────▶ csi (driver's unix socket)
//!             (fenced, rate-limited)                              (fenced)
//! ```
//!
//! Decisions never do I/O (`architecture_tests.rs` fails the build's tests if one names a
//! client, the runtime or the configuration); the executor is the only place that acts.

#![forbid(unsafe_code)]

pub mod binder;
pub mod capacity;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod csi;
pub mod expand;
pub mod explain;
#[cfg(test)]
pub(crate) mod fixtures;
#[doc(hidden)]
pub mod fuzz;
pub mod health;
pub mod inventory;
pub mod journal;
pub mod leader;
pub mod metrics;
pub mod migration;
pub mod model;
pub mod modify;
pub mod provision;
pub mod resync;
pub mod runtime;

#[cfg(test)]
mod architecture_tests;
