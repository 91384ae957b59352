//! What the flags mean to the decisions, once the driver is known: how volumes are named and
//! described. Defined here, below the decisions, so that no decision reads the process's
//! configuration; `config` builds it from the flags.

/// How this sidecar was told to name and describe volumes (flags).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The driver name from GetPluginInfo.
    pub driver: String,
    /// `--volume-name-prefix` and `--volume-name-uuid-length`.
    pub naming: VolumeNaming,
    pub default_fs_type: Option<String>,
    pub extra_create_metadata: bool,
    pub controller_publish_readonly: bool,
    /// `storage.kubernetes.io/csiProvisionerIdentity` for the PVs of this process.
    pub identity: String,
    /// `--prevent-volume-mode-conversion`: a restore keeps the snapshot's volume mode.
    pub prevent_volume_mode_conversion: bool,
    /// `--strict-topology` and `--immediate-topology`.
    pub topology: TopologyOptions,
    /// `--extra-modify-metadata`: ControllerModifyVolume gets the claim's and PV's names.
    pub extra_modify_metadata: bool,
}

/// How a claim's volume is named: `<prefix>-<claim uid>`, or with `uuid_length` the UID
/// without dashes cut to that many characters (csi-provisioner's `--volume-name-prefix` and
/// `--volume-name-uuid-length`). The name is both the CSI volume name (the idempotency key)
/// and the PV name; every place that needs it asks this one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeNaming {
    pub prefix: String,
    pub uuid_length: Option<usize>,
}

impl VolumeNaming {
    /// The volume of the claim with this UID.
    pub fn for_uid(&self, claim_uid: &str) -> String {
        let prefix = &self.prefix;
        match self.uuid_length {
            None => format!("{prefix}-{claim_uid}"),
            Some(n) => {
                let compact: String = claim_uid.chars().filter(|c| *c != '-').take(n).collect();
                format!("{prefix}-{compact}")
            }
        }
    }

    /// The volume of `claim`.
    pub fn for_claim(&self, claim: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> String {
        self.for_uid(claim.metadata.uid.as_deref().unwrap_or_default())
    }
}

/// How csi-provisioner's topology flags are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyOptions {
    /// `--strict-topology`: delayed binding asks for the selected node's segment only.
    pub strict: bool,
    /// `--immediate-topology`: immediate binding without allowedTopologies asks for the
    /// segments of every node the driver is on.
    pub immediate: bool,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        TopologyOptions { strict: false, immediate: true }
    }
}

#[cfg(test)]
mod tests {
    use super::VolumeNaming;

    #[test]
    fn volume_names_carry_the_claim_uid_whole_or_cut() {
        let uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
        let naming =
            |prefix: &str, uuid_length| VolumeNaming { prefix: prefix.into(), uuid_length };
        assert_eq!(naming("pvc", None).for_uid(uid), format!("pvc-{uid}"));
        assert_eq!(naming("vol", Some(8)).for_uid(uid), "vol-1b4e28ba");
        assert_eq!(naming("pvc", Some(100)).for_uid(uid), "pvc-1b4e28ba2fa111d2883f0016d3cca427");
    }
}
