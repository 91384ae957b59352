//! The claim-derived parts of a CreateVolumeRequest: volume name, capacity range and volume
//! capabilities (docs/provisioning.md §3.3).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::csi::v1 as csi;
use crate::model::quantity::{self, QuantityError};
use csi::volume_capability::access_mode::Mode;
use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};

/// A claim whose request cannot become a CreateVolume call; the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("claim has no storage request (spec.resources.requests.storage)")]
    NoRequest,
    #[error("claim's storage request is unusable: {0}")]
    Request(QuantityError),
    #[error("claim's storage limit is unusable: {0}")]
    Limit(QuantityError),
    #[error(
        "claim's storage limit {limit} is below its request {request}; raise the limit or lower the request"
    )]
    LimitBelowRequest { request: String, limit: String },
    #[error("claim has no access modes")]
    NoAccessModes,
    #[error("access mode {0:?} is not one Kubernetes defines")]
    UnknownAccessMode(String),
    #[error("ReadWriteOncePod cannot be combined with other access modes")]
    ReadWriteOncePodNotAlone,
}

/// required = the request, limit = the limit when one is set (0 = none).
pub fn capacity_range(claim: &PersistentVolumeClaim) -> Result<csi::CapacityRange, ClaimError> {
    let resources = claim.spec.as_ref().and_then(|s| s.resources.as_ref());
    let request = resources
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .ok_or(ClaimError::NoRequest)?;
    let required = quantity::parse_bytes(&request.0).map_err(ClaimError::Request)?;
    let limit = match resources.and_then(|r| r.limits.as_ref()).and_then(|l| l.get("storage")) {
        Some(limit) => {
            let bytes = quantity::parse_bytes(&limit.0).map_err(ClaimError::Limit)?;
            if bytes < required {
                return Err(ClaimError::LimitBelowRequest {
                    request: request.0.clone(),
                    limit: limit.0.clone(),
                });
            }
            bytes
        }
        None => 0,
    };
    // parse_bytes never exceeds i64::MAX.
    Ok(csi::CapacityRange {
        required_bytes: i64::try_from(required).unwrap_or(i64::MAX),
        limit_bytes: i64::try_from(limit).unwrap_or(i64::MAX),
    })
}

/// CSI access modes for the claim's modes, one per mode, as csi-lib-utils maps them.
pub fn access_modes(
    modes: &[String],
    single_node_multi_writer: bool,
) -> Result<Vec<Mode>, ClaimError> {
    if modes.is_empty() {
        return Err(ClaimError::NoAccessModes);
    }
    if modes.iter().any(|m| m == "ReadWriteOncePod") && modes.len() > 1 {
        return Err(ClaimError::ReadWriteOncePodNotAlone);
    }
    modes
        .iter()
        .map(|m| match (m.as_str(), single_node_multi_writer) {
            ("ReadWriteOnce", false) => Ok(Mode::SingleNodeWriter),
            ("ReadWriteOnce", true) => Ok(Mode::SingleNodeMultiWriter),
            ("ReadWriteOncePod", false) => Ok(Mode::SingleNodeWriter),
            ("ReadWriteOncePod", true) => Ok(Mode::SingleNodeSingleWriter),
            ("ReadOnlyMany", _) => Ok(Mode::MultiNodeReaderOnly),
            ("ReadWriteMany", _) => Ok(Mode::MultiNodeMultiWriter),
            (other, _) => Err(ClaimError::UnknownAccessMode(other.to_string())),
        })
        .collect()
}

