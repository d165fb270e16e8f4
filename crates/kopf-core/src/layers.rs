//! The per-handler middleware, as tower layers over the service that invokes a handler:
//!
//! ```text
//! FilterLayer -> ProgressLayer -> RetryLayer -> TimeoutLayer -> Invoke
//! ```
//!
//! * [`FilterLayer`] skips handlers whose label/annotation/`when` filters do not match;
//! * [`ProgressLayer`] turns the outcome into the handler's next progress record;
//! * [`RetryLayer`] applies the retry limit and the timeout between attempts, and classifies
//!   arbitrary errors by the handler's errors mode (retry after the backoff, fail, ignore);
//! * [`TimeoutLayer`] cancels an async handler at its deadline;
//! * [`Invoke`] runs the handler in its own task (a panic stays an error of that handler).
//!
//! Each layer is tested alone against a fake inner service; [`stack`] builds the default
//! stack the processing cycle uses.

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceExt};

use crate::events::EventSpec;
use crate::handler::{BoxFuture, Cause, ErrorsMode, HandlerError, HandlerSpec};
use crate::progress::{ProgressRecord, format_time, parse_time};

/// One call of one handler.
#[derive(Clone)]
pub struct HandlerCall {
    /// The handler.
    pub spec: HandlerSpec,
    /// What it receives.
    pub cause: Cause,
    /// Its progress so far (`started` is set).
    pub record: ProgressRecord,
    /// The time of this cycle.
    pub now: Timestamp,
}

impl HandlerCall {
    fn spent(&self) -> Duration {
        let started = self
            .record
            .started
            .as_deref()
            .and_then(parse_time)
            .unwrap_or(self.now);
        Duration::from_millis((self.now.as_millisecond() - started.as_millisecond()).max(0) as u64)
    }
}

/// What one call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// The handler's result or error.
    pub result: Result<Option<Value>, HandlerError>,
    /// The handler's own merge patch.
    pub patch: Value,
    /// Events it asked to post.
    pub events: Vec<EventSpec>,
}

impl CallOutcome {
    fn error(e: HandlerError) -> Self {
        CallOutcome {
            result: Err(e),
            patch: json!({}),
            events: Vec::new(),
        }
    }
}

/// How an attempt ended, with the handler's next progress record.
// One value per handler call: the size difference of the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// The filters did not match: the handler was not called.
    Skipped,
    /// The call ended; `record` is the next progress record.
    Done {
        /// The call's outcome (errors already classified).
        outcome: CallOutcome,
        /// The updated progress record.
        record: ProgressRecord,
        /// Retry after this long (None: finished).
        retry_in: Option<Duration>,
    },
}

// ---------------------------------------------------------------------------------------

/// The innermost service: runs the handler in its own task.
#[derive(Debug, Clone, Copy, Default)]
pub struct Invoke;

impl Service<HandlerCall> for Invoke {
    type Response = CallOutcome;
    type Error = Infallible;
    type Future = BoxFuture<Result<CallOutcome, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        Box::pin(async move {
            let patch = call.cause.patch.clone();
            let events = call.cause.events.clone();
            let handler = call.spec.handler.clone();
            let span = tracing::Span::current();
            let task = tokio::spawn(tracing::Instrument::instrument(
                async move { handler.call(call.cause).await },
                span,
            ));
            let result = match task.await {
                Ok(r) => r,
                Err(e) if e.is_panic() => {
                    Err(HandlerError::other(format!("the handler panicked: {e}")))
                }
                Err(e) => Err(HandlerError::other(format!(
                    "the handler was cancelled: {e}"
                ))),
            };
            Ok(CallOutcome {
                result,
                patch: patch.get(),
                events: events.take(),
            })
        })
    }
}

// ---------------------------------------------------------------------------------------

/// Cancels the call when the handler's `timeout` (counted from its first attempt) runs out.
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeoutLayer;

/// The service of [`TimeoutLayer`].
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout { inner }
    }
}

