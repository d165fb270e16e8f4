//! The operator's side of a simulated run: its client, which draws each request's fate
//! from the seed, and a handler layer that records each attempt. Both stop an instance
//! that was killed: what it sends is never answered, what it runs never returns.

use std::convert::Infallible;
use std::sync::Arc;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use kube::client::Body;
use tower::ServiceExt;

use kopf_core::layers::{CallOutcome, HandlerCall, HandlerService};
use kopf_testing::FakeApiServer;
use kopf_testing::control::RequestTarget;

use super::history::{Answer, Event, HandlerRun, Request, RunOutcome};
use super::plan::Fate;
use super::state::{Life, RunState};

/// The verbs of requests about objects: the ones that get faults.
const OBJECT_VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// The client of one instance: `inner` (the in-process client), with each request's fate
/// drawn from the run's seed.
pub(super) fn faulty(
    inner: kube::Client,
    run: Arc<RunState>,
    life: Life,
    server: Arc<FakeApiServer>,
) -> kube::Client {
    let namespace = inner.default_namespace().to_string();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let sender = Sender {
            inner: inner.clone(),
            run: run.clone(),
            life: life.clone(),
            server: server.clone(),
        };
        async move { sender.send(request).await }
    });
    kube::Client::new(service, namespace)
}

/// What sends one request.
struct Sender {
    inner: kube::Client,
    run: Arc<RunState>,
    life: Life,
    server: Arc<FakeApiServer>,
}

impl Sender {
    async fn send(self, request: http::Request<Body>) -> Result<http::Response<Body>, kube::Error> {
        self.life.or_never().await;
        let uri = request.uri();
        let t = kopf_testing::server::target_of_request(request.method(), uri.path(), uri.query());
        if !OBJECT_VERBS.contains(&t.verb.as_str()) || t.resource.is_empty() {
            return self.pass(request).await;
        }
        let key = key_of(&t);
        let n = self.run.next_count(&key);
        let fate = if self.run.is_calm() {
            Fate::Pass
        } else {
            self.run
                .plan
                .fate(&self.run.dice, &t, &key, n, self.run.kills_left())
        };
        let (answer, response) = self.answer(fate, &key, &t, request).await?;
        self.run.record(Event::Request(Request {
            instance: self.life.instance,
            verb: t.verb.clone(),
            resource: resource_of(&t),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            outcome: answer,
        }));
        if answer == Answer::Killed {
            std::future::pending::<()>().await;
        }
        self.life.or_never().await;
        Ok(response)
    }

    /// Serves a request as it is (the instance may die meanwhile: then it never returns).
    async fn pass(
        &self,
        request: http::Request<Body>,
    ) -> Result<http::Response<Body>, kube::Error> {
        let response = self.inner.send(request).await?;
        self.life.or_never().await;
        Ok(response)
    }

    /// What the operator is answered, by the request's fate.
    async fn answer(
        &self,
        fate: Fate,
        key: &str,
        t: &RequestTarget,
        request: http::Request<Body>,
    ) -> Result<(Answer, http::Response<Body>), kube::Error> {
        let served = |r: &http::Response<Body>| r.status().as_u16();
        // A kill that cannot happen (the faults ended, the instance is dead already) passes.
        let fate = match fate {
            Fate::KillBefore if !self.run.kill(&self.life, format!("before: {key}")) => Fate::Pass,
            fate => fate,
        };
        Ok(match fate {
            Fate::Pass => {
                let r = self.inner.send(request).await?;
                (Answer::Served(served(&r)), r)
            }
            Fate::Fail(code) => (Answer::Injected(code), status(code, None)?),
            Fate::Throttle(secs) => (Answer::Injected(429), status(429, Some(secs))?),
            Fate::Lost => {
                let _ = self.inner.send(request).await?;
                (Answer::Lost(504), status(504, None)?)
            }
            Fate::Delay(delay) => {
                tokio::time::sleep(delay).await;
                // Killed meanwhile: the request never leaves.
                self.life.or_never().await;
                let r = self.inner.send(request).await?;
                let ms = delay.as_millis() as u64;
                (Answer::Delayed(ms, served(&r)), r)
            }
            Fate::Expire => {
                self.server.expire_next_watch(Some(&t.resource));
                let r = self.inner.send(request).await?;
                (Answer::Injected(410), r)
            }
            Fate::KillBefore => (Answer::Killed, status(500, None)?),
            Fate::KillAfter => {
                let r = self.inner.send(request).await?;
                let code = served(&r);
                if self.run.kill(&self.life, format!("after: {key} -> {code}")) {
                    (Answer::Killed, r)
                } else {
                    (Answer::Served(code), r)
                }
            }
        })
    }
}

