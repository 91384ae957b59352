//! The Kubernetes side: the clients (rate-limited, their writes fenced), the watched stores and
//! how they hold claims and PVs, and the object access the executor goes through. Writes and
//! events themselves are the executor's (`controller::writes`, `controller::events`).

pub mod client;
pub mod finalizers;
pub mod gate;
pub mod held;
pub mod objects;
pub mod ratelimit;
pub mod snapshots;
pub mod stores;

pub use stores::Stores;

/// Whether the API serves `kind` in `group_version` (discovery); a group version the API does
/// not know (404) serves nothing.
pub async fn serves(
    client: &kube::Client,
    group_version: &str,
    kind: &str,
) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.kind == kind)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}
