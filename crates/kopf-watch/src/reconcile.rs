//! The reconcile step of an object's worker: one call of the resource's reconcile
//! ([`kopf_core::reconcile`]) on the object's latest state, its writes through the same
//! applier as a cause cycle's, its events, its log lines and metrics, and the next entry of
//! the object's schedule (requeue, backoff, or wait for a change).
//!
//! It runs in the object's worker, so never at the same time as a cause cycle of the same
//! object, and only after the latest state went through the cause handlers.

use std::sync::Arc;
use std::time::Duration;

use kopf_core::conditions::{Intent, auto_intents};
use kopf_core::events::EventSpec;
use kopf_core::handler::HandlerError;
use kopf_core::memo::Memos;
use kopf_core::plan::PatchPlan;
use kopf_core::processing::HandlerOutcome;
use kopf_core::reconcile::{
    Action, ReconcileContext, ReconcileSpec, Schedule, Trigger, next_after, run,
};
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::conditions::ApiConditionsSync;
use crate::cycle::Cycle;
use crate::object::object_span;
use crate::write::CycleEnd;

/// After a write of a reconcile met a concurrent change, it runs again after this long
/// unless a newer state comes first.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// One call of a reconcile and its writes.
struct Ran {
    /// What it returned (a failure of its writes counts as its failure).
    result: Result<Action, HandlerError>,
    /// The events it asked for.
    events: Vec<EventSpec>,
    /// How long the call took.
    took: Duration,
    /// How its writes ended.
    end: CycleEnd,
}

impl Cycle {
    /// Reconciles the object once (within the concurrency limits), writes what the
    /// reconcile asked for, and schedules the next reconcile. The returned end is its
    /// writes' (the worker waits for its own write to come back, as after a cycle).
    pub(crate) async fn reconcile_once(
        &self,
        spec: &ReconcileSpec,
        body: &Arc<Value>,
        trigger: Trigger,
        schedule: &mut Schedule,
        memo: &Memos,
    ) -> CycleEnd {
        // A span of its own inside the object's: every line of the reconcile says which
        // one and why.
        let span = tracing::info_span!(
            parent: &object_span(body),
            "reconcile",
            id = %spec.id,
            trigger = %trigger,
        );
        async move {
            let _resource_permit = match &spec.limit {
                Some(sem) => sem.clone().acquire_owned().await.ok(),
                None => None,
            };
            let mut place = self.lanes.acquire(crate::lanes::Lane::Changed).await;
            let failures = schedule.failures;
            tracing::debug!("Reconciling ({trigger}).");
            let call = Box::pin(self.reconcile_call(spec, body, trigger, failures, memo));
            let ran = self.lanes.hold(&mut place, call).await;
            drop(place);
            let (next, failures_after) = next_after(&ran.result, failures, &spec.config.backoff);
            schedule.failures = failures_after;
            let outcome = log_reconciled(&spec.id, &ran.result, next, failures_after);
            if let Some(m) = &self.metrics {
                m.handler_call(
                    &spec.id,
                    &self.writes.resource.api_resource.plural,
                    outcome,
                    failures > 0,
                    ran.took,
                );
            }
            schedule_next(schedule, &ran.result, next, &ran.end);
            let uid = body
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or("");
            self.poster.post(uid, body, ran.events).await;
            ran.end
        }
        .instrument(span)
        .await
    }

    /// Calls the reconcile and writes what it asked for (with the conditions' defaults and
    /// auto conditions); a reconcile whose writes failed has not converged: it is retried
    /// like a failed one.
    async fn reconcile_call(
        &self,
        spec: &ReconcileSpec,
        body: &Arc<Value>,
        trigger: Trigger,
        failures: u32,
        memo: &Memos,
    ) -> Ran {
        // `Conditions::sync()` writes through the object's API at once.
        let sync = Arc::new(ApiConditionsSync::new(
            self.writes.api_for(body),
            body,
            self.writes.resource.status_subresource,
        ));
        let ctx = ReconcileContext::new(Value::clone(body), trigger, failures)
            .with(memo.clone(), self.extensions.clone())
            .with_conditions_sync(sync.clone());
        let started = Instant::now();
        let mut out = run(spec, ctx).await;
        let took = started.elapsed();
        self.reconcile_conditions(spec, &out.result, &mut out.plan, body);
        // After a sync, the writes go against the object as it returned it.
        let synced = sync.synced_body();
        let written = synced.as_ref().unwrap_or(body);
        let end = if out.result.is_ok() || !out.plan.is_empty() {
            // What a failed reconcile wrote before failing is written too: its status
            // is an observation (e.g. a condition saying why it fails).
            self.writes.apply(written, &out.plan, &[], None).await
        } else {
            CycleEnd::Next {
                delay: None,
                rv: None,
            }
        };
        Ran {
            result: blame_writes(out.result, &end),
            events: out.events,
            took,
            end,
        }
    }

