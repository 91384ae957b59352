//! Which deadline a call to the driver gets: csi-provisioner and csi-resizer each had their own
//! `--timeout`, csi-resizer v2.3 a deadline per call as well (`--resize-timeout`,
//! `--modify-timeout`), and a container that runs both sidecars' args keeps each for its own
//! calls.

use std::time::Duration;

/// Both sidecars' `--timeout` default, and csi-resizer's `--resize-timeout` and
/// `--modify-timeout` defaults.
pub const SIDECAR_DEFAULT: Duration = Duration::from_secs(10);

/// The deadline of each sidecar's calls, where the flags set one; unset: `--timeout`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoleTimeouts {
    /// CreateVolume, DeleteVolume and GetCapacity, csi-provisioner's calls.
    pub provision: Option<Duration>,
    /// ControllerExpandVolume, csi-resizer's.
    pub expand: Option<Duration>,
    /// ControllerModifyVolume, csi-resizer's.
    pub modify: Option<Duration>,
}

impl RoleTimeouts {
    /// The deadline of a call to `method`: its own timeout, else `default`.
    pub fn for_method(&self, method: &str, default: Duration) -> Duration {
        let own = match method {
            "CreateVolume" | "DeleteVolume" | "GetCapacity" => self.provision,
            "ControllerExpandVolume" => self.expand,
            "ControllerModifyVolume" => self.modify,
            _ => None,
        };
        own.unwrap_or(default)
    }

    /// The longest deadline any call can have.
    pub fn longest(&self, default: Duration) -> Duration {
        [self.provision, self.expand, self.modify]
            .into_iter()
            .flatten()
            .fold(default, Duration::max)
    }
}
