//! The reasons of the Events we record, each with the upstream component that records it under
//! that reason: csi-provisioner, csi-resizer, or kube-controller-manager's PV binder. One enum,
//! matched exhaustively, so that a new reason must say whose it is.

/// The upstream component whose work an Event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Provisioner,
    Resizer,
    Binder,
}

/// An Event's reason, spelled as upstream spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    // csi-provisioner's.
    Provisioning,
    ProvisioningSucceeded,
    ProvisioningFailed,
    /// Ours: the claim is gone, and the volume made for it could not be cleaned up yet.
    ProvisioningCleanupFailed,
    VolumeFailedDelete,
    /// csi-provisioner v6.4's Normal event: the deletion waits for the volume's detach.
    VolumeDelete,
    VolumeDeletionRefused,
    /// Ours: beside kube-controller-manager's binder, no binder handed the claim over.
    WaitingForBinder,
    /// Ours: the driver does not list the volume a PV records (the volume reconciler).
    VolumeMissing,
    /// Ours: a pass over the object panicked (a bug), and is retried with backoff.
    InternalError,
    // csi-resizer's: expansion, then VolumeAttributesClass changes.
    Resizing,
    VolumeResizeFailed,
    FileSystemResizeRequired,
    VolumeResizeSuccessful,
    VolumeModify,
    VolumeModifyFailed,
    VolumeModifySuccessful,
    VolumeModifyCanceled,
    // kube-controller-manager's PV binder.
    ExternalProvisioning,
    FailedBinding,
    WaitForFirstConsumer,
    WaitForPodScheduled,
    VolumeMismatch,
    ClaimLost,
    ClaimMisbound,
    VolumeFailedRecycle,
    VolumeUnknownReclaimPolicy,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Provisioning => "Provisioning",
            Reason::ProvisioningSucceeded => "ProvisioningSucceeded",
            Reason::ProvisioningFailed => "ProvisioningFailed",
            Reason::ProvisioningCleanupFailed => "ProvisioningCleanupFailed",
            Reason::VolumeFailedDelete => "VolumeFailedDelete",
            Reason::VolumeDelete => "VolumeDelete",
            Reason::VolumeDeletionRefused => "VolumeDeletionRefused",
            Reason::WaitingForBinder => "WaitingForBinder",
            Reason::VolumeMissing => "VolumeMissing",
            Reason::InternalError => "InternalError",
            Reason::Resizing => "Resizing",
            Reason::VolumeResizeFailed => "VolumeResizeFailed",
            Reason::FileSystemResizeRequired => "FileSystemResizeRequired",
            Reason::VolumeResizeSuccessful => "VolumeResizeSuccessful",
            Reason::VolumeModify => "VolumeModify",
            Reason::VolumeModifyFailed => "VolumeModifyFailed",
            Reason::VolumeModifySuccessful => "VolumeModifySuccessful",
            Reason::VolumeModifyCanceled => "VolumeModifyCanceled",
            Reason::ExternalProvisioning => "ExternalProvisioning",
            Reason::FailedBinding => "FailedBinding",
            Reason::WaitForFirstConsumer => "WaitForFirstConsumer",
            Reason::WaitForPodScheduled => "WaitForPodScheduled",
            Reason::VolumeMismatch => "VolumeMismatch",
            Reason::ClaimLost => "ClaimLost",
            Reason::ClaimMisbound => "ClaimMisbound",
            Reason::VolumeFailedRecycle => "VolumeFailedRecycle",
            Reason::VolumeUnknownReclaimPolicy => "VolumeUnknownReclaimPolicy",
        }
    }

    /// Which component records it. `VolumeFailedDelete` is csi-provisioner's: the binder's
    /// own (a Delete PV no provisioner deletes) is rare enough to share it.
    pub fn role(self) -> Role {
        match self {
            Reason::Provisioning
            | Reason::ProvisioningSucceeded
            | Reason::ProvisioningFailed
            | Reason::ProvisioningCleanupFailed
            | Reason::VolumeFailedDelete
            | Reason::VolumeDelete
            | Reason::VolumeDeletionRefused
            | Reason::WaitingForBinder
            | Reason::VolumeMissing
            | Reason::InternalError => Role::Provisioner,
            Reason::Resizing
            | Reason::VolumeResizeFailed
            | Reason::FileSystemResizeRequired
            | Reason::VolumeResizeSuccessful
            | Reason::VolumeModify
            | Reason::VolumeModifyFailed
            | Reason::VolumeModifySuccessful
            | Reason::VolumeModifyCanceled => Role::Resizer,
            Reason::ExternalProvisioning
            | Reason::FailedBinding
            | Reason::WaitForFirstConsumer
            | Reason::WaitForPodScheduled
            | Reason::VolumeMismatch
            | Reason::ClaimLost
            | Reason::ClaimMisbound
            | Reason::VolumeFailedRecycle
            | Reason::VolumeUnknownReclaimPolicy => Role::Binder,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tests compare reasons with upstream's spelling.
impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
