//! StorageClass parameters: which go to the driver, and what the reserved
//! `csi.storage.k8s.io/` keys ask of us (fsType, secret references). Semantics as
//! external-provisioner (docs/provisioning.md §2d).

use std::collections::BTreeMap;

/// The prefix of keys that are instructions to the sidecar, never passed to the driver.
pub const RESERVED_PREFIX: &str = "csi.storage.k8s.io/";

const FSTYPE: &str = "csi.storage.k8s.io/fstype";
const DEPRECATED_FSTYPE: &str = "fstype"; // any case; passed through to the driver

/// The secrets a StorageClass can name, each for one kind of CSI call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SecretKind {
    Provisioner,
    ControllerPublish,
    NodeStage,
    NodePublish,
    ControllerExpand,
    NodeExpand,
    ControllerModify,
}

impl SecretKind {
    pub const ALL: [SecretKind; 7] = [
        SecretKind::Provisioner,
        SecretKind::ControllerPublish,
        SecretKind::NodeStage,
        SecretKind::NodePublish,
        SecretKind::ControllerExpand,
        SecretKind::NodeExpand,
        SecretKind::ControllerModify,
    ];

    /// The key stem: `csi.storage.k8s.io/<stem>-secret-name`.
    fn stem(self) -> &'static str {
        match self {
            SecretKind::Provisioner => "provisioner",
            SecretKind::ControllerPublish => "controller-publish",
            SecretKind::NodeStage => "node-stage",
            SecretKind::NodePublish => "node-publish",
            SecretKind::ControllerExpand => "controller-expand",
            SecretKind::NodeExpand => "node-expand",
            SecretKind::ControllerModify => "controller-modify",
        }
    }

    /// The pre-1.0 keys some classes still use; they are passed through to the driver too.
    fn deprecated_keys(self) -> Option<(&'static str, &'static str)> {
        match self {
            SecretKind::Provisioner => {
                Some(("csiProvisionerSecretName", "csiProvisionerSecretNamespace"))
            }
            SecretKind::ControllerPublish => {
                Some(("csiControllerPublishSecretName", "csiControllerPublishSecretNamespace"))
            }
            SecretKind::NodeStage => {
                Some(("csiNodeStageSecretName", "csiNodeStageSecretNamespace"))
            }
            SecretKind::NodePublish => {
                Some(("csiNodePublishSecretName", "csiNodePublishSecretNamespace"))
            }
            _ => None,
        }
    }
}

/// A secret reference as the class writes it; either part may hold `${...}` templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretTemplate {
    pub name: String,
    pub namespace: String,
}

/// What the reserved keys of a StorageClass ask for, and what is left for the driver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassParameters {
    /// Parameters for CreateVolume: everything but the reserved keys.
    pub driver_parameters: BTreeMap<String, String>,
    pub fs_type: Option<String>,
    pub secrets: BTreeMap<SecretKind, SecretTemplate>,
    /// Which of a claim's labels and annotations go to CreateVolume (`claim_metadata`).
    pub claim_metadata: Option<super::claim_metadata::MetadataOption>,
}

/// A StorageClass parameter problem; the message names the key and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParameterError {
    #[error(
        "StorageClass parameter {0:?} is not a known key in the reserved csi.storage.k8s.io/ namespace; remove or correct it"
    )]
    UnknownReservedKey(String),
    #[error("StorageClass parameter {0:?} is empty; give it a value or remove it")]
    Empty(String),
    #[error("StorageClass sets both {deprecated:?} and {current:?}; keep only {current:?}")]
    Both { deprecated: String, current: String },
    #[error("StorageClass sets {present:?} but not {missing:?}; a secret reference needs both")]
    Incomplete { present: String, missing: String },
    #[error(
        "StorageClass parameters hold {bytes} bytes, over the {limit} a CreateVolume call is given; shorten them"
    )]
    TooLarge { bytes: usize, limit: usize },
    #[error(transparent)]
    ClaimMetadata(#[from] super::claim_metadata::MetadataError),
}

/// The most parameter text (keys and values) a class may hand the driver: far past what
/// drivers take, and a refusal with an Event where a class holds more, not a slow pass.
pub const MAX_PARAMETER_BYTES: usize = 256 * 1024;

