//! The Kubernetes side: the clients (rate-limited, their writes fenced), the watched stores and
//! how they hold claims and PVs, the object access the executor goes through, and finalizer
//! writes on any kind, and the Event recorder (`events`). The claim and PV patches are the
//! executor's (`controller::writes`).

pub mod client;
pub mod events;
pub mod finalizers;
pub mod gate;
pub mod held;
pub mod objects;
pub mod ratelimit;
pub mod snapshots;
pub mod stores;

pub use stores::Stores;

/// Whether the API answered `error` with HTTP status `code`.
pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// Whether the API serves `kind` in `group_version` (discovery); a group version the API does
/// not know (404) serves nothing.
pub async fn serves(
    client: &kube::Client,
    group_version: &str,
    kind: &str,
) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.kind == kind)),
        Err(e) if is_status(&e, 404) => Ok(false),
        Err(e) => Err(e),
    }
}
