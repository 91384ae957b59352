//! The driver's capabilities, read once at start and after a reconnect.

use std::collections::BTreeSet;
use std::fmt;

use super::proto::v1::{
    ControllerServiceCapability, PluginCapability, controller_service_capability, plugin_capability,
};

pub use controller_service_capability::rpc::Type as ControllerCapability;

/// How the driver grows volumes, from the plugin-level VolumeExpansion capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpansionMode {
    /// The volume may be grown while a workload uses it.
    Online,
    /// The volume must not be in use while it grows.
    Offline,
}

/// Plugin-level capabilities (GetPluginCapabilities).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginCapabilities {
    pub controller_service: bool,
    pub accessibility_constraints: bool,
    pub group_controller_service: bool,
    pub expansion: Option<ExpansionMode>,
}

impl PluginCapabilities {
    /// Folds the driver's list; repeated entries are harmless (hostpathplugin sends some twice),
    /// unknown ones are ignored.
    pub fn from_response(capabilities: &[PluginCapability]) -> Self {
        use plugin_capability::service::Type as Service;
        use plugin_capability::volume_expansion::Type as Expansion;
        let mut caps = PluginCapabilities::default();
        for cap in capabilities {
            match &cap.r#type {
                Some(plugin_capability::Type::Service(s)) => match s.r#type() {
                    Service::ControllerService => caps.controller_service = true,
                    Service::VolumeAccessibilityConstraints => {
                        caps.accessibility_constraints = true;
                    }
                    Service::GroupControllerService => caps.group_controller_service = true,
                    // Snapshots are csi-snapshotter's: nothing of ours changes with them.
                    Service::Unknown
                    | Service::SnapshotMetadataService
                    | Service::SnapshotAccessibilityConstraints => {}
                },
                Some(plugin_capability::Type::VolumeExpansion(e)) => match e.r#type() {
                    Expansion::Online => caps.expansion = Some(ExpansionMode::Online),
                    // Online wins if a driver claims both: it is the weaker requirement on us.
                    Expansion::Offline if caps.expansion.is_none() => {
                        caps.expansion = Some(ExpansionMode::Offline);
                    }
                    _ => {}
                },
                None => {}
            }
        }
        caps
    }
}

/// Controller-level capabilities (ControllerGetCapabilities), as a set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ControllerCapabilities(BTreeSet<i32>);

impl ControllerCapabilities {
    pub fn from_response(capabilities: &[ControllerServiceCapability]) -> Self {
        let set = capabilities
            .iter()
            .filter_map(|c| {
                c.r#type.as_ref().map(|controller_service_capability::Type::Rpc(rpc)| rpc.r#type)
            })
            .filter(|t| *t != ControllerCapability::Unknown as i32)
            .collect();
        ControllerCapabilities(set)
    }

    pub fn has(&self, capability: ControllerCapability) -> bool {
        self.0.contains(&(capability as i32))
    }

    /// Names as the spec spells them, for logs.
    pub fn names(&self) -> Vec<&'static str> {
        self.0
            .iter()
            .map(|t| {
                ControllerCapability::try_from(*t)
                    .map(|c| c.as_str_name())
                    .unwrap_or("UNRECOGNIZED")
            })
            .collect()
    }
}

impl FromIterator<ControllerCapability> for ControllerCapabilities {
    fn from_iter<I: IntoIterator<Item = ControllerCapability>>(iter: I) -> Self {
        ControllerCapabilities(iter.into_iter().map(|c| c as i32).collect())
    }
}

impl fmt::Debug for ControllerCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::proto::v1::controller_service_capability::Rpc;
    use crate::csi::proto::v1::plugin_capability::{Service, VolumeExpansion};

    fn rpc(t: ControllerCapability) -> ControllerServiceCapability {
        ControllerServiceCapability {
            r#type: Some(controller_service_capability::Type::Rpc(Rpc { r#type: t as i32 })),
        }
    }

    #[test]
    fn controller_capabilities_tolerate_duplicates_and_unknown_values() {
        let caps = ControllerCapabilities::from_response(&[
            rpc(ControllerCapability::CreateDeleteVolume),
            rpc(ControllerCapability::ListSnapshots),
            rpc(ControllerCapability::ListSnapshots),
            ControllerServiceCapability {
                r#type: Some(controller_service_capability::Type::Rpc(Rpc { r#type: 999 })),
            },
            ControllerServiceCapability { r#type: None },
        ]);
        assert!(caps.has(ControllerCapability::CreateDeleteVolume));
        assert!(caps.has(ControllerCapability::ListSnapshots));
        assert!(!caps.has(ControllerCapability::ExpandVolume));
        assert_eq!(caps.names(), vec!["CREATE_DELETE_VOLUME", "LIST_SNAPSHOTS", "UNRECOGNIZED"]);
    }

    #[test]
    fn plugin_capabilities_fold() {
        let service = |t: plugin_capability::service::Type| PluginCapability {
            r#type: Some(plugin_capability::Type::Service(Service { r#type: t as i32 })),
        };
        let expansion = |t: plugin_capability::volume_expansion::Type| PluginCapability {
            r#type: Some(plugin_capability::Type::VolumeExpansion(VolumeExpansion {
                r#type: t as i32,
            })),
        };
        let caps = PluginCapabilities::from_response(&[
            service(plugin_capability::service::Type::ControllerService),
            service(plugin_capability::service::Type::VolumeAccessibilityConstraints),
            expansion(plugin_capability::volume_expansion::Type::Offline),
            expansion(plugin_capability::volume_expansion::Type::Online),
        ]);
        assert!(caps.controller_service);
        assert!(caps.accessibility_constraints);
        assert!(!caps.group_controller_service);
        assert_eq!(caps.expansion, Some(ExpansionMode::Online));
        assert_eq!(PluginCapabilities::from_response(&[]), PluginCapabilities::default());
    }
}
