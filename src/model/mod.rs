//! What the decision modules read from Kubernetes objects, in one place: accessors over claims,
//! volumes and pods, the enums of their phases and modes, quantities and topology segments.
//!
//! Decisions read objects through these traits rather than through `spec`/`status` Option
//! chains, so that what a rule reads is named once, and so that a slimmer stored type can take
//! the k8s-openapi type's place behind the same trait.

pub mod claim;
pub mod class;
pub mod compact;
pub mod copy;
pub mod freshness;
pub mod gate;
pub mod hold;
pub mod labels;
pub mod names;
pub mod node_selector;
pub mod pod;
pub mod quantity;
pub mod reason;
pub mod topology;
pub mod turn;
pub mod volume;

pub use claim::{ClaimExt, ClaimPhase};
pub use class::{BindingMode, ClassExt};
pub use pod::PodExt;
pub use volume::{ReclaimPolicy, VolumeExt, VolumePhase};

pub use crate::model::names::{annotation, has_finalizer};

/// `at` as status conditions record it (RFC 3339, whole seconds, UTC).
pub fn condition_time(at: k8s_openapi::jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The class a claim or PV names, as the binder reads it: the beta annotation first, then the
/// field; "" if neither.
fn class_named<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    field: Option<&'a str>,
) -> &'a str {
    annotation(meta, crate::model::names::ANN_BETA_STORAGE_CLASS).or(field).unwrap_or("")
}

/// A volume mode, as claims and PVs spell it; absent means Filesystem. The API accepts only the
/// two, but a value it does not know is kept as written, so that two unknown modes compare as
/// the strings do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeMode<'a> {
    Filesystem,
    Block,
    Other(&'a str),
}

impl<'a> VolumeMode<'a> {
    pub fn from_field(field: Option<&'a str>) -> Self {
        match field {
            None | Some("Filesystem") => VolumeMode::Filesystem,
            Some("Block") => VolumeMode::Block,
            Some(other) => VolumeMode::Other(other),
        }
    }

    pub fn as_str(self) -> &'a str {
        match self {
            VolumeMode::Filesystem => "Filesystem",
            VolumeMode::Block => "Block",
            VolumeMode::Other(s) => s,
        }
    }
}

impl std::fmt::Display for VolumeMode<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An access mode of a claim or PV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccessMode {
    ReadWriteOnce,
    ReadOnlyMany,
    ReadWriteMany,
    ReadWriteOncePod,
}

impl AccessMode {
    pub const ALL: [AccessMode; 4] = [
        AccessMode::ReadWriteOnce,
        AccessMode::ReadOnlyMany,
        AccessMode::ReadWriteMany,
        AccessMode::ReadWriteOncePod,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        AccessMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::ReadWriteOnce => "ReadWriteOnce",
            AccessMode::ReadOnlyMany => "ReadOnlyMany",
            AccessMode::ReadWriteMany => "ReadWriteMany",
            AccessMode::ReadWriteOncePod => "ReadWriteOncePod",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_mode_defaults_to_filesystem_and_keeps_unknown_text() {
        let cases = [
            (None, VolumeMode::Filesystem, "Filesystem"),
            (Some("Filesystem"), VolumeMode::Filesystem, "Filesystem"),
            (Some("Block"), VolumeMode::Block, "Block"),
            (Some("Raw"), VolumeMode::Other("Raw"), "Raw"),
        ];
        for (field, mode, text) in cases {
            assert_eq!(VolumeMode::from_field(field), mode, "{field:?}");
            assert_eq!(mode.as_str(), text);
        }
        assert_ne!(VolumeMode::Other("a"), VolumeMode::Other("b"));
    }

    #[test]
    fn access_modes_round_trip() {
        for mode in AccessMode::ALL {
            assert_eq!(AccessMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(AccessMode::parse("ReadWriteSometimes"), None);
    }
}
