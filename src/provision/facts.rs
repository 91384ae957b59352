//! What a plan is made from beside the claim and its class, and why it may fail: the driver's
//! features, the facts read about the data source and the VolumeAttributesClass, the kinds of
//! data source, the VolumeSnapshot as read, and the plan's errors. Below `plan`, `source` and
//! `snapshot`, which all read them, so that none of the three needs another's types.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttributesClass;

use super::parameters::ParameterError;
use super::request::ClaimError;
use super::secrets::TemplateError;

/// The driver capabilities that change what a plan may contain.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features {
    pub single_node_multi_writer: bool,
    pub clone: bool,
    pub snapshot: bool,
    pub modify: bool,
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS: CreateVolume carries topology requirements.
    pub topology: bool,
    /// `--feature-gates=VolumeAttributesClass=false`: a claim's class is left out of
    /// CreateVolume and of its PV, as csi-provisioner does with the gate off.
    pub attributes_classes_off: bool,
}

/// What the stores and the API say about the objects a plan reads beside the claim and its
/// class: the data source, and the VolumeAttributesClass.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanFacts<'a> {
    /// The claim a clone reads from, and its PV.
    pub claim: Option<&'a PersistentVolumeClaim>,
    pub volume: Option<&'a PersistentVolume>,
    /// The VolumeSnapshot a restore reads from, read live (None: not looked up).
    pub snapshot: Option<&'a SnapshotLookup>,
    /// The new claim holds our intent, so a CreateVolume that copies the source may be under
    /// way (or is replayed to find the volume of a claim given up): a source on its way out
    /// still serves as long as our protection holds it. New clones of it are refused.
    pub in_flight: bool,
    /// The plan only finds the volume of a claim given up (`Abandon`): a data source that can
    /// no longer be read (a snapshot deleted with its content while we were down) is left out.
    /// CreateVolume finds an existing volume by its name, and the spec does not count the
    /// source in what must match; a volume never made comes back empty, and is deleted.
    pub probe: bool,
    /// The claim's VolumeAttributesClass, when it names one and the class exists.
    pub attributes_class: Option<&'a VolumeAttributesClass>,
}

/// Why a claim cannot be provisioned as it stands; the text tells the user what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Parameters(#[from] ParameterError),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error("StorageClass {0:?} not found; create it or correct the claim's storageClassName")]
    MissingClass(String),
    #[error("claim Selector is not supported for dynamic provisioning; remove spec.selector")]
    Selector,
    #[error(
        "the claim clones PersistentVolumeClaim {0:?}, but driver {1} does not support cloning (no CLONE_VOLUME capability)"
    )]
    CloneUnsupported(String, String),
    #[error("cannot clone PersistentVolumeClaim {name:?}: {reason}")]
    CloneSource { name: String, reason: String },
    #[error(
        "the claim restores VolumeSnapshot {0:?}, but driver {1} cannot restore snapshots (no CREATE_DELETE_SNAPSHOT capability)"
    )]
    SnapshotUnsupported(String, String),
    #[error("cannot restore VolumeSnapshot {name:?}: {reason}")]
    SnapshotSource { name: String, reason: String },
    #[error(
        "the claim's dataSourceRef names {kind} {name:?} in namespace {namespace:?}; cross-namespace data sources are not supported (feature gate CrossNamespaceVolumeDataSource). Copy the source into the claim's namespace, or restore it there"
    )]
    CrossNamespace { kind: String, namespace: String, name: String },
    #[error(
        "the claim asks for VolumeAttributesClass {0:?}, but driver {1} cannot apply one (no MODIFY_VOLUME capability, or the cluster does not serve storage.k8s.io/v1 VolumeAttributesClass)"
    )]
    AttributesClassUnsupported(String, String),
    #[error(
        "VolumeAttributesClass {0:?} not found; create it or correct the claim's volumeAttributesClassName"
    )]
    AttributesClassMissing(String),
    #[error("{0}")]
    AttributesClassDriver(String),
    /// An in-tree class the CSI migration translation refuses.
    #[error("failed to translate storage class: {0}")]
    Migration(#[from] crate::migration::TranslateError),
}

