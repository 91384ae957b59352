//! Everything a CreateVolume for one claim needs, worked out before any call is made: the request
//! (without secret contents, which the executor reads), the provisioner secret to read, and the PV
//! to record once the driver answers. Building a plan is where bad input is caught, so that a
//! claim that cannot be served gets a clear message and nothing is created.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, SecretReference,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::parameters::{self, ParameterError, SecretKind};
use super::request::{self, ClaimError};
use super::secrets::{self, SecretRef, TemplateError, TemplateInput};
use super::source::{self, SourceFacts, SourceSupport};
use super::topology::TopologyOptions;
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
    /// `--prevent-volume-mode-conversion`: a restore keeps the snapshot's volume mode.
    pub prevent_volume_mode_conversion: bool,
    /// `--strict-topology` and `--immediate-topology`.
    pub topology: TopologyOptions,
}

/// The driver capabilities that change what a plan may contain.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features {
    pub single_node_multi_writer: bool,
    pub clone: bool,
    pub snapshot: bool,
    pub modify: bool,
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS: CreateVolume carries topology requirements.
    pub topology: bool,
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
    CrossNamespace {
        kind: String,
        namespace: String,
        name: String,
    },
    #[error(
        "the claim asks for VolumeAttributesClass {0:?}; volume attributes classes are not supported by csi-pv-controller yet"
    )]
    AttributesClass(String),
}

/// The CSI volume name and PV name for `claim`.
pub fn volume_name_for(claim: &PersistentVolumeClaim, settings: &Settings) -> String {
    request::volume_name(
        &settings.volume_name_prefix,
        claim.metadata.uid.as_deref().unwrap_or_default(),
        settings.volume_name_uuid_length,
    )
}

/// The claim's class name as the binder reads it (beta annotation first); None for no class.
pub fn class_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    let class = crate::binder::matching::claim_class(claim);
    (!class.is_empty()).then_some(class)
}

