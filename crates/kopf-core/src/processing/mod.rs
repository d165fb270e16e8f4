//! One processing cycle of one object: detect the cause, keep the finalizer right, run every
//! ready handler (and the sub-handlers they register), and fold all outcomes into one
//! [`PatchPlan`](crate::plan::PatchPlan). [`Processor::needs_cycle`] is the one place that
//! says whether a state needs a cycle at all.
//!
//! The parts, in the order a cycle runs them:
//! * [`Processor::check`]: the cause ([`detect`]), and whether anything is to do;
//! * `finalizer`: the step around the cycle that keeps the operator's finalizer right;
//! * `exec`: the cycle itself (the selected handlers, the purge of finished records, the
//!   new diff-base), with `supersede` (records another cause left, and Kopf's note on them);
//! * `level`: one level of handlers through the [`Stack`], and the recursion into
//!   sub-handlers; `select` picks a level's handlers (and the lifecycle's one per cycle);
//! * `intents`: the conditions the cycle writes; `touch`: the touch annotation cleared by
//!   any real change.
//!
//! Unlike Kopf's default (one handler per cycle, a PATCH per handler), all ready handlers run
//! in the same cycle; a cycle in which they all finish writes no progress records, only the
//! results, the new diff-base and (on deletion) the finalizer removal.
//!
//! ```
//! # async fn demo() {
//! use kopf_core::causes::{EventKind, Reason};
//! use kopf_core::handler::{Cause, HandlerSpec};
//! use kopf_core::memo::Memos;
//! use kopf_core::processing::{Persistence, Processor};
//! use serde_json::json;
//!
//! let create = HandlerSpec::new("create_fn", Some(Reason::Create), |_c: Cause| async {
//!     Ok(Some(json!({"message": "hello world"})))
//! });
//! let processor = Processor::new(vec![create], Persistence::default());
//! let body = json!({"metadata": {"name": "x", "resourceVersion": "1"}, "spec": {"a": 1}});
//! let outcome = processor.process(EventKind::Added, &body, false, &Memos::default()).await;
//! assert!(outcome.done);
//! assert_eq!(outcome.plan.preview(&body)["status"]["create_fn"]["message"], "hello world");
//! # }
//! ```

mod exec;
mod finalizer;
mod intents;
mod level;
mod select;
mod supersede;
#[cfg(test)]
mod tests;
mod touch;

use std::collections::HashMap;
use std::sync::Arc;

use kopf_diff::essence::EssenceSettings;
use serde_json::Value;

pub use crate::cycle::{
    CycleCall, CycleOutcome, FinalizerChange, HandlerOutcome, UnstoredDiffBase,
};

use crate::causes::{ChangingCause, EventKind, Reason, detect};
use crate::conditions::{ConditionsHandle, ConditionsSpec, ConditionsSync};
use crate::finalizers;
use crate::handler::context::Extensions;
use crate::handler::spec::HandlerSpec;
use crate::layers::Stack;
use crate::memo::Memos;
use crate::progress::ProgressStorage;
use crate::reconcile::ReconcileSpec;

/// Which of the ready handlers run in one cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lifecycle {
    /// All ready handlers (kopf-rs's default: one PATCH per endpoint per cycle).
    #[default]
    AllAtOnce,
    /// One handler per cycle, the one with the fewest retries (Kopf's default `asap`).
    Asap,
    /// One handler per cycle, in registration order.
    OneByOne,
}

/// Where the engine keeps its state on objects, and how a cycle picks its handlers.
#[derive(Debug, Clone)]
pub struct Persistence {
    /// The essence rules and where the diff-base is stored (`essence.location`).
    pub essence: EssenceSettings,
    /// Progress records.
    pub progress: ProgressStorage,
    /// The finalizer name.
    pub finalizer: String,
    /// Which ready handlers run per cycle.
    pub lifecycle: Lifecycle,
}

impl Default for Persistence {
    fn default() -> Self {
        Persistence {
            essence: EssenceSettings::default(),
            progress: ProgressStorage::default(),
            finalizer: finalizers::DEFAULT_FINALIZER.into(),
            lifecycle: Lifecycle::default(),
        }
    }
}

impl Persistence {
    /// The same settings with the handlers' fields tracked in the essence.
    pub fn tracking(&self, handlers: &[HandlerSpec]) -> Persistence {
        let mut p = self.clone();
        for h in handlers {
            if let Some(f) = &h.field
                && !p.essence.tracked_fields.contains(f)
            {
                p.essence.tracked_fields.push(f.clone());
            }
        }
        p
    }
}

