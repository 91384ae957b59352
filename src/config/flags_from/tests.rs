use std::ffi::OsString;

use serde_json::json;

use super::*;

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// As `from_args` knows them: these take a separate value.
fn takes(name: &str) -> bool {
    ["kubeconfig", "csi-address", "timeout", "args-of", "v"].contains(&name)
}

#[test]
fn sources_parse() {
    let table: [(&str, Result<FlagsSource, &str>); 6] = [
        (
            "pod/kube-system/csi-hostpathplugin-0",
            Ok(FlagsSource::Pod {
                namespace: "kube-system".into(),
                name: "csi-hostpathplugin-0".into(),
                container: None,
            }),
        ),
        (
            "pod/ns/p/csi-pv-controller",
            Ok(FlagsSource::Pod {
                namespace: "ns".into(),
                name: "p".into(),
                container: Some("csi-pv-controller".into()),
            }),
        ),
        ("pod/ns", Err("expected pod/")),
        ("pod//p", Err("expected pod/")),
        ("./args.txt", Ok(FlagsSource::File("./args.txt".into()))),
        ("", Err("or a file")),
    ];
    for (text, want) in table {
        match (text.parse::<FlagsSource>(), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{text}"),
            (Err(e), Err(part)) => assert!(e.contains(part), "{text}: {e}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn files_read_as_lists_or_lines() {
    let want = strings(&["--csi-address=/csi/csi.sock", "--timeout=30s", "-v=5"]);
    let table = [
        r#"["--csi-address=/csi/csi.sock", "--timeout=30s", "-v=5"]"#,
        "--csi-address=/csi/csi.sock\n\n# the driver's limit\n--timeout=30s\n-v=5\n",
        "args:\n  - --csi-address=/csi/csi.sock\n  - \"--timeout=30s\"\n  - '-v=5'\n",
    ];
    for text in table {
        assert_eq!(file_args(text), want, "{text}");
    }
}

#[test]
fn the_controller_container_is_found_by_image_or_name() {
    let pod: Pod = serde_json::from_value(json!({"spec": {"containers": [
        {"name": "hostpath", "image": "registry.k8s.io/sig-storage/hostpathplugin:v1.18.0",
         "args": ["--endpoint=x"]},
        {"name": "controller", "image": "csi-pv-controller:v0.1.0", "args": ["--timeout=30s"]},
    ]}}))
    .unwrap();
    assert_eq!(container_args(&pod, None), Ok(strings(&["--timeout=30s"])));
    assert_eq!(container_args(&pod, Some("hostpath")), Ok(strings(&["--endpoint=x"])));
    let e = container_args(&pod, Some("nope")).unwrap_err();
    assert!(e.contains("no container nope") && e.contains("hostpath, controller"), "{e}");
    let two: Pod = serde_json::from_value(json!({"spec": {"containers": [
        {"name": "a", "image": "csi-pv-controller:1"}, {"name": "b", "image": "csi-pv-controller:2"},
    ]}}))
    .unwrap();
    assert!(container_args(&two, None).unwrap_err().contains("more than one"));
    let none: Pod = serde_json::from_value(json!({"spec": {"containers": [
        {"name": "a", "image": "busybox"}]}}))
    .unwrap();
    assert!(container_args(&none, None).unwrap_err().contains("name one as"));
}

#[test]
fn typed_flags_win_and_in_pod_credentials_are_left_out() {
    let typed = os(&[
        "csi-pv-controller",
        "--kubeconfig",
        "/home/me/.kube/config",
        "-timeout=5s",
        "explain",
        "ns/data",
        "--flags-from=pod/ns/p",
    ]);
    let read = strings(&[
        "--args-of",
        "csi-provisioner",
        "-csi-address=/csi/csi.sock",
        "--timeout",
        "30s",
        "--kubeconfig=/in/pod",
        "-v=5",
        "--extra-create-metadata",
        "--args-of=csi-resizer",
        "--timeout=60s",
        "stray",
    ]);
    let pod = FlagsSource::Pod { namespace: "ns".into(), name: "p".into(), container: None };
    let got = rebuild(typed.clone(), read.clone(), pod.left_out(), takes);
    let want = os(&[
        "csi-pv-controller",
        "--kubeconfig",
        "/home/me/.kube/config",
        "--timeout=5s",
        "--args-of",
        "csi-provisioner",
        "--csi-address=/csi/csi.sock",
        "-v=5",
        "--extra-create-metadata",
        "--args-of=csi-resizer",
        "explain",
        "ns/data",
        "--flags-from=pod/ns/p",
    ]);
    assert_eq!(got, want);
    // From a file nothing is left out but what was typed.
    let file = FlagsSource::File("args".into());
    let typed = os(&["csi-pv-controller", "reconcile", "d.csi", "--flags-from=args"]);
    let got = rebuild(typed, read, file.left_out(), takes);
    assert!(got.contains(&OsString::from("--kubeconfig=/in/pod")), "{got:?}");
    assert!(got.contains(&OsString::from("--timeout=60s")), "{got:?}");
    assert_eq!(got.last(), Some(&OsString::from("--flags-from=args")));
}
