use super::*;

fn parse(args: &[&str]) -> Result<Config, String> {
    let mut argv = vec!["csi-pv-controller"];
    argv.extend_from_slice(args);
    let Read { config, .. } =
        from_args(argv.into_iter().map(std::ffi::OsString::from)).map_err(|e| match e {
            FlagError::Clap(e) => e.to_string(),
            FlagError::Refused(message) | FlagError::Conflict { message, .. } => message,
        })?;
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

#[test]
fn defaults_match_upstream() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.csi_address, "/run/csi/socket");
    assert_eq!(c.timeout, Duration::from_secs(10));
    // Not upstream's 5: one client carries three components' traffic (see the flag's help).
    assert_eq!((c.kube_api_qps, c.kube_api_burst), (-1.0, 10));
    assert_eq!(c.worker_threads, 100);
    assert_eq!(c.retry_interval_start, Duration::from_secs(1));
    assert_eq!(c.retry_interval_max, Duration::from_secs(300));
    assert!(!c.leader_election);
    assert!(c.handle_volume_inuse_error);
    assert!(c.http_addresses().unwrap().is_empty());
    assert_eq!(c.volume_name_prefix, "pvc");
    assert_eq!(c.uuid_length(), None);
    assert!(!c.extra_create_metadata);
    // csi-resizer v2.3: AnnotateFsResize on; every call's deadline --timeout's 10 s.
    assert!(c.feature_gates.annotate_fs_resize);
    assert_eq!(c.role_timeouts, Default::default());
    assert_eq!((c.resize_timeout, c.modify_timeout), (None, None));
}

#[test]
fn log_flags() {
    let c = parse(&["--log-format=json", "-v=5"]).unwrap();
    assert_eq!(c.log_format, "json");
    assert_eq!(c.log_level(), "info,csi_pv_controller=trace");
    assert_eq!(parse(&["--v=2"]).unwrap().log_level(), "info,csi_pv_controller=debug");
    assert_eq!(parse(&[]).unwrap().log_level(), "info");
    assert!(parse(&["--log-format=xml"]).is_err());
    assert_eq!(parse(&["--logging-format=json"]).unwrap().log_format, "json");
}

#[test]
fn leader_election_timing_is_checked() {
    let c = parse(&["--leader-election"]).unwrap();
    assert!(c.leader_election);
    assert_eq!(c.leader_election_lease_duration, Duration::from_secs(15));
    assert_eq!(c.leader_election_renew_deadline, Duration::from_secs(10));
    assert_eq!(c.leader_election_retry_period, Duration::from_secs(5));
    let refused = parse(&[
        "--leader-election",
        "--leader-election-lease-duration=5s",
        "--leader-election-renew-deadline=5s",
    ])
    .unwrap_err();
    assert!(refused.contains("--leader-election-lease-duration"), "{refused}");
    assert!(parse(&["--leader-election", "--leader-election-retry-period=0s"]).is_err());
}

#[test]
fn go_style_values_parse() {
    let c = parse(&[
        "--timeout=1m30s",
        "--http-endpoint=:8080",
        "--leader-election=false",
        "--kube-api-qps=50",
    ])
    .unwrap();
    assert_eq!(c.timeout, Duration::from_secs(90));
    assert_eq!(c.http_addresses().unwrap(), ["[::]:8080"]);
}

#[test]
fn every_http_endpoint_is_served_once_host_names_included() {
    let addresses = |args: &[&str]| parse(args).map(|c| c.http_addresses().unwrap());
    let rows: [(&[&str], &[&str]); 4] = [
        (&["--http-endpoint=127.0.0.1:9808"], &["127.0.0.1:9808"]),
        (&["--http-endpoint=localhost:8080"], &["localhost:8080"]),
        (&["--http-endpoint=[::1]:8080", "--http-endpoint=:8081"], &["[::1]:8080", "[::]:8081"]),
        (&["--http-endpoint=:8080", "-http-endpoint=:8080", "--http-endpoint="], &["[::]:8080"]),
    ];
    for (args, want) in rows {
        assert_eq!(addresses(args).unwrap(), want, "{args:?}");
    }
    for bad in ["--http-endpoint=8080", "--http-endpoint=host:http", "--http-endpoint=a b:80"] {
        let refused = addresses(&[bad]).unwrap_err();
        assert!(refused.contains("--http-endpoint"), "{bad}: {refused}");
    }
}

