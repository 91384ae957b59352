use std::time::Duration;

use super::*;

fn value_flags(name: &str) -> bool {
    [
        "timeout",
        "resize-timeout",
        "modify-timeout",
        "http-endpoint",
        "metrics-address",
        "csi-address",
        "v",
    ]
    .contains(&name)
}

fn merged(args: &[&str]) -> Result<Merged, Refusal> {
    let argv = std::iter::once("csi-pv-controller").chain(args.iter().copied());
    merge(argv.map(OsString::from).collect(), value_flags)
}

fn argv(m: &Merged) -> Vec<String> {
    m.argv.iter().skip(1).map(|a| a.to_string_lossy().into_owned()).collect()
}

#[test]
fn marked_lists_keep_each_sidecars_timeout_and_lose_the_markers() {
    let m = merged(&[
        "--args-of=csi-provisioner",
        "--v=5",
        "--timeout=300s",
        "--args-of",
        "csi-resizer",
        "--v=5",
        "--timeout",
        "150s",
    ])
    .unwrap();
    assert_eq!(
        m.timeouts,
        RoleTimeouts {
            provision: Some(Duration::from_secs(300)),
            expand: Some(Duration::from_secs(150)),
            modify: Some(Duration::from_secs(150)),
        }
    );
    assert_eq!(argv(&m), ["--v=5", "--timeout=300s", "--v=5", "--timeout", "150s"]);
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    let t = m.timeouts;
    let default = Duration::from_secs(10);
    let rows = [
        ("CreateVolume", 300),
        ("DeleteVolume", 300),
        ("GetCapacity", 300),
        ("ControllerExpandVolume", 150),
        ("ControllerModifyVolume", 150),
        ("ListVolumes", 10),
        ("Probe", 10),
    ];
    for (method, secs) in rows {
        assert_eq!(t.for_method(method, default), Duration::from_secs(secs), "{method}");
    }
    assert_eq!(t.longest(default), Duration::from_secs(300));
}

#[test]
fn unmarked_repeats_with_different_values_are_said_and_equal_ones_are_not() {
    let m =
        merged(&["--timeout=30s", "--v=5", "--csi-address=/a", "--timeout=60s", "--v=5"]).unwrap();
    let sixty = Some(Duration::from_secs(60));
    assert_eq!(m.timeouts, RoleTimeouts { provision: sixty, expand: sixty, modify: sixty });
    assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
    assert!(m.warnings[0].starts_with("--timeout is given 2 times: 30s, 60s; 60s applies"));
    assert!(m.warnings[0].contains("--args-of=csi-provisioner"), "{}", m.warnings[0]);

    let m = merged(&["--args-of=provisioner", "-v=5", "--args-of=resizer", "-v", "2"]).unwrap();
    assert_eq!(
        m.warnings,
        ["--v is given 2 times: 5 (csi-provisioner), 2 (csi-resizer); the last, 2, applies"]
    );
    // Every address is served, so repeats of it are not lost.
    assert!(
        merged(&["--http-endpoint=:8080", "--http-endpoint=:8081"]).unwrap().warnings.is_empty()
    );
}

#[test]
fn both_address_flags_for_one_sidecar_exit_1_as_upstream() {
    for args in [
        &["--metrics-address=:8080", "--http-endpoint=:8081"][..],
        &["--args-of=csi-resizer", "--http-endpoint", ":8080", "--metrics-address", ":8081"],
    ] {
        let refusal = merged(args).unwrap_err();
        assert_eq!(refusal.exit, 1, "{args:?}");
        assert!(refusal.message.contains("only one of --metrics-address and --http-endpoint"));
    }
    // One in each sidecar's list is how two containers were configured: both served.
    let m = merged(&[
        "--args-of=csi-provisioner",
        "--metrics-address=:8080",
        "--args-of=csi-resizer",
        "--http-endpoint=:8081",
    ])
    .unwrap();
    assert_eq!(argv(&m), ["--metrics-address=:8080", "--http-endpoint=:8081"]);
}

#[test]
fn a_marker_names_one_of_the_two_sidecars() {
    let refusal = merged(&["--args-of=csi-snapshotter"]).unwrap_err();
    assert_eq!(refusal.exit, 2);
    assert!(refusal.message.contains("csi-provisioner's or csi-resizer's"), "{}", refusal.message);
}

#[test]
fn subcommands_and_values_after_double_dash_pass_untouched() {
    let m = merged(&["--timeout=5s", "explain", "--all", "--", "--timeout=9s"]).unwrap();
    assert_eq!(argv(&m), ["--timeout=5s", "explain", "--all", "--", "--timeout=9s"]);
    assert!(m.warnings.is_empty());
}