/// Works out the CreateVolume call and the PV for `claim` of `class`.
pub fn build(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    settings: &Settings,
    features: Features,
    facts: SourceFacts<'_>,
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

    let support = SourceSupport {
        clone: features.clone,
        snapshot: features.snapshot,
        prevent_mode_conversion: settings.prevent_volume_mode_conversion,
    };
    let content_source = source::content_source(
        claim,
        capacity_range.required_bytes,
        &settings.driver,
        support,
        facts,
    )?;

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
        class: class.clone(),
        retain: reclaim == "Retain",
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{Value, json};

    pub(crate) fn merge(base: &mut Value, extra: Value) {
        match (base, extra) {
            (Value::Object(b), Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    pub(crate) fn settings() -> Settings {
        Settings {
            driver: "d.csi".into(),
            volume_name_prefix: "pvc".into(),
            volume_name_uuid_length: None,
            default_fs_type: Some("ext4".into()),
            extra_create_metadata: false,
            controller_publish_readonly: false,
            identity: "id".into(),
            prevent_volume_mode_conversion: true,
            topology: TopologyOptions::default(),
        }
    }

    pub(crate) fn class(extra: Value) -> StorageClass {
        let mut v = json!({"metadata": {"name": "gold"}, "provisioner": "d.csi"});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    pub(crate) fn claim(extra: Value) -> PersistentVolumeClaim {
        let mut v = json!({
            "metadata": {"name": "data", "namespace": "team", "uid": "u-1", "resourceVersion": "7",
                         "annotations": {"owner": "alice"}},
            "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn build_with(
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
        s: &Settings,
    ) -> Result<Plan, PlanError> {
        build(claim, class, s, Features::default(), SourceFacts::default())
    }

    #[test]
    fn a_full_plan() {
        let c = class(json!({
            "parameters": {
                "pool": "a",
                "csi.storage.k8s.io/fstype": "xfs",
                "csi.storage.k8s.io/provisioner-secret-name": "p-${pvc.name}",
                "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}",
                "csi.storage.k8s.io/node-stage-secret-name": "${pvc.annotations['owner']}",
                "csi.storage.k8s.io/node-stage-secret-namespace": "ops",
                "csi.storage.k8s.io/controller-modify-secret-name": "m",
                "csi.storage.k8s.io/controller-modify-secret-namespace": "ops",
            },
            "mountOptions": ["noatime"],
            "reclaimPolicy": "Retain",
        }));
        let mut s = settings();
        s.extra_create_metadata = true;
        let plan = build_with(&claim(json!({})), &c, &s).unwrap();
        assert_eq!(plan.volume_name, "pvc-u-1");
        assert_eq!(plan.requested_bytes, 1 << 30);
        assert!(plan.retain);
        let r = &plan.request;
        assert_eq!(r.name, "pvc-u-1");
        assert_eq!(r.parameters.get("pool").map(String::as_str), Some("a"));
        assert_eq!(r.parameters["csi.storage.k8s.io/pvc/name"], "data");
        assert_eq!(r.parameters["csi.storage.k8s.io/pvc/namespace"], "team");
        assert_eq!(r.parameters["csi.storage.k8s.io/pv/name"], "pvc-u-1");
        assert_eq!(
            r.parameters.len(),
            4,
            "reserved keys removed: {:?}",
            r.parameters
        );
        assert!(r.secrets.is_empty(), "secret contents are the executor's");
        assert_eq!(
            plan.provisioner_secret,
            Some(SecretRef {
                name: "p-data".into(),
                namespace: "team".into()
            })
        );
        let pv = &plan.volume;
        let a = pv.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[ANN_PROVISIONED_BY], "d.csi");
        assert_eq!(a[ANN_DELETION_SECRET_NAME], "p-data");
        assert_eq!(a[ANN_DELETION_SECRET_NAMESPACE], "team");
        assert_eq!(a[ANN_MODIFY_SECRET_NAME], "m");
        assert_eq!(
            pv.metadata.finalizers, None,
            "Retain: no deletion finalizer"
        );
        let spec = pv.spec.as_ref().unwrap();
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
        assert_eq!(
            spec.mount_options.as_deref(),
            Some(&["noatime".to_string()][..])
        );
        let csi = spec.csi.as_ref().unwrap();
        assert_eq!(csi.fs_type.as_deref(), Some("xfs"));
        let stage = csi.node_stage_secret_ref.as_ref().unwrap();
        assert_eq!(
            (stage.name.as_deref(), stage.namespace.as_deref()),
            (Some("alice"), Some("ops"))
        );
        assert!(csi.controller_publish_secret_ref.is_none());
        let claim_ref = spec.claim_ref.as_ref().unwrap();
        assert_eq!(claim_ref.uid.as_deref(), Some("u-1"));
        assert_eq!(claim_ref.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn defaults_block_and_read_only() {
        let s = settings();
        let plain = build_with(&claim(json!({})), &class(json!({})), &s).unwrap();
        let spec = plain.volume.spec.as_ref().unwrap();
        assert_eq!(
            spec.csi.as_ref().unwrap().fs_type.as_deref(),
            Some("ext4"),
            "--default-fstype"
        );
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
        assert_eq!(
            plain.volume.metadata.finalizers.as_deref(),
            Some(&[FINALIZER_VOLUME.to_string()][..])
        );
        let annotations = plain.volume.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations[ANN_DELETION_SECRET_NAME], "",
            "always written; empty = none"
        );

        let block = build_with(
            &claim(json!({"spec": {"volumeMode": "Block"}})),
            &class(json!({})),
            &s,
        )
        .unwrap();
        assert_eq!(
            block
                .volume
                .spec
                .as_ref()
                .unwrap()
                .csi
                .as_ref()
                .unwrap()
                .fs_type,
            None
        );
        assert!(matches!(
            block.request.volume_capabilities[0].access_type,
            Some(csi::volume_capability::AccessType::Block(_))
        ));

        let mut ro = settings();
        ro.controller_publish_readonly = true;
        let rox = build_with(
            &claim(json!({"spec": {"accessModes": ["ReadOnlyMany"]}})),
            &class(json!({})),
            &ro,
        )
        .unwrap();
        assert_eq!(
            rox.volume
                .spec
                .as_ref()
                .unwrap()
                .csi
                .as_ref()
                .unwrap()
                .read_only,
            Some(true)
        );

        let mut short = settings();
        short.volume_name_uuid_length = Some(4);
        let c = claim(json!({"metadata": {"uid": "ab-cd-ef"}}));
        assert_eq!(
            build_with(&c, &class(json!({})), &short)
                .unwrap()
                .volume_name,
            "pvc-abcd"
        );
    }

    #[test]
    fn refusals_name_what_to_change() {
        let s = settings();
        let plain = class(json!({}));
        let pvc_source =
            json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}});
        let table = [
            (
                "selector",
                claim(json!({"spec": {"selector": {"matchLabels": {"a": "b"}}}})),
                "remove spec.selector",
            ),
            (
                "attributes class",
                claim(json!({"spec": {"volumeAttributesClassName": "fast"}})),
                "VolumeAttributesClass \"fast\"",
            ),
            (
                "clone without CLONE_VOLUME",
                claim(pvc_source),
                "does not support cloning",
            ),
            (
                "snapshot",
                claim(
                    json!({"spec": {"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "s"}}}),
                ),
                "VolumeSnapshot \"s\"",
            ),
            (
                "no request",
                claim(json!({"spec": {"resources": {"requests": null}}})),
                "no storage request",
            ),
            (
                "RWOP with others",
                claim(json!({"spec": {"accessModes": ["ReadWriteOncePod", "ReadOnlyMany"]}})),
                "ReadWriteOncePod",
            ),
        ];
        for (case, c, text) in table {
            let e = build_with(&c, &plain, &s).unwrap_err().to_string();
            assert!(e.contains(text), "{case}: {e}");
        }
        let bad_template = class(json!({"parameters": {
            "csi.storage.k8s.io/provisioner-secret-name": "${pvc.annotations['missing']}",
            "csi.storage.k8s.io/provisioner-secret-namespace": "ns",
        }}));
        let e = build_with(&claim(json!({})), &bad_template, &s)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
    }
}
