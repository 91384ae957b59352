//! Lease-based leader election with client-go's rules, as the Go sidecars (csi-lib-utils) do it:
//! one Lease per driver, held by the replica that acts. Standbys keep their caches warm. The
//! leader renews every retry period; when no renewal has succeeded for the renew deadline it
//! stops at once (main.rs exits), and from that instant the [`Fence`] refuses every side effect,
//! even one a worker was about to send. The Lease is kept on a client of its own that the API
//! rate limit never holds back.

mod elector;
mod events;
pub mod record;

use std::time::Duration;

pub use elector::{Leadership, LeaseName};

/// Timings, from `--leader-election-*`.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Timing {
    /// client-go's rules: the lease outlasts the renew deadline (the margin is what keeps two
    /// leaders apart), which outlasts a retry period with its jitter; the Lease counts whole
    /// seconds.
    pub fn check(&self) -> Result<(), LeaderError> {
        let bad = self.lease_duration < Duration::from_secs(1)
            || self.lease_duration <= self.renew_deadline
            || self.renew_deadline <= self.retry_period.mul_f64(JITTER)
            || self.retry_period.is_zero();
        if bad {
            return Err(LeaderError::Timing(*self));
        }
        Ok(())
    }
}

/// Retries wait up to this factor of the retry period (client-go's JitterFactor + 1).
const JITTER: f64 = 1.2;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error(
        "invalid leader election timing {0:?}: the lease duration must be at least 1s and longer than the renew deadline, which must be longer than 1.2 times the retry period"
    )]
    Timing(Timing),
    #[error("no Lease to campaign for")]
    NoLease,
}

/// Every character outside `[a-zA-Z0-9-]` becomes `-`, and a trailing `-` gets an `X`
/// (csi-lib-utils' sanitizeName), then lowercased, as a Lease name must be.
pub fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c.to_ascii_lowercase() } else { '-' })
        .collect();
    if out.ends_with('-') {
        out.push('X');
    }
    out
}

/// The Lease of this driver's csi-pv-controller replicas. Not the Go sidecars' names
/// (`<driver>` / `external-resizer-<driver>`): one process does the work of both.
pub fn lease_name(driver: &str) -> String {
    sanitize(&format!("csi-pv-controller-{driver}"))
}

/// The Leases to hold before acting: ours, then csi-provisioner's (`<driver>`) and
/// csi-resizer's (`external-resizer-<driver>`), each sanitized as csi-lib-utils does. While either sidecar leads for
/// the driver (the old pod of a rolling update), we wait; while we hold them, a sidecar started
/// after a roll back waits for us. So at no instant do two provisioners or two resizers act.
pub fn leases(driver: &str) -> Vec<LeaseName> {
    vec![
        LeaseName { name: lease_name(driver), whose: None },
        LeaseName { name: sanitize(driver), whose: Some("csi-provisioner's") },
        LeaseName {
            name: format!("external-resizer-{}", sanitize(driver)),
            whose: Some("csi-resizer's"),
        },
    ]
}

/// The holder identity: the pod's hostname, as upstream's os.Hostname().
pub fn identity() -> String {
    env_or_file("HOSTNAME", "/etc/hostname")
        .unwrap_or_else(|| format!("csi-pv-controller-{}", std::process::id()))
}

/// The Lease's namespace: the flag, else $POD_NAMESPACE, else the service account's, else
/// `default`.
pub fn namespace(flag: &str) -> String {
    if !flag.is_empty() {
        return flag.to_string();
    }
    env_or_file("POD_NAMESPACE", "/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .unwrap_or_else(|| "default".to_string())
}

/// The environment variable if set and not empty, else the trimmed file if not empty.
fn env_or_file(variable: &str, path: &str) -> Option<String> {
    std::env::var(variable).ok().filter(|v| !v.is_empty()).or_else(|| {
        std::fs::read_to_string(path).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_first_then_the_go_sidecars_leases() {
        let names: Vec<String> =
            leases("hostpath.csi.k8s.io").into_iter().map(|l| l.name).collect();
        assert_eq!(
            names,
            [
                "csi-pv-controller-hostpath-csi-k8s-io",
                "hostpath-csi-k8s-io",
                "external-resizer-hostpath-csi-k8s-io"
            ]
        );
    }

    #[test]
    fn names_are_sanitized_like_csi_lib_utils() {
        assert_eq!(lease_name("hostpath.csi.k8s.io"), "csi-pv-controller-hostpath-csi-k8s-io");
        assert_eq!(sanitize("a.b_"), "a-b-X");
        assert_eq!(sanitize("Disk.CSI"), "disk-csi");
    }

    #[test]
    fn timing_follows_client_go() {
        let t = |l, r, p| Timing {
            lease_duration: Duration::from_millis(l),
            renew_deadline: Duration::from_millis(r),
            retry_period: Duration::from_millis(p),
        };
        assert!(t(15_000, 10_000, 5_000).check().is_ok(), "the defaults");
        assert!(t(4_000, 3_000, 1_000).check().is_ok());
        assert!(t(10_000, 10_000, 2_000).check().is_err(), "no margin");
        assert!(t(15_000, 6_000, 5_000).check().is_err(), "deadline within a jittered retry");
        assert!(t(900, 500, 100).check().is_err(), "the Lease counts seconds");
        assert!(t(15_000, 10_000, 0).check().is_err());
    }
}
