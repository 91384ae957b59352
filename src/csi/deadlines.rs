//! Which deadline a call to the driver gets: csi-provisioner and csi-resizer each had their own
//! `--timeout`, and a container that runs both sidecars' args keeps each for its own calls.

use std::time::Duration;

/// Each role's `--timeout`, where its args were marked; unset: the last `--timeout`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoleTimeouts {
    /// CreateVolume, DeleteVolume and GetCapacity, csi-provisioner's calls.
    pub provision: Option<Duration>,
    /// ControllerExpandVolume and ControllerModifyVolume, csi-resizer's calls.
    pub resize: Option<Duration>,
}

impl RoleTimeouts {
    /// The deadline of a call to `method`: its role's timeout, else `default`.
    pub fn for_method(&self, method: &str, default: Duration) -> Duration {
        let own = match method {
            "CreateVolume" | "DeleteVolume" | "GetCapacity" => self.provision,
            "ControllerExpandVolume" | "ControllerModifyVolume" => self.resize,
            _ => None,
        };
        own.unwrap_or(default)
    }

    /// The longest deadline any call can have.
    pub fn longest(&self, default: Duration) -> Duration {
        [self.provision, self.resize].into_iter().flatten().fold(default, Duration::max)
    }
}
