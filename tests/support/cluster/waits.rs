//! Waiting for the cluster to reach a state.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams};

/// Polls `check` every 200 ms until it gives Some, or `limit` passes.
pub async fn eventually<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The claims in `claims`, once exactly `count` of them are Bound; None after `limit`.
pub async fn all_bound(
    claims: &Api<PersistentVolumeClaim>,
    count: usize,
    limit: Duration,
) -> Option<Vec<PersistentVolumeClaim>> {
    eventually(limit, || async {
        let list = claims.list(&ListParams::default()).await.ok()?;
        let is_bound = |c: &&PersistentVolumeClaim| {
            c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        };
        let bound = list.items.iter().filter(is_bound).count();
        (bound == count).then_some(list.items)
    })
    .await
}
