//! The decisions' settings (`provision::settings`) built from the flags, once the driver is
//! known. Process-wide, set once at start.

use super::Config;
use crate::provision::settings::{Settings, TopologyOptions, VolumeNaming};

impl Config {
    /// How volumes are named (`--volume-name-prefix`, `--volume-name-uuid-length`).
    pub fn volume_naming(&self) -> VolumeNaming {
        VolumeNaming { prefix: self.volume_name_prefix.clone(), uuid_length: self.uuid_length() }
    }

    /// The settings for `driver`, whose PVs carry `identity`.
    pub fn settings(&self, driver: &str, identity: String) -> Settings {
        Settings {
            driver: driver.to_string(),
            naming: self.volume_naming(),
            default_fs_type: Some(self.default_fstype.clone()).filter(|f| !f.is_empty()),
            extra_create_metadata: self.extra_create_metadata,
            controller_publish_readonly: self.controller_publish_readonly,
            identity,
            prevent_volume_mode_conversion: self.prevent_volume_mode_conversion,
            topology: TopologyOptions {
                strict: self.strict_topology,
                immediate: self.immediate_topology,
            },
            extra_modify_metadata: self.extra_modify_metadata,
        }
    }
}

/// `<unix-ms>-<0..9999>-<driver>`, as upstream's csiProvisionerIdentity.
pub fn provisioner_identity(driver: &str) -> String {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let salt = (now.subsec_nanos() ^ std::process::id()) % 10_000;
    format!("{}-{salt}-{driver}", now.as_millis())
}
