//! The handler stack: the framework's layers ([`kopf_core::layers`]) and the user's,
//! assembled once when the operator starts, with `tower::ServiceBuilder`, and held by each
//! resource's processor (and by daemons, timers and activities). Every handler call goes
//! down it, outermost first:
//!
//! | # | layer | what it does |
//! |---|---|---|
//! | 1 | *before the filters* ([`Operator::layer_before_filters`]) | user layers that see every call, skipped ones too, and its [`Attempt`] (events, next progress record) |
//! | 2 | [`FilterLayer`] | skips the handler when its filters do not match the object |
//! | 3 | [`EventsLayer`] | a `Warning` Event per failure (and a `Normal` one per success with [`Operator::success_events`]) |
//! | 4 | [`ProgressLayer`] | the outcome into the handler's next progress record |
//! | 5 | [`RejectedLayer`] | a handler whose last result the API server rejected: that rejection is its attempt (nothing below runs) |
//! | 6 | *around the attempt* ([`Operator::layer`]) | user layers that see each attempt with its classified outcome; then the operator's [`MetricsLayer`] when metrics are on |
//! | 7 | [`ClassifyLayer`] | Kopf's retry rules: retry limit, timeout between attempts, errors mode (it does not retry: the next attempt is a later cycle's) |
//! | 8 | *around the handler* ([`Operator::layer_around_handler`]) | user layers that see the handler's own outcome, before the errors mode and the limits |
//! | 9 | [`TimeoutLayer`] | cancels an async handler at its deadline |
//! | 10 | [`Invoke`] | runs the handler in its own task |
//!
//! At each user place, the first layer added is the outermost. `docs/handlers.md` has the
//! same table for users.
//!
//! [`Operator::layer_before_filters`]: super::Operator::layer_before_filters
//! [`Operator::layer`]: super::Operator::layer
//! [`Operator::layer_around_handler`]: super::Operator::layer_around_handler
//! [`Operator::success_events`]: super::Operator::success_events
//! [`Attempt`]: kopf_core::layers::Attempt

use std::convert::Infallible;
use std::sync::Arc;

use kopf_core::layers::{
    Attempt, AttemptService, CallOutcome, ClassifyLayer, EventsLayer, FilterLayer, HandlerCall,
    HandlerService, Invoke, ProgressLayer, RejectedLayer, Stack, TimeoutLayer,
};
use kopf_core::metrics::{Metrics, MetricsLayer};
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceBuilder};

/// One user layer, type-erased over the boxed service of its place.
type Boxed<S> = Arc<dyn Fn(S) -> S + Send + Sync>;

/// The layers users added at one place, as one layer: the first added is the outermost.
#[derive(Clone)]
struct UserLayers<S>(Vec<Boxed<S>>);

impl<S> Default for UserLayers<S> {
    fn default() -> Self {
        UserLayers(Vec::new())
    }
}

impl<S> Layer<S> for UserLayers<S> {
    type Service = S;

    fn layer(&self, inner: S) -> S {
        self.0
            .iter()
            .rev()
            .fold(inner, |service, layer| layer(service))
    }
}

impl<S> UserLayers<S> {
    fn push(&mut self, layer: Boxed<S>) {
        self.0.push(layer);
    }
}

/// What the operator's builder collects for its handler stack: the user layers at each
/// place, and whether successes post events. [`build`](Self::build) assembles it.
#[derive(Clone, Default)]
pub(crate) struct StackLayers {
    before_filters: UserLayers<AttemptService>,
    around_attempt: UserLayers<HandlerService>,
    around_handler: UserLayers<HandlerService>,
    success_events: bool,
}

/// A tower layer for a user place of the handler stack whose services answer `R`
/// ([`CallOutcome`] around the attempt and the handler, [`Attempt`] before the filters):
/// the bounds a user layer needs, written once. Every such layer implements it.
pub trait HandlerLayer<R>:
    Layer<
        BoxCloneService<HandlerCall, R, Infallible>,
        Service: Service<HandlerCall, Response = R, Error = Infallible, Future: Send + 'static>
                     + Clone
                     + Send
                     + 'static,
    > + Send
    + Sync
    + 'static
{
}