impl<S> Service<HandlerCall> for Timeout<S>
where
    S: Service<HandlerCall, Response = CallOutcome, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = CallOutcome;
    type Error = Infallible;
    type Future = BoxFuture<Result<CallOutcome, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        let inner = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, inner);
        Box::pin(async move {
            let Some(limit) = call.spec.timeout else {
                return inner.call(call).await;
            };
            let remaining = limit.saturating_sub(call.spent());
            let id = call.spec.id.clone();
            match tokio::time::timeout(remaining, inner.call(call)).await {
                Ok(r) => r,
                Err(_) => Ok(CallOutcome::error(HandlerError::permanent(format!(
                    "{id} has timed out after {limit:?}"
                )))),
            }
        })
    }
}

// ---------------------------------------------------------------------------------------

/// Applies the retry limit and the timeout between attempts, and classifies arbitrary
/// errors by the handler's errors mode.
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryLayer;

/// The service of [`RetryLayer`].
#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;
    fn layer(&self, inner: S) -> Retry<S> {
        Retry { inner }
    }
}

impl<S> Service<HandlerCall> for Retry<S>
where
    S: Service<HandlerCall, Response = CallOutcome, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = CallOutcome;
    type Error = Infallible;
    type Future = BoxFuture<Result<CallOutcome, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        let inner = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, inner);
        Box::pin(async move {
            let spec = call.spec.clone();
            let retries = call.record.retries.unwrap_or(0);
            if let Some(limit) = spec.timeout
                && call.spent() >= limit
            {
                return Ok(CallOutcome::error(HandlerError::permanent(format!(
                    "{} has timed out after {limit:?}",
                    spec.id
                ))));
            }
            if let Some(limit) = spec.retries
                && retries >= limit
            {
                return Ok(CallOutcome::error(HandlerError::permanent(format!(
                    "{} has exceeded {retries} retries",
                    spec.id
                ))));
            }
            let mut outcome = inner.call(call).await?;
            if let Err(HandlerError::Other { message }) = &outcome.result {
                outcome.result = match spec.errors {
                    ErrorsMode::Temporary => Err(HandlerError::Temporary {
                        message: message.clone(),
                        delay: Some(spec.backoff),
                    }),
                    ErrorsMode::Permanent => Err(HandlerError::permanent(message.clone())),
                    ErrorsMode::Ignored => Ok(None),
                };
            }
            Ok(outcome)
        })
    }
}

// ---------------------------------------------------------------------------------------

/// Turns a call's outcome into the handler's next progress record (Kopf's record fields).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgressLayer;

/// The service of [`ProgressLayer`].
#[derive(Debug, Clone)]
pub struct Progress<S> {
    inner: S,
}

impl<S> Layer<S> for ProgressLayer {
    type Service = Progress<S>;
    fn layer(&self, inner: S) -> Progress<S> {
        Progress { inner }
    }
}

impl<S> Service<HandlerCall> for Progress<S>
where
    S: Service<HandlerCall, Response = CallOutcome, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Attempt;
    type Error = Infallible;
    type Future = BoxFuture<Result<Attempt, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        let inner = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, inner);
        Box::pin(async move {
            let now = call.now;
            let mut record = call.record.clone();
            let outcome = inner.call(call).await?;
            record.retries = Some(record.retries.unwrap_or(0) + 1);
            let finished_at = format_time(Timestamp::now());
            let retry_in = match &outcome.result {
                Ok(_) => {
                    record.success = Some(true);
                    record.failure = Some(false);
                    record.stopped = Some(finished_at);
                    record.delayed = None;
                    record.message = None;
                    None
                }
                Err(HandlerError::Temporary { message, delay }) => {
                    let d = delay.unwrap_or(Duration::ZERO);
                    record.success = Some(false);
                    record.failure = Some(false);
                    record.message = Some(message.clone());
                    let at = now
                        .checked_add(jiff::SignedDuration::try_from(d).unwrap_or_default())
                        .unwrap_or(now);
                    record.delayed = Some(format_time(at));
                    Some(d)
                }
                Err(HandlerError::Permanent { message } | HandlerError::Other { message }) => {
                    record.success = Some(false);
                    record.failure = Some(true);
                    record.message = Some(message.clone());
                    record.stopped = Some(finished_at);
                    record.delayed = None;
                    None
                }
            };
            Ok(Attempt::Done {
                outcome,
                record,
                retry_in,
            })
        })
    }
}

