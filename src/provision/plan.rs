//! Everything a CreateVolume for one claim needs, worked out before any call is made: the request
//! (without secret contents, which the executor reads), the provisioner secret to read, and the PV
//! to record once the driver answers. Building a plan is where bad input is caught, so that a
//! claim that cannot be served gets a clear message and nothing is created.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, SecretReference, TypedLocalObjectReference,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::parameters::{self, ParameterError, SecretKind};
use super::request::{self, ClaimError};
use super::secrets::{self, SecretRef, TemplateError, TemplateInput};
use crate::cluster::quantity;
use crate::csi::v1 as csi;
use crate::names::*;

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
}

/// The driver capabilities that change what a plan may contain.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features {
    pub single_node_multi_writer: bool,
    pub clone: bool,
    pub snapshot: bool,
    pub modify: bool,
}

/// A claim the plan clones from, as found in the stores.
#[derive(Debug, Clone, Copy, Default)]
pub struct CloneSource<'a> {
    pub claim: Option<&'a PersistentVolumeClaim>,
    pub volume: Option<&'a PersistentVolume>,
}

/// A CreateVolume worked out for one claim.
#[derive(Debug, Clone)]
pub struct Plan {
    pub volume_name: String,
    /// The request, with `secrets` left empty.
    pub request: csi::CreateVolumeRequest,
    pub provisioner_secret: Option<SecretRef>,
    /// The PV to record, complete but for what the driver's answer fills in.
    pub volume: PersistentVolume,
    pub requested_bytes: i64,
    /// The class asks to retain volumes: a volume made for a claim that went away is recorded in
    /// a PV (which ends Released) rather than deleted.
    pub retain: bool,
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
        "the claim restores VolumeSnapshot {0:?}; restoring from snapshots is not supported by csi-pv-controller yet"
    )]
    Snapshot(String),
    #[error(
        "the claim asks for VolumeAttributesClass {0:?}; volume attributes classes are not supported by csi-pv-controller yet"
    )]
    AttributesClass(String),
}

/// A data source neither this sidecar nor the driver serves: a volume populator will.
pub fn populator_source(claim: &PersistentVolumeClaim) -> Option<TypedLocalObjectReference> {
    let source = data_source(claim)?;
    let group = source.api_group.as_deref().unwrap_or_default();
    let known = (group.is_empty() && source.kind == "PersistentVolumeClaim")
        || (group == "snapshot.storage.k8s.io" && source.kind == "VolumeSnapshot");
    (!known).then_some(source)
}

fn data_source(claim: &PersistentVolumeClaim) -> Option<TypedLocalObjectReference> {
    let spec = claim.spec.as_ref()?;
    spec.data_source.clone().or_else(|| {
        spec.data_source_ref
            .as_ref()
            .filter(|r| r.namespace.is_none())
            .map(|r| TypedLocalObjectReference {
                api_group: r.api_group.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
            })
    })
}

/// The CSI volume name and PV name for `claim`.
pub fn volume_name_for(claim: &PersistentVolumeClaim, settings: &Settings) -> String {
    request::volume_name(
        &settings.volume_name_prefix,
        claim.metadata.uid.as_deref().unwrap_or_default(),
        settings.volume_name_uuid_length,
    )
}

/// The claim's class name: the beta annotation first, as the binder reads it.
pub fn class_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_BETA_STORAGE_CLASS))
        .map(String::as_str)
        .or_else(|| claim.spec.as_ref()?.storage_class_name.as_deref())
}