/// Splits a StorageClass's parameters into instructions for us and parameters for the driver.
pub fn parse(parameters: &BTreeMap<String, String>) -> Result<ClassParameters, ParameterError> {
    let bytes: usize = parameters.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_PARAMETER_BYTES {
        return Err(ParameterError::TooLarge { bytes, limit: MAX_PARAMETER_BYTES });
    }
    let mut out = ClassParameters {
        claim_metadata: super::claim_metadata::option(parameters)?,
        ..ClassParameters::default()
    };
    for (key, value) in parameters {
        if key.starts_with(super::claim_metadata::PREFIX) {
            continue; // ours, read above; never the driver's
        }
        if key.starts_with(RESERVED_PREFIX) {
            if !is_known_reserved(key) {
                return Err(ParameterError::UnknownReservedKey(key.clone()));
            }
            if value.is_empty() {
                return Err(ParameterError::Empty(key.clone()));
            }
        } else {
            out.driver_parameters.insert(key.clone(), value.clone());
        }
    }

    // fsType: the reserved key, or the deprecated one (kept for the driver as well).
    let deprecated_fs = parameters.iter().find(|(k, _)| k.eq_ignore_ascii_case(DEPRECATED_FSTYPE));
    out.fs_type = match (parameters.get(FSTYPE), deprecated_fs) {
        (Some(_), Some((k, _))) => {
            return Err(ParameterError::Both {
                deprecated: k.clone(),
                current: FSTYPE.to_string(),
            });
        }
        (Some(v), None) => Some(v.clone()),
        (None, Some((_, v))) if !v.is_empty() => Some(v.clone()),
        (None, _) => None,
    };

    let default =
        pair(parameters, "csi.storage.k8s.io/secret-name", "csi.storage.k8s.io/secret-namespace")?;
    for kind in SecretKind::ALL {
        let name_key = format!("{RESERVED_PREFIX}{}-secret-name", kind.stem());
        let ns_key = format!("{RESERVED_PREFIX}{}-secret-namespace", kind.stem());
        let current = pair(parameters, &name_key, &ns_key)?;
        let deprecated = match kind.deprecated_keys() {
            Some((n, ns)) => pair(parameters, n, ns)?.map(|t| (t, n)),
            None => None,
        };
        let chosen = match (current, deprecated) {
            (Some(_), Some((_, key))) => {
                return Err(ParameterError::Both {
                    deprecated: key.to_string(),
                    current: name_key,
                });
            }
            (Some(t), None) | (None, Some((t, _))) => Some(t),
            (None, None) => default.clone(),
        };
        if let Some(template) = chosen {
            out.secrets.insert(kind, template);
        }
    }
    Ok(out)
}

/// The reserved keys we understand: fstype, `<kind>-secret-name|namespace` and the generic
/// `secret-name|namespace`.
fn is_known_reserved(key: &str) -> bool {
    let Some(rest) = key.strip_prefix(RESERVED_PREFIX) else {
        return false;
    };
    if key == FSTYPE {
        return true;
    }
    let Some(stem) =
        rest.strip_suffix("secret-name").or_else(|| rest.strip_suffix("secret-namespace"))
    else {
        return false;
    };
    stem.is_empty() || SecretKind::ALL.iter().any(|k| stem.strip_suffix('-') == Some(k.stem()))
}

