//! The rate limit layer: a token bucket (`--qps`, `--burst`) paces every attempt, but those
//! of leader election, sharding and peering ([`unpaced`]).
//!
//! The bucket is ours rather than `governor`'s: it runs on tokio's clock (so that tests
//! pause and advance time), takes a fractional rate (`--qps 0.5`, or `1e-20`, whose waits are
//! capped at a year), and its wait ends at the operator's [`Stop`].

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use kopf_core::handler::BoxFuture;
use tokio::time::Instant;

use super::stop::Stop;
use super::unpaced::unpaced;

/// The longest wait the rate limit imposes, whatever its settings.
const MAX_RATE_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// A token bucket: `burst` requests at once, then `qps` per second on average.
#[derive(Debug)]
pub(crate) struct RateLimit {
    qps: f64,
    burst: f64,
    /// Tokens available at `at` (negative: requests already promised the next tokens).
    state: Mutex<(f64, Instant)>,
}

impl RateLimit {
    /// `qps` ≤ 0, NaN or infinite disables the limit (None); a `burst` of 0 counts as 1.
    pub(crate) fn new(qps: f64, burst: u32) -> Option<Arc<Self>> {
        (qps.is_finite() && qps > 0.0).then(|| {
            let burst = f64::from(burst.max(1));
            Arc::new(RateLimit {
                qps,
                burst,
                state: Mutex::new((burst, Instant::now())),
            })
        })
    }

    /// How long the caller must wait for its token (the token is taken now); at most
    /// [`MAX_RATE_WAIT`], whatever the settings.
    pub(crate) fn reserve(&self) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (tokens, at) = *state;
        // `min` ignores a NaN operand: an overflow to infinity refills the bucket.
        let refilled =
            (tokens + now.saturating_duration_since(at).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-left / self.qps)
                .map_or(MAX_RATE_WAIT, |wait| wait.min(MAX_RATE_WAIT))
        }
    }

    /// Waits for a token; not once the operator stops (then requests go at once).
    pub(crate) async fn acquire(&self, stop: &Stop) {
        if stop.is_stopped() {
            return;
        }
        let wait = self.reserve();
        if !wait.is_zero() {
            stop.sleep(wait).await;
        }
    }
}

/// Paces the requests of the service it wraps with a [`RateLimit`].
#[derive(Clone)]
pub(super) struct RateLimitLayer {
    limit: Option<Arc<RateLimit>>,
    stop: Stop,
}

impl RateLimitLayer {
    /// With this limit (none: no pacing), whose waits end at `stop`.
    pub(super) fn new(limit: Option<Arc<RateLimit>>, stop: Stop) -> Self {
        RateLimitLayer { limit, stop }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = Paced<S>;

    fn layer(&self, inner: S) -> Paced<S> {
        Paced {
            inner,
            limit: self.limit.clone(),
            stop: self.stop.clone(),
        }
    }
}

/// The service of [`RateLimitLayer`].
#[derive(Clone)]
pub(super) struct Paced<S> {
    inner: S,
    limit: Option<Arc<RateLimit>>,
    stop: Stop,
}

type Body = kube::client::Body;

impl<S> tower::Service<Request<Body>> for Paced<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = kube::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The clone that was made ready is the one called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = self
            .limit
            .clone()
            .filter(|_| !unpaced(request.uri().path()));
        let stop = self.stop.clone();
        Box::pin(async move {
            if let Some(limit) = limit {
                limit.acquire(&stop).await;
            }
            inner.call(request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bucket_lets_a_burst_through_then_paces() {
        let limit = RateLimit::new(10.0, 5).expect("on");
        for _ in 0..5 {
            assert_eq!(limit.reserve(), Duration::ZERO, "the burst goes at once");
        }
        assert_eq!(limit.reserve(), Duration::from_millis(100));
        assert_eq!(limit.reserve(), Duration::from_millis(200));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(limit.reserve(), Duration::ZERO, "refilled after a pause");
        assert!(RateLimit::new(0.0, 5).is_none(), "qps 0: no limit");
    }

    #[test]
    fn the_bucket_never_panics_and_its_waits_are_bounded() {
        let tiny = RateLimit::new(1e-20, 1).expect("on");
        assert_eq!(tiny.reserve(), Duration::ZERO);
        assert_eq!(tiny.reserve(), MAX_RATE_WAIT, "1e20 s, capped");
        let subnormal = RateLimit::new(f64::from_bits(1), 0).expect("on");
        subnormal.reserve();
        assert_eq!(
            subnormal.reserve(),
            MAX_RATE_WAIT,
            "an infinite wait, capped"
        );
        for qps in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -0.0] {
            assert!(RateLimit::new(qps, 1).is_none(), "{qps}: no limit");
        }
    }

    proptest! {
        #[test]
        fn any_rate_limit_reserves_without_panicking(
            qps in any::<f64>(),
            // Small bursts run out within the test's reservations.
            burst in prop_oneof![0..4u32, any::<u32>()],
        ) {
            if let Some(limit) = RateLimit::new(qps, burst) {
                for _ in 0..4 {
                    prop_assert!(limit.reserve() <= MAX_RATE_WAIT);
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_stop_ends_the_wait_for_a_token_and_lifts_the_pacing() {
        let limit = RateLimit::new(1e-20, 1).expect("on");
        let stop = Stop::default();
        let start = Instant::now();
        limit.acquire(&stop).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst");
        let waiting = tokio::spawn({
            let (limit, stop) = (limit.clone(), stop.clone());
            async move { limit.acquire(&stop).await }
        });
        tokio::time::advance(Duration::from_secs(3600)).await;
        stop.stop();
        waiting.await.expect("the wait ends");
        assert_eq!(start.elapsed(), Duration::from_secs(3600));
        limit.acquire(&stop).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3600), "no more pacing");
    }
}
