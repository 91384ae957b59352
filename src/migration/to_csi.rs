//! An in-tree PV in its CSI form: the handle, fsType, attributes, secrets and topology the
//! driver's DeleteVolume and ControllerExpandVolume are called with.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolume, SecretReference};

use super::topology::{BETA_ZONE, ZONE, ZONE_SEPARATOR, vsphere_to_csi, zones_to_csi};
use super::{Plugin, TranslateError};

/// The PV as its plugin's CSI driver sees it. `NoSource` for a PV that is not an in-tree PV of
/// a migrated plugin.
pub fn pv_to_csi(pv: &PersistentVolume) -> Result<PersistentVolume, TranslateError> {
    let Some(plugin) = Plugin::of_volume(pv) else {
        return Err(TranslateError::NoSource("in-tree"));
    };
    let mut out = pv.clone();
    let source = match plugin {
        Plugin::AwsEbs => aws_ebs(&mut out)?,
        Plugin::GcePd => gce_pd(&mut out)?,
        Plugin::AzureDisk => azure_disk(&mut out)?,
        Plugin::AzureFile => azure_file(&mut out)?,
        Plugin::Cinder => cinder(&mut out),
        Plugin::VsphereVolume => vsphere(&mut out),
        Plugin::Portworx => portworx(&mut out),
    };
    if let Some(spec) = out.spec.as_mut() {
        spec.csi = Some(source);
    }
    Ok(out)
}

fn csi(plugin: Plugin, handle: String) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: plugin.csi_driver().to_string(),
        volume_handle: handle,
        volume_attributes: Some(BTreeMap::new()),
        ..Default::default()
    }
}

fn attributes(source: &mut CSIPersistentVolumeSource) -> &mut BTreeMap<String, String> {
    source.volume_attributes.get_or_insert_with(BTreeMap::new)
}

fn cinder(pv: &mut PersistentVolume) -> CSIPersistentVolumeSource {
    let from = pv.spec.as_mut().and_then(|s| s.cinder.take()).unwrap_or_default();
    let mut source = csi(Plugin::Cinder, from.volume_id);
    source.read_only = from.read_only;
    source.fs_type = from.fs_type;
    zones_to_csi(pv, zone_key(Plugin::Cinder));
    source
}

fn zone_key(plugin: Plugin) -> &'static str {
    plugin.zone_key().unwrap_or_default()
}

fn aws_ebs(pv: &mut PersistentVolume) -> Result<CSIPersistentVolumeSource, TranslateError> {
    let from = pv.spec.as_ref().and_then(|s| s.aws_elastic_block_store.clone()).unwrap_or_default();
    let mut source = csi(Plugin::AwsEbs, ebs_volume_id(&from.volume_id)?);
    source.read_only = from.read_only;
    source.fs_type = from.fs_type;
    attributes(&mut source).insert("partition".into(), from.partition.unwrap_or(0).to_string());
    zones_to_csi(pv, zone_key(Plugin::AwsEbs));
    if let Some(spec) = pv.spec.as_mut() {
        spec.aws_elastic_block_store = None;
    }
    Ok(source)
}

