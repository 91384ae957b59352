//! Lease-based leader election, as the Go sidecars (csi-lib-utils) do it: one Lease per driver,
//! held by the replica that acts. Standbys keep their caches warm; losing the Lease ends the
//! process at once, so no write is made after it (main.rs). The Lease itself is kept by
//! kube-lease-manager, on a client of its own that the API rate limit never holds back.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// Timings, from `--leader-election-*`.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("cannot take part in leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    #[error(
        "invalid leader election timing: the lease duration ({lease:?}) must be at least 2s and longer than the renew deadline ({renew:?}), which must be at least 1s"
    )]
    Timing { lease: Duration, renew: Duration },
}

/// Every character outside `[a-zA-Z0-9-]` becomes `-`, and a trailing `-` gets an `X`
/// (csi-lib-utils' sanitizeName), then lowercased, as a Lease name must be.
pub fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
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
    env_or_file(
        "POD_NAMESPACE",
        "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
    )
    .unwrap_or_else(|| "default".to_string())
}

/// The environment variable if set and not empty, else the trimmed file if not empty.
fn env_or_file(variable: &str, path: &str) -> Option<String> {
    std::env::var(variable)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| {
            std::fs::read_to_string(path)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        })
}

/// The lease-manager's whole seconds: the lease lasts `lease_duration`; the holder renews when
/// `lease_duration - renew_deadline` is left.
pub fn seconds(timing: Timing) -> Result<(u64, u64), LeaderError> {
    let lease = timing.lease_duration.as_secs();
    let renew = timing.renew_deadline.as_secs();
    if lease < 2 || renew < 1 || renew >= lease {
        return Err(LeaderError::Timing {
            lease: timing.lease_duration,
            renew: timing.renew_deadline,
        });
    }
    Ok((lease, lease - renew))
}

/// Our part in the election.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    task:
        JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>,
    name: String,
}

impl Leadership {
    /// Starts campaigning for the Lease `namespace/name`.
    pub async fn campaign(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Result<Leadership, LeaderError> {
        let (duration, grace) = seconds(timing)?;
        let manager = kube_lease_manager::LeaseManagerBuilder::new(client, name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(duration)
            .with_grace(grace)
            .build()
            .await
            .map_err(|source| LeaderError::Lease {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source,
            })?;
        let (leading, task) = manager.watch().await;
        info!(lease = %format!("{namespace}/{name}"), %identity, "campaigning for leadership");
        Ok(Leadership {
            leading,
            task,
            name: format!("{namespace}/{name}"),
        })
    }

    /// Resolves once we lead; false if the election stopped first.
    pub async fn won(&mut self) -> bool {
        self.leading.wait_for(|l| *l).await.is_ok()
    }

    /// Resolves when we no longer lead (or the election stopped).
    pub async fn lost(&mut self) {
        let _ = self.leading.wait_for(|l| !*l).await;
    }

    /// Gives the Lease up, so a standby takes over without waiting for it to expire.
    pub async fn resign(self) {
        drop(self.leading);
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(Ok(Ok(_))) => info!(lease = %self.name, "lease released"),
            Ok(Ok(Err(error))) => warn!(lease = %self.name, %error, "cannot release the lease"),
            Ok(Err(error)) => warn!(lease = %self.name, %error, "lease task failed"),
            Err(_) => warn!(lease = %self.name, "lease not released within 5s; it will expire"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized_like_csi_lib_utils() {
        assert_eq!(
            lease_name("hostpath.csi.k8s.io"),
            "csi-pv-controller-hostpath-csi-k8s-io"
        );
        assert_eq!(sanitize("a.b_"), "a-b-X");
        assert_eq!(sanitize("Disk.CSI"), "disk-csi");
    }

    #[test]
    fn timing_maps_to_whole_seconds() {
        let t = |l, r| Timing {
            lease_duration: Duration::from_secs(l),
            renew_deadline: Duration::from_secs(r),
        };
        assert_eq!(seconds(t(15, 10)).unwrap(), (15, 5));
        assert_eq!(seconds(t(4, 3)).unwrap(), (4, 1));
        assert!(seconds(t(10, 10)).is_err());
        assert!(seconds(t(1, 0)).is_err());
    }
}
