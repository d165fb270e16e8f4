//! The handlers that see every event, in order, outside the changing cycle: index handlers
//! (their entries replaced or removed) and raw event handlers (no state; their results and
//! patches written like any handler's).

use std::sync::Arc;

use kopf_core::causes::{EventKind, Reason};
use kopf_core::handler::{Cause, ErrorsMode, Extensions, HandlerError, HandlerSpec};
use kopf_core::index::Indexes;
use kopf_core::layers::{HandlerCall, Invoke};
use kopf_core::plan::PatchPlan;
use serde_json::Value;
use tower::ServiceExt;

use crate::events::Poster;
use crate::object::object_span;
use crate::write::{CycleEnd, Writes};

/// The handlers of one resource that see every event, and where their outcomes go.
pub(crate) struct Observers {
    /// The index handlers.
    pub(crate) indexers: Vec<HandlerSpec>,
    /// The raw event handlers.
    pub(crate) watchers: Vec<HandlerSpec>,
    pub(crate) extensions: Extensions,
    /// The operator's indexes, which the index handlers fill.
    pub(crate) indexes: Indexes,
    pub(crate) writes: Arc<Writes>,
    pub(crate) poster: Arc<Poster>,
}

impl Observers {
    /// Runs the index handlers on an event: their pairs replace the object's entries; a
    /// deletion, a filter mismatch or a failure removes them (an error in `Ignored` mode,
    /// the default for indexes, keeps the previous entries).
    pub(crate) async fn index(&self, uid: &str, body: &Value, kind: EventKind) {
        use tracing::Instrument;
        if self.indexers.is_empty() {
            return;
        }
        let indexes = &self.indexes;
        for h in &self.indexers {
            if kind == EventKind::Deleted || !h.matches(body) {
                indexes.remove(&h.id, uid);
                continue;
            }
            let span = object_span(body);
            let outcome = self
                .invoke(h, self.plain_cause(body))
                .instrument(span.clone())
                .await;
            match outcome.result {
                Ok(Some(result)) => indexes.replace(&h.id, uid, &result),
                Ok(None) => {}
                Err(e) => {
                    let keep =
                        matches!(e, HandlerError::Other { .. }) && h.errors == ErrorsMode::Ignored;
                    span.in_scope(|| {
                        tracing::error!(
                            "Indexing handler '{}' failed: {e}; {}",
                            h.id,
                            if keep {
                                "the previous entries are kept"
                            } else {
                                "the object's entries are removed"
                            }
                        )
                    });
                    if !keep {
                        indexes.remove(&h.id, uid);
                    }
                }
            }
        }
    }

    /// Runs the raw event handlers on an event: no state, errors logged and ignored; their
    /// results and patches are applied like any handler's.
    pub(crate) async fn on_event(&self, uid: &str, body: &Value, kind: EventKind, known: bool) {
        use tracing::Instrument;
        if self.watchers.is_empty() {
            return;
        }
        let event = match kind {
            EventKind::Listed => None,
            EventKind::Deleted => Some("DELETED"),
            _ if known => Some("MODIFIED"),
            _ => Some("ADDED"),
        };
        let span = object_span(body);
        let mut plan = PatchPlan::new();
        let mut events = Vec::new();
        let mut delivered = Vec::new();
        for h in &self.watchers {
            if !h.matches(body) {
                continue;
            }
            let mut cause = self.plain_cause(body);
            cause.event = event.map(str::to_string);
            let outcome = self.invoke(h, cause).instrument(span.clone()).await;
            match outcome.result {
                Ok(Some(result)) => {
                    delivered.push((
                        h.id.clone(),
                        serde_json::json!({"status": {&h.id: &result}}),
                    ));
                    plan.status_result(&h.id, result);
                }
                Ok(None) => {}
                Err(e) => span.in_scope(|| {
                    tracing::error!(
                        "Handler '{}' failed with an exception and will ignore it: {e}",
                        h.id
                    )
                }),
            }
            plan.merge(&outcome.patch);
            events.extend(outcome.events);
        }
        if kind != EventKind::Deleted && !plan.is_noop_for(body) {
            let end = self
                .writes
                .apply(body, &plan, &delivered, None)
                .instrument(span.clone())
                .await;
            if let CycleEnd::Failed(error) | CycleEnd::Conflict(error) = end {
                span.in_scope(|| {
                    tracing::error!("Writing the outcome of raw event handlers failed: {error}")
                });
            }
        }
        self.poster.post(uid, body, events).await;
    }

    /// A cause for handlers outside the changing cycle (indexes, raw events).
    fn plain_cause(&self, body: &Value) -> Cause {
        let mut cause = Cause::for_body(Reason::Noop, body.clone());
        cause.extensions = self.extensions.clone();
        cause
    }

    /// One call of a handler, without retries (a panic is an error of the handler).
    async fn invoke(&self, spec: &HandlerSpec, cause: Cause) -> kopf_core::layers::CallOutcome {
        let call = HandlerCall {
            spec: spec.clone(),
            cause,
            record: Default::default(),
            now: kopf_core::clock::now(),
        };
        match Invoke.oneshot(call).await {
            Ok(outcome) => outcome,
            Err(never) => match never {},
        }
    }
}