/// An EBS volume ID as the in-tree plugin wrote it (`aws://<zone>/vol-…`, `aws:///vol-…`) or
/// plain (`vol-…`), as the driver's `vol-…`.
pub fn ebs_volume_id(id: &str) -> Result<String, TranslateError> {
    let Some(rest) = id.strip_prefix("aws://") else {
        return Ok(id.to_string());
    };
    let invalid = |why: &str| TranslateError::VolumeId {
        plugin: Plugin::AwsEbs.in_tree_name(),
        id: id.to_string(),
        why: why.to_string(),
    };
    // aws://<host>/<path>: the path, without its slashes, is the volume.
    let path = match rest.find('/') {
        Some(at) => &rest[at..],
        None => "",
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let volume = path.trim_matches('/');
    if volume.starts_with("vol-") && !volume.contains('/') {
        Ok(volume.to_string())
    } else {
        Err(invalid("not of the form aws://<zone>/vol-<id>"))
    }
}

fn gce_pd(pv: &mut PersistentVolume) -> Result<CSIPersistentVolumeSource, TranslateError> {
    let from = pv.spec.as_ref().and_then(|s| s.gce_persistent_disk.clone()).unwrap_or_default();
    let labels = pv.metadata.labels.clone().unwrap_or_default();
    let zones_label = labels.get(BETA_ZONE).filter(|z| !z.is_empty()).or(labels.get(ZONE));
    let zones: Vec<String> = zones_label
        .map(|l| l.split(ZONE_SEPARATOR).map(str::to_string).collect())
        .unwrap_or_else(|| vec![String::new()]);
    let handle = match zones.as_slice() {
        [one] if !one.is_empty() => {
            format!("projects/UNSPECIFIED/zones/{one}/disks/{}", from.pd_name)
        }
        [_] | [] => format!("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{}", from.pd_name),
        many => {
            let region = super::to_in_tree::gce_region(many)?;
            format!("projects/UNSPECIFIED/regions/{region}/disks/{}", from.pd_name)
        }
    };
    let mut source = csi(Plugin::GcePd, handle);
    source.read_only = from.read_only;
    source.fs_type = from.fs_type;
    let partition = from.partition.filter(|p| *p != 0).map(|p| p.to_string()).unwrap_or_default();
    attributes(&mut source).insert("partition".into(), partition);
    zones_to_csi(pv, zone_key(Plugin::GcePd));
    if let Some(spec) = pv.spec.as_mut() {
        spec.gce_persistent_disk = None;
        spec.access_modes = spec.access_modes.take().map(|modes| pd_access_modes(&modes));
    }
    Ok(source)
}

/// A PD is attached to one node read-write or to many read-only: ReadWriteMany was accepted
/// in-tree but meant ReadWriteOnce, and a PV that asks for both keeps ReadWriteOnce.
fn pd_access_modes(modes: &[String]) -> Vec<String> {
    let writes = modes.iter().any(|m| m == "ReadWriteOnce" || m == "ReadWriteMany");
    let reads = modes.iter().any(|m| m == "ReadOnlyMany");
    let mode = if !writes && reads { "ReadOnlyMany" } else { "ReadWriteOnce" };
    vec![mode.to_string()]
}

fn azure_disk(pv: &mut PersistentVolume) -> Result<CSIPersistentVolumeSource, TranslateError> {
    let from = pv.spec.as_mut().and_then(|s| s.azure_disk.take()).unwrap_or_default();
    if let Some(kind) = from.kind.as_deref().filter(|k| !k.eq_ignore_ascii_case("Managed")) {
        return Err(TranslateError::DiskKind(kind.to_string()));
    }
    let mut source = csi(Plugin::AzureDisk, from.disk_uri);
    if let Some(mode) = from.caching_mode {
        attributes(&mut source).insert("cachingmode".into(), mode);
    }
    if let Some(fs_type) = from.fs_type {
        attributes(&mut source).insert("fstype".into(), fs_type.clone());
        source.fs_type = Some(fs_type);
    }
    attributes(&mut source).insert("kind".into(), "Managed".into());
    source.read_only = from.read_only;
    Ok(source)
}

fn azure_file(pv: &mut PersistentVolume) -> Result<CSIPersistentVolumeSource, TranslateError> {
    let from = pv.spec.as_ref().and_then(|s| s.azure_file.clone()).unwrap_or_default();
    let account = storage_account(&from.secret_name).unwrap_or(&from.secret_name).to_string();
    let resource_group = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::to_in_tree::AZURE_FILE_RESOURCE_GROUP))
        .cloned()
        .unwrap_or_default();
    let claim_namespace = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()?.namespace.clone());
    let namespace = match from.secret_namespace.clone() {
        Some(namespace) => namespace,
        None => claim_namespace.unwrap_or_default(),
    };
    if namespace.is_empty() {
        return Err(TranslateError::NoSecretNamespace);
    }
    let name = pv.metadata.name.clone().unwrap_or_default();
    let handle = format!("{resource_group}#{account}#{}#{name}#{namespace}", from.share_name);
    let mut source = csi(Plugin::AzureFile, handle);
    source.node_stage_secret_ref =
        Some(SecretReference { name: Some(from.secret_name.clone()), namespace: Some(namespace) });
    source.read_only = from.read_only;
    attributes(&mut source).insert("sharename".into(), from.share_name);
    if let Some(spec) = pv.spec.as_mut() {
        spec.azure_file = None;
    }
    Ok(source)
}

/// The storage account an in-tree Azure File secret is named after
/// (`azure-storage-account-<account>-secret`).
pub fn storage_account(secret: &str) -> Option<&str> {
    let start = secret.find("azure-storage-account-")? + "azure-storage-account-".len();
    let rest = &secret[start..];
    let end = rest.rfind("-secret")?;
    Some(&rest[..end]).filter(|a| !a.is_empty())
}

fn vsphere(pv: &mut PersistentVolume) -> CSIPersistentVolumeSource {
    let from = pv.spec.as_mut().and_then(|s| s.vsphere_volume.take()).unwrap_or_default();
    let mut source = csi(Plugin::VsphereVolume, from.volume_path);
    source.fs_type = from.fs_type;
    if let Some(policy) = from.storage_policy_name.filter(|p| !p.is_empty()) {
        attributes(&mut source).insert("storagepolicyname".into(), policy);
    }
    vsphere_to_csi(pv, zone_key(Plugin::VsphereVolume), "topology.csi.vmware.com/region");
    source
}

fn portworx(pv: &mut PersistentVolume) -> CSIPersistentVolumeSource {
    let from = pv.spec.as_mut().and_then(|s| s.portworx_volume.take()).unwrap_or_default();
    let mut source = csi(Plugin::Portworx, from.volume_id);
    source.fs_type = from.fs_type;
    let annotations = pv.metadata.annotations.clone().unwrap_or_default();
    let name = annotations.get("openstorage.io/auth-secret-name");
    let namespace = annotations.get("openstorage.io/auth-secret-namespace");
    if let (Some(name), Some(namespace)) = (name, namespace) {
        let secret =
            Some(SecretReference { name: Some(name.clone()), namespace: Some(namespace.clone()) });
        source.controller_publish_secret_ref = secret.clone();
        source.node_stage_secret_ref = secret.clone();
        source.node_publish_secret_ref = secret.clone();
        source.controller_expand_secret_ref = secret.clone();
        source.node_expand_secret_ref = secret;
    }
    source
}