/// The API group of VolumeSnapshots.
pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

/// A claim's data source, sorted by who fills the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Empty,
    /// Another claim of the same namespace.
    Clone {
        name: String,
    },
    /// A VolumeSnapshot of the same namespace.
    Snapshot {
        name: String,
    },
    /// A kind neither we nor the driver fill: a volume populator's.
    Populator {
        group: String,
        kind: String,
        name: String,
    },
    /// A `dataSourceRef` into another namespace.
    CrossNamespace {
        kind: String,
        namespace: String,
        name: String,
    },
}

impl Source {
    /// The kind, for metrics and messages ("" for an empty volume).
    pub fn kind(&self) -> &str {
        match self {
            Source::Empty => "",
            Source::Clone { .. } => "PersistentVolumeClaim",
            Source::Snapshot { .. } => "VolumeSnapshot",
            Source::Populator { kind, .. } | Source::CrossNamespace { kind, .. } => kind,
        }
    }
}

/// The claim's data source. `dataSource` wins; the API server mirrors a same-namespace
/// `dataSourceRef` into it, but not one that names another namespace.
pub fn of(claim: &PersistentVolumeClaim) -> Source {
    let Some(spec) = claim.spec.as_ref() else {
        return Source::Empty;
    };
    let own = claim.metadata.namespace.as_deref().unwrap_or_default();
    let (group, kind, name) = if let Some(s) = &spec.data_source {
        (s.api_group.clone(), s.kind.clone(), s.name.clone())
    } else if let Some(r) = &spec.data_source_ref {
        if let Some(ns) = r.namespace.as_deref().filter(|ns| *ns != own) {
            return Source::CrossNamespace {
                kind: r.kind.clone(),
                namespace: ns.to_string(),
                name: r.name.clone(),
            };
        }
        (r.api_group.clone(), r.kind.clone(), r.name.clone())
    } else {
        return Source::Empty;
    };
    let group = group.unwrap_or_default();
    match (group.as_str(), kind.as_str()) {
        ("", "PersistentVolumeClaim") => Source::Clone { name },
        (SNAPSHOT_GROUP, "VolumeSnapshot") => Source::Snapshot { name },
        _ => Source::Populator { group, kind, name },
    }
}

/// The VolumeSnapshot a claim restores from, as the API answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotLookup {
    /// The cluster does not serve `snapshot.storage.k8s.io/v1`.
    Unserved,
    Missing,
    /// The API refused the read (RBAC, most likely): the text says why.
    Unreadable(String),
    Found(Box<Snapshot>),
}

/// The fields of a VolumeSnapshot (and its bound content) a restore reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub deleting: bool,
    /// Held by `snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection`.
    pub protected: bool,
    /// Held by our `FINALIZER_RESTORE_PROTECTION`.
    pub held: bool,
    pub finalizers: Vec<String>,
    pub resource_version: String,
    pub ready: bool,
    /// `status.restoreSize`, as written.
    pub restore_size: Option<String>,
    pub content_name: Option<String>,
    /// `status.error.message`, for the user.
    pub error: Option<String>,
    /// The bound VolumeSnapshotContent, when it exists.
    pub content: Option<Content>,
}

/// The fields of a VolumeSnapshotContent a restore reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Content {
    pub name: String,
    pub driver: String,
    pub handle: Option<String>,
    /// `spec.volumeSnapshotRef`: (namespace, name, uid).
    pub snapshot_ref: (String, String, String),
    pub source_volume_mode: Option<String>,
    /// `snapshot.storage.kubernetes.io/allow-volume-mode-change: "true"`.
    pub allow_mode_change: bool,
}
