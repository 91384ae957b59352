//! CSI migration: the in-tree volume plugins whose volumes a CSI driver now serves, and the
//! translation of their StorageClasses and PVs to the CSI form and back (docs/compatibility.md,
//! "CSI migration").
//!
//! Kubernetes' translation library (csi-translation-lib v0.36) knows seven plugins; the results
//! here are the same as its, written from its behaviour and held to it by the tables in
//! `tests.rs`. Everything is pure: an object in, an object (or a reason it cannot be) out.
//!
//! - A claim of an in-tree class (`kubernetes.io/aws-ebs`, ...) is provisioned by the plugin's
//!   CSI driver with the class translated ([`class_to_csi`]); the PV is written in the in-tree
//!   form ([`pv_to_in_tree`]) with `pv.kubernetes.io/provisioned-by` naming the in-tree plugin.
//! - An in-tree PV (made by the plugin long ago, or by the migrated provisioner) is deleted and
//!   grown through the handle, fsType and topology of its CSI form ([`pv_to_csi`]).

mod classes;
mod to_csi;
mod to_in_tree;
pub mod topology;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod volume_tests;

use k8s_openapi::api::core::v1::PersistentVolume;

pub use classes::class_to_csi;
pub use to_csi::pv_to_csi;
pub use to_in_tree::pv_to_in_tree;

/// `pv.kubernetes.io/migrated-to`: on a claim or PV of a migrated plugin, the CSI driver that
/// serves it (kube-controller-manager writes it; its binder then stands down).
pub const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// `volume.kubernetes.io/storage-resizer`: on a claim of a migrated plugin's PV, the CSI driver
/// that grows it (kube-controller-manager's expand controller writes it).
pub const ANN_STORAGE_RESIZER: &str = "volume.kubernetes.io/storage-resizer";

/// An in-tree volume plugin that a CSI driver replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Plugin {
    AwsEbs,
    GcePd,
    AzureDisk,
    AzureFile,
    Cinder,
    VsphereVolume,
    Portworx,
}

impl Plugin {
    pub const ALL: [Plugin; 7] = [
        Plugin::AwsEbs,
        Plugin::GcePd,
        Plugin::AzureDisk,
        Plugin::AzureFile,
        Plugin::Cinder,
        Plugin::VsphereVolume,
        Plugin::Portworx,
    ];

    /// The plugin's name: a StorageClass's `provisioner`, a PV's `provisioned-by`.
    pub fn in_tree_name(self) -> &'static str {
        match self {
            Plugin::AwsEbs => "kubernetes.io/aws-ebs",
            Plugin::GcePd => "kubernetes.io/gce-pd",
            Plugin::AzureDisk => "kubernetes.io/azure-disk",
            Plugin::AzureFile => "kubernetes.io/azure-file",
            Plugin::Cinder => "kubernetes.io/cinder",
            Plugin::VsphereVolume => "kubernetes.io/vsphere-volume",
            Plugin::Portworx => "kubernetes.io/portworx-volume",
        }
    }

    /// The CSI driver that serves the plugin's volumes.
    pub fn csi_driver(self) -> &'static str {
        match self {
            Plugin::AwsEbs => "ebs.csi.aws.com",
            Plugin::GcePd => "pd.csi.storage.gke.io",
            Plugin::AzureDisk => "disk.csi.azure.com",
            Plugin::AzureFile => "file.csi.azure.com",
            Plugin::Cinder => "cinder.csi.openstack.org",
            Plugin::VsphereVolume => "csi.vsphere.vmware.com",
            Plugin::Portworx => "pxd.portworx.com",
        }
    }

    /// The driver's zone key in topology, for the plugins whose zones are translated.
    pub fn zone_key(self) -> Option<&'static str> {
        match self {
            Plugin::AwsEbs => Some("topology.ebs.csi.aws.com/zone"),
            Plugin::GcePd => Some("topology.gke.io/zone"),
            Plugin::AzureDisk => Some("topology.disk.csi.azure.com/zone"),
            Plugin::Cinder => Some("topology.cinder.csi.openstack.org/zone"),
            Plugin::VsphereVolume => Some("topology.csi.vmware.com/zone"),
            Plugin::AzureFile | Plugin::Portworx => None,
        }
    }

    pub fn by_in_tree_name(name: &str) -> Option<Plugin> {
        Plugin::ALL.into_iter().find(|p| p.in_tree_name() == name)
    }

    /// The plugin `driver` replaces, if it is a migration target: "not mine" for any other name.
    pub fn by_csi_driver(driver: &str) -> Option<Plugin> {
        Plugin::ALL.into_iter().find(|p| p.csi_driver() == driver)
    }

    /// The plugin whose source the PV carries, if it is an in-tree PV of one of the seven.
    pub fn of_volume(pv: &PersistentVolume) -> Option<Plugin> {
        let spec = pv.spec.as_ref()?;
        if spec.csi.is_some() {
            return None;
        }
        [
            (spec.aws_elastic_block_store.is_some(), Plugin::AwsEbs),
            (spec.gce_persistent_disk.is_some(), Plugin::GcePd),
            (spec.azure_disk.is_some(), Plugin::AzureDisk),
            (spec.azure_file.is_some(), Plugin::AzureFile),
            (spec.cinder.is_some(), Plugin::Cinder),
            (spec.vsphere_volume.is_some(), Plugin::VsphereVolume),
            (spec.portworx_volume.is_some(), Plugin::Portworx),
        ]
        .into_iter()
        .find_map(|(has, plugin)| has.then_some(plugin))
    }
}

