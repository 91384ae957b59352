//! The PV binder: kube-controller-manager's PV controller semantics (reference/binder.md),
//! decided purely. `claim` and `volume` map an object and the stores to one step; `bind` builds
//! the writes; `matching` finds the PV for a claim; `explain` says why.

pub mod bind;
pub mod claim;
pub mod explain;
pub mod matching;
pub mod volume;

#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

pub use matching::VolumeIndex;

use crate::names::*;

/// Which objects this process binds.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Our driver's name.
    pub driver: String,
    /// `--bind-all`: every claim and PV, for clusters whose own binder is switched off.
    pub all: bool,
}

impl Scope {
    /// By default: claims of our driver's classes (or, with the class gone, annotated for our
    /// driver), claims carrying our provisioning intent, and claims that name a PV of ours.
    pub fn has_claim(
        &self,
        claim: &PersistentVolumeClaim,
        class: Option<&StorageClass>,
        named_volume: Option<&PersistentVolume>,
    ) -> bool {
        if self.all || crate::provision::claim::has_intent(claim) {
            return true;
        }
        let ours = match class {
            Some(c) => c.provisioner == self.driver,
            None => {
                annotation(&claim.metadata, ANN_STORAGE_PROVISIONER)
                    .or_else(|| annotation(&claim.metadata, ANN_BETA_STORAGE_PROVISIONER))
                    == Some(self.driver.as_str())
            }
        };
        ours || named_volume.is_some_and(|pv| volume::is_drivers(pv, &self.driver))
    }

    /// By default: CSI PVs of our driver.
    pub fn has_volume(&self, pv: &PersistentVolume) -> bool {
        self.all || volume::is_drivers(pv, &self.driver)
    }
}
