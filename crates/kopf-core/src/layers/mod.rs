//! The per-handler middleware, as tower layers over the service that invokes a handler.
//! The facade (`kopf`) assembles them once per operator, with `tower::ServiceBuilder`, in
//! this order (outermost first; the user layers' places in brackets):
//!
//! ```text
//! [before filters] -> Filter -> Events -> Progress -> Rejected -> [around the attempt]
//!     -> Classify -> [around the handler] -> Timeout -> Invoke
//! ```
//!
//! * [`FilterLayer`] skips handlers whose label/annotation/`when` filters do not match;
//! * [`EventsLayer`] turns failures (and, if enabled, successes) into Kubernetes Events;
//! * [`ProgressLayer`] turns the outcome into the handler's next progress record;
//! * [`RejectedLayer`] answers for a handler whose last result the API server rejected:
//!   that rejection is its attempt (the layers below are not involved);
//! * [`ClassifyLayer`] classifies the outcome under Kopf's retry rules: the retry limit and
//!   the timeout between attempts (with Kopf's look-ahead), arbitrary errors by the
//!   handler's errors mode. It does not retry: the next attempt is a later cycle's;
//! * [`TimeoutLayer`] cancels an async handler at its deadline;
//! * [`Invoke`] runs the handler in its own task (a panic stays an error of that handler).
//!
//! Above [`ProgressLayer`] a service answers an [`Attempt`] ([`AttemptService`]); below it,
//! a [`CallOutcome`] ([`HandlerService`]). Each layer is tested alone against a fake inner
//! service; [`Stack`] holds the assembled service for the processing cycle, daemons, timers
//! and activities ([`Stack::framework`] is the same order without user layers).
//!
//! The operator's finalizer is not a layer: it is a step around the whole cycle of an object
//! (`processing::finalizer::around_cycle`).

mod classify;
mod events;
mod filter;
mod invoke;
mod progress;
mod rejected;
mod step;
mod timeout;

pub use classify::ClassifyLayer;
pub use events::EventsLayer;
pub use filter::FilterLayer;
pub use invoke::{EndGrace, GraceOver, Invoke};
pub use progress::{ProgressLayer, retrying};
pub use rejected::RejectedLayer;
pub use step::{Next, Step, Stepped};
pub use timeout::TimeoutLayer;

step::step_layers!(
    FilterLayer => Filter,
    EventsLayer => Events,
    ProgressLayer => Progress,
    RejectedLayer => Rejected,
    ClassifyLayer => Classify,
    TimeoutLayer => Timeout,
);

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use tower::util::BoxCloneService;
use tower::{Service, ServiceExt};
use tracing::Instrument;

use crate::events::EventSpec;
use crate::handler::error::HandlerError;
use crate::handler::spec::{Cause, HandlerSpec};
use crate::progress::{ProgressRecord, parse_time};
use rejected::Rejection;

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
    /// Time since the handler's first attempt.
    pub fn spent(&self) -> Duration {
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
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The handler's result or error.
    pub result: Result<Option<Value>, HandlerError>,
    /// The handler's own merge patch.
    pub patch: Value,
    /// Events it asked to post.
    pub events: Vec<EventSpec>,
    /// Sub-handlers it registered (ids relative to the handler).
    pub subhandlers: Vec<HandlerSpec>,
}

impl CallOutcome {
    /// An outcome with only a result (no patch, events or sub-handlers).
    pub fn of(result: Result<Option<Value>, HandlerError>) -> Self {
        CallOutcome {
            result,
            patch: json!({}),
            events: Vec::new(),
            subhandlers: Vec::new(),
        }
    }
}

/// How an attempt ended, with the handler's next progress record.
// One value per handler call: the size difference of the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
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

