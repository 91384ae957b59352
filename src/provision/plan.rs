//! Everything a CreateVolume for one claim needs, worked out before any call is made: the request
//! (without secret contents, which the executor reads), the provisioner secret to read, and the PV
//! to record once the driver answers. Building a plan is where bad input is caught, so that a
//! claim that cannot be served gets a clear message and nothing is created.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeSpec, SecretReference,
};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::claim_metadata;
pub use super::facts::{Features, PlanError, PlanFacts};
use super::parameters::{self, SecretKind};
use super::request;
use super::secrets::{self, SecretRef, TemplateInput};
pub use super::settings::Settings;
use super::source::{self, SourceSupport};
use crate::csi::v1 as csi;
use crate::model::ClaimExt;
use crate::model::names::*;
use crate::model::{ClassExt, ReclaimPolicy, VolumeMode};

/// The claim's VolumeAttributesClass, checked as csi-provisioner checks it: the driver must
/// modify volumes, the class must exist and be the driver's. None with the gate off.
fn attributes_class<'a>(
    spec: &PersistentVolumeClaimSpec,
    settings: &Settings,
    features: Features,
    facts: PlanFacts<'a>,
) -> Result<Option<&'a VolumeAttributesClass>, PlanError> {
    let Some(name) = spec.volume_attributes_class_name.as_deref().filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if features.attributes_classes_off {
        return Ok(None);
    }
    if !features.modify {
        return Err(PlanError::AttributesClassUnsupported(
            name.to_string(),
            settings.driver.clone(),
        ));
    }
    let class = facts
        .attributes_class
        .filter(|c| c.metadata.name.as_deref() == Some(name))
        .ok_or_else(|| PlanError::AttributesClassMissing(name.to_string()))?;
    if let Some(e) = crate::modify::class_error(class, &settings.driver) {
        return Err(PlanError::AttributesClassDriver(e));
    }
    Ok(Some(class))
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
    /// The class the plan was made from (its allowedTopologies decide the requirements).
    pub class: StorageClass,
    /// The class asks to retain volumes: a volume made for a claim that went away is recorded in
    /// a PV (which ends Released) rather than deleted.
    pub retain: bool,
    /// The driver's topology is used (its capability, and the Topology gate): the PV records
    /// where the driver says the volume is.
    pub topology: bool,
    /// The class names the in-tree plugin the driver serves through CSI migration: the request
    /// is made from the class translated, and the PV is written in the plugin's in-tree form.
    pub migrated: Option<crate::migration::Plugin>,
}

/// The claim's class name as the binder reads it (beta annotation first); None for no class.
pub fn class_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    let class = claim.class();
    (!class.is_empty()).then_some(class)
}

/// Works out the CreateVolume call and the PV for `claim` of `class`.
pub fn build(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    settings: &Settings,
    features: Features,
    facts: PlanFacts<'_>,
) -> Result<Plan, PlanError> {
    let spec = claim.spec.clone().unwrap_or_default();
    if spec.selector.is_some() {
        return Err(PlanError::Selector);
    }
    // `pv.kubernetes.io/provisioned-by` names the class's provisioner: the in-tree plugin's
    // name for a migrated class, as csi-provisioner writes it.
    let provisioned_by = class.provisioner.clone();
    let migrated = crate::migration::Plugin::by_in_tree_name(&class.provisioner)
        .filter(|p| p.csi_driver() == settings.driver);
    let translated = match migrated {
        Some(plugin) => Some(crate::migration::class_to_csi(plugin, class)?),
        None => None,
    };
    let class = translated.as_ref().unwrap_or(class);
    let attributes = attributes_class(&spec, settings, features, facts)?;
    let empty = BTreeMap::new();
    let parameters = parameters::parse(class.parameters.as_ref().unwrap_or(&empty))?;
    let volume_name = settings.naming.for_claim(claim);
    let fs_type = parameters
        .fs_type
        .clone()
        .or_else(|| settings.default_fs_type.clone())
        .filter(|f| !f.is_empty());
    let inputs = Inputs {
        claim,
        spec: &spec,
        class,
        settings,
        volume_name: &volume_name,
        provisioned_by: &provisioned_by,
    };
    let request =
        inputs.create_request(&parameters, fs_type.as_deref(), attributes, features, facts)?;
    let secrets = inputs.resolve_secrets(&parameters)?;
    let reclaim = ClassExt::reclaim_policy(class);
    let volume = inputs.volume_to_record(fs_type, &secrets, attributes, reclaim);
    Ok(Plan {
        requested_bytes: request.capacity_range.as_ref().map(|r| r.required_bytes).unwrap_or(0),
        volume_name,
        request,
        provisioner_secret: secrets.get(&SecretKind::Provisioner).cloned(),
        volume,
        class: class.clone(),
        retain: reclaim == ReclaimPolicy::Retain,
        topology: features.topology,
        migrated,
    })
}