/// Runs the changing handlers of a resource on objects, one cycle at a time.
#[derive(Clone)]
pub struct Processor {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    handlers: Vec<HandlerSpec>,
    persistence: Persistence,
    /// The per-handler stack, assembled once for the operator.
    stack: Stack,
    extensions: Extensions,
    /// The resource's conditions declarations, merged once (see
    /// [`Processor::conditions_spec`]).
    conditions: Option<ConditionsSpec>,
    /// The resource has a reconcile (its write carries the declared defaults).
    reconciled: bool,
}

impl std::fmt::Debug for Processor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processor")
            .field("handlers", &self.inner.handlers)
            .field("stack", &self.inner.stack)
            .finish()
    }
}

/// The cause of one observed state, detected once by [`Processor::check`], for the cycle
/// that processes the same state ([`Processor::process_checked`]).
#[derive(Debug, Clone)]
pub struct Detected {
    event: EventKind,
    initial: bool,
    cause: ChangingCause,
}

impl Detected {
    /// Whether it was detected for this event and `initial` (a cycle of the same body with
    /// another `initial`, e.g. after a pause forgot which objects were handled, detects
    /// again).
    pub fn is_for(&self, event: EventKind, initial: bool) -> bool {
        self.event == event && self.initial == initial
    }

    /// The detected reason.
    pub fn reason(&self) -> Reason {
        self.cause.reason
    }
}

/// Whether an observed state needs a cycle ([`Processor::check`]).
#[derive(Debug, Clone)]
pub enum Check {
    /// The cycle on it would do nothing: the essence is the stored diff-base, the finalizer
    /// is as the handlers need it, no condition is declared, no resume handler is due.
    Settled,
    /// It needs a cycle; the cause, when it was detected to decide.
    Cycle(Option<Detected>),
}

impl Processor {
    /// A processor for these handlers (their fields join the tracked essence), with the
    /// framework's layers alone ([`Stack::framework`]).
    pub fn new(handlers: Vec<HandlerSpec>, persistence: Persistence) -> Self {
        Self::with_stack(handlers, persistence, Stack::default())
    }

    /// Like [`new`](Self::new) with an assembled per-handler stack (the facade's, with its
    /// user layers and success events).
    pub fn with_stack(handlers: Vec<HandlerSpec>, persistence: Persistence, stack: Stack) -> Self {
        crate::conditions::warn_conditions_fields(&handlers);
        let persistence = persistence.tracking(&handlers);
        let conditions = intents::merged_conditions(&handlers);
        let reconciled = handlers
            .iter()
            .any(|h| h.declared::<ReconcileSpec>().is_some());
        Processor {
            inner: Arc::new(Inner {
                handlers,
                persistence,
                stack,
                extensions: Extensions::default(),
                conditions,
                reconciled,
            }),
        }
    }