/// How an attempt ended, for callers that keep the retry record in memory (daemons,
/// timers, activities).
#[derive(Debug)]
pub(crate) enum Verdict {
    /// The filters did not match: the handler was not called.
    Skipped,
    /// It returned successfully.
    Succeeded,
    /// It failed and is retried after `delay` with `record`.
    Retry {
        error: HandlerError,
        delay: Duration,
        record: ProgressRecord,
    },
    /// It failed for good.
    Failed(HandlerError),
}

impl Attempt {
    /// The attempt's verdict.
    pub(crate) fn verdict(self) -> Verdict {
        match self {
            Attempt::Skipped => Verdict::Skipped,
            Attempt::Done {
                outcome,
                record,
                retry_in,
            } => match (outcome.result, retry_in) {
                (Ok(_), _) => Verdict::Succeeded,
                (Err(error), Some(delay)) => Verdict::Retry {
                    error,
                    delay,
                    record,
                },
                (Err(error), None) => Verdict::Failed(error),
            },
        }
    }
}

/// The type-erased service of the layers below the classification's place: a handler call
/// to its outcome. User layers around the attempt and around the handler wrap it.
pub type HandlerService = BoxCloneService<HandlerCall, CallOutcome, Infallible>;

/// The type-erased service of the layers above the progress record's place: a handler call
/// to its [`Attempt`]. User layers before the filters wrap it, and the whole stack is one.
pub type AttemptService = BoxCloneService<HandlerCall, Attempt, Infallible>;

/// The per-handler stack, assembled once (by the facade, `kopf`, with its user layers; or
/// with the framework's layers alone, [`Stack::framework`]) and held by whoever calls
/// handlers: the processor of each resource, daemons and timers, activities. A call clones
/// the assembled service; nothing is built per call.
///
/// ```
/// # async fn demo() {
/// use kopf_core::causes::Reason;
/// use kopf_core::handler::{Cause, HandlerSpec};
/// use kopf_core::layers::{Attempt, HandlerCall, Stack};
/// use serde_json::json;
///
/// let stack = Stack::framework(false);
/// let spec = HandlerSpec::new("h", None, |_c: Cause| async { Ok(Some(json!(1))) });
/// let call = HandlerCall {
///     spec,
///     cause: Cause::for_body(Reason::Create, json!({"metadata": {"name": "x"}})),
///     record: Default::default(),
///     now: jiff::Timestamp::now(),
/// };
/// assert!(matches!(stack.call(call).await, Attempt::Done { retry_in: None, .. }));
/// # }
/// ```
#[derive(Clone)]
pub struct Stack {
    /// The assembled stack. Behind a lock because a boxed service is `Send` but not `Sync`;
    /// the lock is held only to clone it.
    service: Arc<Mutex<AttemptService>>,
    success_events: bool,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("success_events", &self.success_events)
            .finish_non_exhaustive()
    }
}

impl Default for Stack {
    /// The framework's layers alone, without success events.
    fn default() -> Self {
        Stack::framework(false)
    }
}

impl Stack {
    /// A stack of an assembled service. `success_events` says whether the service's
    /// [`EventsLayer`] posts success events (the cycle then also posts a parent's success
    /// once all its sub-handlers have succeeded).
    pub fn new<S>(service: S, success_events: bool) -> Self
    where
        S: Service<HandlerCall, Response = Attempt, Error = Infallible> + Clone + Send + 'static,
        S::Future: Send + 'static,
    {
        Stack {
            service: Arc::new(Mutex::new(BoxCloneService::new(service))),
            success_events,
        }
    }

    /// The framework's layers alone, with no user layer, in the order the facade (`kopf`)
    /// documents for its stack: Filter, Events, Progress, Rejected, Classify, Timeout,
    /// Invoke. For the I/O-free core used without the facade (its tests, engines built
    /// directly).
    pub fn framework(success_events: bool) -> Self {
        let service = tower::ServiceBuilder::new()
            .layer(FilterLayer)
            .layer(EventsLayer::new(success_events))
            .layer(ProgressLayer)
            .layer(RejectedLayer)
            .layer(ClassifyLayer)
            .layer(TimeoutLayer)
            .service(Invoke);
        Stack::new(service, success_events)
    }

