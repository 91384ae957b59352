//! Where a new volume's data comes from, and whether we can honour it. A data source we cannot
//! honour is an error the user sees, never an empty volume: the claim stays Pending with a
//! Warning that names what to change.
//!
//! Sources, read from `spec.dataSource`, else `spec.dataSourceRef`:
//!
//! | source | what happens |
//! |---|---|
//! | none | an empty volume |
//! | a claim (core group) | a clone: CreateVolume with the source PV's handle (CLONE_VOLUME) |
//! | a `snapshot.storage.k8s.io` VolumeSnapshot | a restore: the content's snapshot handle |
//! | in another namespace | refused: cross-namespace data sources are not supported |
//! | any other kind | left to a volume populator, if the cluster serves that kind |

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::facts::{PlanError, PlanFacts};
pub use super::facts::{SNAPSHOT_GROUP, Source, of};
use crate::csi::v1 as csi;
use crate::model::names::*;
use crate::model::quantity;
use crate::model::{ClaimExt, VolumeExt};

/// The driver capabilities a data source needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceSupport {
    pub clone: bool,
    pub snapshot: bool,
    /// `--prevent-volume-mode-conversion`.
    pub prevent_mode_conversion: bool,
}

/// The CreateVolume content source for `claim`, or why it cannot have one.
pub fn content_source(
    claim: &PersistentVolumeClaim,
    required_bytes: i64,
    driver: &str,
    support: SourceSupport,
    facts: PlanFacts<'_>,
) -> Result<Option<csi::VolumeContentSource>, PlanError> {
    match of(claim) {
        Source::Empty | Source::Populator { .. } => Ok(None),
        Source::CrossNamespace { kind, namespace, name } => {
            Err(PlanError::CrossNamespace { kind, namespace, name })
        }
        Source::Clone { name } if !support.clone => {
            Err(PlanError::CloneUnsupported(name, driver.to_string()))
        }
        Source::Clone { name } => {
            clone_source(&name, claim, required_bytes, driver, facts).map(Some)
        }
        Source::Snapshot { name } if !support.snapshot => {
            Err(PlanError::SnapshotUnsupported(name, driver.to_string()))
        }
        Source::Snapshot { name } => super::snapshot::restore_source(
            &name,
            claim,
            required_bytes,
            driver,
            support.prevent_mode_conversion,
            facts,
        )
        .map(Some),
    }
}

/// The source volume of a clone, checked as external-provisioner checks it.
fn clone_source(
    name: &str,
    claim: &PersistentVolumeClaim,
    required_bytes: i64,
    driver: &str,
    facts: PlanFacts<'_>,
) -> Result<csi::VolumeContentSource, PlanError> {
    let fail = |reason: &str| PlanError::CloneSource {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let source_claim =
        facts.claim.ok_or_else(|| fail("it does not exist in the claim's namespace"))?;
    if source_claim.metadata.deletion_timestamp.is_some()
        && !(facts.in_flight && has_clone_protection(source_claim))
    {
        return Err(fail("it is being deleted"));
    }
    if !source_claim.is_bound() {
        return Err(fail("it is not Bound yet"));
    }
    let source_request = source_claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage").cloned());
    if let Some(q) = source_request
        && let Ok(bytes) = quantity::parse_bytes(&q.0)
        && i64::try_from(bytes).unwrap_or(i64::MAX) > required_bytes
    {
        return Err(fail(&format!("the new claim requests less than the source's {}", q.0)));
    }
    if source_claim.volume_mode() != claim.volume_mode() {
        return Err(fail("its volumeMode differs from the new claim's"));
    }
    let volume = facts.volume.ok_or_else(|| fail("its PersistentVolume is not found"))?;
    let csi_source = volume
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .ok_or_else(|| fail("its PersistentVolume is not a CSI volume"))?;
    if csi_source.driver != driver {
        return Err(fail(&format!(
            "its volume belongs to driver {}, not {driver}",
            csi_source.driver
        )));
    }
    if volume.claim_ref_uid() != source_claim.metadata.uid.as_deref() {
        return Err(fail("its PersistentVolume is bound to another claim"));
    }
    Ok(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Volume(
            csi::volume_content_source::VolumeSource {
                volume_id: csi_source.volume_handle.clone(),
            },
        )),
    })
}

/// The source claim carries the cloning-protection finalizer.
pub fn has_clone_protection(claim: &PersistentVolumeClaim) -> bool {
    has_finalizer(&claim.metadata, FINALIZER_CLONING_PROTECTION)
}

/// The source is on its way out and protected: whether the protection may go is the next
/// question (`release_clone_protection`).
pub fn protection_pending(source: &PersistentVolumeClaim) -> bool {
    has_clone_protection(source) && source.metadata.deletion_timestamp.is_some()
}

/// The source claim must be protected before a CreateVolume that clones it: the claim of a
/// clone named in a plan, when its finalizer is missing. None: nothing to protect.
pub fn unprotected_clone_source<'a>(facts: &PlanFacts<'a>) -> Option<&'a PersistentVolumeClaim> {
    facts.claim.filter(|c| !has_clone_protection(c))
}

/// The protection of `source` may go: it is on its way out and no clone of it is in flight.
/// `clones` are the claims of its namespace; `in_flight` says whether one of them may have a
/// CreateVolume under way (it carries our intent: a finalizer or a journal entry).
pub fn release_clone_protection<'a>(
    source: &PersistentVolumeClaim,
    clones: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    in_flight: impl Fn(&PersistentVolumeClaim) -> bool,
) -> bool {
    if !protection_pending(source) {
        return false;
    }
    let name = source.metadata.name.as_deref().unwrap_or_default();
    !clones.into_iter().any(|c| of(c) == (Source::Clone { name: name.into() }) && in_flight(c))
}

/// The source claim a clone reads from, as (namespace, name), to queue it when the clone moves.
pub fn clone_source_key(claim: &PersistentVolumeClaim) -> Option<(String, String)> {
    match of(claim) {
        Source::Clone { name } => Some((claim.metadata.namespace.clone()?, name)),
        _ => None,
    }
}

/// A populator's kind the cluster does not serve cannot be filled by anyone: (warning, message).
pub fn populator_notice(group: &str, kind: &str, name: &str, served: bool) -> (bool, String) {
    let what = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    if served {
        (false, "Assuming an external populator will provision the volume".into())
    } else {
        (
            true,
            format!(
                "data source {what} {name:?} cannot be filled: the cluster does not serve kind {what}, so no volume populator can exist for it. Install the populator of that kind, or correct the claim's dataSourceRef; no empty volume is made instead"
            ),
        )
    }
}

#[cfg(test)]
mod tests;