    /// Operator-wide values for the handlers' extractors (the API client, the indexes).
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        Arc::make_mut(&mut self.inner).extensions = extensions;
        self
    }

    /// The persistence settings in use (with the handlers' fields tracked).
    pub fn persistence(&self) -> &Persistence {
        &self.inner.persistence
    }

    /// The resource's conditions declarations, as one (declared types in order; an auto
    /// condition on when any declaration asks for it; the first summary type).
    pub fn conditions_spec(&self) -> Option<&ConditionsSpec> {
        self.inner.conditions.as_ref()
    }

    /// Whether some handler that matches the object needs the finalizer.
    pub fn requires_finalizer(&self, body: &Value) -> bool {
        self.inner
            .handlers
            .iter()
            .any(|h| h.requires_finalizer && h.matches(body))
    }

    /// Whether a state of an object needs a cycle (see [`check`](Self::check)).
    pub fn needs_cycle(&self, event: EventKind, body: &Value, initial: bool) -> bool {
        matches!(self.check(event, body, initial), Check::Cycle(_))
    }

    /// Whether a state of an object needs a cycle: a deletion, a first sight in a listing
    /// (`initial`: resume handlers are due) and a resource with declared conditions always
    /// do; otherwise the state needs one when its cause is not a no-op or the finalizer is
    /// not as its handlers need it. Own writes coming back are settled states. The cause
    /// detected to decide comes with the answer, for the cycle on the same state.
    pub fn check(&self, event: EventKind, body: &Value, initial: bool) -> Check {
        if event == EventKind::Deleted || initial || self.conditions_spec().is_some() {
            return Check::Cycle(None);
        }
        let detected = self.detect(event, body, initial);
        let finalizer = &self.inner.persistence.finalizer;
        let settled = detected.cause.reason == Reason::Noop
            && finalizer::change(self.requires_finalizer(body), body, finalizer, false).is_none();
        if settled {
            Check::Settled
        } else {
            Check::Cycle(Some(detected))
        }
    }

    /// The cause of a state ([`detect`] with this resource's settings).
    fn detect(&self, event: EventKind, body: &Value, initial: bool) -> Detected {
        let persistence = &self.inner.persistence;
        let cause = detect(
            event,
            body,
            &persistence.essence,
            &persistence.finalizer,
            initial,
        );
        Detected {
            event,
            initial,
            cause,
        }
    }

    /// Runs one cycle for one object: `initial` is true for objects first seen in a listing
    /// and not yet fully handled by this process (resume handlers join then).
    pub async fn process(
        &self,
        event: EventKind,
        body: &Value,
        initial: bool,
        memo: &Memos,
    ) -> CycleOutcome {
        self.process_with(event, body, initial, memo, Arc::default())
            .await
    }

    /// Like [`process`](Self::process), with the handlers whose results the API server
    /// rejected in the previous cycle (id → the server's message): their attempt counts as
    /// failed with that message (retried, failed or ignored by their errors mode), and they
    /// are not called again in this cycle.
    pub async fn process_with(
        &self,
        event: EventKind,
        body: &Value,
        initial: bool,
        memo: &Memos,
        rejected: Arc<HashMap<String, String>>,
    ) -> CycleOutcome {
        self.process_synced(event, body, initial, memo, rejected, None)
            .await
    }

    /// Like [`process_with`](Self::process_with), with the writer through which handlers
    /// publish their conditions mid-handler (`Conditions::sync`); without one, such a sync
    /// is an error.
    pub async fn process_synced(
        &self,
        event: EventKind,
        body: &Value,
        initial: bool,
        memo: &Memos,
        rejected: Arc<HashMap<String, String>>,
        sync: Option<Arc<dyn ConditionsSync>>,
    ) -> CycleOutcome {
        let detected = self.detect(event, body, initial);
        self.process_checked(detected, body, memo, rejected, sync)
            .await
    }

    /// Like [`process_synced`](Self::process_synced), with the cause [`check`](Self::check)
    /// detected on the same body (for the same event and `initial`: see
    /// [`Detected::is_for`]), so that it is not detected again.
    pub async fn process_checked(
        &self,
        detected: Detected,
        body: &Value,
        memo: &Memos,
        rejected: Arc<HashMap<String, String>>,
        sync: Option<Arc<dyn ConditionsSync>>,
    ) -> CycleOutcome {
        let cause = detected.cause;
        if matches!(cause.reason, Reason::Gone | Reason::Free) {
            let mut out = CycleOutcome::new(cause.reason);
            out.done = true;
            return out;
        }
        let corrupt = cause.corrupt_diffbase.clone();
        let mut conditions = ConditionsHandle::new(body);
        if let Some(sync) = sync {
            conditions = conditions.with_sync(sync);
        }
        let call = CycleCall {
            body: body.clone(),
            cause,
            memo: memo.clone(),
            rejected,
            conditions: conditions.clone(),
        };
        let required = self.requires_finalizer(body);
        let finalizer = &self.inner.persistence.finalizer;
        let mut out = finalizer::around_cycle(call, finalizer, required, |call| {
            exec::run_cycle(&self.inner, call)
        })
        .await;
        out.corrupt_diffbase = corrupt;
        let intents = intents::of_cycle(
            self.conditions_spec(),
            self.inner.reconciled,
            &out,
            conditions.take_intents(),
        );
        if !intents.is_empty() {
            out.plan.conditions(intents);
            out.plan
                .condition_clock(conditions.generation(), crate::clock::now());
        }
        touch::clear_on_change(&mut out, body, &self.inner.persistence.progress);
        out
    }
}

/// Runs one cycle for one object with a one-off processor (see [`Processor::process`]).
pub async fn process(
    event: EventKind,
    body: &Value,
    initial: bool,
    handlers: &[HandlerSpec],
    persistence: &Persistence,
) -> CycleOutcome {
    Processor::new(handlers.to_vec(), persistence.clone())
        .process(event, body, initial, &Memos::default())
        .await
}