// ---------------------------------------------------------------------------------------

/// Skips the call when the handler's filters do not match the object.
#[derive(Debug, Clone, Copy, Default)]
pub struct FilterLayer;

/// The service of [`FilterLayer`].
#[derive(Debug, Clone)]
pub struct Filter<S> {
    inner: S,
}

impl<S> Layer<S> for FilterLayer {
    type Service = Filter<S>;
    fn layer(&self, inner: S) -> Filter<S> {
        Filter { inner }
    }
}

impl<S> Service<HandlerCall> for Filter<S>
where
    S: Service<HandlerCall, Response = Attempt, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Attempt;
    type Error = Infallible;
    type Future = BoxFuture<Result<Attempt, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        if !call.spec.matches(&call.cause.body) {
            return Box::pin(async { Ok(Attempt::Skipped) });
        }
        let inner = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, inner);
        Box::pin(async move { inner.call(call).await })
    }
}

// ---------------------------------------------------------------------------------------

/// Runs one call through the default stack: Filter → Progress → Retry → Timeout → Invoke.
pub async fn stack(call: HandlerCall) -> Attempt {
    let svc = tower::ServiceBuilder::new()
        .layer(FilterLayer)
        .layer(ProgressLayer)
        .layer(RetryLayer)
        .layer(TimeoutLayer)
        .service(Invoke);
    match svc.oneshot(call).await {
        Ok(a) => a,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causes::Reason;
    use crate::handler::{EventsHandle, MetaFilter, PatchHandle};
    use tower::service_fn;

    fn call_with(spec: HandlerSpec, record: ProgressRecord) -> HandlerCall {
        HandlerCall {
            spec,
            cause: Cause {
                reason: Reason::Create,
                body: json!({"metadata": {"name": "k", "labels": {"a": "b"}}}),
                diff: kopf_diff::Diff::default(),
                old: None,
                new: None,
                retry: record.retries.unwrap_or(0),
                started: record.started.clone().unwrap_or_default(),
                patch: PatchHandle::default(),
                events: EventsHandle::default(),
            },
            record,
            now: Timestamp::now(),
        }
    }

    fn spec() -> HandlerSpec {
        HandlerSpec::new("h", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        })
    }

    fn fake(
        result: Result<Option<Value>, HandlerError>,
    ) -> impl Service<
        HandlerCall,
        Response = CallOutcome,
        Error = Infallible,
        Future = BoxFuture<Result<CallOutcome, Infallible>>,
    > + Clone
    + Send
    + 'static {
        service_fn(move |_c: HandlerCall| {
            let result = result.clone();
            Box::pin(async move {
                Ok::<_, Infallible>(CallOutcome {
                    result,
                    patch: json!({}),
                    events: vec![],
                })
            }) as BoxFuture<_>
        })
    }

    #[tokio::test]
    async fn invoke_runs_the_handler_and_contains_panics() {
        let out = Invoke
            .oneshot(call_with(spec(), ProgressRecord::default()))
            .await
            .unwrap_or_else(|n| match n {});
        assert_eq!(out.result, Ok(Some(json!(1))));
        let boom = HandlerSpec::new("b", None, |_c: Cause| async {
            if true {
                panic!("boom");
            }
            Ok(None)
        });
        let out = Invoke
            .oneshot(call_with(boom, ProgressRecord::default()))
            .await
            .unwrap_or_else(|n| match n {});
        assert!(
            matches!(out.result, Err(HandlerError::Other { message }) if message.contains("panicked"))
        );
    }

    #[tokio::test]
    async fn timeout_layer_cancels_at_the_deadline() {
        let slow = service_fn(|_c: HandlerCall| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, Infallible>(CallOutcome {
                result: Ok(None),
                patch: json!({}),
                events: vec![],
            })
        });
        let mut s = spec();
        s.timeout = Some(Duration::from_millis(50));
        let out = TimeoutLayer
            .layer(slow)
            .oneshot(call_with(s, ProgressRecord::default()))
            .await
            .unwrap_or_else(|n| match n {});
        assert!(
            matches!(out.result, Err(HandlerError::Permanent { message }) if message.contains("timed out"))
        );
    }

    #[tokio::test]
    async fn retry_layer_limits_and_classifies() {
        let mut s = spec();
        s.retries = Some(3);
        let over = ProgressRecord {
            retries: Some(3),
            ..Default::default()
        };
        let out = RetryLayer
            .layer(fake(Ok(None)))
            .oneshot(call_with(s.clone(), over))
            .await
            .unwrap_or_else(|n| match n {});
        assert!(
            matches!(out.result, Err(HandlerError::Permanent { message }) if message.contains("exceeded 3 retries"))
        );
        s.backoff = Duration::from_secs(7);
        let out = RetryLayer
            .layer(fake(Err(HandlerError::other("x"))))
            .oneshot(call_with(s.clone(), ProgressRecord::default()))
            .await
            .unwrap_or_else(|n| match n {});
        assert_eq!(
            out.result,
            Err(HandlerError::Temporary {
                message: "x".into(),
                delay: Some(Duration::from_secs(7))
            })
        );
        s.errors = ErrorsMode::Ignored;
        let out = RetryLayer
            .layer(fake(Err(HandlerError::other("x"))))
            .oneshot(call_with(s.clone(), ProgressRecord::default()))
            .await
            .unwrap_or_else(|n| match n {});
        assert_eq!(out.result, Ok(None));
        s.errors = ErrorsMode::Permanent;
        let out = RetryLayer
            .layer(fake(Err(HandlerError::other("x"))))
            .oneshot(call_with(s, ProgressRecord::default()))
            .await
            .unwrap_or_else(|n| match n {});
        assert_eq!(out.result, Err(HandlerError::permanent("x")));
    }

    #[tokio::test]
    async fn progress_layer_writes_kopf_records() {
        let start = ProgressRecord {
            started: Some(format_time(Timestamp::now())),
            retries: Some(1),
            ..Default::default()
        };
        let a = ProgressLayer
            .layer(fake(Err(HandlerError::temporary(
                "later",
                Duration::from_secs(5),
            ))))
            .oneshot(call_with(spec(), start.clone()))
            .await
            .unwrap_or_else(|n| match n {});
        let Attempt::Done {
            record, retry_in, ..
        } = a
        else {
            panic!("not done")
        };
        assert_eq!(
            (record.retries, record.success, record.failure, retry_in),
            (
                Some(2),
                Some(false),
                Some(false),
                Some(Duration::from_secs(5))
            )
        );
        assert_eq!(record.message.as_deref(), Some("later"));
        assert!(record.delayed.is_some());
        let a = ProgressLayer
            .layer(fake(Ok(Some(json!(1)))))
            .oneshot(call_with(spec(), start))
            .await
            .unwrap_or_else(|n| match n {});
        let Attempt::Done {
            record, retry_in, ..
        } = a
        else {
            panic!("not done")
        };
        assert!(record.is_finished() && record.stopped.is_some() && retry_in.is_none());
    }

    #[tokio::test]
    async fn filter_layer_skips_non_matching_objects() {
        let inner = ProgressLayer.layer(fake(Ok(None)));
        let mut s = spec();
        s.labels = vec![("a".into(), MetaFilter::Value("other".into()))];
        let a = FilterLayer
            .layer(inner.clone())
            .oneshot(call_with(s, ProgressRecord::default()))
            .await
            .unwrap_or_else(|n| match n {});
        assert_eq!(a, Attempt::Skipped);
        let a = FilterLayer
            .layer(inner)
            .oneshot(call_with(spec(), ProgressRecord::default()))
            .await
            .unwrap_or_else(|n| match n {});
        assert!(matches!(a, Attempt::Done { .. }));
    }
}
