//! csi-sanity against our fault-injecting fake driver (Identity and Controller specs: the fake is
//! only a fair stand-in for real drivers if it keeps the same contract), and against the real
//! hostpathplugin, Node specs included (they mount for real; these machines run them as root).

mod support;

use support::fake_driver::{DriverConfig, FakeDriver};

/// Runs csi-sanity against a fake configured by `config`, prints the counts, and requires at
/// exactly `passed` passing specs and no failure.
async fn assert_sanity(label: &str, config: DriverConfig, passed: u32) {
    let dir = tempfile::tempdir().unwrap();
    let driver = FakeDriver::start(&dir.path().join("csi.sock"), config).await.unwrap();
    let report = support::sanity::run(&driver.endpoint(), dir.path(), &[]).await;
    println!(
        "csi-sanity against the fake driver ({label}): {} passed, {} failed, {} skipped",
        report.passed, report.failed, report.skipped
    );
    report.assert_green(passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_driver_passes_csi_sanity() {
    assert_sanity("defaults", DriverConfig::default(), 23).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_driver_with_topology_and_offline_expansion_passes_csi_sanity() {
    let config = DriverConfig {
        topology: true,
        online_expansion: Some(false),
        node_expansion_required: true,
        clone: false,
        single_node_multi_writer: false,
        ..DriverConfig::default()
    };
    assert_sanity("topology, offline expansion", config, 21).await;
}

/// Every spec hostpathplugin takes part in: Identity, Controller and Node (NodeStage/Publish
/// make real bind mounts), in its default configuration and as a controller-expansion-less,
/// capacity-limited driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostpathplugin_passes_csi_sanity_node_specs_included() {
    use support::hostpath::{Hostpath, HostpathConfig};
    for (label, flags, passed) in [
        ("defaults", vec![], 77),
        (
            "node-only expansion, 20Gi per volume",
            vec![
                "--disable-controller-expansion".to_string(),
                format!("--max-volume-size={}", 20u64 << 30),
            ],
            74,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let driver = Hostpath::start(
            dir.path(),
            HostpathConfig { flags, ..HostpathConfig::named("hostpath.csi.k8s.io") },
        )
        .await;
        let report = support::sanity::run_specs(&driver.endpoint(), dir.path(), &[]).await;
        println!(
            "csi-sanity against hostpathplugin ({label}): {} passed, {} failed, {} pending, {} skipped",
            report.passed, report.failed, report.pending, report.skipped
        );
        report.assert_green(passed);
    }
}

#[test]
fn summary_line_parses() {
    use support::sanity::parse_summary;
    let r = parse_summary(
        "Ran 30 of 95 Specs\nSUCCESS! -- 30 Passed | 0 Failed | 0 Pending | 65 Skipped\n",
    )
    .unwrap();
    assert_eq!((r.passed, r.failed, r.pending, r.skipped, r.success), (30, 0, 0, 65, true));
    let r = parse_summary("FAIL! -- 28 Passed | 2 Failed | 0 Pending | 65 Skipped").unwrap();
    assert_eq!((r.passed, r.failed, r.success), (28, 2, false));
    assert_eq!(parse_summary("no summary"), None);
}
