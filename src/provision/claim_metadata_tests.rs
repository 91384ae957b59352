use super::*;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A class's parameters, and what `option` makes of them.
type Row<'a> = (&'a [(&'a str, &'a str)], Result<Option<MetadataOption>, MetadataError>);

#[test]
fn a_class_opts_in_by_naming_prefixes() {
    let rows: [Row; 6] = [
        (&[("type", "fast")], Ok(None)),
        (
            &[(LABEL_PREFIXES, " team.example.com/ , cost-center,")],
            Ok(Some(MetadataOption {
                label_prefixes: vec!["team.example.com/".into(), "cost-center".into()],
                annotation_prefixes: vec![],
            })),
        ),
        (
            &[(ANNOTATION_PREFIXES, "backup.example.com/")],
            Ok(Some(MetadataOption {
                label_prefixes: vec![],
                annotation_prefixes: vec!["backup.example.com/".into()],
            })),
        ),
        (&[(LABEL_PREFIXES, " , ")], Err(MetadataError::NoPrefix(LABEL_PREFIXES.into()))),
        (
            &[("csi-pv-controller.storage.k8s.io/claim-label/team", "x")],
            Err(MetadataError::UnknownKey(
                "csi-pv-controller.storage.k8s.io/claim-label/team".into(),
            )),
        ),
        (
            &[("csi-pv-controller.storage.k8s.io/other", "x")],
            Err(MetadataError::UnknownKey("csi-pv-controller.storage.k8s.io/other".into())),
        ),
    ];
    for (parameters, want) in rows {
        assert_eq!(option(&map(parameters)), want, "{parameters:?}");
    }
}

#[test]
fn only_keys_under_a_prefix_pass_and_never_the_sidecars_or_a_secrets() {
    let option = MetadataOption {
        label_prefixes: vec!["team.example.com/".into(), "csi.storage.k8s.io/".into()],
        annotation_prefixes: vec!["backup.example.com/".into(), "kubectl.kubernetes.io/".into()],
    };
    let labels = map(&[
        ("team.example.com/owner", "storage"),
        ("app", "db"),
        ("csi.storage.k8s.io/pvc/name", "sneaky"),
    ]);
    let annotations = map(&[
        ("backup.example.com/policy", "daily"),
        ("backup.example.com/credentials", "backup-secret"),
        ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
        ("team.example.com/owner", "annotation, not a label"),
    ]);
    let secret = SecretTemplate {
        name: "${pvc.annotations['backup.example.com/credentials']}".into(),
        namespace: "${pvc.namespace}".into(),
    };
    let passed = parameters(&option, &labels, &annotations, &[&secret]).unwrap();
    assert_eq!(
        passed,
        map(&[
            ("csi-pv-controller.storage.k8s.io/claim-label/team.example.com/owner", "storage"),
            (
                "csi-pv-controller.storage.k8s.io/claim-annotation/backup.example.com/policy",
                "daily"
            ),
        ])
    );
}

#[test]
fn past_the_bound_the_claim_is_refused_with_its_size() {
    let option = MetadataOption { label_prefixes: vec!["a/".into()], annotation_prefixes: vec![] };
    let value = "v".repeat(MAX_BYTES);
    let labels = map(&[("a/big", &value)]);
    let bytes = LABEL_PARAMETER.len() + "a/big".len() + MAX_BYTES;
    assert_eq!(
        parameters(&option, &labels, &BTreeMap::new(), &[]),
        Err(MetadataError::TooLarge { bytes, limit: MAX_BYTES })
    );
    let fits = map(&[("a/small", "v")]);
    assert_eq!(parameters(&option, &fits, &BTreeMap::new(), &[]).map(|p| p.len()), Ok(1));
}