/// Works out the CreateVolume call and the PV for `claim` of `class`.
pub fn build(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    settings: &Settings,
    features: Features,
    source: CloneSource<'_>,
) -> Result<Plan, PlanError> {
    let spec = claim.spec.clone().unwrap_or_default();
    if spec.selector.is_some() {
        return Err(PlanError::Selector);
    }
    if let Some(vac) = spec
        .volume_attributes_class_name
        .as_deref()
        .filter(|v| !v.is_empty())
    {
        return Err(PlanError::AttributesClass(vac.to_string()));
    }
    let empty = BTreeMap::new();
    let class_parameters = parameters::parse(class.parameters.as_ref().unwrap_or(&empty))?;

    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let claim_name = claim.metadata.name.clone().unwrap_or_default();
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let volume_name = volume_name_for(claim, settings);

    let capacity_range = request::capacity_range(claim)?;
    let access_modes = spec.access_modes.clone().unwrap_or_default();
    let modes = request::access_modes(&access_modes, features.single_node_multi_writer)?;
    let block = spec.volume_mode.as_deref() == Some("Block");
    let fs_type = class_parameters
        .fs_type
        .clone()
        .or_else(|| settings.default_fs_type.clone())
        .filter(|f| !f.is_empty());
    let mount_options = class.mount_options.clone().unwrap_or_default();
    let capabilities =
        request::volume_capabilities(&modes, block, fs_type.as_deref(), &mount_options);

    let content_source = match data_source(claim) {
        None => None,
        Some(s) if s.kind == "PersistentVolumeClaim" => {
            if !features.clone {
                return Err(PlanError::CloneUnsupported(
                    s.name.clone(),
                    settings.driver.clone(),
                ));
            }
            Some(clone_source(
                &s.name,
                claim,
                capacity_range.required_bytes,
                settings,
                source,
            )?)
        }
        Some(s) if s.kind == "VolumeSnapshot" => return Err(PlanError::Snapshot(s.name)),
        // Populator sources are filtered out before planning; be safe anyway.
        Some(_) => None,
    };

    let annotations = claim.metadata.annotations.clone().unwrap_or_default();
    let template_input = TemplateInput {
        pv_name: &volume_name,
        pvc_name: &claim_name,
        pvc_namespace: &namespace,
        pvc_annotations: &annotations,
    };
    let mut resolved = BTreeMap::new();
    for (kind, template) in &class_parameters.secrets {
        resolved.insert(*kind, secrets::resolve(template, &template_input)?);
    }
    let reference = |kind| {
        resolved.get(&kind).map(|r: &SecretRef| SecretReference {
            name: Some(r.name.clone()),
            namespace: Some(r.namespace.clone()),
        })
    };

    let mut driver_parameters: std::collections::HashMap<String, String> = class_parameters
        .driver_parameters
        .clone()
        .into_iter()
        .collect();
    if settings.extra_create_metadata {
        driver_parameters.insert("csi.storage.k8s.io/pvc/name".into(), claim_name.clone());
        driver_parameters.insert("csi.storage.k8s.io/pvc/namespace".into(), namespace.clone());
        driver_parameters.insert("csi.storage.k8s.io/pv/name".into(), volume_name.clone());
    }

    let request = csi::CreateVolumeRequest {
        name: volume_name.clone(),
        capacity_range: Some(capacity_range),
        volume_capabilities: capabilities,
        parameters: driver_parameters,
        secrets: Default::default(),
        volume_content_source: content_source,
        accessibility_requirements: None,
        mutable_parameters: Default::default(),
    };

    let reclaim = class
        .reclaim_policy
        .clone()
        .unwrap_or_else(|| "Delete".to_string());
    let provisioner_secret = resolved.get(&SecretKind::Provisioner).cloned();
    let mut pv_annotations = BTreeMap::from([
        (ANN_PROVISIONED_BY.to_string(), settings.driver.clone()),
        (
            ANN_DELETION_SECRET_NAME.to_string(),
            provisioner_secret
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default(),
        ),
        (
            ANN_DELETION_SECRET_NAMESPACE.to_string(),
            provisioner_secret
                .as_ref()
                .map(|s| s.namespace.clone())
                .unwrap_or_default(),
        ),
    ]);
    if let Some(modify) = resolved.get(&SecretKind::ControllerModify) {
        pv_annotations.insert(ANN_MODIFY_SECRET_NAME.into(), modify.name.clone());
        pv_annotations.insert(ANN_MODIFY_SECRET_NAMESPACE.into(), modify.namespace.clone());
    }
    let read_only = settings.controller_publish_readonly
        && access_modes.len() == 1
        && access_modes[0] == "ReadOnlyMany";
    let volume = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(volume_name.clone()),
            annotations: Some(pv_annotations),
            finalizers: (reclaim == "Delete").then(|| vec![FINALIZER_VOLUME.to_string()]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(access_modes),
            mount_options: class.mount_options.clone().filter(|m| !m.is_empty()),
            persistent_volume_reclaim_policy: Some(reclaim.clone()),
            storage_class_name: class.metadata.name.clone(),
            volume_mode: spec.volume_mode.clone(),
            claim_ref: Some(ObjectReference {
                kind: Some("PersistentVolumeClaim".into()),
                api_version: Some("v1".into()),
                namespace: Some(namespace),
                name: Some(claim_name),
                uid: Some(uid),
                resource_version: claim.metadata.resource_version.clone(),
                ..Default::default()
            }),
            csi: Some(CSIPersistentVolumeSource {
                driver: settings.driver.clone(),
                fs_type: if block { None } else { fs_type },
                read_only: read_only.then_some(true),
                controller_publish_secret_ref: reference(SecretKind::ControllerPublish),
                node_stage_secret_ref: reference(SecretKind::NodeStage),
                node_publish_secret_ref: reference(SecretKind::NodePublish),
                controller_expand_secret_ref: reference(SecretKind::ControllerExpand),
                node_expand_secret_ref: reference(SecretKind::NodeExpand),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    Ok(Plan {
        volume_name,
        requested_bytes: request
            .capacity_range
            .as_ref()
            .map(|r| r.required_bytes)
            .unwrap_or_default(),
        request,
        provisioner_secret,
        volume,
        retain: reclaim == "Retain",
    })
}

/// The source volume of a clone, checked as external-provisioner checks it.
fn clone_source(
    name: &str,
    claim: &PersistentVolumeClaim,
    required_bytes: i64,
    settings: &Settings,
    source: CloneSource<'_>,
) -> Result<csi::VolumeContentSource, PlanError> {
    let fail = |reason: &str| PlanError::CloneSource {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let source_claim = source
        .claim
        .ok_or_else(|| fail("it does not exist in the claim's namespace"))?;
    if source_claim.metadata.deletion_timestamp.is_some() {
        return Err(fail("it is being deleted"));
    }
    if source_claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        != Some(PHASE_BOUND)
    {
        return Err(fail("it is not Bound yet"));
    }
    let source_request = source_claim.spec.as_ref().and_then(|s| {
        s.resources
            .as_ref()?
            .requests
            .as_ref()?
            .get("storage")
            .cloned()
    });
    if let Some(q) = source_request
        && let Ok(bytes) = quantity::parse_bytes(&q.0)
        && i64::try_from(bytes).unwrap_or(i64::MAX) > required_bytes
    {
        return Err(fail(&format!(
            "the new claim requests less than the source's {}",
            q.0
        )));
    }
    let mode = |c: &PersistentVolumeClaim| {
        c.spec
            .as_ref()
            .and_then(|s| s.volume_mode.clone())
            .unwrap_or_else(|| "Filesystem".into())
    };
    if mode(source_claim) != mode(claim) {
        return Err(fail("its volumeMode differs from the new claim's"));
    }
    let volume = source
        .volume
        .ok_or_else(|| fail("its PersistentVolume is not found"))?;
    let csi_source = volume
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .ok_or_else(|| fail("its PersistentVolume is not a CSI volume"))?;
    if csi_source.driver != settings.driver {
        return Err(fail(&format!(
            "its volume belongs to driver {}, not {}",
            csi_source.driver, settings.driver
        )));
    }
    let claim_ref_uid = volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref()?.uid.clone());
    if claim_ref_uid != source_claim.metadata.uid {
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