/// The name under which a request's fates are drawn: what it does to which object.
fn key_of(t: &RequestTarget) -> String {
    format!("{} {} {}/{}", t.verb, resource_of(t), t.namespace, t.name)
}

fn resource_of(t: &RequestTarget) -> String {
    if t.subresource.is_empty() {
        t.resource.clone()
    } else {
        format!("{}/{}", t.resource, t.subresource)
    }
}

/// A failure answer as the API server sends it: a `Status` with the code's reason.
fn status(code: u16, retry_after: Option<u64>) -> Result<http::Response<Body>, kube::Error> {
    let (reason, message) = match code {
        409 => (
            "Conflict",
            "the object has been modified; please apply your changes to the latest version \
             and try again",
        ),
        429 => (
            "TooManyRequests",
            "too many requests, please try again later",
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => (
            "Timeout",
            "the request did not complete within the allowed duration",
        ),
        _ => (
            "InternalError",
            "an error on the server has prevented the request from succeeding",
        ),
    };
    let mut error = kopf_testing::error::ApiError::new(
        code,
        reason,
        format!("{message} (injected by the simulation)"),
    );
    error.retry_after = retry_after;
    let mut response = http::Response::builder()
        .status(code)
        .header(CONTENT_TYPE, "application/json");
    if let Some(secs) = retry_after {
        response = response.header(RETRY_AFTER, secs.to_string());
    }
    let body = error.to_status();
    response
        .body(Body::from(body.to_string().into_bytes()))
        .map_err(kube::Error::HttpError)
}

/// A handler layer that records every attempt of `life`'s instance into the run's
/// history (and never returns from an attempt its instance did not live to finish).
pub(super) fn recorder(
    run: Arc<RunState>,
    life: Life,
) -> impl tower::Layer<HandlerService, Service = HandlerService> + Clone + Send + Sync + 'static {
    tower::layer::layer_fn(move |inner: HandlerService| {
        let (run, life) = (run.clone(), life.clone());
        HandlerService::new(tower::service_fn(move |call: HandlerCall| {
            let (inner, run, life) = (inner.clone(), run.clone(), life.clone());
            async move {
                life.or_never().await;
                let mut attempt = attempt_of(&call, life.instance);
                let outcome: CallOutcome = inner.oneshot(call).await?;
                attempt.outcome = match (&outcome.result, life.is_alive()) {
                    (_, false) => RunOutcome::Interrupted,
                    (Ok(value), true) => RunOutcome::Succeeded(value.clone()),
                    (Err(e), true) => RunOutcome::Failed(e.to_string()),
                };
                run.record(Event::Handler(attempt));
                life.or_never().await;
                Ok::<_, Infallible>(outcome)
            }
        }))
    })
}

/// The record of an attempt about to run (its outcome is set when it ends).
fn attempt_of(call: &HandlerCall, instance: u32) -> HandlerRun {
    let meta = &call.cause.body["metadata"];
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    HandlerRun {
        instance,
        handler: call.spec.id.clone(),
        reason: call.cause.reason,
        uid: text(&meta["uid"]),
        object: format!("{}/{}", text(&meta["namespace"]), text(&meta["name"])),
        spec: call.cause.body["spec"].clone(),
        retry: call.cause.retry,
        finalized: meta["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == super::invariants::FINALIZER)),
        outcome: RunOutcome::Interrupted,
    }
}
