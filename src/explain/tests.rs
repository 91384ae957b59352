use serde_json::{Value, json};

use super::*;
use crate::binder::VolumeIndex;
use crate::expand::Expander;
use crate::fixtures::{self, CLAIM_UID, DRIVER};
use crate::model::copy::ClaimCopy;
use crate::provision::plan::{Features, PlanFacts};

const NOW: &str = "2026-01-01T00:00:00Z";
const HANDED: &str = "volume.kubernetes.io/storage-provisioner";

/// The line for `claim` beside the cluster's binder (`binds` false), with class `class` and
/// the PV `volume`.
fn line_of(
    claim: &PersistentVolumeClaim,
    class: &k8s_openapi::api::storage::v1::StorageClass,
    volume: Option<&PersistentVolume>,
    expander: Option<Expander>,
) -> Line {
    line_with(claim, class, volume, expander, &VolumeIndex::default())
}

/// As `line_of`, with the PVs the binder matches against.
fn line_with(
    claim: &PersistentVolumeClaim,
    class: &k8s_openapi::api::storage::v1::StorageClass,
    volume: Option<&PersistentVolume>,
    expander: Option<Expander>,
    volumes: &VolumeIndex,
) -> Line {
    let settings = fixtures::settings();
    let none = |_: &str| None;
    let facts = Facts {
        claim,
        binder: ClaimView { class: Some(class), default_class: None, volumes },
        provisioning: ClaimContext {
            settings: &settings,
            features: Features::default(),
            class: Some(class),
            volume: None,
            facts: PlanFacts::default(),
            binds: false,
            journaled: false,
            binder_takes_ours: false,
            copy: ClaimCopy::Live,
            hold: None,
            now: std::time::Instant::now(),
        },
        volume,
        resizer: Resizer {
            driver: DRIVER,
            expander,
            handle_in_use: false,
            annotate_fs_resize: false,
        },
        attributes_class: &none,
        now: NOW,
        clock: std::time::Instant::now(),
    };
    let report = report(&facts);
    assert!(report.contains(&format!("state: {}", line(&facts).state)), "{report}");
    // The migration line is there exactly when the class or the PV names an in-tree plugin.
    let in_tree = crate::migration::Plugin::by_in_tree_name(&class.provisioner).is_some()
        || volume.is_some_and(|pv| crate::migration::Plugin::of_volume(pv).is_some());
    assert_eq!(report.contains("\nmigration: migrated: "), in_tree, "{report}");
    assert!(one_line(&facts).starts_with("ns/c "));
    line(&facts)
}

/// Class `gold` of the driver, Immediate.
fn immediate_class() -> k8s_openapi::api::storage::v1::StorageClass {
    fixtures::class(json!({"provisioner": DRIVER, "volumeBindingMode": "Immediate"}))
}

/// PV `pv-1` of the driver, 1Gi, Bound to the `claim` fixture.
fn bound_pv() -> PersistentVolume {
    fixtures::pv("pv-1")
        .csi(DRIVER, "h")
        .size("1Gi")
        .claim_ref("ns", "c", Some(CLAIM_UID))
        .phase("Bound")
        .build()
}

fn waiting_condition(reason: &str, message: &str) -> Value {
    json!({"status": {"conditions": [{"type": waiting::CONDITION, "status": "True",
        "reason": reason, "message": message}]}})
}

#[test]
fn a_pending_claim_says_the_live_cause_or_the_recorded_one() {
    let class = immediate_class();
    let late = fixtures::class(
        json!({"provisioner": DRIVER, "volumeBindingMode": "WaitForFirstConsumer"}),
    );
    let handed = json!({"metadata": {"annotations": {HANDED: DRIVER}}});
    let selector = json!({"metadata": {"annotations": {HANDED: DRIVER}},
        "spec": {"selector": {"matchLabels": {"a": "b"}}}});
    let mut recorded = handed.clone();
    fixtures::merge(&mut recorded, waiting_condition("SecretMissing", "secret ns/s not found"));
    let cases = [
        ("not handed over", json!({}), &class, "WaitingForBinder", "hands the claim"),
        ("no pod yet", json!({}), &late, "WaitForFirstConsumer", "pod"),
        ("refused", selector, &class, "InvalidRequest", "refused: claim Selector"),
        ("handed, nothing recorded", handed, &class, "-", "CreateVolume pvc-"),
        ("handed, a recorded cause", recorded, &class, "SecretMissing", "last said: secret ns/s"),
    ];
    for (case, extra, class, reason, next) in cases {
        let claim = fixtures::claim(extra);
        let line = line_of(&claim, class, None, None);
        assert_eq!((line.state, line.reason.as_str()), ("Pending", reason), "{case}: {line:?}");
        assert!(line.next.contains(next), "{case}: {line:?}");
        assert!(!line.settled());
    }
}

