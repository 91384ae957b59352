//! Resolving StorageClass secret templates (`${pvc.name}`, `${pvc.namespace}`, `${pv.name}`,
//! `${pvc.annotations['key']}`) into a concrete Secret reference.

use std::collections::BTreeMap;

use super::parameters::SecretTemplate;
use crate::model::labels::{is_dns_label, is_dns_subdomain};

/// What the templates may refer to.
#[derive(Debug, Clone, Copy)]
pub struct TemplateInput<'a> {
    pub pv_name: &'a str,
    pub pvc_name: &'a str,
    pub pvc_namespace: &'a str,
    pub pvc_annotations: &'a BTreeMap<String, String>,
}

/// A Secret to read or to reference from the PV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("secret {part} template {template:?} is malformed: {reason}")]
    Malformed { part: &'static str, template: String, reason: String },
    #[error(
        "secret {part} template {template:?} uses ${{{token}}}, which is not allowed there (allowed: {allowed})"
    )]
    UnknownToken { part: &'static str, template: String, token: String, allowed: &'static str },
    #[error(
        "secret name template {template:?} needs annotation {key:?}, which the claim does not have"
    )]
    MissingAnnotation { template: String, key: String },
    #[error("secret {part} template {template:?} gives {value:?}, which is not a valid {kind}")]
    Invalid { part: &'static str, template: String, value: String, kind: &'static str },
}

/// Expands both halves of `template`. The namespace may use `${pv.name}` and `${pvc.namespace}`;
/// the name may also use `${pvc.name}` and claim annotations.
pub fn resolve(
    template: &SecretTemplate,
    input: &TemplateInput<'_>,
) -> Result<SecretRef, TemplateError> {
    let namespace = expand("namespace", &template.namespace, input, false)?;
    if !is_dns_label(&namespace) {
        let kind = "namespace name (DNS-1123 label)";
        return Err(invalid("namespace", &template.namespace, namespace, kind));
    }
    let name = expand("name", &template.name, input, true)?;
    if !is_dns_subdomain(&name) {
        let kind = "Secret name (DNS-1123 subdomain)";
        return Err(invalid("name", &template.name, name, kind));
    }
    Ok(SecretRef { name, namespace })
}

fn invalid(part: &'static str, template: &str, value: String, kind: &'static str) -> TemplateError {
    TemplateError::Invalid { part, template: template.to_string(), value, kind }
}