    /// The declared conditions' defaults (the first reconcile of an object writes them, at
    /// no request of their own) and the auto conditions of the outcome (the reconcile is
    /// one handler, with its id), added to the reconcile's plan.
    fn reconcile_conditions(
        &self,
        spec: &ReconcileSpec,
        result: &Result<Action, HandlerError>,
        plan: &mut PatchPlan,
        body: &Value,
    ) {
        let Some(declared) = self.processor.conditions_spec() else {
            return;
        };
        let mut intents: Vec<Intent> = declared.declared.clone();
        let outcome = match result {
            Ok(_) => HandlerOutcome::Succeeded,
            Err(
                HandlerError::Permanent { message, .. } | HandlerError::Admission { message, .. },
            ) => HandlerOutcome::Failed {
                message: message.clone(),
            },
            Err(e) => HandlerOutcome::Retrying {
                message: e.to_string(),
            },
        };
        intents.extend(auto_intents(
            &declared.auto,
            &[(spec.id.clone(), outcome)],
            result.is_ok(),
        ));
        // Its own intents last: what the reconcile set wins over the automatic ones.
        intents.extend(plan.condition_intents().iter().cloned());
        let mut fresh = PatchPlan::new();
        fresh.merge(plan.merge_patch());
        fresh.conditions(intents);
        fresh.condition_clock(
            body.pointer("/metadata/generation").and_then(Value::as_i64),
            kopf_core::clock::now(),
        );
        *plan = fresh;
    }
}

/// A reconcile whose writes failed or were refused failed.
fn blame_writes(
    result: Result<Action, HandlerError>,
    end: &CycleEnd,
) -> Result<Action, HandlerError> {
    match end {
        CycleEnd::Failed(message) => Err(HandlerError::other(message.clone())),
        CycleEnd::Rejected(refused) => {
            let message = refused.values().cloned().collect::<Vec<_>>().join("; ");
            Err(HandlerError::other(format!(
                "the API server refused what the reconcile wrote: {message}"
            )))
        }
        _ => result,
    }
}

/// Logs a reconcile's outcome; its name for the metrics.
fn log_reconciled(
    id: &str,
    result: &Result<Action, HandlerError>,
    next: Option<Duration>,
    failures_after: u32,
) -> &'static str {
    match result {
        Ok(_) => {
            match next {
                Some(d) => tracing::info!(
                    "Reconcile '{id}' succeeded; requeued in {}s.",
                    d.as_secs_f64()
                ),
                None => tracing::info!("Reconcile '{id}' succeeded."),
            }
            "success"
        }
        Err(HandlerError::Permanent { message, .. } | HandlerError::Admission { message, .. }) => {
            tracing::error!(
                "Reconcile '{id}' failed permanently: {message}. It runs again when the object or what it owns changes."
            );
            "failure"
        }
        Err(e) => {
            tracing::error!(
                "Reconcile '{id}' failed ({} in a row): {e}. Retrying in {}s.",
                failures_after,
                next.unwrap_or_default().as_secs_f64()
            );
            "retry"
        }
    }
}

/// The next entry of the schedule after a reconcile: its requeue or backoff (measured from
/// the end of the call), and a retry soon after a write that met a concurrent change.
fn schedule_next(
    schedule: &mut Schedule,
    result: &Result<Action, HandlerError>,
    next: Option<Duration>,
    end: &CycleEnd,
) {
    if let Some(d) = next {
        let why = if result.is_ok() {
            Trigger::Requeue
        } else {
            Trigger::Backoff
        };
        schedule.at(Instant::now() + d, why);
    }
    if let CycleEnd::Conflict(_) = end {
        schedule.at(Instant::now() + CONFLICT_RETRY, Trigger::ObjectChanged);
    }
}