    /// Whether success events are on.
    pub fn posts_success_events(&self) -> bool {
        self.success_events
    }

    /// The attempt of a handler whose result the API server rejected (e.g. a CRD's status
    /// schema refused it): the handler is not called again; its attempt fails with
    /// `message` and is classified by its errors mode (retried after its backoff, failed for
    /// good, or ignored), with its events and its next progress record, as if it had
    /// returned that error (see [`RejectedLayer`]). The layers below the rejection's place
    /// (user layers around the attempt or the handler) are not involved: the handler did
    /// not run now.
    pub async fn reject(&self, mut call: HandlerCall, message: String) -> Attempt {
        call.cause.extensions.insert(Rejection(message));
        self.call(call).await
    }

    /// Runs one call through the whole stack.
    pub async fn call(&self, call: HandlerCall) -> Attempt {
        let service = self
            .service
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let span = handler_span(&call);
        let attempt = match service.oneshot(call).instrument(span.clone()).await {
            Ok(a) => a,
            Err(never) => match never {},
        };
        record_attempt(&span, &attempt);
        attempt
    }
}

/// The span of one handler call (the handler's own task runs in it): its id and retry
/// number now, its outcome once the attempt is classified (see [`record_attempt`]). Inside
/// the object's cycle span; exported by OpenTelemetry when the operator has it (`kopf`'s
/// `otel` feature), and ignored by the log formats.
fn handler_span(call: &HandlerCall) -> tracing::Span {
    tracing::info_span!(
        "handler",
        handler = %call.spec.id,
        retry = call.record.retries.unwrap_or(0),
        outcome = tracing::field::Empty,
        delay = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    )
}

