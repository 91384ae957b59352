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
    m.csi_call("d", "CreateVolume", tonic::Code::Ok, Duration::from_millis(30));
    m.csi_call("d", "Probe", tonic::Code::DeadlineExceeded, Duration::from_secs(1));
    let text = m.encode();
    assert!(text.contains("csi_sidecar_operations_seconds_count{driver_name=\"d\",method_name=\"/csi.v1.Controller/CreateVolume\",grpc_status_code=\"OK\"} 1"), "{text}");
    assert!(
        text.contains(
            "method_name=\"/csi.v1.Identity/Probe\",grpc_status_code=\"DeadlineExceeded\""
        ),
        "{text}"
    );
}