#[test]
fn a_negative_qps_means_no_client_side_limit() {
    assert_eq!(parse(&["--kube-api-qps=-1"]).unwrap().kube_api_qps, -1.0);
    assert_eq!(parse(&["--kube-api-qps=50"]).unwrap().kube_api_qps, 50.0);
    for nonsense in ["--kube-api-qps=NaN", "--kube-api-qps=inf", "--kube-api-qps=0"] {
        let e = parse(&[nonsense]).unwrap_err();
        assert!(e.contains("kube-api-qps"), "{nonsense}: {e}");
    }
}

#[test]
fn kube_controller_manager_binds_unless_told_otherwise() {
    use crate::binder::Binder;
    assert_eq!(parse(&[]).unwrap().binder(), Binder::External);
    assert_eq!(parse(&["--binder=driver"]).unwrap().binder(), Binder::Driver);
    assert_eq!(parse(&["--binder=all"]).unwrap().binder(), Binder::All);
    assert_eq!(parse(&["--bind-all"]).unwrap().binder(), Binder::All);
    assert_eq!(parse(&["--bind-all=false", "--binder=driver"]).unwrap().binder(), Binder::Driver);
}

#[test]
fn nonsense_is_rejected_with_the_flag_named() {
    for (args, flag) in [
        (&["--timeout=-1s"][..], "timeout"),
        (&["--timeout=0s"], "timeout"),
        (&["--kube-api-qps=0", "--kube-api-burst=0"], "kube-api-qps"),
        (&["--kube-api-burst=0"], "kube-api-burst"),
        (&["--worker-threads=0"], "worker-threads"),
        (&["--retry-interval-start=10s", "--retry-interval-max=1s"], "retry-interval-max"),
        (&["--http-endpoint=nonsense"], "http-endpoint"),
        (&["--csi-address=tcp://127.0.0.1:1"], "csi-address"),
        (&["--kubeconfig=/does/not/exist"], "kubeconfig"),
        (&["--volume-name-prefix="], "volume-name-prefix"),
        (&["--volume-name-uuid-length=-2"], "volume-name-uuid-length"),
        (&["--binder=kcm"], "binder"),
        (&["--feature-gates=Nope=true"], "feature-gates"),
        (&["--bind-all", "--binder=driver"], "bind-all"),
    ] {
        let err = parse(args).unwrap_err();
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

/// Every long flag the binary accepts is passed to it by some integration test: a string
/// literal in any `.rs` file under tests/ (subfolders too) that starts with the flag, as an
/// argument does (`"--flag"`, `"--flag=…"`, or Go's `"-flag=…"`). A flag named inside a
/// sentence, an expected event text, or as the prefix of a longer flag does not count. Upstream's
/// spellings taken from csi-driver-host-path's manifest (`tests/sidecar.rs`) count as passed.
#[test]
fn every_accepted_flag_is_passed_by_a_test() {
    use clap::CommandFactory;
    fn read(folder: &std::path::Path, text: &mut String) {
        for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                read(&path, text);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut text = String::new();
    read(&dir, &mut text);
    assert!(text.len() > 10_000, "the integration tests were not read from {}", dir.display());
    let passed = |long: &str| {
        ["--", "-"].iter().any(|dashes| {
            let start = format!("\"{dashes}{long}");
            text.match_indices(&start).any(|(at, _)| {
                let next = text[at + start.len()..].chars().next();
                matches!(next, Some('"' | '='))
            })
        })
    };
    // The flags csi-driver-host-path's own manifest passes, which tests/sidecar.rs and
    // tests/merged_args.rs give verbatim.
    let manifest = ["csi-address", "v", "feature-gates"];
    let missing: Vec<String> = Config::command()
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|long| !["help", "version"].contains(long))
        .filter(|long| !manifest.contains(long) && !passed(long))
        .map(str::to_string)
        .collect();
    assert!(missing.is_empty(), "flags no integration test passes: {missing:?}");
}

#[test]
fn go_spellings_and_upstream_flags_are_read_as_the_sidecars_read_them() {
    let c =
        parse(&["-leader-election=True", "--feature-gates=Topology=True", "--enable-capacity=1"])
            .unwrap();
    assert!(c.leader_election && c.enable_capacity);
    assert!(!parse(&["--strict-topology=F"]).unwrap().strict_topology);
    let c = parse(&["--metrics-address=:9090", "-automaxprocs"]).unwrap();
    assert_eq!(c.http_endpoint, [":9090"]);
    // A flag nobody knows gets our words, not a guess at a similar flag.
    let unknown = parse(&["--leader-elect"]).unwrap_err();
    assert!(unknown.contains("unknown flag --leader-elect"), "{unknown}");
    assert!(!unknown.contains("similar"), "{unknown}");
    let refused = parse(&["--master=https://api:6443"]).unwrap_err();
    assert!(refused.contains("kubeconfig"), "{refused}");
}

#[test]
fn a_process_flag_after_a_subcommand_is_told_where_it_goes() {
    let misplaced = parse(&["explain", "--timeout=5s", "ns/data"]).unwrap_err();
    assert!(misplaced.contains("before the subcommand"), "{misplaced}");
    let unknown = parse(&["explain", "--nonsense", "ns/data"]).unwrap_err();
    assert!(unknown.contains("unknown flag --nonsense"), "{unknown}");
    assert!(parse(&["--timeout=5s", "explain", "ns/data"]).is_ok());
}

/// Every long flag has a row in docs/testing.md's "Each flag's effect" naming a test that shows
/// what the flag changes: the function exists in the file named, and that file mentions each
/// flag of the row.
#[test]
fn every_flag_has_a_test_showing_its_effect() {
    use clap::CommandFactory;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/testing.md")).unwrap_or_default();
    let section = doc.split("## Each flag's effect").nth(1).unwrap_or_default();
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut covered = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `-")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let flags: Vec<&str> =
            cells[0].split('`').filter(|f| f.starts_with("--")).map(|f| &f[2..]).collect();
        let test = cells.get(1).map_or("", |c| c.trim_matches('`'));
        let (file, function) = test.split_once("::").unwrap_or((test, ""));
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        assert!(
            !function.is_empty() && text.contains(&format!("fn {function}(")),
            "{row}: no function {function} in {file}"
        );
        for flag in &flags {
            assert!(text.contains(flag), "{row}: {file} never mentions --{flag}");
        }
        covered.extend(flags.into_iter().map(str::to_string));
    }
    assert!(covered.len() > 40, "the section was not read: {covered:?}");
    let command = Config::command();
    let missing: Vec<&str> = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|long| !["help", "version"].contains(long))
        .filter(|long| !covered.iter().any(|c| c == long))
        .collect();
    assert!(missing.is_empty(), "flags with no test of their effect: {missing:?}");
}

