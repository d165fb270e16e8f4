//! The operator's API client: requests go through a token-bucket rate limit (`--qps`,
//! `--burst`), are counted in the metrics by verb and status, and a `429 Too Many Requests`
//! answer is retried after its `Retry-After` delay (up to 5 times), so that a busy API
//! server slows the operator down instead of failing its handlers.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt;
use kopf_core::handler::BoxFuture;
use kopf_core::metrics::Metrics;
use tokio::time::Instant;

/// Retries of one request answered 429.
const MAX_429_RETRIES: u32 = 5;
/// The delay after a 429 without `Retry-After`, and the longest delay honoured.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A token bucket: `burst` requests at once, then `qps` per second on average.
#[derive(Debug)]
pub(crate) struct RateLimit {
    qps: f64,
    burst: f64,
    /// Tokens available at `at` (negative: requests already promised the next tokens).
    state: Mutex<(f64, Instant)>,
}

impl RateLimit {
    /// `qps` ≤ 0 disables the limit (None).
    pub(crate) fn new(qps: f64, burst: u32) -> Option<Arc<Self>> {
        (qps > 0.0).then(|| {
            let burst = f64::from(burst.max(1));
            Arc::new(RateLimit {
                qps,
                burst,
                state: Mutex::new((burst, Instant::now())),
            })
        })
    }

    /// How long the caller must wait for its token (the token is taken now).
    fn reserve(&self) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (tokens, at) = *state;
        let refilled =
            (tokens + now.saturating_duration_since(at).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.qps)
        }
    }

    pub(crate) async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The verb of a request, as Kubernetes names it (for the metrics).
fn verb(request: &Request<kube::client::Body>) -> &'static str {
    let query = request.uri().query().unwrap_or("");
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    match *request.method() {
        http::Method::GET if watch => "watch",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

fn retry_after(response: &Response<kube::client::Body>) -> Duration {
    response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_RETRY_AFTER)
        .min(MAX_RETRY_AFTER)
}

/// The service under the operator's [`kube::Client`].
#[derive(Clone)]
struct Limited {
    inner: kube::Client,
    limit: Option<Arc<RateLimit>>,
    metrics: Option<Metrics>,
}

impl tower::Service<Request<kube::client::Body>> for Limited {
    type Response = Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = BoxFuture<Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let verb = verb(&request);
            let (parts, body) = request.into_parts();
            // Kept for a resend after 429 (request bodies are small JSON documents).
            let body = body
                .collect()
                .await
                .map_err(|e| kube::Error::Service(e.into()))?
                .to_bytes();
            let mut attempt = 0;
            loop {
                if let Some(limit) = &this.limit {
                    limit.acquire().await;
                }
                let mut request =
                    Request::from_parts(parts.clone(), kube::client::Body::from(body.clone()));
                *request.extensions_mut() = parts.extensions.clone();
                let result = this.inner.send(request).await;
                if let Some(m) = &this.metrics {
                    m.api_request(verb, result.as_ref().map_or(0, |r| r.status().as_u16()));
                }
                let response = result?;
                if response.status() != http::StatusCode::TOO_MANY_REQUESTS
                    || attempt >= MAX_429_RETRIES
                {
                    return Ok(response);
                }
                attempt += 1;
                let delay = retry_after(&response);
                tracing::warn!(
                    "The API server is busy (429 Too Many Requests): {verb} {} again in {:.1}s (attempt {attempt} of {MAX_429_RETRIES}).",
                    parts.uri.path(),
                    delay.as_secs_f64()
                );
                tokio::time::sleep(delay).await;
            }
        })
    }
}

/// Wraps `client` with the rate limit, the 429 retries and the request metrics.
pub(crate) fn wrap(
    client: kube::Client,
    limit: Option<Arc<RateLimit>>,
    metrics: Option<Metrics>,
) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    kube::Client::new(
        Limited {
            inner: client,
            limit,
            metrics,
        },
        namespace,
    )
}

#[cfg(test)]
mod tests {
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
}
