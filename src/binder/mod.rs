//! The PV binder: kube-controller-manager's PV controller semantics (docs/binder.md),
//! decided purely. `claim` and `volume` map an object and the stores to one step; `bind` builds
//! the writes; `matching` finds the PV for a claim (`explain::binder` says why).

pub mod bind;
pub mod claim;
pub mod foreign;
pub mod index;
pub mod matching;
pub mod usage;
pub mod volume;

#[cfg(test)]
mod tests;

use crate::model::{ClaimExt, ClassExt, VolumeExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

pub use index::VolumeIndex;

/// Who binds claims to PersistentVolumes (`--binder`). Two binders must never share a claim:
/// resourceVersion preconditions keep each write safe, but two binders can each give the same
/// claim a different PV in the same instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Binder {
    /// kube-controller-manager's PV binder, as in every cluster that runs it: we provision the
    /// claims it hands to our driver (`volume.kubernetes.io/storage-provisioner`), create the PV
    /// pre-bound to its claim and delete the volumes it releases. We never bind.
    #[default]
    External,
    /// We bind our driver's claims and PVs ourselves, provision and bind in one pass; for a
    /// cluster whose kube-controller-manager runs without its binder and whose other claims
    /// something else binds (e.g. one csi-pv-controller per driver).
    Driver,
    /// We bind every claim and PV of the cluster (`--bind-all`): the cluster's only binder.
    All,
}

impl Binder {
    /// This process writes bindings and binder phases.
    pub fn binds(self) -> bool {
        self != Binder::External
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Binder::External => "external",
            Binder::Driver => "driver",
            Binder::All => "all",
        }
    }
}

impl std::str::FromStr for Binder {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "external" => Ok(Binder::External),
            "driver" => Ok(Binder::Driver),
            "all" => Ok(Binder::All),
            other => Err(format!(
                "{other:?}: expected external (kube-controller-manager binds), driver or all"
            )),
        }
    }
}

/// Which objects this process looks after.
#[derive(Debug, Clone)]
pub struct Scope {
    /// Our driver's name.
    pub driver: String,
    pub binder: Binder,
}

impl Scope {
    /// Our driver's: claims of its classes (or, with the class gone, annotated for it), claims
    /// carrying our provisioning intent, and claims that name a PV of the driver. With
    /// `Binder::All`, every claim. When we bind, also a claim that names no class while the
    /// cluster's default class (`default_class`) is the driver's: kube-controller-manager's
    /// binder, which gives such a claim the default class, is off then, and the claim becomes
    /// ours once it has the class.
    pub fn has_claim(
        &self,
        claim: &PersistentVolumeClaim,
        class: Option<&StorageClass>,
        default_class: Option<&StorageClass>,
        named_volume: Option<&PersistentVolume>,
    ) -> bool {
        if self.binder == Binder::All || claim.has_intent() {
            return true;
        }
        let ours = match class {
            Some(c) => c.served_by(&self.driver),
            None => {
                claim.handed_to(&self.driver)
                    || (self.binder.binds()
                        && claim.names_no_class()
                        && default_class.is_some_and(|c| c.served_by(&self.driver)))
            }
        };
        // The named PV may be a static in-tree PV the driver serves: its claim is grown here.
        ours || named_volume.is_some_and(|pv| {
            volume::is_drivers(pv, &self.driver) || pv.served_by() == Some(self.driver.as_str())
        })
    }

    /// CSI PVs of our driver; with `Binder::All`, every PV.
    pub fn has_volume(&self, pv: &PersistentVolume) -> bool {
        self.binder == Binder::All || volume::is_drivers(pv, &self.driver)
    }
}