fn expand(
    part: &'static str,
    template: &str,
    input: &TemplateInput<'_>,
    name_tokens: bool,
) -> Result<String, TemplateError> {
    let allowed = if name_tokens {
        "${pv.name}, ${pvc.name}, ${pvc.namespace}, ${pvc.annotations['<key>']}"
    } else {
        "${pv.name}, ${pvc.namespace}"
    };
    let malformed = |reason: &str| TemplateError::Malformed {
        part,
        template: template.to_string(),
        reason: reason.to_string(),
    };
    let mut out = String::new();
    let mut rest = template;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        let Some(body) = after.strip_prefix('{') else {
            return Err(malformed("a '$' must start a ${...} token"));
        };
        let Some(close) = body.find('}') else {
            return Err(malformed("unclosed ${"));
        };
        let token = &body[..close];
        let annotation = annotation_key(token).filter(|_| name_tokens);
        let value = match (token, annotation) {
            ("pv.name", _) => input.pv_name.to_string(),
            ("pvc.namespace", _) => input.pvc_namespace.to_string(),
            ("pvc.name", _) if name_tokens => input.pvc_name.to_string(),
            (_, Some(key)) => input.pvc_annotations.get(key).cloned().ok_or_else(|| {
                TemplateError::MissingAnnotation {
                    template: template.to_string(),
                    key: key.to_string(),
                }
            })?,
            _ => {
                return Err(TemplateError::UnknownToken {
                    part,
                    template: template.to_string(),
                    token: token.to_string(),
                    allowed,
                });
            }
        };
        out.push_str(&value);
        rest = &body[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The annotation keys a template reads (`${pvc.annotations['<key>']}`), in order.
pub fn annotation_keys(template: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find("${") {
        let body = &rest[open + 2..];
        let Some(close) = body.find('}') else { break };
        if let Some(key) = annotation_key(&body[..close]) {
            keys.push(key.to_string());
        }
        rest = &body[close + 1..];
    }
    keys
}

/// The key of a `pvc.annotations['<key>']` token. `pvc.annotations[']` is no such token: its
/// prefix and suffix overlap, and it is refused as an unknown token.
fn annotation_key(token: &str) -> Option<&str> {
    token.strip_prefix("pvc.annotations['")?.strip_suffix("']")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(annotations: &BTreeMap<String, String>) -> TemplateInput<'_> {
        TemplateInput {
            pv_name: "pvc-0a1b",
            pvc_name: "data",
            pvc_namespace: "team-a",
            pvc_annotations: annotations,
        }
    }

    fn template(name: &str, namespace: &str) -> SecretTemplate {
        SecretTemplate { name: name.into(), namespace: namespace.into() }
    }

    #[test]
    fn expands_every_token() {
        let annotations: BTreeMap<String, String> =
            [("example.com/secret".to_string(), "custom".to_string())].into();
        let table = [
            (template("static", "kube-system"), ("static", "kube-system")),
            (template("${pvc.name}-creds", "${pvc.namespace}"), ("data-creds", "team-a")),
            (template("${pv.name}", "${pv.name}"), ("pvc-0a1b", "pvc-0a1b")),
            (template("${pvc.annotations['example.com/secret']}", "ns"), ("custom", "ns")),
            (template("a.${pvc.namespace}.b", "x"), ("a.team-a.b", "x")),
        ];
        for (t, (name, namespace)) in table {
            let got = resolve(&t, &input(&annotations)).unwrap();
            assert_eq!((got.name.as_str(), got.namespace.as_str()), (name, namespace), "{t:?}");
        }
    }

    #[test]
    fn bad_templates_say_what_is_wrong() {
        let none = BTreeMap::new();
        let err = |t: SecretTemplate| resolve(&t, &input(&none)).unwrap_err();
        assert!(matches!(err(template("${pvc.name}", "${pvc.name}")),
            TemplateError::UnknownToken { part: "namespace", ref token, .. } if token == "pvc.name"));
        assert!(matches!(
            err(template("${pvc.uid}", "ns")),
            TemplateError::UnknownToken { part: "name", .. }
        ));
        assert!(matches!(err(template("$pvc", "ns")), TemplateError::Malformed { .. }));
        assert!(matches!(err(template("${pvc.name", "ns")), TemplateError::Malformed { .. }));
        // The prefix and the suffix of an annotation token overlap: no key, no panic.
        for overlapping in ["${pvc.annotations[']}", "${pvc.annotations['}", "${pvc.annotations[}"]
        {
            assert!(
                matches!(err(template(overlapping, "ns")), TemplateError::UnknownToken { .. }),
                "{overlapping}"
            );
        }
        assert!(matches!(err(template("${pvc.annotations['']}", "ns")),
            TemplateError::MissingAnnotation { ref key, .. } if key.is_empty()));
        assert!(matches!(err(template("${pvc.annotations['k']}", "ns")),
            TemplateError::MissingAnnotation { ref key, .. } if key == "k"));
        assert!(matches!(
            err(template("Upper", "ns")),
            TemplateError::Invalid { part: "name", .. }
        ));
        assert!(matches!(
            err(template("ok", "not.a.label")),
            TemplateError::Invalid { part: "namespace", .. }
        ));
        assert!(matches!(err(template("", "ns")), TemplateError::Invalid { part: "name", .. }));
        let message = err(template("${pvc.uid}", "ns")).to_string();
        assert!(message.contains("${pvc.uid}") && message.contains("allowed"), "{message}");
    }

    #[test]
    fn dns_names() {
        assert!(
            is_dns_label("a-1")
                && !is_dns_label("-a")
                && !is_dns_label("a_b")
                && !is_dns_label(&"a".repeat(64))
        );
        assert!(
            is_dns_subdomain("a.b-c.d") && !is_dns_subdomain("a..b") && !is_dns_subdomain("a.")
        );
    }
}
