//! The operator's API client. Every request it sends goes through a stack of tower layers,
//! one module each, assembled in [`wrap`] (from the outside in):
//!
//! - [`retry`]: sends a request again after a transient failure: `429 Too Many Requests`
//!   (after its `Retry-After`, at most 60 s), `502`, `503`, `504`, `500` for GET and PATCH
//!   (which can safely be repeated), and no answer at all (a refused or reset connection,
//!   the request timeout). It waits 0.2 s, 0.4 s, 0.8 s, then 1 s between attempts (each
//!   randomly shortened by up to a half, [`kopf_core::backoff`]), so that a recovered API
//!   server is noticed within about a second, and gives up after 5 retries: the caller gets
//!   the last answer or error. The first failure of an outage is one WARNING line (the
//!   request, the status and the API server's message, what happens next); the next ones
//!   are summarised every 10 s (see [`failures`]), and every retry is counted in
//!   `kopf_api_retries_total`. It does not retry a refused or reset connection while the API
//!   server has never answered this client: a server that was never reached (a wrong URL,
//!   nothing listening) fails the operator's start at once with one clear line (a server
//!   that takes the connection but is slow to answer gets its retries);
//! - [`rate_limit`]: paces every attempt with a token bucket (`--qps`, `--burst`), except
//!   those of leader election, sharding and peering ([`unpaced`]): a renewal must never wait
//!   behind the operator's own work, or the replica loses its lead;
//! - [`metrics`]: counts every answer by verb and status (`kopf_api_requests_total`);
//! - [`timeout`]: logs a warning when the API server has not answered a request after 10 s
//!   (a third of the request timeout if that is shorter), and gives up on the attempt after
//!   the request timeout (`--request-timeout`, default 30 s).
//!
//! Watch requests are never sent again (the watch engine restarts its streams itself), and
//! other answers (`404`, `409`, ...) go to the caller unchanged. kube's own hidden retry of
//! the same failures is off in the operator's clients (see [`crate::config::client_config`]).
//!
//! The operator's stop ([`Stop`]) ends the client's own waits: a request held by the rate
//! limit goes at once (requests are not paced any more once the operator stops), a retry's
//! wait ends and the request is sent at once, and a request that fails after the stop is
//! not sent again. An attempt in flight keeps its request timeout.

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use kopf_core::metrics::Metrics;
use tower::ServiceBuilder;

use kopf_core::extract::FromCause;
use kopf_core::handler::{Cause, HandlerError};

mod failures;
mod metrics;
mod rate_limit;
mod request;
mod retry;
mod stop;
mod timeout;
mod unpaced;

pub(crate) use rate_limit::RateLimit;
pub(crate) use stop::Stop;

/// How long an attempt waits for the API server's answer (its head) by default.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What the layers know besides the client they wrap.
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

/// Wraps `client` with the layers, in this order (from the outside in): retries, rate
/// limit, metrics, request timeout; kube's client sends each attempt. `stop` ends the
/// layers' waits.
pub(crate) fn wrap(client: kube::Client, settings: Settings, stop: Stop) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    let service = ServiceBuilder::new()
        .layer(retry::RetryLayer::new(
            settings.metrics.clone(),
            stop.clone(),
        ))
        .layer(rate_limit::RateLimitLayer::new(settings.limit, stop))
        .layer(metrics::MetricsLayer::new(settings.metrics))
        .layer(timeout::TimeoutLayer::new(
            settings.request_timeout,
            settings.server,
        ))
        .service(Send(client));
    kube::Client::new(service, namespace)
}

/// The bottom of the stack: kube's client, which sends one attempt.
#[derive(Clone)]
struct Send(kube::Client);

impl tower::Service<Request<kube::client::Body>> for Send {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = kopf_core::handler::BoxFuture<Result<Self::Response, kube::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), kube::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// The Kubernetes client of the operator, as a handler argument (for creating children,
/// reading other objects...).
#[derive(Clone)]
pub struct Client(pub kube::Client);

