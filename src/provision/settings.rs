//! What the flags mean to the decisions, once the driver is known: how volumes are named and
//! described. Defined here, below the decisions, so that no decision reads the process's
//! configuration; `config` builds it from the flags.

/// How this sidecar was told to name and describe volumes (flags).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The driver name from GetPluginInfo.
    pub driver: String,
    pub volume_name_prefix: String,
    pub volume_name_uuid_length: Option<usize>,
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