impl<R, L> HandlerLayer<R> for L where
    L: Layer<
            BoxCloneService<HandlerCall, R, Infallible>,
            Service: Service<
                HandlerCall,
                Response = R,
                Error = Infallible,
                Future: Send + 'static,
            > + Clone
                         + Send
                         + 'static,
        > + Send
        + Sync
        + 'static
{
}

/// A user layer over the boxed service of its place.
fn boxed<R: 'static, L: HandlerLayer<R>>(
    layer: L,
) -> Boxed<BoxCloneService<HandlerCall, R, Infallible>> {
    Arc::new(move |inner| BoxCloneService::new(layer.layer(inner)))
}

impl StackLayers {
    /// Adds a user layer before the filters.
    pub(crate) fn before_filters(&mut self, layer: impl HandlerLayer<Attempt>) {
        self.before_filters.push(boxed(layer));
    }

    /// Adds a user layer around the attempt (its classified outcome).
    pub(crate) fn around_attempt(&mut self, layer: impl HandlerLayer<CallOutcome>) {
        self.around_attempt.push(boxed(layer));
    }

    /// Adds a user layer around the handler (its own outcome).
    pub(crate) fn around_handler(&mut self, layer: impl HandlerLayer<CallOutcome>) {
        self.around_handler.push(boxed(layer));
    }

    /// Post a `Normal` event when a handler succeeds.
    pub(crate) fn success_events(&mut self, on: bool) {
        self.success_events = on;
    }

