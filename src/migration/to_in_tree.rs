//! A CSI PV in its plugin's in-tree form: what the migrated provisioner writes, so that the
//! cluster (and a rollback to the in-tree plugin) sees the volume as the plugin's.

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, AzureDiskVolumeSource, AzureFilePersistentVolumeSource,
    CinderPersistentVolumeSource, GCEPersistentDiskVolumeSource, PersistentVolume,
    PortworxVolumeSource, VsphereVirtualDiskVolumeSource,
};

use super::topology::{vsphere_to_in_tree, zones_to_in_tree};
use super::{Plugin, TranslateError};

/// On an Azure File PV: the resource group of its storage account.
pub const AZURE_FILE_RESOURCE_GROUP: &str = "kubernetes.io/azure-file-resource-group";

/// The CSI PV `pv` written as `plugin`'s in-tree PV; `NoSource` when it has no CSI source.
pub fn pv_to_in_tree(
    plugin: Plugin,
    pv: &PersistentVolume,
) -> Result<PersistentVolume, TranslateError> {
    let mut out = pv.clone();
    let Some(csi) = out.spec.as_mut().and_then(|s| s.csi.take()) else {
        return Err(TranslateError::NoSource("CSI"));
    };
    let attribute = |key: &str| csi.volume_attributes.as_ref().and_then(|a| a.get(key)).cloned();
    let fs_type = csi.fs_type.clone();
    let read_only = csi.read_only;
    match plugin {
        Plugin::Cinder => {
            zones_to_in_tree(&mut out, zone_key(plugin), None)?;
            spec(&mut out).cinder = Some(CinderPersistentVolumeSource {
                volume_id: csi.volume_handle.clone(),
                fs_type,
                read_only,
                ..Default::default()
            });
        }
        Plugin::AwsEbs => {
            let partition = partition(attribute("partition"), false)?;
            zones_to_in_tree(&mut out, zone_key(plugin), Some(aws_region))?;
            spec(&mut out).aws_elastic_block_store = Some(AWSElasticBlockStoreVolumeSource {
                volume_id: csi.volume_handle.clone(),
                fs_type,
                read_only,
                partition,
            });
        }
        Plugin::GcePd => {
            let pd_name = pd_name(&csi.volume_handle)?;
            let partition = partition(attribute("partition"), true)?;
            zones_to_in_tree(&mut out, zone_key(plugin), Some(gce_region))?;
            spec(&mut out).gce_persistent_disk =
                Some(GCEPersistentDiskVolumeSource { pd_name, fs_type, read_only, partition });
        }
        Plugin::AzureDisk => {
            let disk_name = azure_disk_name(&csi.volume_handle)?;
            let mut source = AzureDiskVolumeSource {
                disk_name,
                disk_uri: csi.volume_handle.clone(),
                fs_type: Some(fs_type.unwrap_or_default()),
                read_only: Some(read_only.unwrap_or(false)),
                kind: Some("Managed".into()),
                caching_mode: None,
            };
            for (key, value) in csi.volume_attributes.iter().flatten() {
                match key.to_ascii_lowercase().as_str() {
                    "cachingmode" if !value.is_empty() => source.caching_mode = Some(value.clone()),
                    "fstype" if !value.is_empty() => source.fs_type = Some(value.clone()),
                    _ => {}
                }
            }
            spec(&mut out).azure_disk = Some(source);
        }
        Plugin::AzureFile => azure_file(&mut out, &csi)?,
        Plugin::VsphereVolume => {
            vsphere_to_in_tree(&mut out, zone_key(plugin), "topology.csi.vmware.com/region");
            spec(&mut out).vsphere_volume = Some(VsphereVirtualDiskVolumeSource {
                volume_path: attribute("initialvolumefilepath").unwrap_or_default(),
                fs_type,
                ..Default::default()
            });
        }
        Plugin::Portworx => {
            spec(&mut out).portworx_volume = Some(PortworxVolumeSource {
                volume_id: csi.volume_handle.clone(),
                fs_type,
                read_only,
            });
        }
    }
    Ok(out)
}

fn spec(pv: &mut PersistentVolume) -> &mut k8s_openapi::api::core::v1::PersistentVolumeSpec {
    pv.spec.get_or_insert_with(Default::default)
}

fn zone_key(plugin: Plugin) -> &'static str {
    plugin.zone_key().unwrap_or_default()
}

/// A `partition` attribute as the in-tree source's number. PD writes "" for none.
fn partition(value: Option<String>, blank_is_none: bool) -> Result<Option<i32>, TranslateError> {
    match value {
        None => Ok(None),
        Some(v) if blank_is_none && v.is_empty() => Ok(None),
        Some(v) => v.parse::<i32>().map(Some).map_err(|_| TranslateError::Partition(v)),
    }
}

/// The disk's name in a PD handle (`projects/<p>/zones/<z>/disks/<name>`, or `regions/<r>`).
pub fn pd_name(handle: &str) -> Result<String, TranslateError> {
    let parts: Vec<&str> = handle.split('/').collect();
    match parts.get(5) {
        Some(name) => Ok(name.to_string()),
        None => Err(TranslateError::VolumeId {
            plugin: Plugin::GcePd.in_tree_name(),
            id: handle.to_string(),
            why: format!("{} components, 6 or more wanted", parts.len()),
        }),
    }
}

