//! One cycle of an object, the step its worker runs on a state: the processor's outcome
//! ([`kopf_core::processing::Processor`]), its writes through the applier, its log lines and
//! Events; and the worker's other steps on the API: touching the object after a retry delay,
//! and reading it when its own write does not come back in time.

use std::collections::HashMap;
use std::sync::Arc;

use kopf_core::causes::{EventKind, Reason};
use kopf_core::conditions::ConditionsSync;
use kopf_core::events::failure_message;
use kopf_core::handler::Extensions;
use kopf_core::memo::Memos;
use kopf_core::metrics::Metrics;
use kopf_core::plan::PatchPlan;
use kopf_core::processing::{CycleOutcome, FinalizerChange, HandlerOutcome, Processor};
use kopf_core::text::for_log;
use serde_json::Value;

use crate::books::Books;
use crate::conditions::ApiConditionsSync;
use crate::events::Poster;
use crate::lanes::Lanes;
use crate::object::{Observed, cycle_span, object_span};
use crate::raw::RawObject;
use crate::write::{CycleEnd, Writes};

/// What a cycle of one resource's objects needs: the processor, the writes and the Events,
/// the bookkeeping of handled objects, and the places for cycles.
pub(crate) struct Cycle {
    pub(crate) processor: Processor,
    pub(crate) writes: Arc<Writes>,
    pub(crate) poster: Arc<Poster>,
    pub(crate) books: Arc<Books>,
    /// Places for cycles: changed objects first, listed ones bounded (see `lanes`).
    pub(crate) lanes: Arc<Lanes>,
    /// What the reconcile's context carries.
    pub(crate) extensions: Extensions,
    pub(crate) metrics: Option<Metrics>,
    /// How the objects read are kept (managedFields, trimming: as the watch's).
    pub(crate) arrival: crate::keeping::Arrival,
    /// Diff-bases too large to be stored, kept in memory.
    pub(crate) oversized: crate::oversized::Oversized,
}

impl Cycle {
    /// The object as the API server has it now (one GET), for a worker whose own write has
    /// not come back through the watch within the consistency timeout.
    pub(crate) async fn read_fresh(&self, body: &Value) -> Fresh {
        let Some(name) = body.pointer("/metadata/name").and_then(Value::as_str) else {
            return Fresh::Unknown;
        };
        match self.writes.api_for::<RawObject>(body).get_opt(name).await {
            Ok(Some(obj)) => {
                let body = self.arrival.body(obj);
                let uid = body
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let body = match self.oversized.restore(uid, &body) {
                    Some(restored) => Arc::new(restored),
                    None => body,
                };
                Fresh::Read(Observed::new(body, EventKind::Modified))
            }
            // Gone: its deletion comes through the watch.
            Ok(None) => Fresh::Gone,
            Err(e) => {
                object_span(body).in_scope(|| {
                    tracing::debug!(
                        "Reading the object after a slow watch failed ({}); processing the state at hand.",
                        for_log(&e)
                    )
                });
                Fresh::Unknown
            }
        }
    }

    /// A change's handlers all succeeded and that is stored: its convergence, from `since`
    /// (when the operator first saw the change), goes to the metrics.
    fn converged(&self, reason: Reason, since: tokio::time::Instant) {
        let (Some(metrics), Reason::Create | Reason::Update | Reason::Delete | Reason::Resume) =
            (&self.metrics, reason)
        else {
            return;
        };
        metrics.converged(
            &self.writes.resource.api_resource.plural,
            reason.purpose(),
            since.elapsed(),
        );
    }

    /// Touches the object so that its next state comes through the watch (Kopf's way of
    /// waking up after a delay), through the same plan as any cycle's writes.
    pub(crate) async fn touch(&self, body: &Value) -> CycleEnd {
        let mut plan = PatchPlan::new();
        plan.merge(
            &self
                .processor
                .persistence()
                .progress
                .touch_patch(kopf_core::clock::now()),
        );
        self.writes.apply(body, &plan, &[], None).await
    }

    /// One cycle, in the object's log span: the processor's outcome, its writes, then its
    /// log lines and events.
    pub(crate) async fn run(
        &self,
        uid: &str,
        observed: &Observed,
        initial: bool,
        memo: &Memos,
        rejected: Arc<HashMap<String, String>>,
        since: tokio::time::Instant,
    ) -> CycleEnd {
        use tracing::Instrument;
        let span = cycle_span(&observed.body, &self.writes.resource.api_resource.plural);
        let cycle = span.clone();
        async move {
            let body = &observed.body;
            // Handlers' `Conditions::sync()` writes through the object's API at once.
            let sync = Arc::new(ApiConditionsSync::new(
                self.writes.api_for(body),
                body,
                self.writes.resource.status_subresource,
            ));
            let sync_to: Arc<dyn ConditionsSync> = sync.clone();
            // The cause the engine detected on this very state, if it did (and for the same
            // `initial`): not detected again.
            let outcome = match observed
                .detected
                .as_deref()
                .filter(|d| d.is_for(observed.event, initial))
            {
                Some(detected) => {
                    self.processor
                        .process_checked(detected.clone(), body, memo, rejected, Some(sync_to))
                        .await
                }
                None => {
                    self.processor
                        .process_synced(
                            observed.event,
                            body,
                            initial,
                            memo,
                            rejected,
                            Some(sync_to),
                        )
                        .await
                }
            };
            // After a handler's sync, the writes go against the object as it returned it.
            let synced = sync.synced_body();
            let written = synced.as_ref().unwrap_or(body);
            log_cause(&outcome, body);
            if outcome.reason == Reason::Gone {
                self.books.forget(uid);
                self.poster.forget(uid);
                self.oversized.forget(uid);
                record_cycle(&cycle, outcome.reason, outcome.done, &CycleEnd::Gone);
                return CycleEnd::Gone;
            }
            let end = self
                .writes
                .apply(written, &outcome.plan, &outcome.delivered, outcome.delay)
                .await;
            record_cycle(&cycle, outcome.reason, outcome.done, &end);
            self.report(uid, body, outcome, &end, since).await;
            end
        }
        .instrument(span)
        .await
    }