impl FromCause for Client {
    fn reads() -> kopf_core::reads::Reads {
        kopf_core::reads::Reads::nothing()
    }

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
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};

    use http::{Method, Response};
    use http_body_util::BodyExt;
    use kopf_core::handler::BoxFuture;
    use tokio::time::Instant;

    use super::*;
    use crate::logging::LogBuffer;

    /// The layers around `client`, never stopped.
    fn wrap(client: kube::Client, settings: Settings) -> kube::Client {
        super::wrap(client, settings, Stop::default())
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
        let (logs, _guard) = LogBuffer::capture();
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
        let warnings = logs.matching("WARN", "");
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].contains(
                "GET /api/v1/pods failed: 503 Service Unavailable: scripted 503; retrying in"
            ) && warnings[0].contains("(attempt 2 of 6)")
                && !warnings[0].contains("limit=5"),
            "{}",
            warnings[0]
        );
        let infos = logs.matching("INFO", "");
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
        let (logs, _guard) = LogBuffer::capture();
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
        let warnings = logs.matching("WARN", "");
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
        let (logs, _guard) = LogBuffer::capture();
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
        let warnings = logs.matching("WARN", "");
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
        let (logs, _guard) = LogBuffer::capture();
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
        let warnings = logs.matching("WARN", "");
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
        let (logs, _guard) = LogBuffer::capture();
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
        let warnings = logs.matching("WARN", "");
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
        let (logs, _guard) = LogBuffer::capture();
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
        let warnings = logs.matching("WARN", "");
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
        let (logs, _guard) = LogBuffer::capture();
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
        assert_eq!(
            logs.matching("WARN", ""),
            Vec::<String>::new(),
            "the caller says it"
        );
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
        let (logs, _guard) = LogBuffer::capture();
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
        let warnings = logs.matching("WARN", "");
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
        let infos = logs.matching("INFO", "");
        assert_eq!(infos.len(), 1, "{infos:#?}");
        assert!(
            infos[0].contains(&format!(
                "The API server answers again, after {failed} failed attempt(s) over 6"
            )),
            "{}",
            infos[0]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_waits_and_the_retries() {
        // A request held by the rate limit goes at once, and its failure is not retried.
        let server = Scripted::new(&[Answer::Status(200), Answer::Busy(60)]);
        let stop = Stop::default();
        let settings = Settings {
            limit: RateLimit::new(1e-20, 1),
            metrics: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            server: None,
        };
        let client = super::wrap(
            kube::Client::new(server.clone(), "default"),
            settings,
            stop.clone(),
        );
        reach(&client).await;
        let start = Instant::now();
        let held = tokio::spawn({
            let client = client.clone();
            async move { client.send(request(Method::GET, "/api")).await }
        });
        tokio::time::advance(Duration::from_secs(3600)).await;
        stop.stop();
        let response = held.await.expect("joined").expect("answered");
        assert_eq!(response.status(), 429, "not sent again after the stop");
        assert_eq!(server.calls(), 2);
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(3600),
            "no year of waiting"
        );
        let start = Instant::now();

        // A retry's wait ends at the stop: the request is sent again at once.
        let server = Scripted::new(&[Answer::Status(200), Answer::Busy(60)]);
        let stop = Stop::default();
        let client = super::wrap(
            kube::Client::new(server.clone(), "default"),
            Settings {
                limit: None,
                metrics: None,
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
                server: None,
            },
            stop.clone(),
        );
        reach(&client).await;
        let retrying = tokio::spawn({
            let client = client.clone();
            async move { client.send(request(Method::GET, "/api")).await }
        });
        while server.calls() < 2 {
            tokio::task::yield_now().await;
        }
        stop.stop();
        let response = retrying.await.expect("joined").expect("answered");
        assert_eq!(response.status(), 200, "sent again");
        assert_eq!(server.calls(), 3);
        assert_eq!(start.elapsed(), Duration::ZERO, "not after the Retry-After");
    }
}