#[test]
fn a_bound_claim_is_settled_or_says_what_its_resize_needs() {
    let class = immediate_class();
    let bound = |extra: Value| {
        let mut base = json!({"spec": {"volumeName": "pv-1"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}});
        fixtures::merge(&mut base, extra);
        fixtures::claim(base)
    };
    let pv = bound_pv();
    let settled = line_of(&bound(json!({})), &class, Some(&pv), Some(Expander::Controller));
    assert!(settled.settled(), "{settled:?}");
    let grow = bound(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    let resizing = line_of(&grow, &class, Some(&pv), Some(Expander::Controller));
    assert_eq!(resizing.state, "Resizing", "{resizing:?}");
    assert!(resizing.next.contains("ControllerExpandVolume to 2147483648"), "{resizing:?}");
    let unsupported = line_of(&grow, &class, Some(&pv), None);
    assert_eq!(
        (unsupported.state, unsupported.reason.as_str()),
        ("ResizeFailed", "ExpansionUnsupported")
    );
    let failed = bound(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}},
        "status": {"conditions": [{"type": "ControllerResizeError", "status": "True",
            "message": "out of range"}]}}));
    let failed = line_of(&failed, &class, Some(&pv), Some(Expander::Controller));
    assert_eq!((failed.state, failed.reason.as_str()), ("ResizeFailed", "ControllerResizeError"));
    assert!(failed.next.starts_with("out of range; "), "{failed:?}");
    // An in-tree PV of the plugin the driver serves waits for the expander's hand-over.
    let mut in_tree = pv.clone();
    if let Some(spec) = in_tree.spec.as_mut() {
        spec.csi = None;
        spec.cinder = Some(Default::default());
    }
    let cinder = "cinder.csi.openstack.org";
    assert!(waits_for_expander(&grow, &in_tree, cinder));
    let handed = bound(
        json!({"metadata": {"annotations": {"volume.kubernetes.io/storage-resizer": cinder}},
        "spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
    );
    assert!(!waits_for_expander(&handed, &in_tree, cinder));
    assert!(!waits_for_expander(&grow, &pv, DRIVER), "a CSI PV waits for nobody");
    assert!(!waits_for_expander(&bound(json!({})), &in_tree, cinder), "nothing asked");
}

#[test]
fn a_lost_or_deleted_claim_says_so() {
    let class = immediate_class();
    let lost = fixtures::claim(json!({"status": {"phase": "Lost"}}));
    assert_eq!(line_of(&lost, &class, None, None).state, "Lost");
    let deleting = fixtures::claim(json!({"metadata": {"deletionTimestamp": NOW}}));
    assert_eq!(line_of(&deleting, &class, None, None).state, "Deleting");
}

#[test]
fn a_bound_claim_waiting_on_its_attributes_class_says_so() {
    let class = immediate_class();
    let claim = fixtures::claim(json!({"spec": {"volumeName": "pv-1",
            "volumeAttributesClassName": "fast"},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}));
    let pv = bound_pv();
    let line = line_of(&claim, &class, Some(&pv), Some(Expander::Controller));
    assert_eq!(line.state, "Modifying", "{line:?}");
    assert!(line.next.contains("VolumeAttributesClass \"fast\" to exist"), "{line:?}");
}

#[test]
fn a_claim_a_pv_matches_waits_for_the_binder_not_for_provisioning() {
    let class = immediate_class();
    let mut volumes = VolumeIndex::default();
    let pv = fixtures::pv("pv-free")
        .size("5Gi")
        .class("gold")
        .access_modes(&["ReadWriteOnce"])
        .phase("Available")
        .build();
    volumes.upsert(&pv);
    let line = line_with(&fixtures::claim(json!({})), &class, None, None, &volumes);
    assert_eq!((line.state, line.reason.as_str()), ("Pending", "-"), "{line:?}");
    assert!(line.next.contains("binds it to PersistentVolume pv-free"), "{line:?}");
}

/// A claim of an in-tree class whose plugin migrates to another driver: the report has its
/// migration line (`line_with` holds every report to that), and nothing provisions it here.
#[test]
fn a_claim_of_an_in_tree_class_says_it_is_migrated() {
    let class = fixtures::class(json!({"provisioner": "kubernetes.io/cinder"}));
    let claim =
        fixtures::claim(json!({"metadata": {"annotations": {HANDED: "cinder.csi.openstack.org"}}}));
    let line = line_of(&claim, &class, None, None);
    assert_eq!(line.state, "Pending");
    assert!(!line.next.contains("CreateVolume"), "{line:?}");
}