/// Why an object cannot be translated. Every case is final for that object as written: the
/// executor reports it (a Warning on the object, a log line) and retries only after a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    #[error("cannot simultaneously set allowed topologies and zone/zones parameters")]
    ZonesAndAllowedTopologies,
    #[error("the PV has no {0} source")]
    NoSource(&'static str),
    #[error("invalid {plugin} volume ID {id:?}: {why}")]
    VolumeId { plugin: &'static str, id: String, why: String },
    #[error("failed to convert partition {0:?} to integer")]
    Partition(String),
    #[error("cannot work out one region from zones {zones:?}: {why}")]
    Region { zones: Vec<String>, why: String },
    #[error("kind({0}) is not supported in csi migration")]
    DiskKind(String),
    #[error("could not find a secret namespace in PersistentVolumeSource or ClaimRef")]
    NoSecretNamespace,
}

/// The CSI driver a claim's or PV's `pv.kubernetes.io/migrated-to` names; "" if none.
pub fn migrated_to(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(ANN_MIGRATED_TO))
        .map(String::as_str)
        .unwrap_or_default()
}

/// The CSI identity DeleteVolume and ControllerExpandVolume need: the PV itself when it is a CSI
/// PV, its translation when it is an in-tree PV of a migrated plugin. None: neither.
pub fn csi_form(
    pv: &PersistentVolume,
) -> Option<Result<std::borrow::Cow<'_, PersistentVolume>, TranslateError>> {
    if pv.spec.as_ref()?.csi.is_some() {
        return Some(Ok(std::borrow::Cow::Borrowed(pv)));
    }
    Plugin::of_volume(pv)?;
    Some(pv_to_csi(pv).map(std::borrow::Cow::Owned))
}

/// The driver's ID of the PV's volume: `spec.csi.volumeHandle`, or the translated handle of an
/// in-tree PV of a migrated plugin. None: neither kind of PV.
pub fn volume_handle(pv: &PersistentVolume) -> Option<Result<String, TranslateError>> {
    let form = csi_form(pv)?;
    Some(form.map(|pv| {
        pv.spec
            .as_ref()
            .and_then(|s| s.csi.as_ref())
            .map(|c| c.volume_handle.clone())
            .unwrap_or_default()
    }))
}

/// The plugin of an in-tree PV that `driver` provisioned, deletes and keeps the deletion
/// finalizer of, as csi-provisioner decides it: the PV names the plugin (or the driver) in
/// `pv.kubernetes.io/provisioned-by`, or names the driver in `pv.kubernetes.io/migrated-to`.
/// A static in-tree PV without `migrated-to` is not the driver's to delete, nor is a PV that
/// `migrated-to` gives to another driver.
pub fn deleted_by(pv: &PersistentVolume, driver: &str) -> Option<Plugin> {
    let plugin = Plugin::of_volume(pv).filter(|p| p.csi_driver() == driver)?;
    let annotations = pv.metadata.annotations.as_ref();
    let provisioned_by = annotations.and_then(|a| a.get("pv.kubernetes.io/provisioned-by"));
    let by_us = provisioned_by.is_some_and(|p| p == plugin.in_tree_name() || p == driver);
    let migrated_to = migrated_to(&pv.metadata);
    let elsewhere = !migrated_to.is_empty() && migrated_to != driver;
    ((by_us && !elsewhere) || migrated_to == driver).then_some(plugin)
}
