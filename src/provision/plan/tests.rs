use super::*;
use crate::fixtures::{class, data_claim as claim, settings};
use serde_json::json;

/// The PV's CSI source; a test's PV always has one.
fn csi_of(pv: &PersistentVolume) -> &k8s_openapi::api::core::v1::CSIPersistentVolumeSource {
    let spec = pv.spec.as_ref().expect("a PV spec");
    spec.csi.as_ref().expect("a CSI source")
}

fn build_with(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    s: &Settings,
) -> Result<Plan, PlanError> {
    build(claim, class, s, Features::default(), PlanFacts::default())
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
    assert_eq!(r.parameters.len(), 4, "reserved keys removed: {:?}", r.parameters);
    assert!(r.secrets.is_empty(), "secret contents are the executor's");
    assert_eq!(
        plan.provisioner_secret,
        Some(SecretRef { name: "p-data".into(), namespace: "team".into() })
    );
    let pv = &plan.volume;
    let a = pv.metadata.annotations.as_ref().unwrap();
    assert_eq!(a[ANN_PROVISIONED_BY], "d.csi");
    assert_eq!(a[ANN_DELETION_SECRET_NAME], "p-data");
    assert_eq!(a[ANN_DELETION_SECRET_NAMESPACE], "team");
    assert_eq!(a[ANN_MODIFY_SECRET_NAME], "m");
    assert_eq!(pv.metadata.finalizers, None, "Retain: no deletion finalizer");
    let spec = pv.spec.as_ref().unwrap();
    assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Retain"));
    assert_eq!(spec.mount_options.as_deref(), Some(&["noatime".to_string()][..]));
    let csi = spec.csi.as_ref().unwrap();
    assert_eq!(csi.fs_type.as_deref(), Some("xfs"));
    let stage = csi.node_stage_secret_ref.as_ref().unwrap();
    assert_eq!((stage.name.as_deref(), stage.namespace.as_deref()), (Some("alice"), Some("ops")));
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
    assert_eq!(spec.csi.as_ref().unwrap().fs_type.as_deref(), Some("ext4"), "--default-fstype");
    assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
    assert_eq!(
        plain.volume.metadata.finalizers.as_deref(),
        Some(&[FINALIZER_VOLUME.to_string()][..])
    );
    let annotations = plain.volume.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[ANN_DELETION_SECRET_NAME], "", "always written; empty = none");

    let block = build_with(&claim(json!({"spec": {"volumeMode": "Block"}})), &class(json!({})), &s)
        .unwrap();
    assert_eq!(csi_of(&block.volume).fs_type, None);
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
    assert_eq!(csi_of(&rox.volume).read_only, Some(true));

    let mut short = settings();
    short.naming.uuid_length = Some(4);
    let c = claim(json!({"metadata": {"uid": "ab-cd-ef"}}));
    assert_eq!(build_with(&c, &class(json!({})), &short).unwrap().volume_name, "pvc-abcd");
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
        ("clone without CLONE_VOLUME", claim(pvc_source), "does not support cloning"),
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
    let e = build_with(&claim(json!({})), &bad_template, &s).unwrap_err().to_string();
    assert!(e.contains("missing"), "{e}");
}