    /// The stack, assembled in the order of this module's table; with `metrics`, the
    /// [`MetricsLayer`] is the innermost layer around the attempt.
    pub(crate) fn build(&self, metrics: Option<&Metrics>) -> Stack {
        let mut around_attempt = self.around_attempt.clone();
        if let Some(metrics) = metrics {
            around_attempt.push(boxed(MetricsLayer(metrics.clone())));
        }
        let service = ServiceBuilder::new()
            .layer(self.before_filters.clone())
            .layer(BoxCloneService::layer())
            .layer(FilterLayer)
            .layer(EventsLayer::new(self.success_events))
            .layer(ProgressLayer)
            .layer(RejectedLayer)
            .layer(around_attempt)
            .layer(BoxCloneService::layer())
            .layer(ClassifyLayer)
            .layer(self.around_handler.clone())
            .layer(BoxCloneService::layer())
            .layer(TimeoutLayer)
            .service(Invoke);
        Stack::new(service, self.success_events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopf_core::causes::Reason;
    use kopf_core::handler::{Cause, HandlerError, HandlerSpec};
    use serde_json::json;
    use std::sync::Mutex;
    use tower::ServiceExt;

    type Log = Arc<Mutex<Vec<String>>>;

    fn seen(log: &Log) -> Vec<String> {
        log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A layer at a place (its boxed service answers `R`) that logs `name` on the way in.
    fn logging<R: Send + 'static>(
        name: &'static str,
        log: Log,
    ) -> impl Layer<
        BoxCloneService<HandlerCall, R, Infallible>,
        Service = BoxCloneService<HandlerCall, R, Infallible>,
    > + Send
    + Sync
    + Clone
    + 'static {
        tower::layer::layer_fn(move |inner: BoxCloneService<HandlerCall, R, Infallible>| {
            let log = log.clone();
            BoxCloneService::new(tower::service_fn(move |call: HandlerCall| {
                log.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(name.to_string());
                inner.clone().oneshot(call)
            }))
        })
    }

    fn call(spec: HandlerSpec) -> HandlerCall {
        HandlerCall {
            spec,
            cause: Cause::for_body(Reason::Create, json!({"metadata": {"name": "k"}})),
            record: Default::default(),
            now: jiff::Timestamp::now(),
        }
    }

    #[tokio::test]
    async fn user_layers_run_at_their_places_in_the_documented_order() {
        let log: Log = Arc::default();
        let mut layers = StackLayers::default();
        layers.around_handler(logging("handler 1", log.clone()));
        layers.around_attempt(logging("attempt 1", log.clone()));
        layers.before_filters(logging("before 1", log.clone()));
        layers.around_attempt(logging("attempt 2", log.clone()));
        layers.before_filters(logging("before 2", log.clone()));
        layers.around_handler(logging("handler 2", log.clone()));
        let stack = layers.build(None);
        let handler_log = log.clone();
        let handler = HandlerSpec::new("h", None, move |_c: Cause| {
            handler_log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push("handler".into());
            async { Ok(Some(json!(1))) }
        });
        let attempt = stack.call(call(handler.clone())).await;
        assert!(matches!(attempt, Attempt::Done { retry_in: None, .. }));
        assert_eq!(
            seen(&log),
            [
                "before 1",
                "before 2",
                "attempt 1",
                "attempt 2",
                "handler 1",
                "handler 2",
                "handler"
            ]
        );
        // A rejected result is the attempt: only the layers before the filters see it.
        log.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let rejected = stack.reject(call(handler), "refused".into()).await;
        assert!(matches!(
            rejected,
            Attempt::Done {
                retry_in: Some(_),
                ..
            }
        ));
        assert_eq!(seen(&log), ["before 1", "before 2"]);
    }

    /// A layer around the handler that records the outcome it sees.
    fn outcomes(log: Log) -> impl Layer<HandlerService, Service = HandlerService> + Clone {
        tower::layer::layer_fn(move |inner: HandlerService| {
            let log = log.clone();
            BoxCloneService::new(tower::service_fn(move |call: HandlerCall| {
                let log = log.clone();
                let inner = inner.clone();
                async move {
                    let outcome = inner.oneshot(call).await?;
                    let seen = match &outcome.result {
                        Ok(_) => "ok".to_string(),
                        Err(HandlerError::Temporary { delay, .. }) => {
                            format!("temporary {delay:?}")
                        }
                        Err(HandlerError::Other { .. }) => "error".to_string(),
                        Err(_) => "permanent".to_string(),
                    };
                    log.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
                    Ok(outcome)
                }
            }))
        })
    }

    #[tokio::test]
    async fn the_assembled_order_filters_first_classifies_inside_and_records_outside() {
        let log: Log = Arc::default();
        let mut layers = StackLayers::default();
        layers.around_attempt(outcomes(log.clone()));
        layers.around_handler(outcomes(log.clone()));
        layers.success_events(true);
        let stack = layers.build(Some(&Metrics::new()));
        // Filters are above everything: a skipped handler reaches no layer below.
        let mut filtered = HandlerSpec::new("f", None, |_c: Cause| async { Ok(None) });
        filtered.labels = vec![(
            "x".into(),
            kopf_core::handler::MetaFilter::Value("y".into()),
        )];
        assert!(matches!(stack.call(call(filtered)).await, Attempt::Skipped));
        assert!(seen(&log).is_empty());
        // Around the handler, the handler's own error; around the attempt, the same error
        // classified by its errors mode; above, its event and progress record.
        let failing = HandlerSpec::new("e", None, |_c: Cause| async {
            Err(HandlerError::other("boom"))
        });
        let Attempt::Done {
            outcome,
            record,
            retry_in,
        } = stack.call(call(failing)).await
        else {
            panic!("not done")
        };
        assert_eq!(seen(&log), ["error", "temporary Some(60s)"]);
        assert_eq!(retry_in, Some(std::time::Duration::from_secs(60)));
        assert_eq!(record.retries, Some(1));
        assert_eq!(outcome.events.len(), 1, "the failure's warning");
        assert!(stack.posts_success_events());
    }
}
