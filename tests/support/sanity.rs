//! Running csi-sanity (the real one, built by `make peers`) against a driver's socket.

#![allow(dead_code)]

use std::path::Path;

use super::peers::peer;

/// The counts csi-sanity's summary line reports.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SanityReport {
    pub passed: u32,
    pub failed: u32,
    pub pending: u32,
    pub skipped: u32,
    pub success: bool,
    pub output: String,
}

impl SanityReport {
    /// Fails the test unless csi-sanity succeeded, none failed, and exactly `passed` specs
    /// passed: a spec that stops running (skipped by a capability we no longer report, or
    /// dropped by a new csi-sanity) shows as a changed count, not as a quieter green.
    pub fn assert_green(&self, passed: u32) {
        assert!(
            self.success && self.failed == 0 && self.passed == passed,
            "csi-sanity: {} passed (want {passed}), {} failed\n{}",
            self.passed,
            self.failed,
            self.output
        );
    }
}

/// Parses Ginkgo's "SUCCESS! -- 30 Passed | 0 Failed | 0 Pending | 65 Skipped" line.
pub fn parse_summary(output: &str) -> Option<SanityReport> {
    let line = output
        .lines()
        .find(|l| (l.contains("SUCCESS!") || l.contains("FAIL!")) && l.contains("Passed"))?;
    let mut report = SanityReport { success: line.contains("SUCCESS!"), ..SanityReport::default() };
    let counts = line.split("--").nth(1)?;
    for part in counts.split('|') {
        let mut words = part.split_whitespace();
        let n: u32 = words.next()?.parse().ok()?;
        match words.next()? {
            "Passed" => report.passed = n,
            "Failed" => report.failed = n,
            "Pending" => report.pending = n,
            "Skipped" => report.skipped = n,
            _ => {}
        }
    }
    Some(report)
}

/// Runs the Identity and Controller specs against `endpoint`, with scratch folders under `work`.
pub async fn run(endpoint: &str, work: &Path, extra_args: &[&str]) -> SanityReport {
    let mut args = vec!["--ginkgo.skip=Node Service"];
    args.extend_from_slice(extra_args);
    run_specs(endpoint, work, &args).await
}

/// Runs every spec csi-sanity has that `extra_args` does not skip (Node specs too: they mount
/// for real, so they need root).
pub async fn run_specs(endpoint: &str, work: &Path, extra_args: &[&str]) -> SanityReport {
    let output = tokio::process::Command::new(peer("csi-sanity"))
        .arg(format!("--csi.endpoint={endpoint}"))
        .arg(format!("--csi.mountdir={}", work.join("mount").display()))
        .arg(format!("--csi.stagingdir={}", work.join("staging").display()))
        .arg("--csi.testvolumesize=1073741824")
        .arg("--csi.testvolumeexpandsize=2147483648")
        .arg("--ginkgo.no-color")
        .args(extra_args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("csi-sanity did not start");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut report = parse_summary(&text).unwrap_or_else(|| {
        panic!("no Ginkgo summary in csi-sanity output (exit {:?}):\n{text}", output.status)
    });
    report.success &= output.status.success();
    report.output = text;
    report
}