    /// What a cycle tells once its writes are done: outcomes are reported once the writes
    /// went through (a result the API server refused is not a success, and a cause whose
    /// writes failed is not processed), then its convergence, a diff-base too large to be
    /// stored, and its Events.
    async fn report(
        &self,
        uid: &str,
        body: &Value,
        outcome: CycleOutcome,
        end: &CycleEnd,
        since: tokio::time::Instant,
    ) {
        let stored = matches!(end, CycleEnd::Next { .. });
        log_handlers(&outcome, end);
        if outcome.done && stored {
            self.books.handled(uid);
            self.converged(outcome.reason, since);
        }
        let mut events = outcome.events;
        if stored
            && let Some(unstored) = &outcome.unstored_diff_base
            && let Some(report) = self.oversized.keep(uid, unstored)
        {
            tracing::error!("{}", report.message);
            events.push(report);
        }
        self.poster.post(uid, body, events).await;
    }
}

/// What a read of the object after a slow watch found.
pub(crate) enum Fresh {
    /// The object as it is now.
    Read(Observed),
    /// It is gone.
    Gone,
    /// The read failed: the state at hand is processed (Kopf's consistency timeout).
    Unknown,
}

/// Kopf's log lines for the cause of a cycle, what it found on the object, and its
/// finalizer change (before its writes).
fn log_cause(outcome: &CycleOutcome, body: &Value) {
    match outcome.reason {
        Reason::Gone => tracing::debug!("Deleted, really deleted, and we are notified."),
        Reason::Free => tracing::debug!("Deletion, but we are done with it, and we do not care."),
        Reason::Noop => tracing::debug!(
            "Something has changed, but we are not interested (the essence is the same)."
        ),
        reason => tracing::debug!("{} is in progress: {}", reason.title(), for_log(body)),
    }
    if let Some(why) = &outcome.corrupt_diffbase {
        tracing::warn!("{why}; the object is handled as newly created.");
    }
    for why in &outcome.corrupt_records {
        tracing::warn!("{why}");
    }
    if let Some(superseded) = &outcome.superseded {
        tracing::info!("{superseded}");
    }
    match outcome.finalizer {
        Some(FinalizerChange::Added) => {
            tracing::debug!("Adding the finalizer, thus preventing the actual deletion.")
        }
        Some(FinalizerChange::Removed) if outcome.reason == Reason::Delete => {
            tracing::debug!("Removing the finalizer, thus allowing the actual deletion.")
        }
        Some(FinalizerChange::Removed) => {
            tracing::debug!("Removing the finalizer, as there are no handlers requiring it.")
        }
        None => {}
    }
}

/// Kopf's log lines for the handlers of a cycle, once its writes are done: handlers whose
/// results the API server refused are reported by the writer (and fail in the next cycle),
/// and a cause is processed only when its writes went through.
fn log_handlers(outcome: &CycleOutcome, end: &CycleEnd) {
    let refused = match end {
        CycleEnd::Rejected(refused) => Some(refused),
        _ => None,
    };
    for (id, result) in &outcome.ran {
        if refused.is_some_and(|r| r.contains_key(id)) {
            continue;
        }
        match result {
            HandlerOutcome::Succeeded => tracing::info!("Handler '{id}' succeeded."),
            HandlerOutcome::Waiting => {
                tracing::debug!("Handler '{id}' has unfinished sub-handlers. Will retry soon.")
            }
            HandlerOutcome::Retrying { message } => {
                tracing::error!("{}", failure_message(id, message, true))
            }
            HandlerOutcome::Failed { message } => {
                tracing::error!("{}", failure_message(id, message, false))
            }
        }
    }
    if outcome.done && !outcome.ran.is_empty() && matches!(end, CycleEnd::Next { .. }) {
        let (succeeded, failed) = outcome.counts;
        tracing::info!(
            "{} is processed: {succeeded} succeeded; {failed} failed.",
            outcome.reason.title()
        );
    }
}

/// Records how a cycle ended on its [`cycle_span`]: the cause (`create`, `update`,
/// `delete`, `resume`, `noop`...), and the `outcome`: `done` (every handler of the cause
/// finished), `pending` (handlers left, `delay` seconds until the next cycle), `gone`,
/// `conflict`, `rejected` (the API server refused handlers' results) or `failed` (its
/// writes failed: the span's status is an error).
pub(crate) fn record_cycle(span: &tracing::Span, reason: Reason, done: bool, end: &CycleEnd) {
    if span.is_disabled() {
        return;
    }
    span.record("reason", reason.purpose());
    let outcome = match end {
        CycleEnd::Next { delay, .. } => match (done, delay) {
            (false, Some(delay)) => {
                span.record("delay", delay.as_secs_f64());
                "pending"
            }
            (false, None) => "pending",
            (true, _) => "done",
        },
        CycleEnd::Gone => "gone",
        CycleEnd::Conflict(_) => "conflict",
        CycleEnd::Rejected(_) => "rejected",
        CycleEnd::Failed(error) => {
            span.record("otel.status_code", "error");
            span.record("otel.status_description", error.as_str());
            "failed"
        }
    };
    span.record("outcome", outcome);
}
