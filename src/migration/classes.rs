//! An in-tree StorageClass as its CSI driver reads it: parameters renamed or dropped, the zone
//! parameters and `allowedTopologies` in the driver's zone key.

use std::collections::BTreeMap;

use k8s_openapi::api::storage::v1::StorageClass;

use super::topology::{allowed_from_zones, allowed_to_csi};
use super::{Plugin, TranslateError};

const FS_TYPE: &str = "fstype";
const CSI_FS_TYPE: &str = "csi.storage.k8s.io/fstype";

/// The class as `plugin`'s CSI driver is asked with. Parameter names are matched without
/// regard to case, as the in-tree plugins read them; names kept are kept as written.
pub fn class_to_csi(plugin: Plugin, class: &StorageClass) -> Result<StorageClass, TranslateError> {
    let mut out = class.clone();
    let parameters = class.parameters.clone().unwrap_or_default();
    let allowed = class.allowed_topologies.as_deref().unwrap_or_default();
    match plugin {
        Plugin::AwsEbs | Plugin::GcePd | Plugin::AzureDisk => {
            let (params, zones) = zonal(plugin, parameters);
            let key = zone(plugin);
            out.allowed_topologies = match zones {
                Some(_) if !allowed.is_empty() => {
                    return Err(TranslateError::ZonesAndAllowedTopologies);
                }
                Some(zones) => Some(allowed_from_zones(key, zones)),
                None if allowed.is_empty() => class.allowed_topologies.clone(),
                None => Some(allowed_to_csi(allowed, key)),
            };
            if plugin == Plugin::AzureDisk {
                blank_fault_domains(&mut out, key);
            }
            out.parameters = Some(params);
        }
        Plugin::Cinder => {
            let params = parameters.into_iter().map(|(k, v)| (fs_type_renamed(k), v)).collect();
            out.parameters = Some(params);
            if !allowed.is_empty() {
                out.allowed_topologies = Some(allowed_to_csi(allowed, zone(plugin)));
            }
        }
        Plugin::AzureFile => {}
        Plugin::VsphereVolume => {
            out.parameters = Some(vsphere(parameters));
            if !allowed.is_empty() {
                out.allowed_topologies = Some(allowed_to_csi(allowed, zone(plugin)));
            }
        }
        Plugin::Portworx => {
            let params = portworx(parameters);
            if !params.is_empty() {
                out.parameters = Some(params);
            }
            out.provisioner = plugin.csi_driver().to_string();
        }
    }
    Ok(out)
}

/// The plugin's zone key; every plugin whose classes name zones has one (a table holds it).
fn zone(plugin: Plugin) -> &'static str {
    plugin.zone_key().unwrap_or_default()
}

fn fs_type_renamed(key: String) -> String {
    if key.eq_ignore_ascii_case(FS_TYPE) { CSI_FS_TYPE.to_string() } else { key }
}

/// The parameters of EBS, PD and Azure Disk, and the zones their `zone`/`zones` name (the
/// later key in name order wins when a class has both, as each replaces the other).
fn zonal(
    plugin: Plugin,
    parameters: BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Option<Vec<String>>) {
    let mut params = BTreeMap::new();
    let mut zones = None;
    for (key, value) in parameters {
        match key.to_ascii_lowercase().as_str() {
            "zone" => zones = Some(vec![value]),
            "zones" => zones = Some(value.split(',').map(str::to_string).collect()),
            // Azure Disk's driver reads `fstype` itself.
            FS_TYPE if plugin != Plugin::AzureDisk => {
                params.insert(CSI_FS_TYPE.to_string(), value);
            }
            // EBS: the in-tree plugin raised IOPS to the volume's minimum; the driver does so
            // only when asked.
            "iopspergb" if plugin == Plugin::AwsEbs => {
                params.insert(key, value);
                params.insert("allowautoiopspergbincrease".to_string(), "true".to_string());
            }
            _ => {
                params.insert(key, value);
            }
        }
    }
    (params, zones)
}

/// Azure Disk in a region without zones names fault domains ("0", "1") where zones would be;
/// the driver's topology has no zone there, so those values become "".
fn blank_fault_domains(class: &mut StorageClass, key: &str) {
    let terms = class.allowed_topologies.iter_mut().flatten();
    for expression in terms.flat_map(|t| t.match_label_expressions.iter_mut().flatten()) {
        if expression.key == key {
            for value in &mut expression.values {
                if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
                    value.clear();
                }
            }
        }
    }
}

/// vSphere: the storage policy kept, the vSAN and datastore parameters under the names the
/// driver reads in migration, anything else dropped, and `csimigration` set.
fn vsphere(parameters: BTreeMap<String, String>) -> BTreeMap<String, String> {
    const RENAMED: &[&str] = &[
        "datastore",
        "diskformat",
        "hostfailurestotolerate",
        "forceprovisioning",
        "cachereservation",
        "diskstripes",
        "objectspacereservation",
        "iopslimit",
    ];
    let mut params = BTreeMap::new();
    for (key, value) in parameters {
        let lower = key.to_ascii_lowercase();
        if lower == FS_TYPE {
            params.insert(CSI_FS_TYPE.to_string(), value);
        } else if lower == "storagepolicyname" {
            params.insert(lower, value);
        } else if RENAMED.contains(&lower.as_str()) {
            params.insert(format!("{lower}-migrationparam"), value);
        }
    }
    params.insert("csimigration".to_string(), "true".to_string());
    params
}

/// Portworx: its auth secret becomes every CSI secret of the class.
fn portworx(parameters: BTreeMap<String, String>) -> BTreeMap<String, String> {
    const SECRETS: &[&str] = &[
        "provisioner",
        "controller-publish",
        "node-publish",
        "node-stage",
        "controller-expand",
        "node-expand",
    ];
    let mut params = BTreeMap::new();
    for (key, value) in parameters {
        let suffix = match key.to_ascii_lowercase().as_str() {
            "openstorage.io/auth-secret-name" => "name",
            "openstorage.io/auth-secret-namespace" => "namespace",
            _ => {
                params.insert(key, value);
                continue;
            }
        };
        for secret in SECRETS {
            params.insert(format!("csi.storage.k8s.io/{secret}-secret-{suffix}"), value.clone());
        }
    }
    params
}
