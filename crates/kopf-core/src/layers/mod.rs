//! The per-handler middleware, as tower layers over the service that invokes a handler:
//!
//! ```text
//! Filter -> Events -> Progress -> [user layers] -> Retry -> Timeout -> Invoke
//! ```
//!
//! * [`FilterLayer`] skips handlers whose label/annotation/`when` filters do not match;
//! * [`EventsLayer`] turns failures (and, if enabled, successes) into Kubernetes Events;
//! * [`ProgressLayer`] turns the outcome into the handler's next progress record;
//! * user layers ([`Stack::layer`]) see every attempt with its classified outcome;
//! * [`RetryLayer`] applies the retry limit and the timeout between attempts (with Kopf's
//!   look-ahead), and classifies arbitrary errors by the handler's errors mode;
//! * [`TimeoutLayer`] cancels an async handler at its deadline;
//! * [`Invoke`] runs the handler in its own task (a panic stays an error of that handler).
//!
//! One level up, the [`FinalizerLayer`] wraps a whole processing cycle of an object: it adds
//! the finalizer when handlers need it and removes it once deletion is handled.
//!
//! Each layer is tested alone against a fake inner service; [`Stack`] builds the per-handler
//! stack the processing cycle uses.

mod events;
mod filter;
mod finalizer;
mod invoke;
mod progress;
mod retry;
mod timeout;

pub use events::{Events, EventsLayer};
pub use filter::{Filter, FilterLayer};
pub use finalizer::{Finalizer, FinalizerLayer, RequiresFinalizer};
pub use invoke::{EndGrace, GraceOver, Invoke};
pub use progress::{Progress, ProgressLayer, retrying};
pub use retry::{Retry, RetryLayer};
pub use timeout::{Timeout, TimeoutLayer};

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt};
use tracing::Instrument;

use crate::events::EventSpec;
use crate::handler::error::HandlerError;
use crate::handler::spec::{Cause, HandlerSpec};
use crate::progress::{ProgressRecord, parse_time};

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

/// The type-erased service user layers wrap: a handler call to its outcome.
pub type HandlerService = BoxCloneService<HandlerCall, CallOutcome, Infallible>;

type UserLayer = Arc<dyn Fn(HandlerService) -> HandlerService + Send + Sync>;

/// The per-handler stack: the framework's layers around the user's own.
///
/// ```
/// use kopf_core::layers::{HandlerCall, HandlerService, Stack};
/// use tower::ServiceExt;
///
/// // A user layer that logs every attempt's outcome.
/// let stack = Stack::default().layer(tower::layer::layer_fn(|inner: HandlerService| {
///     tower::service_fn(move |call: HandlerCall| {
///         let id = call.spec.id.clone();
///         let inner = inner.clone();
///         async move {
///             let outcome = inner.oneshot(call).await?;
///             tracing::info!(handler = %id, ok = outcome.result.is_ok(), "attempt");
///             Ok(outcome)
///         }
///     })
/// }));
/// # let _ = stack;
/// ```
#[derive(Clone, Default)]
pub struct Stack {
    user: Vec<UserLayer>,
    success_events: bool,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("user_layers", &self.user.len())
            .field("success_events", &self.success_events)
            .finish()
    }
}

impl Stack {
    /// Adds a user layer; the first added is the outermost of the user layers. They sit
    /// between the progress layer and the retry layer, so they see every attempt with its
    /// classified outcome (temporary with a delay, permanent, or success).
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<HandlerService> + Send + Sync + 'static,
        L::Service: Service<HandlerCall, Response = CallOutcome, Error = Infallible>
            + Clone
            + Send
            + 'static,
        <L::Service as Service<HandlerCall>>::Future: Send + 'static,
    {
        self.user.push(Arc::new(move |inner| {
            BoxCloneService::new(layer.layer(inner))
        }));
        self
    }

    /// Post a `Normal` event when a handler succeeds (off by default: Kopf's "succeeded"
    /// events are a known source of API load).
    pub fn success_events(mut self, on: bool) -> Self {
        self.success_events = on;
        self
    }

    /// Whether success events are on.
    pub fn posts_success_events(&self) -> bool {
        self.success_events
    }

    /// The attempt of a handler whose result the API server rejected (e.g. a CRD's status
    /// schema refused it): the handler is not called again; its attempt fails with
    /// `message` and is classified by its errors mode (retried after its backoff, failed for
    /// good, or ignored), with its events and its next progress record, as if it had
    /// returned that error. User layers are not involved: the handler did not run now.
    pub async fn reject(&self, call: HandlerCall, message: String) -> Attempt {
        let inner = tower::service_fn(move |_call: HandlerCall| {
            let message = message.clone();
            async move { Ok::<_, Infallible>(CallOutcome::of(Err(HandlerError::other(message)))) }
        });
        let svc = tower::ServiceBuilder::new()
            .layer(FilterLayer)
            .layer(EventsLayer::new(self.success_events))
            .layer(ProgressLayer)
            .layer(RetryLayer)
            .service(inner);
        let span = handler_span(&call);
        let attempt = match svc.oneshot(call).instrument(span.clone()).await {
            Ok(a) => a,
            Err(never) => match never {},
        };
        record_attempt(&span, &attempt);
        attempt
    }

    /// Runs one call through the whole stack.
    pub async fn call(&self, call: HandlerCall) -> Attempt {
        let mut inner: HandlerService =
            BoxCloneService::new(RetryLayer.layer(TimeoutLayer.layer(Invoke)));
        for layer in self.user.iter().rev() {
            inner = layer(inner);
        }
        let svc = tower::ServiceBuilder::new()
            .layer(FilterLayer)
            .layer(EventsLayer::new(self.success_events))
            .layer(ProgressLayer)
            .service(inner);
        let span = handler_span(&call);
        let attempt = match svc.oneshot(call).instrument(span.clone()).await {
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

    #[tokio::test]
    async fn user_layers_see_every_attempt_in_order() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let counter = Arc::new(AtomicUsize::new(0));
        let log = |name: &'static str, seen: Arc<std::sync::Mutex<Vec<String>>>| {
            tower::layer::layer_fn(move |inner: HandlerService| {
                let seen = seen.clone();
                tower::service_fn(move |call: HandlerCall| {
                    seen.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(name.into());
                    inner.clone().oneshot(call)
                })
            })
        };
        let c = counter.clone();
        let stack = Stack::default()
            .layer(log("outer", seen.clone()))
            .layer(log("inner", seen.clone()));
        let handler = HandlerSpec::new("h", None, move |_c: Cause| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(Some(json!("ok"))) }
        });
        let attempt = stack
            .call(call_with(handler, ProgressRecord::default()))
            .await;
        assert!(matches!(attempt, Attempt::Done { retry_in: None, .. }));
        assert_eq!(counter.load(Ordering::SeqCst), 1);
        assert_eq!(
            *seen.lock().unwrap_or_else(|e| e.into_inner()),
            vec!["outer".to_string(), "inner".to_string()]
        );
    }
}
