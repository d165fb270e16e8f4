//! The retry layer: a request is sent again after a transient failure, by a
//! [`tower::retry::Policy`] ([`Retries`]) that honours a 429's `Retry-After`, repeats a 500
//! only for GET and PATCH, waits with a capped, jittered [`Backoff`] between attempts, logs
//! the failures in bounded volume ([`Failures`]) and counts the retries in the metrics.
//!
//! kube's own `RetryPolicy` does not fit: it retries neither a 502, nor a 500 (even for a
//! GET), nor a request that got no answer; it logs nothing; and it would retry watches.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kopf_core::backoff::{Backoff, Jitter};
use kopf_core::handler::BoxFuture;
use kopf_core::metrics::Metrics;

use super::failures::Failures;
use super::request::{describe, seconds, transient, verb};
use super::stop::Stop;
use super::timeout::{NoAnswer, ServerMessage};

type Body = kube::client::Body;

/// Retries of one request after transient failures (so at most 6 attempts).
const MAX_RETRIES: u32 = 5;
/// The first delay between attempts; it doubles up to [`BACKOFF_CAP`].
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
/// The longest delay between attempts (but a 429's `Retry-After`): small, so that a
/// recovered API server is noticed soon.
const BACKOFF_CAP: Duration = Duration::from_secs(1);
/// The delays between attempts, each shortened by a random factor in [0.5, 1] so that many
/// clients do not come back at once.
const BACKOFF: Backoff = Backoff::new(BACKOFF_FIRST, BACKOFF_CAP, Jitter::Shorten(0.5));
/// The longest `Retry-After` of a 429 honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The delay before retry number `retry` (from 1).
fn backoff(retry: u32) -> Duration {
    BACKOFF.delay(retry)
}

/// The `Retry-After` of a 429 (whole seconds, at most [`MAX_RETRY_AFTER`]), if it has one.
fn retry_after(response: &Response<Body>) -> Option<Duration> {
    response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|secs| Duration::from_secs(secs).min(MAX_RETRY_AFTER))
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

/// Whether the error is the timeout layer's (the server took the connection but did not
/// answer in time).
fn timed_out(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Service(e) if e.is::<NoAnswer>())
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

/// The retry policy of one request (each request starts from a fresh clone).
#[derive(Clone)]
pub(super) struct Retries {
    /// Attempts made so far.
    attempts: u32,
    failures: Arc<Failures>,
    metrics: Option<Metrics>,
    stop: Stop,
}

impl Retries {
    /// Records an attempt's answer; the failure to retry, and the `Retry-After` to wait, if
    /// the request is sent again (else `None`: the answer goes to the caller).
    fn failure(
        &self,
        request: &Request<Body>,
        result: &mut Result<Response<Body>, kube::Error>,
    ) -> Option<(Failure, Option<Duration>)> {
        match result {
            Ok(response) if transient(response.status()) => self.failures.answered_with_failure(),
            Ok(_) => self.failures.answered(),
            Err(_) => {}
        }
        // Watch requests are never sent again: the watch engine restarts its streams.
        if verb(request) == "watch" {
            return None;
        }
        let (method, path) = (request.method(), request.uri().path());
        match result {
            Ok(response) if !transient(response.status()) => None,
            Ok(response) => {
                let status = response.status();
                let wait = (status == StatusCode::TOO_MANY_REQUESTS)
                    .then(|| retry_after(response))
                    .flatten();
                let message = response
                    .extensions_mut()
                    .remove::<ServerMessage>()
                    .map(|m| m.0)
                    .unwrap_or_default();
                let failure = Failure::Answer { status, message };
                if !retried(method, status) {
                    self.failures.failed(&format!(
                        "API request {method} {path} failed: {failure}; not sent again (a {method} may have taken effect)."
                    ));
                    return None;
                }
                Some((failure, wait))
            }
            // A server that never answered and refuses (or resets) the connection is not
            // there: the caller says so at once. One that is slow to answer (the request
            // timeout) is given its retries.
            Err(error) if no_answer(error) && (self.failures.reached() || timed_out(error)) => {
                Some((Failure::NoAnswer(describe(error)), None))
            }
            Err(_) => None,
        }
    }
}

impl tower::retry::Policy<Request<Body>, Response<Body>, kube::Error> for Retries {
    type Future = BoxFuture<()>;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<Response<Body>, kube::Error>,
    ) -> Option<BoxFuture<()>> {
        self.attempts += 1;
        let attempt = self.attempts;
        let (failure, wait) = self.failure(request, result)?;
        let (method, path) = (request.method(), request.uri().path());
        let attempts = MAX_RETRIES + 1;
        if attempt >= attempts {
            self.failures.failed(&format!(
                "API request {method} {path} failed: {failure}; giving up (attempt {attempt} of {attempts})."
            ));
            return None;
        }
        if self.stop.is_stopped() {
            self.failures.failed(&format!(
                "API request {method} {path} failed: {failure}; not sent again: the operator is stopping."
            ));
            return None;
        }
        let delay = wait.unwrap_or_else(|| backoff(attempt));
        self.failures.failed(&format!(
            "API request {method} {path} failed: {failure}; retrying in {} (attempt {} of {attempts}).",
            seconds(delay),
            attempt + 1
        ));
        if let Some(m) = &self.metrics {
            m.api_retry(verb(request), failure.code());
        }
        let stop = self.stop.clone();
        Some(Box::pin(async move { stop.sleep(delay).await }))
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        // The retry layer reads every body into memory first: it can be cloned.
        let body = request.body().try_clone()?;
        let mut clone = Request::new(body);
        *clone.method_mut() = request.method().clone();
        *clone.uri_mut() = request.uri().clone();
        *clone.version_mut() = request.version();
        *clone.headers_mut() = request.headers().clone();
        *clone.extensions_mut() = request.extensions().clone();
        Some(clone)
    }
}

/// Sends the requests of the service it wraps again after transient failures.
#[derive(Clone)]
pub(super) struct RetryLayer {
    metrics: Option<Metrics>,
    stop: Stop,
    /// The failures of all the client's requests.
    failures: Arc<Failures>,
}

impl RetryLayer {
    /// Counting the retries in `metrics`, if any; `stop` ends the waits between attempts.
    pub(super) fn new(metrics: Option<Metrics>, stop: Stop) -> Self {
        RetryLayer {
            metrics,
            stop,
            failures: Arc::default(),
        }
    }
}

impl<S> tower::Layer<S> for RetryLayer {
    type Service = Resent<S>;

    fn layer(&self, inner: S) -> Resent<S> {
        let policy = Retries {
            attempts: 0,
            failures: self.failures.clone(),
            metrics: self.metrics.clone(),
            stop: self.stop.clone(),
        };
        Resent(tower::retry::Retry::new(policy, inner))
    }
}

/// The service of [`RetryLayer`]: reads the request's body (small JSON documents) so that it
/// can be sent again, then sends it with [`tower::retry`].
#[derive(Clone)]
pub(super) struct Resent<S>(tower::retry::Retry<Retries, S>);

impl<S> tower::Service<Request<Body>> for Resent<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = kube::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The clone that was made ready is the one called.
        let clone = self.0.clone();
        let mut retry = std::mem::replace(&mut self.0, clone);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| kube::Error::Service(e.into()))?
                .to_bytes();
            retry
                .call(Request::from_parts(parts, Body::from(body)))
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