/// One capability per access mode: raw block for `volumeMode: Block`, otherwise a mount with
/// the filesystem type and the class's mount options.
pub fn volume_capabilities(
    modes: &[Mode],
    block: bool,
    fs_type: Option<&str>,
    mount_flags: &[String],
) -> Vec<csi::VolumeCapability> {
    modes
        .iter()
        .map(|mode| csi::VolumeCapability {
            access_type: Some(if block {
                AccessType::Block(BlockVolume {})
            } else {
                AccessType::Mount(MountVolume {
                    fs_type: fs_type.unwrap_or_default().to_string(),
                    mount_flags: mount_flags.to_vec(),
                    volume_mount_group: String::new(),
                })
            }),
            access_mode: Some(AccessMode { mode: *mode as i32 }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(request: Option<&str>, limit: Option<&str>) -> PersistentVolumeClaim {
        let mut c = crate::fixtures::pvc("c").access_modes(&["ReadWriteOnce"]);
        if let Some(r) = request {
            c = c.size(r);
        }
        if let Some(l) = limit {
            c = c.limit(l);
        }
        c.build()
    }

    #[test]
    fn capacity_from_request_and_limit() {
        let range = |r, l| capacity_range(&claim(r, l));
        assert_eq!(
            range(Some("1Gi"), None),
            Ok(csi::CapacityRange { required_bytes: 1 << 30, limit_bytes: 0 })
        );
        assert_eq!(
            range(Some("1Gi"), Some("2Gi")),
            Ok(csi::CapacityRange { required_bytes: 1 << 30, limit_bytes: 2 << 30 })
        );
        assert_eq!(range(None, None), Err(ClaimError::NoRequest));
        assert!(matches!(
            range(Some("1Gi"), Some("512Mi")),
            Err(ClaimError::LimitBelowRequest { .. })
        ));
        assert!(matches!(
            range(Some("lots"), None),
            Err(ClaimError::Request(QuantityError::Malformed(_)))
        ));
        assert!(matches!(
            range(Some("9Ei"), None),
            Err(ClaimError::Request(QuantityError::TooLarge(_)))
        ));
        assert!(matches!(range(Some("1Gi"), Some("x")), Err(ClaimError::Limit(_))));
    }

    #[test]
    fn access_mode_mapping() {
        let modes = |m: &[&str], snmw| {
            access_modes(&m.iter().map(|s| s.to_string()).collect::<Vec<_>>(), snmw)
        };
        type Row<'a> = (&'a [&'a str], bool, Result<Vec<Mode>, ClaimError>);
        let table: &[Row] = &[
            (&["ReadWriteOnce"], false, Ok(vec![Mode::SingleNodeWriter])),
            (&["ReadWriteOnce"], true, Ok(vec![Mode::SingleNodeMultiWriter])),
            (&["ReadWriteOncePod"], false, Ok(vec![Mode::SingleNodeWriter])),
            (&["ReadWriteOncePod"], true, Ok(vec![Mode::SingleNodeSingleWriter])),
            (&["ReadOnlyMany"], true, Ok(vec![Mode::MultiNodeReaderOnly])),
            (
                &["ReadWriteMany", "ReadOnlyMany"],
                false,
                Ok(vec![Mode::MultiNodeMultiWriter, Mode::MultiNodeReaderOnly]),
            ),
            (&[], false, Err(ClaimError::NoAccessModes)),
            (
                &["ReadWriteOncePod", "ReadOnlyMany"],
                true,
                Err(ClaimError::ReadWriteOncePodNotAlone),
            ),
            (
                &["WriteSometimes"],
                false,
                Err(ClaimError::UnknownAccessMode("WriteSometimes".into())),
            ),
        ];
        for (input, snmw, want) in table {
            assert_eq!(&modes(input, *snmw), want, "{input:?} snmw={snmw}");
        }
    }

    #[test]
    fn capabilities_for_block_and_mount() {
        let caps =
            volume_capabilities(&[Mode::SingleNodeWriter], false, Some("xfs"), &["noatime".into()]);
        assert_eq!(caps.len(), 1);
        match &caps[0].access_type {
            Some(AccessType::Mount(m)) => {
                assert_eq!(
                    (m.fs_type.as_str(), m.mount_flags.as_slice()),
                    ("xfs", &["noatime".to_string()][..])
                );
            }
            other => panic!("{other:?}"),
        }
        let caps = volume_capabilities(
            &[Mode::SingleNodeWriter, Mode::MultiNodeReaderOnly],
            true,
            Some("xfs"),
            &[],
        );
        assert_eq!(caps.len(), 2);
        assert!(caps.iter().all(|c| matches!(c.access_type, Some(AccessType::Block(_)))));
        assert_eq!(caps[1].access_mode.as_ref().map(|m| m.mode()), Some(Mode::MultiNodeReaderOnly));
    }
}