/// The disk's name in an Azure disk URI: a managed disk's resource ID
/// (`…/subscriptions/…/resourceGroups/…/providers/Microsoft.Compute/disks/<name>`) or an
/// unmanaged disk's blob URL (`http[s]://…/vhds/<name>`).
pub fn azure_disk_name(uri: &str) -> Result<String, TranslateError> {
    let unmanaged = uri.len() > 4 && uri.get(..4).is_some_and(|s| s.eq_ignore_ascii_case("http"));
    let name = if unmanaged {
        uri.find("://").and_then(|at| uri[at + 3..].rfind("/vhds/").map(|v| &uri[at + 3 + v + 6..]))
    } else {
        uri.find("/subscriptions/").and_then(|s| {
            let rest = &uri[s..];
            let group = rest.find("/resourceGroups/")?;
            let disks = rest[group..].rfind("/providers/Microsoft.Compute/disks/")?;
            Some(&rest[group + disks + "/providers/Microsoft.Compute/disks/".len()..])
        })
    };
    name.filter(|n| !n.is_empty()).map(str::to_string).ok_or_else(|| TranslateError::VolumeId {
        plugin: Plugin::AzureDisk.in_tree_name(),
        id: uri.to_string(),
        why: "neither a managed disk's resource ID nor a blob URL under /vhds/".into(),
    })
}

fn azure_file(
    pv: &mut PersistentVolume,
    csi: &k8s_openapi::api::core::v1::CSIPersistentVolumeSource,
) -> Result<(), TranslateError> {
    let mut source =
        AzureFilePersistentVolumeSource { read_only: csi.read_only, ..Default::default() };
    for (key, value) in csi.volume_attributes.iter().flatten() {
        match key.to_ascii_lowercase().as_str() {
            "sharename" => source.share_name = value.clone(),
            "secretname" => source.secret_name = value.clone(),
            "secretnamespace" => source.secret_namespace = Some(value.clone()),
            _ => {}
        }
    }
    if let Some(secret) = csi.node_stage_secret_ref.as_ref()
        && let Some(name) = secret.name.as_ref().filter(|n| !n.is_empty())
    {
        source.secret_name = name.clone();
        source.secret_namespace = Some(secret.namespace.clone().unwrap_or_default());
    }
    let mut resource_group = String::new();
    if source.share_name.is_empty() || source.secret_name.is_empty() {
        let segments: Vec<&str> = csi.volume_handle.split('#').collect();
        let [group, account, share, ..] = segments.as_slice() else {
            return Err(TranslateError::VolumeId {
                plugin: Plugin::AzureFile.in_tree_name(),
                id: csi.volume_handle.clone(),
                why: "should at least contain two #".into(),
            });
        };
        if source.share_name.is_empty() {
            source.share_name = share.to_string();
        }
        if source.secret_name.is_empty() {
            source.secret_name = format!("azure-storage-account-{account}-secret");
        }
        resource_group = group.to_string();
    }
    source.secret_namespace.get_or_insert_with(|| "default".to_string());
    spec(pv).azure_file = Some(source);
    let annotations = pv.metadata.annotations.get_or_insert_with(Default::default);
    if !resource_group.is_empty() {
        annotations.insert(AZURE_FILE_RESOURCE_GROUP.to_string(), resource_group);
    }
    Ok(())
}

fn region_error(zones: &[String], why: impl Into<String>) -> TranslateError {
    TranslateError::Region { zones: zones.to_vec(), why: why.into() }
}

fn one_region(
    zones: &[String],
    regions: std::collections::BTreeSet<String>,
) -> Result<String, TranslateError> {
    let mut regions = regions.into_iter();
    match (regions.next(), regions.next()) {
        (Some(region), None) => Ok(region),
        _ => Err(region_error(zones, "multiple or no regions")),
    }
}

/// An AWS zone's region: `us-east-1a` is in `us-east-1`; a Local or Wavelength Zone
/// (`us-west-2-lax-1a`, `us-east-1-wl1-bos-wlz-1`) in its first three parts.
pub fn aws_region(zones: &[String]) -> Result<String, TranslateError> {
    if zones.is_empty() {
        return Err(region_error(zones, "no zones specified"));
    }
    let mut regions = std::collections::BTreeSet::new();
    for zone in zones {
        let mut parts: Vec<&str> = zone.split('-').collect();
        let last = parts.last().copied().unwrap_or_default();
        if matches!(parts.len(), 3 | 4) && last.len() == 2 {
            let first = last.get(..1).unwrap_or_default();
            let region_end = parts.len() - 1;
            let joined = format!("{}-{first}", parts[..region_end].join("-"));
            regions.insert(joined);
        } else if matches!(parts.len(), 5 | 7) {
            parts.truncate(3);
            regions.insert(parts.join("-"));
        } else {
            return Err(region_error(zones, format!("{zone} is not a valid AWS zone")));
        }
    }
    one_region(zones, regions)
}

/// A GCE zone's region: `us-central1-a` is in `us-central1`.
pub fn gce_region(zones: &[String]) -> Result<String, TranslateError> {
    if zones.is_empty() {
        return Err(region_error(zones, "no zones specified"));
    }
    let mut regions = std::collections::BTreeSet::new();
    for zone in zones {
        let parts: Vec<&str> = zone.split('-').collect();
        if parts.len() != 3 {
            return Err(region_error(
                zones,
                format!("{zone} is not {{locale}}-{{region}}-{{zone}}"),
            ));
        }
        regions.insert(parts[..2].join("-"));
    }
    one_region(zones, regions)
}
