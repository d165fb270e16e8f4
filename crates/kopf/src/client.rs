//! The operator's API client. Every request it sends goes through one layer that:
//!
//! - paces the requests with a token bucket (`--qps`, `--burst`), except those of leader
//!   election, sharding and peering (Leases, peering objects): a renewal must never wait
//!   behind the operator's own work, or the replica loses its lead;
//! - counts every answer in the metrics by verb and status (`kopf_api_requests_total`);
//! - logs a warning when the API server has not answered a request after 10 s (a third of
//!   the request timeout if that is shorter), and gives up on the attempt after the request
//!   timeout (`--request-timeout`, default 30 s);
//! - sends a request again after a transient failure: `429 Too Many Requests` (after its
//!   `Retry-After`, at most 60 s), `502`, `503`, `504`, `500` for GET and PATCH (which can
//!   safely be repeated), and no answer at all (a refused or reset connection, the request
//!   timeout). It waits 0.2 s, 0.4 s, 0.8 s, then 1 s between attempts (each randomly
//!   shortened by up to a half), so that a recovered API server is noticed within about a
//!   second, and gives up after 5 retries: the caller gets the last answer or error. The
//!   first failure of an outage is one WARNING line (the request, the status and the API
//!   server's message, what happens next); the next ones are summarised every 10 s (see
//!   [`failures`]), and every retry is counted in `kopf_api_retries_total`;
//! - does not retry a refused or reset connection while the API server has never answered
//!   this client: a server that was never reached (a wrong URL, nothing listening) fails
//!   the operator's start at once with one clear line (a server that takes the connection
//!   but is slow to answer gets its retries).
//!
//! Watch requests are never sent again here (the watch engine restarts its streams itself),
//! and other answers (`404`, `409`, ...) go to the caller unchanged. kube's own hidden retry
//! of the same failures is off in the operator's clients (see [`crate::config::client_config`]).

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kopf_core::handler::BoxFuture;
use kopf_core::metrics::Metrics;
use tokio::time::Instant;

use kopf_core::extract::FromCause;
use kopf_core::handler::{Cause, HandlerError};

use crate::error::one_line;

mod failures;
use failures::Failures;

/// Retries of one request after transient failures (so at most 6 attempts).
pub(crate) const MAX_RETRIES: u32 = 5;
/// The first delay between attempts; it doubles up to [`BACKOFF_CAP`].
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
/// The longest delay between attempts (but a 429's `Retry-After`): small, so that a
/// recovered API server is noticed soon.
const BACKOFF_CAP: Duration = Duration::from_secs(1);
/// The longest `Retry-After` of a 429 honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long an attempt waits for the API server's answer (its head) by default.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// After this long without an answer, a warning says that the request is still waiting
/// (or after a third of the request timeout, if that is shorter).
const SLOW_ANSWER: Duration = Duration::from_secs(10);
/// Whether a request goes without the rate limit: Leases and peering objects are never held
/// back behind the operator's own work (a renewal that waits in the queue can cost the
/// lead).
fn unpaced(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/")
        || path.starts_with("/apis/kopf.dev/v1/clusterkopfpeerings")
        || (path.starts_with("/apis/kopf.dev/v1/namespaces/") && path.contains("/kopfpeerings/"))
}

/// The longest wait the rate limit imposes, whatever its settings.
const MAX_RATE_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest API server message quoted in a log line.
const MESSAGE_EXCERPT: usize = 300;

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
        Method::GET if watch => "watch",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether an answer with this status is a transient failure of the API server (or of
/// what stands between it and the operator).
fn transient(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 500 | 502 | 503 | 504)
}

/// Whether a request of this method answered with this (transient) status is sent again:
/// a 500 only for GET and PATCH, as the failed request may have taken effect (our patches
/// are merge patches, or JSON patches guarded by a resourceVersion test: repeating them is
/// harmless; a repeated POST, PUT or DELETE is not).
fn retried(method: &Method, status: StatusCode) -> bool {
    status != StatusCode::INTERNAL_SERVER_ERROR || matches!(*method, Method::GET | Method::PATCH)
}