#[test]
fn an_address_named_by_one_roles_list_serves_that_roles_series() {
    use merged::Role;
    let c = parse(&[
        "--http-endpoint=127.0.0.1:9000",
        "--args-of=csi-provisioner",
        "--http-endpoint=:8080",
        "--args-of=csi-resizer",
        "--http-endpoint=localhost:8081",
        "--args-of=csi-resizer",
        "--http-endpoint=127.0.0.1:9000",
        "--args-of=csi-provisioner",
        "--feature-gates=Topology=true",
        "--args-of=csi-resizer",
        "--feature-gates=AnnotateFsResize=false",
        "--args-of=csi-provisioner",
        "--kube-api-qps=5",
        "--kube-api-burst=10",
        "--args-of=csi-resizer",
        "--kube-api-qps=5",
        "--kube-api-burst=10",
    ])
    .unwrap();
    let listeners = c.http_listeners().unwrap();
    assert_eq!(
        listeners,
        [
            ("127.0.0.1:9000".to_string(), None),
            ("[::]:8080".to_string(), Some(Role::Provisioner)),
            ("localhost:8081".to_string(), Some(Role::Resizer)),
        ]
    );
    // Both lists' gates, merged; both lists' limits, added.
    assert!(!c.feature_gates.annotate_fs_resize && !c.feature_gates.topology_off);
    assert_eq!((c.kube_api_qps, c.kube_api_burst), (10.0, 20));
}
