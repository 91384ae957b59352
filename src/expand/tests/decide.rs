//! ControllerExpandVolume requests and answers, the expander, and who uses a claim.

use super::*;

#[test]
fn request_carries_handle_size_and_capability() {
    let r = request(&pv(json!({})), 4 * GI, false).unwrap();
    assert_eq!(r.volume_id, "h");
    assert_eq!(r.capacity_range.unwrap().required_bytes, (4 * GI) as i64);
    let cap = r.volume_capability.unwrap();
    match cap.access_type.unwrap() {
        AccessType::Mount(m) => {
            assert_eq!(m.fs_type, "xfs");
            assert_eq!(m.mount_flags, vec!["noatime".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(cap.access_mode.unwrap().mode, Mode::SingleNodeWriter as i32);
    let block = request(&pv(json!({"spec": {"volumeMode": "Block"}})), GI, true).unwrap();
    assert!(matches!(block.volume_capability.unwrap().access_type, Some(AccessType::Block(_))));
    assert!(request(&pv(json!({"spec": {"csi": {"volumeHandle": ""}}})), GI, false).is_err());
}

#[test]
fn access_modes_for_expansion() {
    let m = |modes: &[&str], snmw| {
        access_mode(&modes.iter().map(|s| s.to_string()).collect::<Vec<_>>(), snmw)
    };
    assert_eq!(m(&["ReadWriteOnce"], false), Ok(Mode::SingleNodeWriter));
    assert_eq!(m(&["ReadWriteOnce"], true), Ok(Mode::SingleNodeMultiWriter));
    assert_eq!(m(&["ReadWriteOncePod"], true), Ok(Mode::SingleNodeSingleWriter));
    assert_eq!(m(&["ReadWriteMany", "ReadWriteOnce"], false), Ok(Mode::MultiNodeMultiWriter));
    assert_eq!(m(&["ReadOnlyMany"], false), Ok(Mode::MultiNodeReaderOnly));
    assert!(m(&["ReadOnlyMany", "ReadWriteOnce"], false).is_err());
    assert!(m(&["ReadWriteOncePod", "ReadWriteOnce"], false).is_err());
}

#[test]
fn answers_zero_means_asked_and_smaller_is_refused() {
    assert_eq!(answer(4 * GI, 0), Ok(4 * GI));
    assert_eq!(answer(4 * GI, (5 * GI) as i64), Ok(5 * GI));
    assert!(answer(4 * GI, GI as i64).is_err());
    assert!(answer(4 * GI, -1).is_err());
}

#[test]
fn expander_from_capabilities() {
    assert_eq!(Expander::of(true, true), Some(Expander::Controller));
    assert_eq!(Expander::of(true, false), Some(Expander::Controller));
    assert_eq!(Expander::of(false, true), Some(Expander::NodeOnly));
    assert_eq!(Expander::of(false, false), None);
}

#[test]
fn in_use_by_running_or_pending_pods_of_the_namespace() {
    let pod = |ns: &str, claim_name: &str, phase: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": ns},
            "spec": {"containers": [{"name": "c"}],
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    };
    let c = claim(json!({}));
    assert!(in_use(&c, &[pod("ns", "c", "Running")]));
    assert!(in_use(&c, &[pod("ns", "c", "Pending")]));
    assert!(!in_use(&c, &[pod("ns", "c", "Succeeded")]));
    assert!(!in_use(&c, &[pod("ns", "c", "Failed")]));
    assert!(!in_use(&c, &[pod("other", "c", "Running")]));
    assert!(!in_use(&c, &[pod("ns", "d", "Running")]));
    assert!(!in_use(&c, &[]));
}

/// An in-tree PV of the plugin the driver serves through CSI migration is the driver's to grow,
/// through its translated handle and fsType; one whose ID does not translate is not grown.
#[test]
fn in_tree_volumes_grow_through_their_csi_form() {
    let in_tree = |source: Value| {
        let mut v = pv(json!({"spec": source}));
        if let Some(spec) = v.spec.as_mut() {
            spec.csi = None;
        }
        v
    };
    let ebs = in_tree(
        json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-7", "fsType": "ext4"}}),
    );
    let handed = |driver: &str| {
        claim(
            json!({"metadata": {"annotations": {"volume.kubernetes.io/storage-resizer": driver}}}),
        )
    };
    assert!(owns(&handed("ebs.csi.aws.com"), &ebs, "ebs.csi.aws.com"));
    assert!(!owns(&claim(json!({})), &ebs, "ebs.csi.aws.com"), "not handed over yet");
    assert!(!owns(&handed("d"), &ebs, "d"), "not the driver the plugin migrates to");
    let r = request(&ebs, 2 * GI, false).unwrap();
    assert_eq!(r.volume_id, "vol-7");
    match r.volume_capability.unwrap().access_type.unwrap() {
        AccessType::Mount(m) => assert_eq!(m.fs_type, "ext4"),
        other => panic!("{other:?}"),
    }
    let bad = in_tree(json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/disk"}}));
    let err = request(&bad, 2 * GI, false).unwrap_err();
    assert!(err.contains("invalid kubernetes.io/aws-ebs volume ID"), "{err}");
    // Portworx names its expansion secret only in the CSI form.
    let mut px = in_tree(json!({"portworxVolume": {"volumeID": "p"}}));
    px.metadata.annotations = Some(
        [("openstorage.io/auth-secret-name", "s"), ("openstorage.io/auth-secret-namespace", "ns")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let secret = expansion_secret(&px).unwrap();
    assert_eq!((secret.name.as_deref(), secret.namespace.as_deref()), (Some("s"), Some("ns")));
}