/// Whether an error of the client means that no answer came (a refused, reset or timed-out
/// connection): the request may be sent again. Errors of the client's own setup
/// (credentials, ...) are not such failures.
fn no_answer(error: &kube::Error) -> bool {
    matches!(error, kube::Error::HyperError(_) | kube::Error::Service(_))
}

/// Whether the error is this layer's request timeout (the server took the connection but
/// did not answer in time).
fn timed_out(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Service(e) if e.is::<NoAnswer>())
}

/// An error of the client in words, without kube's `ServiceError:` wrapping.
fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Service(e) => one_line(e.as_ref()),
        kube::Error::HyperError(e) => one_line(e),
        e => one_line(e),
    }
}

/// `2 s`, `0.25 s`.
fn seconds(d: Duration) -> String {
    let text = format!("{:.2}", d.as_secs_f64());
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}

/// The delay before retry number `retry` (from 1): 0.2 s doubling up to 1 s, each shortened
/// by a random factor in [0.5, 1] so that many clients do not come back at once.
fn backoff(retry: u32) -> Duration {
    let doublings = retry.saturating_sub(1).min(16);
    let full = BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(BACKOFF_CAP);
    full.mul_f64(rand::random_range(0.5..=1.0))
}

/// The `Retry-After` of a 429 (whole seconds, at most [`MAX_RETRY_AFTER`]), if it has one.
fn retry_after(response: &Response<kube::client::Body>) -> Option<Duration> {
    response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|secs| Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// The `message` of a Kubernetes Status body, else the body's text, on one line and cut
/// to [`MESSAGE_EXCERPT`] bytes.
fn status_message(body: &[u8]) -> String {
    let status = serde_json::from_slice::<serde_json::Value>(body).ok();
    let message = match status
        .as_ref()
        .and_then(|s| s.get("message"))
        .and_then(|m| m.as_str())
    {
        Some(message) => message.to_string(),
        None => String::from_utf8_lossy(body).into_owned(),
    };
    let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    kopf_core::text::excerpt(&line, MESSAGE_EXCERPT).into_owned()
}

/// An attempt that got no answer within the request timeout.
#[derive(Debug, thiserror::Error)]
#[error("the API server{at} did not answer {method} {path} within {within}")]
pub(crate) struct NoAnswer {
    /// ` at <base URL>`, or nothing when the client does not know it.
    at: String,
    method: Method,
    path: String,
    within: String,
}

/// What the layer knows besides the client it wraps.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The rate limit, if any.
    pub(crate) limit: Option<Arc<RateLimit>>,
    /// Where requests, answers and retries are counted, if anywhere.
    pub(crate) metrics: Option<Metrics>,
    /// How long an attempt waits for an answer (zero: as long as the connection lives).
    pub(crate) request_timeout: Duration,
    /// The API server's URL, for the messages (when it is known).
    pub(crate) server: Option<String>,
}

/// The service under the operator's [`kube::Client`].
#[derive(Clone)]
struct Limited {
    inner: kube::Client,
    settings: Arc<Settings>,
    failures: Arc<Failures>,
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
        Box::pin(async move { this.send(request).await })
    }
}

/// A transient failure of one attempt.
enum Failure {
    /// A transient status.
    Answer { status: StatusCode, message: String },
    /// No answer came.
    NoAnswer(String),
}

