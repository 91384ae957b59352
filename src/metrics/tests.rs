use super::*;

#[test]
fn grpc_codes_are_named_as_grpc_go_names_them() {
    for (code, name) in [
        (tonic::Code::Ok, "OK"),
        (tonic::Code::Cancelled, "Canceled"),
        (tonic::Code::DeadlineExceeded, "DeadlineExceeded"),
        (tonic::Code::ResourceExhausted, "ResourceExhausted"),
    ] {
        assert_eq!(go_code_name(&format!("{code:?}")), name);
    }
}

#[test]
fn resources_from_paths() {
    assert_eq!(
        resource_of("/api/v1/namespaces/ns/persistentvolumeclaims/c/status"),
        "persistentvolumeclaims/status"
    );
    assert_eq!(resource_of("/api/v1/persistentvolumes/pv-1"), "persistentvolumes");
    assert_eq!(resource_of("/api/v1/persistentvolumes"), "persistentvolumes");
    assert_eq!(resource_of("/apis/events.k8s.io/v1/namespaces/ns/events"), "events");
    assert_eq!(resource_of("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"), "leases");
    assert_eq!(resource_of("/api/v1/namespaces/ns"), "namespaces");
}

#[test]
fn csi_calls_are_labelled_as_upstream() {
    let m = Metrics::new();
    m.csi_call("d", "CreateVolume", tonic::Code::Ok, Duration::from_millis(30), false);
    m.csi_call("d", "Probe", tonic::Code::DeadlineExceeded, Duration::from_secs(1), false);
    let text = m.encode();
    assert!(text.contains("csi_sidecar_operations_seconds_count{driver_name=\"d\",method_name=\"/csi.v1.Controller/CreateVolume\",grpc_status_code=\"OK\"} 1"), "{text}");
    assert!(
        text.contains(
            "method_name=\"/csi.v1.Identity/Probe\",grpc_status_code=\"DeadlineExceeded\""
        ),
        "{text}"
    );
    assert!(!text.contains("migrated="), "a driver no in-tree plugin migrates to: no label");
}

/// A CSI migration driver's calls carry csi-lib-utils' `migrated` label: "true" for a call
/// about an in-tree volume, "false" for any other.
#[test]
fn a_migration_drivers_calls_say_whether_they_were_about_a_migrated_volume() {
    let m = Metrics::new();
    let driver = "cinder.csi.openstack.org";
    m.csi_call(driver, "CreateVolume", tonic::Code::Ok, Duration::from_millis(30), true);
    m.csi_call(driver, "DeleteVolume", tonic::Code::Ok, Duration::from_millis(30), false);
    m.csi_call(driver, "Probe", tonic::Code::Ok, Duration::from_millis(1), false);
    let text = m.encode();
    let series = |method: &str, migrated: &str| {
        format!(
            "csi_sidecar_operations_seconds_count{{driver_name=\"{driver}\",method_name=\"/csi.v1.{method}\",grpc_status_code=\"OK\",migrated=\"{migrated}\"}} 1"
        )
    };
    for (method, migrated) in [
        ("Controller/CreateVolume", "true"),
        ("Controller/DeleteVolume", "false"),
        ("Identity/Probe", "false"),
    ] {
        assert!(text.contains(&series(method, migrated)), "{method}: {text}");
    }
}
