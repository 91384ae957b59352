//! Client-side QPS/burst limit for API requests, as client-go's token bucket does for the Go
//! sidecars (`--kube-api-qps`, `--kube-api-burst`). kube-rs has none of its own. A negative QPS
//! means no limit, as in client-go: the apiserver's priority and fairness protects it instead.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// A token bucket: `burst` tokens, refilled at `qps` per second.
#[derive(Debug)]
struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Takes one token, possibly on credit, and returns how long to wait before using it.
    fn reserve(&mut self, now: Instant) -> Duration {
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * self.qps;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.last = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }

    /// Takes a token only if one is spare now (never on credit, so never ahead of a waiting
    /// foreground request); otherwise how long until one could be, to try again then.
    fn take_spare(&mut self, now: Instant) -> Result<(), Duration> {
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * self.qps;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.qps);
            Err(wait.max(Duration::from_millis(1)))
        }
    }
}

/// Limits the requests that pass through it to `qps` per second with bursts of `burst`.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    /// None: no limit.
    bucket: Option<Arc<Mutex<Bucket>>>,
    /// Background requests use only spare tokens of the shared bucket.
    background: bool,
}

impl RateLimitLayer {
    /// A `qps` of 0 or below lets every request through at once; a `burst` below 1 is taken
    /// as 1.
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        let bucket = (qps > 0.0).then(|| {
            Arc::new(Mutex::new(Bucket {
                qps: f64::from(qps),
                burst,
                tokens: burst,
                last: Instant::now(),
            }))
        });
        RateLimitLayer { bucket, background: false }
    }

    /// Waits for a token of this budget, for a request that then goes on a client without the
    /// limit (see `client::Writes`). Returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let Some(bucket) = &self.bucket else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let wait = bucket.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).reserve(now);
        if !wait.is_zero() {
            tokio::time::sleep_until(now + wait).await;
        }
        wait
    }

    /// A layer on the same budget for requests that may wait (Events): they go only when a
    /// token is spare, so the budget's QPS is never exceeded and state changes always go first.
    pub fn background(&self) -> Self {
        RateLimitLayer { bucket: self.bucket.clone(), background: true }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            background: self.background,
            wait: None,
            reserved: false,
        }
    }
}

/// The service made by [`RateLimitLayer`]: readiness waits until a token is due.
pub struct RateLimited<S> {
    inner: S,
    bucket: Option<Arc<Mutex<Bucket>>>,
    background: bool,
    wait: Option<Pin<Box<Sleep>>>,
    reserved: bool,
}

impl<S: Service<R>, R> Service<R> for RateLimited<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &self.bucket {
            loop {
                if let Some(wait) = self.wait.as_mut() {
                    ready!(wait.as_mut().poll(cx));
                    self.wait = None;
                }
                if self.reserved {
                    break;
                }
                let now = Instant::now();
                // A panic elsewhere poisoned the lock; limiting is not worth failing requests for.
                let mut b = bucket.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let delay = if self.background {
                    // Not taken: wait, then look again.
                    b.take_spare(now).err()
                } else {
                    self.reserved = true;
                    Some(b.reserve(now)).filter(|d| !d.is_zero())
                };
                drop(b);
                match delay {
                    Some(d) => self.wait = Some(Box::pin(tokio::time::sleep_until(now + d))),
                    None => self.reserved = true,
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.reserved = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test(start_paused = true)]
    async fn the_layer_holds_requests_back() {
        let layer = RateLimitLayer::new(2.0, 1);
        let mut service = layer.layer(tower::service_fn(|n: u32| async move { Ok::<_, ()>(n) }));
        let start = Instant::now();
        for n in 0..5 {
            assert_eq!(service.ready().await.unwrap().call(n).await, Ok(n));
        }
        // One from the burst, then four at 2 per second.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn background_requests_take_only_spare_tokens() {
        let foreground = RateLimitLayer::new(2.0, 1);
        let background = foreground.background();
        let echo = tower::service_fn(|n: u32| async move { Ok::<_, ()>(n) });
        let start = Instant::now();
        // Three foreground requests at once: the burst token, then on credit at 0.5 s and 1 s.
        let sent: Vec<_> = (0..3)
            .map(|n| {
                let mut service = foreground.layer(echo);
                tokio::spawn(async move {
                    let _ = service.ready().await.map(|s| s.call(n));
                    start.elapsed()
                })
            })
            .collect();
        tokio::task::yield_now().await;
        // An event now waits behind all three, and for one more token: 1.5 s.
        let mut event = background.layer(echo);
        assert_eq!(event.ready().await.unwrap().call(9).await, Ok(9));
        assert_eq!(start.elapsed(), Duration::from_millis(1500));
        let mut at = Vec::new();
        for s in sent {
            at.push(s.await.unwrap());
        }
        let ms = |n| Duration::from_millis(n);
        assert_eq!(at, vec![ms(0), ms(500), ms(1000)]);
        // A foreground request that arrives while an event waits still goes first.
        let mut event = background.layer(echo);
        let waiting = tokio::spawn(async move {
            let _ = event.ready().await.map(|s| s.call(0));
            start.elapsed()
        });
        tokio::task::yield_now().await;
        let mut late = foreground.layer(echo);
        assert_eq!(late.ready().await.unwrap().call(1).await, Ok(1));
        assert_eq!(start.elapsed(), ms(2000));
        assert_eq!(waiting.await.unwrap(), ms(2500));
    }

    #[tokio::test(start_paused = true)]
    async fn acquired_tokens_share_the_budget_with_the_layer() {
        let limit = RateLimitLayer::new(2.0, 1);
        let start = Instant::now();
        assert_eq!(limit.acquire().await, Duration::ZERO, "the burst token");
        let mut service = limit.layer(tower::service_fn(|n: u32| async move { Ok::<_, ()>(n) }));
        assert_eq!(service.ready().await.unwrap().call(1).await, Ok(1));
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        assert_eq!(limit.acquire().await, Duration::from_millis(500));
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert_eq!(RateLimitLayer::new(-1.0, 1).acquire().await, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_negative_qps_holds_nothing_back() {
        let layer = RateLimitLayer::new(-1.0, 1);
        let mut service = layer.layer(tower::service_fn(|n: u32| async move { Ok::<_, ()>(n) }));
        let start = Instant::now();
        for n in 0..50 {
            assert_eq!(service.ready().await.unwrap().call(n).await, Ok(n));
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[test]
    fn bucket_allows_burst_then_paces_at_qps() {
        let start = Instant::now();
        let mut b = Bucket { qps: 5.0, burst: 10.0, tokens: 10.0, last: start };
        for _ in 0..10 {
            assert_eq!(b.reserve(start), Duration::ZERO);
        }
        // The 11th and 12th requests wait one and two token intervals (200 ms each at 5 QPS).
        assert_eq!(b.reserve(start), Duration::from_millis(200));
        assert_eq!(b.reserve(start), Duration::from_millis(400));
        // A second later five tokens came back, two of them owed: three go at once.
        let t1 = start + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(b.reserve(t1), Duration::ZERO);
        }
        assert_eq!(b.reserve(t1), Duration::from_millis(200));
        // Idle for long: the bucket refills to burst, never beyond.
        let later = start + Duration::from_secs(60);
        for _ in 0..10 {
            assert_eq!(b.reserve(later), Duration::ZERO);
        }
        assert!(b.reserve(later) > Duration::ZERO);
    }
}