impl Failure {
    /// The status for the metrics (0: no answer).
    fn code(&self) -> u16 {
        match self {
            Failure::Answer { status, .. } => status.as_u16(),
            Failure::NoAnswer(_) => 0,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Answer { status, message } => {
                write!(f, "{}", status.as_u16())?;
                if let Some(reason) = status.canonical_reason() {
                    write!(f, " {reason}")?;
                }
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
            Failure::NoAnswer(error) => write!(f, "no answer: {error}"),
        }
    }
}

impl Limited {
    /// Sends `request`, again after transient failures (not for watches).
    async fn send(
        &self,
        request: Request<kube::client::Body>,
    ) -> Result<Response<kube::client::Body>, kube::Error> {
        let verb = verb(&request);
        let watch = verb == "watch";
        let (parts, body) = request.into_parts();
        // Kept for a resend (request bodies are small JSON documents).
        let body = body
            .collect()
            .await
            .map_err(|e| kube::Error::Service(e.into()))?
            .to_bytes();
        let method = &parts.method;
        let path = parts.uri.path();
        let attempts = MAX_RETRIES + 1;
        let mut attempt = 1;
        let coordination = unpaced(path);
        loop {
            if let Some(limit) = self.settings.limit.as_ref().filter(|_| !coordination) {
                limit.acquire().await;
            }
            let mut request =
                Request::from_parts(parts.clone(), kube::client::Body::from(body.clone()));
            *request.extensions_mut() = parts.extensions.clone();
            let result = self.attempt(request, method, path).await;
            if let Some(m) = &self.settings.metrics {
                m.api_request(verb, result.as_ref().map_or(0, |r| r.status().as_u16()));
            }
            match &result {
                Ok(response) if transient(response.status()) => {
                    self.failures.answered_with_failure()
                }
                Ok(_) => self.failures.answered(),
                Err(_) => {}
            }
            if watch {
                return result;
            }
            let (failure, wait, outcome) = match result {
                Ok(response) if !transient(response.status()) => return Ok(response),
                Ok(response) => {
                    let status = response.status();
                    let wait = (status == StatusCode::TOO_MANY_REQUESTS)
                        .then(|| retry_after(&response))
                        .flatten();
                    let (response, message) = self.buffered(response).await;
                    let failure = Failure::Answer { status, message };
                    if !retried(method, status) {
                        self.failures.failed(&format!(
                            "API request {method} {path} failed: {failure}; not sent again (a {method} may have taken effect)."
                        ));
                        return Ok(response);
                    }
                    (failure, wait, Ok(response))
                }
                // A server that never answered and refuses (or resets) the connection is
                // not there: the caller says so at once. One that is slow to answer (the
                // request timeout) is given its retries.
                Err(error)
                    if no_answer(&error) && (self.failures.reached() || timed_out(&error)) =>
                {
                    (Failure::NoAnswer(describe(&error)), None, Err(error))
                }
                Err(error) => return Err(error),
            };
            if attempt >= attempts {
                self.failures.failed(&format!(
                    "API request {method} {path} failed: {failure}; giving up (attempt {attempt} of {attempts})."
                ));
                return outcome;
            }
            drop(outcome);
            let delay = wait.unwrap_or_else(|| backoff(attempt));
            attempt += 1;
            self.failures.failed(&format!(
                "API request {method} {path} failed: {failure}; retrying in {} (attempt {attempt} of {attempts}).",
                seconds(delay)
            ));
            if let Some(m) = &self.settings.metrics {
                m.api_retry(verb, failure.code());
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt: the answer's head within the request timeout, with a warning when it
    /// is slow to come.
    async fn attempt(
        &self,
        request: Request<kube::client::Body>,
        method: &Method,
        path: &str,
    ) -> Result<Response<kube::client::Body>, kube::Error> {
        let start = Instant::now();
        let timeout = self.settings.request_timeout;
        let send = self.inner.send(request);
        tokio::pin!(send);
        let warn_after = if timeout.is_zero() {
            SLOW_ANSWER
        } else {
            SLOW_ANSWER.min(timeout / 3)
        };
        if !warn_after.is_zero() {
            match tokio::time::timeout(warn_after, &mut send).await {
                Ok(result) => return result,
                Err(_) => tracing::warn!(
                    "No answer from the API server to {method} {path} after {}; still waiting.",
                    seconds(warn_after)
                ),
            }
        }
        let deadline = start.checked_add(timeout).filter(|_| !timeout.is_zero());
        let Some(deadline) = deadline else {
            return send.await;
        };
        match tokio::time::timeout_at(deadline, send).await {
            Ok(result) => result,
            Err(_) => Err(kube::Error::Service(Box::new(NoAnswer {
                at: self
                    .settings
                    .server
                    .as_ref()
                    .map(|url| format!(" at {url}"))
                    .unwrap_or_default(),
                method: method.clone(),
                path: path.to_string(),
                within: seconds(timeout),
            }))),
        }
    }

    /// The answer with its body read (within the request timeout), and the API server's
    /// message from it; the caller gets the same bytes.
    async fn buffered(
        &self,
        response: Response<kube::client::Body>,
    ) -> (Response<kube::client::Body>, String) {
        let (parts, body) = response.into_parts();
        let timeout = self.settings.request_timeout;
        let read = if timeout.is_zero() {
            Ok(body.collect().await)
        } else {
            tokio::time::timeout(timeout, body.collect()).await
        };
        match read {
            Ok(Ok(collected)) => {
                let bytes = collected.to_bytes();
                let message = status_message(&bytes);
                (
                    Response::from_parts(parts, kube::client::Body::from(bytes)),
                    message,
                )
            }
            Ok(Err(e)) => (
                Response::from_parts(parts, kube::client::Body::empty()),
                format!("(its body could not be read: {})", describe(&e)),
            ),
            Err(_) => (
                Response::from_parts(parts, kube::client::Body::empty()),
                format!("(its body did not come within {})", seconds(timeout)),
            ),
        }
    }
}

/// Wraps `client` with the rate limit, the request timeout, the retries of transient
/// failures and the request metrics.
pub(crate) fn wrap(client: kube::Client, settings: Settings) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    kube::Client::new(
        Limited {
            inner: client,
            settings: Arc::new(settings),
            failures: Arc::default(),
        },
        namespace,
    )
}

/// The Kubernetes client of the operator, as a handler argument (for creating children,
/// reading other objects...).
#[derive(Clone)]
pub struct Client(pub kube::Client);

impl FromCause for Client {
    fn from_cause(cause: &Cause) -> Result<Self, HandlerError> {
        cause
            .extensions
            .get::<kube::Client>()
            .cloned()
            .map(Client)
            .ok_or_else(|| HandlerError::permanent("no Kubernetes client is available here"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn leases_and_peering_are_not_paced() {
        assert!(unpaced(
            "/apis/coordination.k8s.io/v1/namespaces/ops/leases/op-leader"
        ));
        assert!(unpaced("/apis/kopf.dev/v1/clusterkopfpeerings/default"));
        assert!(unpaced(
            "/apis/kopf.dev/v1/namespaces/ops/kopfpeerings/default"
        ));
        assert!(!unpaced("/apis/kopf.dev/v1/namespaces/ops/kopfexamples/x"));
        assert!(!unpaced("/api/v1/namespaces/ops/pods"));
    }

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

    #[test]
    fn the_backoff_doubles_up_to_a_second_with_jitter() {
        let full = [0.2, 0.4, 0.8, 1.0, 1.0, 1.0];
        for _ in 0..200 {
            for (i, full) in full.iter().enumerate() {
                let d = backoff(i as u32 + 1).as_secs_f64();
                assert!(
                    d >= full * 0.5 - 1e-9 && d <= full + 1e-9,
                    "retry {}: {d}",
                    i + 1
                );
            }
        }
        assert!(backoff(u32::MAX) <= BACKOFF_CAP);
    }

    #[test]
    fn messages_come_from_status_bodies() {
        let status = br#"{"kind":"Status","message":"etcdserver:\n request timed out","code":500}"#;
        assert_eq!(status_message(status), "etcdserver: request timed out");
        assert_eq!(
            status_message(b"<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
        let long = status_message("x".repeat(1000).as_bytes());
        assert!(long.starts_with(&"x".repeat(300)) && long.ends_with("(700 more bytes)"));
        assert_eq!(seconds(Duration::from_secs(30)), "30 s");
        assert_eq!(seconds(Duration::from_millis(250)), "0.25 s");
    }

    /// What the scripted server does with one request.
    #[derive(Clone, Copy, Debug)]
    enum Answer {
        Status(u16),
        /// A 429 with this `Retry-After`.
        Busy(u64),
        /// Never answers.
        Hang,
        /// A refused connection.
        Refused,
    }

    /// A server answering from a script (then 200), recording the requests it got.
    #[derive(Clone, Default)]
    struct Scripted {
        script: Arc<Mutex<VecDeque<Answer>>>,
        calls: Arc<AtomicUsize>,
    }

    impl Scripted {
        fn new(answers: &[Answer]) -> Self {
            Scripted {
                script: Arc::new(Mutex::new(answers.iter().copied().collect())),
                calls: Arc::default(),
            }
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl tower::Service<Request<kube::client::Body>> for Scripted {
        type Response = Response<kube::client::Body>;
        type Error = tower::BoxError;
        type Future = BoxFuture<Result<Self::Response, tower::BoxError>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), tower::BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _request: Request<kube::client::Body>) -> Self::Future {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let next = self
                .script
                .lock()
                .expect("script")
                .pop_front()
                .unwrap_or(Answer::Status(200));
            Box::pin(async move {
                let status = |code: u16| {
                    let body =
                        format!(r#"{{"kind":"Status","code":{code},"message":"scripted {code}"}}"#);
                    Response::builder()
                        .status(code)
                        .body(kube::client::Body::from(body.into_bytes()))
                        .expect("response")
                };
                match next {
                    Answer::Status(code) => Ok(status(code)),
                    Answer::Busy(secs) => {
                        let mut response = status(429);
                        response
                            .headers_mut()
                            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
                        Ok(response)
                    }
                    Answer::Hang => std::future::pending().await,
                    Answer::Refused => Err(Box::new(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        "connection refused",
                    )) as tower::BoxError),
                }
            })
        }
    }

    /// A log buffer for the tests.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("logs").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        /// Captures the logs of this thread (the client's layer runs in the caller's task).
        fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
            // Tests running in parallel with thread-local subscribers, and some without one,
            // can leave a log statement's cached interest at "never" (tracing-core's
            // callsite cache): a global subscriber that wants the same levels prevents it.
            static GLOBAL: std::sync::Once = std::sync::Once::new();
            GLOBAL.call_once(|| {
                let sink = tracing_subscriber::fmt()
                    .with_writer(std::io::sink)
                    .with_max_level(tracing::Level::INFO)
                    .finish();
                let _ = tracing::subscriber::set_global_default(sink);
            });
            let logs = Logs::default();
            let writer = logs.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .finish();
            (logs, tracing::subscriber::set_default(subscriber))
        }

        fn warnings(&self) -> Vec<String> {
            self.at("WARN")
        }

        fn at(&self, level: &str) -> Vec<String> {
            String::from_utf8_lossy(&self.0.lock().expect("logs"))
                .lines()
                .filter(|l| l.contains(level))
                .map(String::from)
                .collect()
        }
    }

    fn client(server: &Scripted, metrics: Option<Metrics>) -> kube::Client {
        wrap(
            kube::Client::new(server.clone(), "default"),
            Settings {
                limit: None,
                metrics,
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
                server: Some("https://10.0.0.1:6443".into()),
            },
        )
    }

    /// One answered request: the server has been reached (its failures are retried).
    async fn reach(client: &kube::Client) {
        client
            .send(request(Method::GET, "/api"))
            .await
            .expect("reached");
    }

    fn request(method: Method, uri: &str) -> Request<kube::client::Body> {
        Request::builder()
            .method(method)
            .uri(uri)
            .body(kube::client::Body::from(b"{}".to_vec()))
            .expect("request")
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_with_a_short_backoff() {
        let (logs, _guard) = Logs::capture();
        let server = Scripted::new(&[Answer::Status(503), Answer::Status(502)]);
        let metrics = Metrics::new();
        let start = Instant::now();
        let response = client(&server, Some(metrics.clone()))
            .send(request(Method::GET, "/api/v1/pods?limit=5"))
            .await
            .expect("answered");
        let waited = start.elapsed();
        assert_eq!(response.status(), 200);
        assert_eq!(server.calls(), 3);
        assert!(
            waited >= Duration::from_millis(300) && waited <= Duration::from_millis(620),
            "0.2 s then 0.4 s, jittered: {waited:?}"
        );
        // The first failure is a WARNING, the second (within 10 s) is counted, and the
        // answer that ends the outage is said once.
        let warnings = logs.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].contains(
                "GET /api/v1/pods failed: 503 Service Unavailable: scripted 503; retrying in"
            ) && warnings[0].contains("(attempt 2 of 6)")
                && !warnings[0].contains("limit=5"),
            "{}",
            warnings[0]
        );
        let infos = logs.at("INFO");
        assert_eq!(infos.len(), 1, "{infos:#?}");
        assert!(
            infos[0].contains("The API server answers again, after 2 failed attempt(s) over 0."),
            "{}",
            infos[0]
        );
        let text = metrics.encode();
        for line in [
            r#"kopf_api_retries_total{verb="get",code="503"} 1"#,
            r#"kopf_api_retries_total{verb="get",code="502"} 1"#,
            r#"kopf_api_requests_total{verb="get",code="200"} 1"#,
            r#"kopf_api_requests_total{verb="get",code="503"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn after_five_retries_the_caller_gets_the_last_answer_with_its_body() {
        let (logs, _guard) = Logs::capture();
        let server = Scripted::new(&[Answer::Status(504); 10]);
        let start = Instant::now();
        let response = client(&server, None)
            .send(request(Method::PATCH, "/api/v1/namespaces/a/pods/b"))
            .await
            .expect("answered");
        let waited = start.elapsed();
        assert_eq!(response.status(), 504);
        assert_eq!(server.calls(), 6);
        assert!(
            waited >= Duration::from_millis(1700) && waited <= Duration::from_millis(3450),
            "0.2 + 0.4 + 0.8 + 1 + 1 s, jittered: {waited:?}"
        );
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert_eq!(
            &body[..],
            br#"{"kind":"Status","code":504,"message":"scripted 504"}"#
        );
        // One WARNING for the first failure; the other five (within 3.5 s) are DEBUG
        // lines, counted in the next summary.
        let warnings = logs.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].contains("failed: 504 Gateway Timeout: scripted 504; retrying in"),
            "{}",
            warnings[0]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_waits_for_its_retry_after_up_to_a_minute() {
        let server = Scripted::new(&[Answer::Busy(7), Answer::Busy(3600)]);
        let start = Instant::now();
        let response = client(&server, None)
            .send(request(Method::POST, "/api/v1/namespaces/a/pods"))
            .await
            .expect("answered");
        assert_eq!(response.status(), 200);
        assert_eq!(server.calls(), 3, "429 is retried for a POST too");
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(67) && waited <= Duration::from_millis(67_050),
            "7 s, then 60 s instead of an hour: {waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_not_transient_or_not_idempotent_goes_to_the_caller_at_once() {
        let (logs, _guard) = Logs::capture();
        for (method, code, calls) in [
            (Method::POST, 500, 1),
            (Method::PUT, 500, 1),
            (Method::DELETE, 500, 1),
            (Method::GET, 500, 2),
            (Method::PATCH, 500, 2),
            (Method::GET, 404, 1),
            (Method::PATCH, 409, 1),
            (Method::POST, 422, 1),
            (Method::GET, 401, 1),
        ] {
            let server = Scripted::new(&[Answer::Status(code)]);
            let response = client(&server, None)
                .send(request(method.clone(), "/api/v1/namespaces/a/pods/b"))
                .await
                .expect("answered");
            let expected = if calls == 1 { code } else { 200 };
            assert_eq!(response.status(), expected, "{method} {code}");
            assert_eq!(server.calls(), calls, "{method} {code}");
        }
        // A client of its own for each request: each one's first failure is a WARNING.
        let warnings = logs.warnings();
        assert_eq!(
            warnings.len(),
            5,
            "3 not sent again, 2 retried: {warnings:#?}"
        );
        assert!(
            warnings[0].contains("POST /api/v1/namespaces/a/pods/b failed: 500 Internal Server Error: scripted 500; not sent again"),
            "{}",
            warnings[0]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn watches_are_not_retried() {
        for answer in [Answer::Status(503), Answer::Refused] {
            let server = Scripted::new(&[answer]);
            let result = client(&server, None)
                .send(request(
                    Method::GET,
                    "/api/v1/pods?watch=true&resourceVersion=1",
                ))
                .await;
            assert_eq!(server.calls(), 1, "{answer:?}");
            match answer {
                Answer::Status(_) => assert_eq!(result.expect("answered").status(), 503),
                _ => assert!(result.is_err()),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn connection_errors_are_retried() {
        let (logs, _guard) = Logs::capture();
        let metrics = Metrics::new();
        let server = Scripted::new(&[Answer::Status(200), Answer::Refused, Answer::Refused]);
        let client = client(&server, Some(metrics.clone()));
        reach(&client).await;
        let response = client
            .send(request(Method::DELETE, "/api/v1/namespaces/a/pods/b"))
            .await
            .expect("answered");
        assert_eq!(response.status(), 200);
        assert_eq!(server.calls(), 4);
        let warnings = logs.warnings();
        assert!(
            warnings[0].contains(
                "DELETE /api/v1/namespaces/a/pods/b failed: no answer: connection refused; retrying"
            ),
            "{warnings:#?}"
        );
        assert!(
            metrics
                .encode()
                .contains(r#"kopf_api_retries_total{verb="delete",code="0"} 2"#)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_server_times_out_and_is_retried() {
        let (logs, _guard) = Logs::capture();
        let mut script = vec![Answer::Status(200)];
        script.extend([Answer::Hang; 10]);
        let server = Scripted::new(&script);
        let client = client(&server, None);
        reach(&client).await;
        let start = Instant::now();
        let error = client
            .send(request(Method::GET, "/api/v1/pods"))
            .await
            .expect_err("no answer");
        let waited = start.elapsed();
        assert_eq!(server.calls(), 7);
        assert!(
            waited >= Duration::from_millis(6 * 30_000 + 1700)
                && waited <= Duration::from_millis(6 * 30_000 + 3450),
            "{waited:?}"
        );
        assert!(
            error.to_string().contains(
                "the API server at https://10.0.0.1:6443 did not answer GET /api/v1/pods within 30 s"
            ),
            "{error}"
        );
        let warnings = logs.warnings();
        let waiting = warnings
            .iter()
            .filter(|l| {
                l.contains(
                    "No answer from the API server to GET /api/v1/pods after 10 s; still waiting.",
                )
            })
            .count();
        assert_eq!(waiting, 6, "{warnings:#?}");
        // Failures 30 s apart: each is reported, the later ones as summaries.
        assert_eq!(warnings.len(), 12, "{warnings:#?}");
        assert!(warnings.iter().any(|l| l.contains(
            "failed: no answer: the API server at https://10.0.0.1:6443 did not answer GET /api/v1/pods within 30 s; retrying in"
        )));
        // The last: 150 s of attempts and 1.7 to 3.45 s of backoff after the first failure.
        assert!(
            warnings.iter().any(|l| l
                .contains("API requests keep failing: 6 failed attempt(s) in 15")
                && l.contains(
                    " s (1 since the last report); the last: API request GET /api/v1/pods failed"
                )
                && l.contains("giving up (attempt 6 of 6)")),
            "{warnings:#?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_request_timeout_warns_after_a_third_of_it() {
        let (logs, _guard) = Logs::capture();
        let server = Scripted::new(&[Answer::Status(200), Answer::Hang]);
        let client = wrap(
            kube::Client::new(server.clone(), "default"),
            Settings {
                limit: None,
                metrics: None,
                request_timeout: Duration::from_secs(3),
                server: None,
            },
        );
        reach(&client).await;
        let response = client
            .send(request(Method::GET, "/api"))
            .await
            .expect("answered the second time");
        assert_eq!(response.status(), 200);
        let warnings = logs.warnings();
        assert_eq!(warnings.len(), 2, "{warnings:#?}");
        assert!(
            warnings[0].contains("to GET /api after 1 s; still waiting"),
            "{warnings:#?}"
        );
        assert!(
            warnings[1].contains("no answer: the API server did not answer GET /api within 3 s"),
            "{warnings:#?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_never_reached_is_not_retried() {
        let (logs, _guard) = Logs::capture();
        let metrics = Metrics::new();
        let server = Scripted::new(&[Answer::Refused, Answer::Refused]);
        let start = Instant::now();
        let error = client(&server, Some(metrics.clone()))
            .send(request(Method::GET, "/api"))
            .await
            .expect_err("refused");
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "no backoff: it fails at once"
        );
        assert_eq!(server.calls(), 1);
        assert!(error.to_string().contains("connection refused"), "{error}");
        assert_eq!(logs.warnings(), Vec::<String>::new(), "the caller says it");
        assert!(
            !metrics
                .encode()
                .contains(r#"kopf_api_retries_total{verb="get""#)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_slow_to_answer_at_first_gets_its_retries() {
        let server = Scripted::new(&[Answer::Hang, Answer::Hang]);
        let response = client(&server, None)
            .send(request(Method::GET, "/api"))
            .await
            .expect("answered the third time");
        assert_eq!(response.status(), 200);
        assert_eq!(server.calls(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_outage_of_many_requests_logs_a_summary_every_10_s() {
        let (logs, _guard) = Logs::capture();
        // Reached once, then a minute of 503s for 20 requests at a time.
        let mut script = vec![Answer::Status(200)];
        script.extend([Answer::Status(503); 10_000]);
        let server = Scripted::new(&script);
        let client = client(&server, None);
        reach(&client).await;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            let requests = (0..20).map(|i| {
                let client = client.clone();
                async move {
                    client
                        .send(request(
                            Method::GET,
                            &format!("/api/v1/namespaces/n{i}/pods"),
                        ))
                        .await
                }
            });
            for answer in futures::future::join_all(requests).await {
                assert_eq!(answer.expect("answered").status(), 503);
            }
        }
        let failed = server.calls() - 1;
        assert!(failed >= 20 * 6 * 10, "a minute of failures: {failed}");
        let warnings = logs.warnings();
        assert!(
            (6..=8).contains(&warnings.len()),
            "the first failure, then a summary every 10 s: {warnings:#?}"
        );
        assert!(warnings[0].contains("503 Service Unavailable: scripted 503; retrying in"));
        for summary in &warnings[1..] {
            assert!(
                summary.contains("API requests keep failing: ")
                    && summary.contains(
                        " since the last report); the last: API request GET /api/v1/namespaces/n"
                    ),
                "{summary}"
            );
        }
        // The outage ends: one line says so.
        server.script.lock().expect("script").clear();
        client
            .send(request(Method::GET, "/api"))
            .await
            .expect("answered");
        let infos = logs.at("INFO");
        assert_eq!(infos.len(), 1, "{infos:#?}");
        assert!(
            infos[0].contains(&format!(
                "The API server answers again, after {failed} failed attempt(s) over 6"
            )),
            "{}",
            infos[0]
        );
    }
}
