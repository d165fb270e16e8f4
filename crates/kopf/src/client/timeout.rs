//! The timeout layer: an attempt gets the head of its answer within the request timeout
//! (`tower::timeout`; zero: as long as the connection lives), with a warning when it is slow
//! to come (after 10 s, or a third of the request timeout if that is shorter). The body of
//! a transient failure (not of a watch) is read here too, within the request timeout, for
//! the API server's message in the retry layer's log lines ([`ServerMessage`]).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kopf_core::handler::BoxFuture;

use super::request::{describe, seconds, transient, verb};

type Body = kube::client::Body;

/// After this long without an answer, a warning says that the request is still waiting
/// (or after a third of the request timeout, if that is shorter).
const SLOW_ANSWER: Duration = Duration::from_secs(10);
/// The longest API server message quoted in a log line.
const MESSAGE_EXCERPT: usize = 300;

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

/// The API server's message in a transient failure's body, on one line (a response
/// extension, for the retry layer).
#[derive(Clone, Debug)]
pub(super) struct ServerMessage(pub(super) String);

/// Times the attempts of the service it wraps.
#[derive(Clone)]
pub(super) struct TimeoutLayer {
    timeout: Duration,
    /// ` at <base URL>`, or nothing.
    at: Arc<str>,
}

impl TimeoutLayer {
    /// Attempts get `timeout` (zero: no limit); `server` is named in the errors.
    pub(super) fn new(timeout: Duration, server: Option<String>) -> Self {
        let at = server.map(|url| format!(" at {url}")).unwrap_or_default();
        TimeoutLayer {
            timeout,
            at: at.into(),
        }
    }
}

impl<S> tower::Layer<S> for TimeoutLayer {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        // Zero is no limit: tokio's timer takes the longest duration as "never".
        let limit = if self.timeout.is_zero() {
            Duration::MAX
        } else {
            self.timeout
        };
        Timed {
            inner: tower::timeout::Timeout::new(inner, limit),
            timeout: self.timeout,
            at: self.at.clone(),
        }
    }
}

/// The service of [`TimeoutLayer`].
#[derive(Clone)]
pub(super) struct Timed<S> {
    inner: tower::timeout::Timeout<S>,
    timeout: Duration,
    at: Arc<str>,
}

impl<S> tower::Service<Request<Body>> for Timed<S>
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
        self.inner.poll_ready(cx).map_err(into_kube)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let watch = verb(&request) == "watch";
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let (timeout, at) = (self.timeout, self.at.clone());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let warn_after = if timeout.is_zero() {
                SLOW_ANSWER
            } else {
                SLOW_ANSWER.min(timeout / 3)
            };
            let answer = warn_if_slow(answer, warn_after, &method, &path).await;
            let response =
                answer.map_err(|e| match e.downcast::<tower::timeout::error::Elapsed>() {
                    Ok(_) => kube::Error::Service(Box::new(NoAnswer {
                        at: at.to_string(),
                        method,
                        path,
                        within: seconds(timeout),
                    })),
                    Err(e) => into_kube(e),
                })?;
            if watch || !transient(response.status()) {
                return Ok(response);
            }
            Ok(buffered(response, timeout).await)
        })
    }
}

/// `answer`, with a warning when it has not come after `warn_after` (zero: none).
async fn warn_if_slow<T>(
    answer: impl Future<Output = T>,
    warn_after: Duration,
    method: &Method,
    path: &str,
) -> T {
    tokio::pin!(answer);
    if !warn_after.is_zero() {
        match tokio::time::timeout(warn_after, &mut answer).await {
            Ok(result) => return result,
            Err(_) => tracing::warn!(
                "No answer from the API server to {method} {path} after {}; still waiting.",
                seconds(warn_after)
            ),
        }
    }
    answer.await
}

/// The client's error again (the timeout layer boxes the errors of what it wraps).
fn into_kube(error: tower::BoxError) -> kube::Error {
    match error.downcast::<kube::Error>() {
        Ok(error) => *error,
        Err(other) => kube::Error::Service(other),
    }
}

/// The answer with its body read (within `timeout`, zero: no limit) and the API server's
/// message from it as a [`ServerMessage`]; the caller gets the same bytes.
async fn buffered(response: Response<Body>, timeout: Duration) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    let read = if timeout.is_zero() {
        Ok(body.collect().await)
    } else {
        tokio::time::timeout(timeout, body.collect()).await
    };
    let (body, message) = match read {
        Ok(Ok(collected)) => {
            let bytes = collected.to_bytes();
            let message = status_message(&bytes);
            (Body::from(bytes), message)
        }
        Ok(Err(e)) => (
            Body::empty(),
            format!("(its body could not be read: {})", describe(&e)),
        ),
        Err(_) => (
            Body::empty(),
            format!("(its body did not come within {})", seconds(timeout)),
        ),
    };
    parts.extensions.insert(ServerMessage(message));
    Response::from_parts(parts, body)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