/// Reads a name/namespace pair: both or neither, and neither empty.
fn pair(
    parameters: &BTreeMap<String, String>,
    name_key: &str,
    namespace_key: &str,
) -> Result<Option<SecretTemplate>, ParameterError> {
    match (parameters.get(name_key), parameters.get(namespace_key)) {
        (None, None) => Ok(None),
        (Some(name), Some(namespace)) => {
            for (key, value) in [(name_key, name), (namespace_key, namespace)] {
                if value.is_empty() {
                    return Err(ParameterError::Empty(key.to_string()));
                }
            }
            Ok(Some(SecretTemplate { name: name.clone(), namespace: namespace.clone() }))
        }
        (Some(_), None) => Err(ParameterError::Incomplete {
            present: name_key.to_string(),
            missing: namespace_key.to_string(),
        }),
        (None, Some(_)) => Err(ParameterError::Incomplete {
            present: namespace_key.to_string(),
            missing: name_key.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn template(name: &str, namespace: &str) -> SecretTemplate {
        SecretTemplate { name: name.into(), namespace: namespace.into() }
    }

    #[test]
    fn reserved_keys_are_taken_out_and_the_rest_goes_to_the_driver() {
        let parsed = parse(&params(&[
            ("type", "fast"),
            ("csi.storage.k8s.io/fstype", "xfs"),
            ("csi.storage.k8s.io/provisioner-secret-name", "creds-${pvc.name}"),
            ("csi.storage.k8s.io/provisioner-secret-namespace", "${pvc.namespace}"),
        ]))
        .unwrap();
        assert_eq!(parsed.driver_parameters, params(&[("type", "fast")]));
        assert_eq!(parsed.fs_type.as_deref(), Some("xfs"));
        assert_eq!(
            parsed.secrets.get(&SecretKind::Provisioner),
            Some(&template("creds-${pvc.name}", "${pvc.namespace}"))
        );
        assert_eq!(parsed.secrets.len(), 1);
    }

    #[test]
    fn the_generic_secret_fills_every_kind_not_set_on_its_own() {
        let parsed = parse(&params(&[
            ("csi.storage.k8s.io/secret-name", "all"),
            ("csi.storage.k8s.io/secret-namespace", "ns"),
            ("csi.storage.k8s.io/node-stage-secret-name", "stage"),
            ("csi.storage.k8s.io/node-stage-secret-namespace", "ns2"),
        ]))
        .unwrap();
        assert_eq!(parsed.secrets.len(), SecretKind::ALL.len());
        assert_eq!(parsed.secrets[&SecretKind::NodeStage], template("stage", "ns2"));
        assert_eq!(parsed.secrets[&SecretKind::ControllerExpand], template("all", "ns"));
        assert!(parsed.driver_parameters.is_empty());
    }

    #[test]
    fn deprecated_keys_work_and_are_passed_through() {
        let parsed = parse(&params(&[
            ("fsType", "ext4"),
            ("csiProvisionerSecretName", "old"),
            ("csiProvisionerSecretNamespace", "ns"),
        ]))
        .unwrap();
        assert_eq!(parsed.fs_type.as_deref(), Some("ext4"));
        assert_eq!(parsed.secrets[&SecretKind::Provisioner], template("old", "ns"));
        assert_eq!(parsed.driver_parameters.len(), 3);
    }

    #[test]
    fn bad_parameters_name_the_key() {
        let table: &[(&[(&str, &str)], ParameterError)] = &[
            (
                &[("csi.storage.k8s.io/fs-type", "xfs")],
                ParameterError::UnknownReservedKey("csi.storage.k8s.io/fs-type".into()),
            ),
            (
                &[("csi.storage.k8s.io/fstype", "")],
                ParameterError::Empty("csi.storage.k8s.io/fstype".into()),
            ),
            (
                &[("csi.storage.k8s.io/fstype", "xfs"), ("FSTYPE", "ext4")],
                ParameterError::Both { deprecated: "FSTYPE".into(), current: FSTYPE.into() },
            ),
            (
                &[("csi.storage.k8s.io/provisioner-secret-name", "x")],
                ParameterError::Incomplete {
                    present: "csi.storage.k8s.io/provisioner-secret-name".into(),
                    missing: "csi.storage.k8s.io/provisioner-secret-namespace".into(),
                },
            ),
            (
                &[("csiNodeStageSecretNamespace", "ns")],
                ParameterError::Incomplete {
                    present: "csiNodeStageSecretNamespace".into(),
                    missing: "csiNodeStageSecretName".into(),
                },
            ),
            (
                &[("csiNodeStageSecretName", ""), ("csiNodeStageSecretNamespace", "ns")],
                ParameterError::Empty("csiNodeStageSecretName".into()),
            ),
            (
                &[
                    ("csi.storage.k8s.io/node-publish-secret-name", "a"),
                    ("csi.storage.k8s.io/node-publish-secret-namespace", "b"),
                    ("csiNodePublishSecretName", "c"),
                    ("csiNodePublishSecretNamespace", "d"),
                ],
                ParameterError::Both {
                    deprecated: "csiNodePublishSecretName".into(),
                    current: "csi.storage.k8s.io/node-publish-secret-name".into(),
                },
            ),
        ];
        for (input, want) in table {
            assert_eq!(parse(&params(input)).as_ref(), Err(want), "{input:?}");
        }
        // Past the bound: refused whole, before any key is looked at.
        let huge = "x".repeat(MAX_PARAMETER_BYTES);
        let bytes = "type".len() + huge.len();
        assert_eq!(
            parse(&params(&[("type", &huge)])),
            Err(ParameterError::TooLarge { bytes, limit: MAX_PARAMETER_BYTES })
        );
        assert!(parse(&params(&[("t", &huge[1..])])).is_ok(), "at the bound");
        // Every message tells the user what to change.
        let message = ParameterError::UnknownReservedKey("csi.storage.k8s.io/x".into()).to_string();
        assert!(message.contains("csi.storage.k8s.io/x") && message.contains("remove or correct"));
    }
}