/// What every part of a plan reads.
struct Inputs<'a> {
    claim: &'a PersistentVolumeClaim,
    spec: &'a PersistentVolumeClaimSpec,
    class: &'a StorageClass,
    settings: &'a Settings,
    volume_name: &'a str,
    provisioned_by: &'a str,
}

impl Inputs<'_> {
    fn name(&self) -> String {
        self.claim.metadata.name.clone().unwrap_or_default()
    }

    fn namespace(&self) -> String {
        self.claim.metadata.namespace.clone().unwrap_or_default()
    }

    fn access_modes(&self) -> Vec<String> {
        self.spec.access_modes.clone().unwrap_or_default()
    }

    /// CreateVolume without secrets (the executor reads them): size, capabilities, the class's
    /// parameters (with the claim's names under `--extra-create-metadata`), the source, and
    /// the attributes class's parameters.
    fn create_request(
        &self,
        parameters: &parameters::ClassParameters,
        fs_type: Option<&str>,
        attributes: Option<&VolumeAttributesClass>,
        features: Features,
        facts: PlanFacts<'_>,
    ) -> Result<csi::CreateVolumeRequest, PlanError> {
        let capacity_range = request::capacity_range(self.claim)?;
        let modes = request::access_modes(&self.access_modes(), features.single_node_multi_writer)?;
        let block = self.claim.volume_mode() == VolumeMode::Block;
        let mount_options = self.class.mount_options.clone().unwrap_or_default();
        let support = SourceSupport {
            clone: features.clone,
            snapshot: features.snapshot,
            prevent_mode_conversion: self.settings.prevent_volume_mode_conversion,
        };
        let source = source::content_source(
            self.claim,
            capacity_range.required_bytes,
            &self.settings.driver,
            support,
            facts,
        );
        let content_source = match source {
            // An abandon only needs the name: a source that cannot be read is left out.
            Err(PlanError::SnapshotSource { .. } | PlanError::CloneSource { .. })
                if facts.probe =>
            {
                None
            }
            other => other?,
        };
        let mut driver_parameters: std::collections::HashMap<String, String> =
            parameters.driver_parameters.clone().into_iter().collect();
        if self.settings.extra_create_metadata {
            let mut add = |key: &str, value: String| driver_parameters.insert(key.into(), value);
            add("csi.storage.k8s.io/pvc/name", self.name());
            add("csi.storage.k8s.io/pvc/namespace", self.namespace());
            add("csi.storage.k8s.io/pv/name", self.volume_name.to_string());
        }
        if let Some(option) = &parameters.claim_metadata {
            let meta = &self.claim.metadata;
            let empty = BTreeMap::new();
            let secrets: Vec<&parameters::SecretTemplate> = parameters.secrets.values().collect();
            let passed = claim_metadata::parameters(
                option,
                meta.labels.as_ref().unwrap_or(&empty),
                meta.annotations.as_ref().unwrap_or(&empty),
                &secrets,
            )
            .map_err(parameters::ParameterError::from)?;
            driver_parameters.extend(passed);
        }
        Ok(csi::CreateVolumeRequest {
            name: self.volume_name.to_string(),
            capacity_range: Some(capacity_range),
            volume_capabilities: request::volume_capabilities(
                &modes,
                block,
                fs_type,
                &mount_options,
            ),
            parameters: driver_parameters,
            secrets: Default::default(),
            volume_content_source: content_source,
            accessibility_requirements: None,
            mutable_parameters: attributes
                .and_then(|c| c.parameters.clone())
                .unwrap_or_default()
                .into_iter()
                .collect(),
        })
    }

    /// The class's secret templates, filled in with the claim's and the PV's names.
    fn resolve_secrets(
        &self,
        parameters: &parameters::ClassParameters,
    ) -> Result<BTreeMap<SecretKind, SecretRef>, PlanError> {
        let (name, namespace) = (self.name(), self.namespace());
        let annotations = self.claim.metadata.annotations.clone().unwrap_or_default();
        let input = TemplateInput {
            pv_name: self.volume_name,
            pvc_name: &name,
            pvc_namespace: &namespace,
            pvc_annotations: &annotations,
        };
        let mut resolved = BTreeMap::new();
        for (kind, template) in &parameters.secrets {
            resolved.insert(*kind, secrets::resolve(template, &input)?);
        }
        Ok(resolved)
    }

    /// The PV to record once the driver answers, pre-bound to the claim.
    fn volume_to_record(
        &self,
        fs_type: Option<String>,
        secrets: &BTreeMap<SecretKind, SecretRef>,
        attributes: Option<&VolumeAttributesClass>,
        reclaim: ReclaimPolicy<'_>,
    ) -> PersistentVolume {
        let settings = self.settings;
        let reference = |kind| {
            secrets.get(&kind).map(|r: &SecretRef| SecretReference {
                name: Some(r.name.clone()),
                namespace: Some(r.namespace.clone()),
            })
        };
        let provisioner = secrets.get(&SecretKind::Provisioner);
        let mut annotations = BTreeMap::from([
            (ANN_PROVISIONED_BY.to_string(), self.provisioned_by.to_string()),
            (
                ANN_DELETION_SECRET_NAME.to_string(),
                provisioner.map(|s| s.name.clone()).unwrap_or_default(),
            ),
            (
                ANN_DELETION_SECRET_NAMESPACE.to_string(),
                provisioner.map(|s| s.namespace.clone()).unwrap_or_default(),
            ),
        ]);
        if let Some(modify) = secrets.get(&SecretKind::ControllerModify) {
            annotations.insert(ANN_MODIFY_SECRET_NAME.into(), modify.name.clone());
            annotations.insert(ANN_MODIFY_SECRET_NAMESPACE.into(), modify.namespace.clone());
        }
        let access_modes = self.access_modes();
        let read_only = settings.controller_publish_readonly && access_modes == ["ReadOnlyMany"];
        let block = self.claim.volume_mode() == VolumeMode::Block;
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(self.volume_name.to_string()),
                annotations: Some(annotations),
                finalizers: (reclaim == ReclaimPolicy::Delete)
                    .then(|| vec![FINALIZER_VOLUME.to_string()]),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: Some(access_modes),
                mount_options: self.class.mount_options.clone().filter(|m| !m.is_empty()),
                persistent_volume_reclaim_policy: Some(reclaim.as_str().to_string()),
                storage_class_name: self.class.metadata.name.clone(),
                volume_mode: self.spec.volume_mode.clone(),
                volume_attributes_class_name: attributes.and_then(|c| c.metadata.name.clone()),
                claim_ref: Some(ObjectReference {
                    kind: Some("PersistentVolumeClaim".into()),
                    api_version: Some("v1".into()),
                    namespace: Some(self.namespace()),
                    name: Some(self.name()),
                    uid: Some(self.claim.metadata.uid.clone().unwrap_or_default()),
                    resource_version: self.claim.metadata.resource_version.clone(),
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
        }
    }
}

#[cfg(test)]
mod tests;
