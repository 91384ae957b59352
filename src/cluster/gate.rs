//! The fence on the API clients: a write (POST, PUT, PATCH, DELETE) goes only while
//! [`Fence`] is open. It sits inside the rate limit, so a write that waited for a token is
//! checked when it leaves, not when it started waiting. Reads always go: a standby keeps its
//! caches warm.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{BoxError, Layer, Service};

use crate::runtime::fence::Fence;

#[derive(Clone, Debug)]
pub struct GateLayer {
    fence: Fence,
}

impl GateLayer {
    pub fn new(fence: Fence) -> Self {
        GateLayer { fence }
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Gate<S> {
        Gate { inner, fence: self.fence.clone() }
    }
}

pub struct Gate<S> {
    inner: S,
    fence: Fence,
}

type Answer<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

impl<S, B> Service<axum::http::Request<B>> for Gate<S>
where
    S: Service<axum::http::Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Answer<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let write = crate::metrics::verb_of(request.method()).is_some();
        if write && let Err(refused) = self.fence.check() {
            crate::metrics::metrics().fenced("api");
            return Box::pin(std::future::ready(Err(Box::new(refused) as BoxError)));
        }
        let answer = self.inner.call(request);
        Box::pin(async move { answer.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn request(method: &str) -> axum::http::Request<()> {
        axum::http::Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/a/persistentvolumeclaims/b")
            .body(())
            .unwrap()
    }

    #[tokio::test]
    async fn writes_wait_for_the_fence_reads_never_do() {
        let fence = Fence::shut();
        let echo = tower::service_fn(|r: axum::http::Request<()>| async move {
            Ok::<_, BoxError>(r.method().to_string())
        });
        let mut gate = GateLayer::new(fence.clone()).layer(echo);
        for (method, passes) in
            [("GET", true), ("PATCH", false), ("POST", false), ("PUT", false), ("DELETE", false)]
        {
            let answer = gate.ready().await.unwrap().call(request(method)).await;
            assert_eq!(answer.is_ok(), passes, "{method} while shut");
        }
        fence.slot().renewed(std::time::Instant::now(), std::time::Duration::from_secs(10));
        let answer = gate.ready().await.unwrap().call(request("PATCH")).await;
        assert_eq!(answer.unwrap(), "PATCH", "a write while open");
    }
}
