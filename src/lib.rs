//! csi-pv-controller: one sidecar that does, for one CSI driver's volumes, what
//! kube-controller-manager's PV binder and expander, external-provisioner and external-resizer do
//! together.

pub mod cluster;
pub mod config;
pub mod csi;
pub mod http;
pub mod provision;
