//! The Kubernetes side: the client, the watched stores, and (later) writes and events.

pub mod client;
pub mod gate;
pub mod quantity;
pub mod ratelimit;
pub mod stores;

pub use stores::Stores;

/// Whether the API serves `kind` in `group_version` (discovery). An error counts as not served:
/// the caller turns a feature off rather than watch what may not exist.
pub async fn serves(client: &kube::Client, group_version: &str, kind: &str) -> bool {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => list.resources.iter().any(|r| r.kind == kind),
        Err(e) => {
            tracing::debug!(error = %e, %group_version, "discovery found no such API");
            false
        }
    }
}