#[test]
fn repeated_feature_gates_merge_as_each_go_sidecar_merges_its_own() {
    let m = merged(&[
        "--args-of=csi-provisioner",
        "--feature-gates=Topology=true",
        "--args-of=csi-resizer",
        "--feature-gates=AnnotateFsResize=true,Topology=false",
    ])
    .unwrap();
    // The joined list comes last, so that it is the one the flag parser keeps; a gate given
    // twice takes its last value, as a Go feature gate set twice does.
    assert_eq!(
        argv(&m).last().map(String::as_str),
        Some("--feature-gates=Topology=true,AnnotateFsResize=true,Topology=false")
    );
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    assert_eq!(m.notes.len(), 1, "{:?}", m.notes);
    // A subcommand's args stay after the flags.
    let m =
        merged(&["--feature-gates=A=true", "--feature-gates=B=true", "explain", "--all"]).unwrap();
    assert_eq!(argv(&m)[2..], ["--feature-gates=A=true,B=true", "explain", "--all"]);
}

#[test]
fn the_two_marked_lists_api_limits_add_up() {
    let lists = |p_qps: &str, r_qps: &str| {
        merged(&[
            "--args-of=csi-provisioner",
            &format!("--kube-api-qps={p_qps}"),
            "--kube-api-burst=10",
            "--args-of=csi-resizer",
            &format!("--kube-api-qps={r_qps}"),
            "--kube-api-burst=20",
        ])
        .unwrap()
    };
    let rows = [
        ("5", "5", "--kube-api-qps=10"),
        ("2.5", "5", "--kube-api-qps=7.5"),
        ("-1", "5", "--kube-api-qps=-1"),
    ];
    for (p, r, want) in rows {
        let m = lists(p, r);
        let args = argv(&m);
        assert_eq!(args[args.len() - 2..], [want, "--kube-api-burst=30"], "{p} + {r}");
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        assert_eq!(m.notes.len(), 2, "{:?}", m.notes);
    }
    // Unmarked repeats keep the last value, and say so.
    let m = merged(&["--kube-api-qps=5", "--kube-api-qps=20"]).unwrap();
    assert_eq!(argv(&m), ["--kube-api-qps=5", "--kube-api-qps=20"]);
    assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
}

#[test]
fn each_marked_address_keeps_its_role() {
    let m = merged(&[
        "--args-of=csi-provisioner",
        "--http-endpoint=:8080",
        "--args-of=csi-resizer",
        "--metrics-address",
        ":8081",
    ])
    .unwrap();
    assert_eq!(
        m.endpoints,
        [
            (Some(Role::Provisioner), ":8080".to_string()),
            (Some(Role::Resizer), ":8081".to_string())
        ]
    );
}

/// csi-resizer v2.3's per-call deadlines: they apply where no `--timeout` is given for
/// csi-resizer; an explicit one overrides both, as in csi-resizer. In marked lists, a sidecar
/// whose list sets no deadline gets the sidecars' 10 s, not the other list's `--timeout`.
#[test]
fn resize_and_modify_timeouts_apply_where_csi_resizer_has_no_timeout() {
    let s = |secs| Some(Duration::from_secs(secs));
    let rows: [(&[&str], RoleTimeouts); 7] = [
        (&[], RoleTimeouts::default()),
        (
            &["--resize-timeout=20s", "--modify-timeout", "30s"],
            RoleTimeouts { provision: None, expand: s(20), modify: s(30) },
        ),
        (
            &["--timeout=5s", "--resize-timeout=20s", "--modify-timeout=30s"],
            RoleTimeouts { provision: s(5), expand: s(5), modify: s(5) },
        ),
        (
            &["--args-of=csi-provisioner", "--timeout=300s", "--args-of=csi-resizer", "--v=5"],
            RoleTimeouts { provision: s(300), expand: s(10), modify: s(10) },
        ),
        (
            &[
                "--args-of=csi-provisioner",
                "--timeout=300s",
                "--args-of=csi-resizer",
                "--resize-timeout=20s",
                "--modify-timeout=40s",
            ],
            RoleTimeouts { provision: s(300), expand: s(20), modify: s(40) },
        ),
        (
            &[
                "--args-of=csi-resizer",
                "--timeout=15s",
                "--resize-timeout=20s",
                "--args-of=csi-provisioner",
                "--v=5",
            ],
            RoleTimeouts { provision: s(10), expand: s(15), modify: s(15) },
        ),
        (&["--resize-timeout=soon"], RoleTimeouts::default()),
    ];
    for (args, want) in rows {
        let m = merged(args).unwrap();
        assert_eq!(m.timeouts, want, "{args:?}");
    }
    let t = merged(&["--resize-timeout=20s"]).unwrap().timeouts;
    let default = Duration::from_secs(10);
    assert_eq!(t.for_method("ControllerExpandVolume", default), Duration::from_secs(20));
    assert_eq!(t.for_method("ControllerModifyVolume", default), default);
    assert_eq!(t.for_method("CreateVolume", default), default);
    assert_eq!(t.longest(default), Duration::from_secs(20));
}