/// Records how an attempt ended on its [`handler_span`]: `outcome` is `succeeded`,
/// `failed-temporary` (with `delay`, seconds until the next attempt), `failed-permanent`
/// or `skipped`; a failure also sets the span's error status, with the error's message.
/// Nothing is formatted here: the values are formatted only by a layer that records them.
fn record_attempt(span: &tracing::Span, attempt: &Attempt) {
    if span.is_disabled() {
        return;
    }
    let (outcome, error) = match attempt {
        Attempt::Skipped => ("skipped", None),
        Attempt::Done {
            outcome, retry_in, ..
        } => match (&outcome.result, retry_in) {
            (Ok(_), _) => ("succeeded", None),
            (Err(e), Some(delay)) => {
                span.record("delay", delay.as_secs_f64());
                ("failed-temporary", Some(e))
            }
            (Err(e), None) => ("failed-permanent", Some(e)),
        },
    };
    span.record("outcome", outcome);
    if let Some(error) = error {
        span.record("otel.status_code", "error");
        span.record("otel.status_description", tracing::field::display(error));
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A fake inner service and calls for the layer tests.

    use super::*;
    use crate::causes::Reason;
    use crate::handler::spec::BoxFuture;

    pub fn call_with(spec: HandlerSpec, record: ProgressRecord) -> HandlerCall {
        let mut cause = Cause::for_body(
            Reason::Create,
            json!({"metadata": {"name": "k", "labels": {"a": "b"}}}),
        );
        cause.retry = record.retries.unwrap_or(0);
        cause.started = record.started.clone().unwrap_or_default();
        HandlerCall {
            spec,
            cause,
            record,
            now: Timestamp::now(),
        }
    }

    pub fn spec() -> HandlerSpec {
        HandlerSpec::new("h", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        })
    }

    pub fn fake(
        result: Result<Option<Value>, HandlerError>,
    ) -> impl Service<
        HandlerCall,
        Response = CallOutcome,
        Error = Infallible,
        Future = BoxFuture<Result<CallOutcome, Infallible>>,
    > + Clone
    + Send
    + 'static {
        tower::service_fn(move |_c: HandlerCall| {
            let result = result.clone();
            Box::pin(async move { Ok::<_, Infallible>(CallOutcome::of(result)) }) as BoxFuture<_>
        })
    }

    pub async fn run<S>(svc: S, call: HandlerCall) -> S::Response
    where
        S: Service<HandlerCall, Error = Infallible>,
    {
        match svc.oneshot(call).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A layer that counts the calls that reach it.
    fn counting(
        seen: Arc<AtomicUsize>,
    ) -> impl tower::Layer<HandlerService, Service = HandlerService> + Clone {
        tower::layer::layer_fn(move |inner: HandlerService| {
            let seen = seen.clone();
            BoxCloneService::new(tower::service_fn(move |call: HandlerCall| {
                seen.fetch_add(1, Ordering::SeqCst);
                inner.clone().oneshot(call)
            }))
        })
    }

    #[tokio::test]
    async fn a_call_and_a_rejection_go_through_the_one_assembled_service() {
        let below = Arc::new(AtomicUsize::new(0));
        let called = Arc::new(AtomicUsize::new(0));
        let c = called.clone();
        let stack = Stack::new(
            tower::ServiceBuilder::new()
                .layer(FilterLayer)
                .layer(EventsLayer::new(false))
                .layer(ProgressLayer)
                .layer(RejectedLayer)
                .layer(counting(below.clone()))
                .layer(BoxCloneService::layer())
                .layer(ClassifyLayer)
                .service(Invoke),
            false,
        );
        let handler = HandlerSpec::new("h", None, move |_c: Cause| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(Some(json!("ok"))) }
        });
        let attempt = stack
            .call(call_with(handler.clone(), ProgressRecord::default()))
            .await;
        assert!(matches!(attempt, Attempt::Done { retry_in: None, .. }));
        assert_eq!(called.load(Ordering::SeqCst), 1);
        assert_eq!(below.load(Ordering::SeqCst), 1);
        let rejected = stack
            .reject(
                call_with(handler, ProgressRecord::default()),
                "status.x: Invalid value".into(),
            )
            .await;
        let Attempt::Done {
            outcome, retry_in, ..
        } = rejected
        else {
            panic!("not done")
        };
        assert_eq!(retry_in, Some(Duration::from_secs(60)), "its backoff");
        assert_eq!(
            outcome.events,
            vec![EventSpec::warning(
                "Logging",
                "Handler 'h' failed temporarily: status.x: Invalid value"
            )],
            "the events above the rejection's place see it"
        );
        assert_eq!(
            called.load(Ordering::SeqCst),
            1,
            "the handler is not called"
        );
        assert_eq!(below.load(Ordering::SeqCst), 1, "nor the layers below");
    }

    #[tokio::test]
    async fn the_framework_stack_skips_classifies_and_records() {
        let stack = Stack::framework(true);
        let mut filtered = spec();
        filtered.labels = vec![(
            "a".into(),
            crate::handler::MetaFilter::Value("other".into()),
        )];
        let skipped = stack
            .call(call_with(filtered, ProgressRecord::default()))
            .await;
        assert!(matches!(skipped, Attempt::Skipped));
        let mut failing = HandlerSpec::new("f", None, |_c: Cause| async {
            Err(HandlerError::other("boom"))
        });
        failing.errors = crate::handler::ErrorsMode::Permanent;
        let Attempt::Done {
            outcome, record, ..
        } = stack
            .call(call_with(failing, ProgressRecord::default()))
            .await
        else {
            panic!("not done")
        };
        assert_eq!(outcome.result, Err(HandlerError::permanent("boom")));
        assert_eq!(record.failure, Some(true));
        assert_eq!(outcome.events.len(), 1);
        let Attempt::Done { outcome, .. } = stack
            .call(call_with(spec(), ProgressRecord::default()))
            .await
        else {
            panic!("not done")
        };
        assert_eq!(outcome.events, vec![EventSpec::success("h")]);
    }
}
