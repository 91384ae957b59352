//! The csi-pv-controller binary against the real kube-apiserver and the fake driver: it becomes
//! ready, runs with nothing but deploy/ RBAC, stops on SIGTERM, and fails clearly on bad input.

mod support;

use std::time::Duration;

use support::control_plane::control_plane;
use support::fake_driver::{DriverConfig, FakeDriver};
use support::sidecar::{Sidecar, apply_deploy_rbac, start_beside_fake};
use support::signal;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn becomes_ready_and_stops_on_sigterm() {
    let plane = control_plane();
    let (_dir, driver, mut sidecar) = start_beside_fake(&plane.admin_kubeconfig, &[]).await;
    assert!(
        sidecar.wait_ready(Duration::from_secs(60)).await,
        "not ready:\n{}",
        sidecar.log_text()
    );
    assert!(sidecar.healthy().await);
    let log = sidecar.log_text();
    assert!(log.contains("fake.csi.test") && log.contains("CREATE_DELETE_VOLUME"), "{log}");
    // Text logs carry klog's header: `I1126 02:38:30.756391    6744 main.rs:201] "msg" k=v`.
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let (head, tail) = line.split_once("] ").unwrap_or_else(|| panic!("no header: {line}"));
        let parts: Vec<&str> = head.split_whitespace().collect();
        assert_eq!(parts.len(), 4, "{line}");
        let (level, date) = parts[0].split_at(1);
        assert!(["I", "W", "E"].contains(&level) && date.len() == 4, "{line}");
        assert!(date.chars().chain(parts[2].chars()).all(|c| c.is_ascii_digit()), "{line}");
        assert!(parts[3].contains(".rs:") && tail.starts_with('"'), "{line}");
    }

    // A driver outage shows in /readyz; /healthz (liveness) stays 200: a restart would not
    // bring the driver back.
    driver.stop();
    assert!(!sidecar.answers("/readyz").await, "readyz must fail without a driver");
    assert!(sidecar.healthy().await, "healthz must not follow the driver");
    driver.restart().await.unwrap();
    assert!(
        sidecar.wait_for("/readyz", Duration::from_secs(5)).await,
        "readyz must recover when the driver is back"
    );

    assert_eq!(sidecar.terminate(Duration::from_secs(15)).await, Some(0), "{}", sidecar.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_with_only_the_deploy_rbac() {
    let plane = control_plane();
    let account = apply_deploy_rbac(plane, "sidecar-rbac", "rbac-test").await;
    let token = plane.service_account_token("sidecar-rbac", &account).await;
    let kubeconfig = plane.token_kubeconfig("deploy-rbac", &token);
    let (_dir, _driver, mut sidecar) = start_beside_fake(&kubeconfig, &[]).await;
    assert!(
        sidecar.wait_ready(Duration::from_secs(60)).await,
        "not ready:\n{}",
        sidecar.log_text()
    );
    let log = sidecar.log_text();
    assert!(!log.contains("forbidden") && !log.contains("Forbidden"), "RBAC denied a call:\n{log}");
    assert_eq!(sidecar.terminate(Duration::from_secs(15)).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_the_rules_never_gets_ready() {
    let plane = control_plane();
    let token = plane.service_account_token("sidecar-norbac", "no-rules").await;
    let kubeconfig = plane.token_kubeconfig("no-rules", &token);
    let (_dir, _driver, mut sidecar) = start_beside_fake(&kubeconfig, &[]).await;
    assert!(
        !sidecar.wait_ready(Duration::from_secs(5)).await,
        "ready without RBAC:\n{}",
        sidecar.log_text()
    );
    let log = sidecar.log_text();
    assert!(
        log.contains("forbidden") || log.contains("Forbidden"),
        "the denial must be logged:\n{log}"
    );
}

#[tokio::test]
async fn an_unreachable_socket_is_one_error_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_csi-pv-controller"))
        .arg(format!("--csi-address={}", dir.path().join("nothing.sock").display()))
        .arg("--csi-connect-timeout=1s")
        .env("RUST_LOG", "error")
        .output()
        .await
        .unwrap();
    // --csi-connect-timeout=1s: given up after a second of waiting, not the default minute.
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(1) && waited < Duration::from_secs(20), "{waited:?}");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("not ready") && lines[0].contains("socket does not exist"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{stderr}");
}

#[tokio::test]
async fn bad_flags_are_rejected_with_the_flag_named() {
    for (args, flag) in [
        (&["--timeout=-5s"][..], "--timeout"),
        (&["--kube-api-qps=0", "--kube-api-burst=0"], "kube-api-qps"),
        (&["--csi-address=tcp://127.0.0.1:9"], "csi-address"),
        (&["--no-such-flag"], "--no-such-flag"),
    ] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_csi-pv-controller"))
            .args(args)
            .output()
            .await
            .unwrap();
        assert!(!output.status.success(), "{args:?} accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// An API server outage shows in /readyz within seconds (the watches fail), and /healthz stays
/// 200. A plain test: its own plane starts outside any runtime, on this thread.
#[test]
fn an_api_outage_shows_in_readyz_not_healthz() {
    let owned = support::control_plane::OwnedPlane::for_test(false);
    let runtime = support::control_plane::runtime();
    runtime.block_on(async {
        let (_dir, _driver, mut sidecar) =
            start_beside_fake(&owned.plane.admin_kubeconfig, &[]).await;
        assert!(
            sidecar.wait_ready(Duration::from_secs(60)).await,
            "not ready:\n{}",
            sidecar.log_text()
        );
        let pid = owned.apiserver_pid().expect("apiserver pid");
        signal(pid, libc::SIGKILL);
        let started = std::time::Instant::now();
        let mut unready = false;
        while started.elapsed() < Duration::from_secs(30) {
            if !sidecar.answers("/readyz").await {
                unready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(unready, "readyz still 200 30 s into the outage");
        println!("readyz 503 {:.1} s after the apiserver died", started.elapsed().as_secs_f64());
        assert!(sidecar.healthy().await, "healthz must not follow the API server");
    });
}

/// The args of csi-driver-host-path's own csi-provisioner and csi-resizer containers (its
/// `deploy/kubernetes-1.34` manifest, read from the release archive the peers are built from),
/// one after the other, start our binary unchanged: Go's single-dash flags, the GA Topology gate
/// and a flag given twice included. Only the socket path is mapped to this test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostpath_upstream_container_args_start_it_unchanged() {
    let mut upstream: Vec<String> = Vec::new();
    for name in ["csi-provisioner", "csi-resizer"] {
        let (args, security) = support::hostpath::container_args(name);
        upstream.extend(args);
        // The manifest names no user: the image's own runs, and ours is root as the sidecars'
        // images are (deploy/image-check.sh), so the driver's root-owned socket opens with only
        // the image changed.
        assert!(
            security["runAsUser"].is_null() && security["runAsNonRoot"].is_null(),
            "{name}: the manifest now sets a user: {security:?}"
        );
    }
    assert!(
        upstream.iter().any(|a| a.starts_with("-csi-address"))
            && upstream.iter().any(|a| a.starts_with("--feature-gates")),
        "the manifest's args changed: {upstream:?}"
    );

    let plane = control_plane();
    let dir = tempfile::tempdir().unwrap();
    let driver =
        FakeDriver::start(&dir.path().join("csi.sock"), DriverConfig::default()).await.unwrap();
    let socket = driver.socket().display().to_string();
    let mut args: Vec<String> =
        upstream.iter().map(|a| a.replace("/csi/csi.sock", &socket)).collect();
    args.push(format!("--kubeconfig={}", plane.admin_kubeconfig.display()));
    args.extend(["--workers=3".into(), "--metrics-path=/custom-metrics".into()]);
    let mut sidecar = Sidecar::start(dir.path(), &args);
    assert!(
        sidecar.wait_ready(Duration::from_secs(60)).await,
        "not ready with upstream's args {upstream:?}:\n{}",
        sidecar.log_text()
    );
    assert!(
        sidecar.answers("/custom-metrics").await && !sidecar.answers("/metrics").await,
        "--metrics-path moves the metrics"
    );
    assert!(sidecar.answers("/healthz/leader-election").await);
    println!("started with {upstream:?}");
}

/// The args and env of csi-provisioner's and csi-resizer's own example deployments, as each
/// release ships them (deploy/kubernetes/deployment.yaml of the module peers/ pins, copied by
/// peers/driver-images.sh), start ours with their meaning, one list at a time: `$(ADDRESS)`
/// expanded from the container's env as kubelet expands it (only its socket path mapped to this
/// test's), the Lease taken (`--leader-election`, in the pod's namespace) and every path served on
/// `--http-endpoint=:8080`, all interfaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sidecars_own_deployment_args_start_it_with_their_meaning() {
    use k8s_openapi::api::coordination::v1::Lease;
    let plane = control_plane();
    let dir = tempfile::tempdir().unwrap();
    let driver =
        FakeDriver::start(&dir.path().join("csi.sock"), DriverConfig::default()).await.unwrap();
    let socket = driver.socket().display().to_string();
    let client = plane.client().await;
    for name in ["csi-provisioner", "csi-resizer"] {
        let path =
            support::peers::bin_dir().join("hostpath-deploy/sidecars").join(format!("{name}.yaml"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run `make peers`)", path.display()));
        let manifest: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        let containers = manifest["spec"]["template"]["spec"]["containers"].as_sequence().unwrap();
        let container = containers.iter().find(|c| c["name"].as_str() == Some(name)).unwrap();
        let env: Vec<(String, String)> = container["env"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
            .collect();
        let args: Vec<String> = container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str())
            .map(|a| env.iter().fold(a.to_string(), |a, (k, v)| a.replace(&format!("$({k})"), v)))
            .collect();
        assert!(
            args.iter().any(|a| a == "--leader-election")
                && args.iter().any(|a| a == "--http-endpoint=:8080"),
            "{name}'s manifest changed: {args:?}"
        );
        let (_, address) = env.iter().find(|(k, _)| k == "ADDRESS").unwrap();
        let mut given: Vec<String> = args.iter().map(|a| a.replace(address, &socket)).collect();
        given.push(format!("--kubeconfig={}", plane.admin_kubeconfig.display()));
        let namespace = format!("own-{name}");
        support::control_plane::create_namespace(&client, &namespace).await;
        let mut sidecar =
            Sidecar::start_with_env(dir.path(), &given, &[("POD_NAMESPACE", &namespace)]);
        let ready = sidecar.wait_ready(Duration::from_secs(60)).await;
        assert!(ready, "{name}: not ready with {args:?}:\n{}", sidecar.log_text());
        for path in ["/healthz", "/readyz", "/healthz/leader-election", "/metrics"] {
            let answered =
                tokio::task::spawn_blocking(move || support::control_plane::http_ok(8080, path));
            assert!(answered.await.unwrap(), "{name}: :8080 does not answer {path}");
        }
        let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &namespace);
        let held = support::cluster::eventually(Duration::from_secs(30), || async {
            let list = leases.list(&Default::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|l| l.spec.as_ref().and_then(|s| s.holder_identity.as_ref()).is_some())
        });
        assert!(
            held.await.is_some(),
            "{name}: no Lease held in {namespace}:\n{}",
            sidecar.log_text()
        );
        drop(sidecar);
        // The port is free again before the next list binds it.
        let freed = support::cluster::eventually(Duration::from_secs(15), || async {
            (!support::control_plane::http_ok(8080, "/healthz")).then_some(())
        });
        assert!(freed.await.is_some(), "{name}: :8080 still answers after the process ended");
    }
}

/// `-v` alone sets the verbosity, as deployed (no RUST_LOG): `-v=5` writes each CSI call with
/// its payload, as csi-lib-utils does at V(5); `-v=2` and `-v=0` do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v_sets_the_verbosity_and_only_v5_writes_csi_payloads() {
    let plane = control_plane();
    let dir = tempfile::tempdir().unwrap();
    let driver =
        FakeDriver::start(&dir.path().join("csi.sock"), DriverConfig::default()).await.unwrap();
    let mut logs = Vec::new();
    for v in ["-v=5", "--v=2", "--v=0"] {
        let args = vec![
            format!("--csi-address={}", driver.socket().display()),
            format!("--kubeconfig={}", plane.admin_kubeconfig.display()),
            v.to_string(),
        ];
        let mut sidecar = Sidecar::start_as_deployed(dir.path(), &args, &[]);
        assert!(sidecar.wait_ready(Duration::from_secs(60)).await, "{v}:\n{}", sidecar.log_text());
        assert_eq!(sidecar.terminate(Duration::from_secs(15)).await, Some(0));
        logs.push((v, sidecar.log_text()));
    }
    let payload = "\"CSI call succeeded\" method=\"GetPluginInfo\"";
    for (v, log) in &logs {
        let has_payload = log.contains(payload);
        assert_eq!(has_payload, *v == "-v=5", "{v}: CSI payloads only at 5:\n{log}");
        assert!(log.contains("\"CSI driver discovered\""), "{v}: info at every level:\n{log}");
    }
}