#[test]
fn an_attributes_class_of_ours_gives_mutable_parameters() {
    let s = settings();
    let vac = |driver: &str| -> VolumeAttributesClass {
        serde_json::from_value(json!({
            "metadata": {"name": "fast"}, "driverName": driver,
            "parameters": {"iops": "3000"}
        }))
        .unwrap()
    };
    let ours = vac("d.csi");
    let theirs = vac("x.csi");
    let c = claim(json!({"spec": {"volumeAttributesClassName": "fast"}}));
    let modify = Features { modify: true, ..Features::default() };
    let with = |class: Option<&VolumeAttributesClass>, features| {
        build(
            &c,
            &self::class(json!({})),
            &s,
            features,
            PlanFacts { attributes_class: class, ..PlanFacts::default() },
        )
    };
    let plan = with(Some(&ours), modify).unwrap();
    assert_eq!(plan.request.mutable_parameters["iops"], "3000");
    assert_eq!(plan.volume.spec.unwrap().volume_attributes_class_name.as_deref(), Some("fast"));
    let table: [(&str, Option<&VolumeAttributesClass>, Features, &str); 3] = [
        ("no MODIFY_VOLUME", Some(&ours), Features::default(), "MODIFY_VOLUME"),
        ("missing", None, modify, "not found"),
        ("another driver's", Some(&theirs), modify, "for driver x.csi"),
    ];
    for (case, class, features, text) in table {
        let e = with(class, features).unwrap_err().to_string();
        assert!(e.contains(text), "{case}: {e}");
    }
    // The gate off: the class is left out, whether or not the driver modifies or it exists.
    let off = Features { attributes_classes_off: true, ..modify };
    for class in [Some(&ours), Some(&theirs), None] {
        let plan = with(class, off).unwrap();
        assert!(plan.request.mutable_parameters.is_empty());
        assert_eq!(plan.volume.spec.unwrap().volume_attributes_class_name, None);
    }
    // A claim without a class asks for none.
    let plain = build_with(&claim(json!({})), &self::class(json!({})), &s).unwrap();
    assert!(plain.request.mutable_parameters.is_empty());
}

/// A claim of an in-tree class, with the driver its plugin's migration target: the request is
/// made from the translated class, and the PV written in the plugin's in-tree form.
#[test]
fn an_in_tree_class_is_translated_and_its_pv_written_in_tree() {
    use crate::provision::volume::{AnswerError, record};
    let mut s = settings();
    s.driver = "cinder.csi.openstack.org".into();
    let c = class(json!({
        "provisioner": "kubernetes.io/cinder",
        "parameters": {"availability": "nova", "fsType": "xfs"},
        "reclaimPolicy": "Delete",
    }));
    let plan = build_with(&claim(json!({})), &c, &s).unwrap();
    assert_eq!(plan.migrated, Some(crate::migration::Plugin::Cinder));
    let r = &plan.request;
    assert_eq!(r.parameters.len(), 1, "fsType is the capability's: {:?}", r.parameters);
    assert_eq!(r.parameters["availability"], "nova");
    let mount = match r.volume_capabilities[0].access_type.as_ref() {
        Some(csi::volume_capability::AccessType::Mount(m)) => m.fs_type.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(mount, "xfs");
    let pv =
        record(&Plan { topology: true, ..plan.clone() }, &crate::fixtures::created(1 << 30), "i")
            .unwrap();
    let a = pv.metadata.annotations.as_ref().unwrap();
    assert_eq!(a[ANN_PROVISIONED_BY], "kubernetes.io/cinder", "the in-tree name, as upstream");
    assert_eq!(pv.metadata.finalizers.as_deref(), Some(&[FINALIZER_VOLUME.to_string()][..]));
    let spec = pv.spec.as_ref().unwrap();
    assert!(spec.csi.is_none());
    let cinder = spec.cinder.as_ref().unwrap();
    assert_eq!((cinder.volume_id.as_str(), cinder.fs_type.as_deref()), ("vol-1", Some("xfs")));
    assert!(spec.node_affinity.is_some(), "the driver's topology is kept");
    // Another driver than the plugin's target: the in-tree class is not translated for it.
    let theirs = build_with(&claim(json!({})), &c, &settings()).unwrap();
    assert_eq!(theirs.migrated, None);
    // A class the translation refuses names the reason; nothing is created.
    let mut e = settings();
    e.driver = "ebs.csi.aws.com".into();
    let refused = class(json!({
        "provisioner": "kubernetes.io/aws-ebs",
        "parameters": {"zone": "us-east-1a"},
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["us-east-1a"]}]}],
    }));
    let err = build_with(&claim(json!({})), &refused, &e).unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to translate storage class: cannot simultaneously set allowed topologies and zone/zones parameters"
    );
    // An answer the in-tree form cannot hold (topology without an EBS zone gives no region) is
    // taken back.
    let ebs = class(json!({"provisioner": "kubernetes.io/aws-ebs"}));
    let plan = build_with(&claim(json!({})), &ebs, &e).unwrap();
    let got = record(&Plan { topology: true, ..plan }, &crate::fixtures::created(1 << 30), "i");
    assert!(matches!(got, Err(AnswerError::Migration { .. })), "{got:?}");
}
