//! One processing cycle of one object: detect the cause, keep the finalizer right, run every
//! ready handler (and the sub-handlers they register), and fold all outcomes into one
//! [`PatchPlan`](crate::plan::PatchPlan).
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

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use jiff::Timestamp;
use kopf_diff::essence::{self, EssenceSettings};
use kopf_diff::{Diff, diff, reduce, resolve};
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceExt};

pub use crate::cycle::{CycleCall, CycleOutcome, FinalizerChange, HandlerOutcome};

use crate::causes::{ChangingCause, EventKind, Reason, detect};
use crate::conditions::{ConditionsHandle, ConditionsSpec, ConditionsSync, Intent, auto_intents};
use crate::events::EventSpec;
use crate::finalizers;
use crate::handler::context::Extensions;
use crate::handler::spec::{BoxFuture, Cause, HandlerKind, HandlerSpec};
use crate::layers::{Attempt, FinalizerLayer, HandlerCall, Stack, retrying};
use crate::memo::Memos;
use crate::progress::{ProgressRecord, ProgressStorage, format_time, parse_time};
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

impl Processor {
    /// A processor for these handlers (their fields join the tracked essence).
    pub fn new(handlers: Vec<HandlerSpec>, persistence: Persistence) -> Self {
        Self::with_stack(handlers, persistence, Stack::default())
    }

    /// Like [`new`](Self::new) with a per-handler stack (user layers, success events).
    pub fn with_stack(handlers: Vec<HandlerSpec>, persistence: Persistence, stack: Stack) -> Self {
        crate::conditions::warn_conditions_fields(&handlers);
        let persistence = persistence.tracking(&handlers);
        let conditions = merged_conditions(&handlers);
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

    /// Whether some handler that matches the object needs the finalizer.
    pub fn requires_finalizer(&self, body: &Value) -> bool {
        self.inner
            .handlers
            .iter()
            .any(|h| h.requires_finalizer && h.matches(body))
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
        let persistence = &self.inner.persistence;
        let cause = detect(
            event,
            body,
            &persistence.essence,
            &persistence.finalizer,
            initial,
        );
        if matches!(cause.reason, Reason::Gone | Reason::Free) {
            let mut out = CycleOutcome::new(cause.reason);
            out.done = true;
            return out;
        }
        let corrupt = cause.corrupt_diffbase.clone();
        let this = self.clone();
        let requires = Arc::new(move |b: &Value| this.requires_finalizer(b));
        let svc = FinalizerLayer::new(persistence.finalizer.clone(), requires)
            .layer(HandlersCycle(self.inner.clone()));
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
        let mut out = match svc.oneshot(call).await {
            Ok(out) => out,
            Err(never) => match never {},
        };
        out.corrupt_diffbase = corrupt;
        let intents = self.condition_intents(&out, conditions.take_intents());
        if !intents.is_empty() {
            out.plan.conditions(intents);
            out.plan
                .condition_clock(conditions.generation(), crate::clock::now());
        }
        // A real change also clears the touch.
        if !out.plan.is_noop_for(body)
            && let Some(clear) = persistence.progress.touch_clear(body)
        {
            out.plan.merge(&clear);
        }
        out
    }
}

impl Processor {
    /// The resource's conditions declarations, as one (declared types in order; an auto
    /// condition on when any declaration asks for it; the first summary type).
    pub fn conditions_spec(&self) -> Option<&ConditionsSpec> {
        self.inner.conditions.as_ref()
    }

    /// The condition intents of a cycle: the declared defaults (except in a deletion's
    /// cycles and in a cycle that only adds the finalizer: the next one writes status
    /// anyway), what the handlers set, and the auto conditions of their outcomes (not while
    /// the object is deleted).
    fn condition_intents(&self, out: &CycleOutcome, handlers: Vec<Intent>) -> Vec<Intent> {
        let mut intents = Vec::new();
        let deleting = out.reason == Reason::Delete;
        let spec = self.conditions_spec();
        // With a reconcile, a cycle that writes nothing else leaves the defaults to the
        // reconcile's write, which follows (no request of their own).
        let reconciled = self.inner.reconciled;
        if let Some(spec) = spec
            && !deleting
            && out.finalizer != Some(FinalizerChange::Added)
            && !(reconciled && handlers.is_empty() && out.plan.is_empty())
        {
            intents.extend(spec.declared.iter().cloned());
        }
        intents.extend(handlers);
        if let Some(spec) = &spec
            && !deleting
            && !out.ran.is_empty()
        {
            let mut ran = out.ran.clone();
            let failed_now = ran
                .iter()
                .any(|(_, o)| matches!(o, HandlerOutcome::Failed { .. }));
            if out.counts.1 > 0 && !failed_now {
                // A handler of the cause failed for good in an earlier cycle: the summary
                // and kstatus still say so (its own condition was set then).
                ran.push((
                    String::new(),
                    HandlerOutcome::Failed {
                        message: "a handler of this cause failed for good in an earlier attempt"
                            .into(),
                    },
                ));
            }
            intents.extend(auto_intents(&spec.auto, &ran, out.done));
        }
        intents
    }
}

/// The conditions declarations among `handlers`, merged into one.
fn merged_conditions(handlers: &[HandlerSpec]) -> Option<ConditionsSpec> {
    let mut specs = handlers
        .iter()
        .filter_map(|h| h.declared::<ConditionsSpec>());
    let mut all = specs.next()?.clone();
    for spec in specs {
        all.declared.extend(spec.declared.iter().cloned());
        all.auto.per_handler |= spec.auto.per_handler;
        all.auto.kstatus |= spec.auto.kstatus;
        if all.auto.summary.is_none() {
            all.auto.summary = spec.auto.summary.clone();
        }
    }
    Some(all)
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

/// The innermost cycle service: selects and runs the handlers, and folds their outcomes.
#[derive(Clone)]
struct HandlersCycle(Arc<Inner>);

impl Service<CycleCall> for HandlersCycle {
    type Response = CycleOutcome;
    type Error = Infallible;
    type Future = BoxFuture<Result<CycleOutcome, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: CycleCall) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { Ok(run_cycle(&inner, call).await) })
    }
}

/// The values a handler's cause is made of: the whole essence's, or a field's.
#[derive(Debug, Clone)]
struct Base {
    diff: Diff,
    old: Option<Value>,
    new: Option<Value>,
}

impl Base {
    fn of(cause: &ChangingCause) -> Self {
        Base {
            diff: diff(cause.old.as_ref(), Some(&cause.new)),
            old: cause.old.clone(),
            new: Some(cause.new.clone()),
        }
    }

    fn for_handler(&self, h: &HandlerSpec) -> Base {
        match &h.field {
            Some(field) => Base {
                diff: reduce(&self.diff, field),
                old: resolve(self.old.as_ref(), field).cloned(),
                new: resolve(self.new.as_ref(), field).cloned(),
            },
            None => self.clone(),
        }
    }
}

/// Whether a top-level handler is for this cause (Kopf's reason and `initial` rules).
fn for_reason(h: &HandlerSpec, cause: &ChangingCause) -> bool {
    if !matches!(h.kind, HandlerKind::Changing) {
        return false;
    }
    if h.initial && !cause.initial {
        return false;
    }
    if h.initial && h.reason.is_none() && cause.reason == Reason::Delete && !h.deleted {
        return false;
    }
    h.reason.is_none_or(|r| r == cause.reason)
}

/// The handlers of a level in Kopf's matching order (reason, labels, annotations, field
/// value, field change, `when`), each id once.
fn select(
    handlers: impl IntoIterator<Item = HandlerSpec>,
    body: &Value,
    base: &Base,
    reason_ok: impl Fn(&HandlerSpec) -> bool,
) -> Vec<HandlerSpec> {
    let mut seen = HashSet::new();
    handlers
        .into_iter()
        .filter(|h| {
            reason_ok(h) && h.matches(body) && h.matches_field(base.old.as_ref(), base.new.as_ref())
        })
        .filter(|h| seen.insert(h.id.clone()))
        .collect()
}

/// What a level of handlers (top-level, or one parent's sub-handlers) came to.
struct Level {
    done: bool,
    succeeded: usize,
    failed: usize,
    delays: Vec<Duration>,
    /// Every handler id of the level, with all their descendants (for purging).
    ids: Vec<String>,
}

impl Level {
    fn delay(&self) -> Duration {
        self.delays.iter().min().copied().unwrap_or(Duration::ZERO)
    }
}

/// The state of one cycle while its handlers run.
struct Exec<'a> {
    inner: &'a Inner,
    body: &'a Value,
    reason: Reason,
    now: Timestamp,
    memo: Memos,
    out: CycleOutcome,
    /// Records of handlers that ran, and first records of those that did not run yet:
    /// written only if the cause stays unfinished.
    records: Vec<(String, ProgressRecord)>,
    /// Handlers whose results the API server rejected (see [`CycleCall::rejected`]).
    rejected: Arc<HashMap<String, String>>,
    /// The cycle's conditions, shared by its handlers.
    conditions: ConditionsHandle,
}

async fn run_cycle(inner: &Inner, call: CycleCall) -> CycleOutcome {
    let cause = call.cause;
    let body = &call.body;
    let persistence = &inner.persistence;
    if cause.reason == Reason::Noop {
        let mut out = CycleOutcome::new(cause.reason);
        out.done = true;
        return out;
    }
    if !inner
        .handlers
        .iter()
        .any(|h| matches!(h.kind, HandlerKind::Changing) && h.matches(body))
    {
        // Only timers, daemons, indexes or raw events: no diff-base to keep. Or Kopf's
        // prematch: the resource has changing handlers, but their filters (labels,
        // annotations, owners, `when`) leave this object out: be blind to it, store nothing.
        let mut out = CycleOutcome::new(cause.reason);
        out.done = true;
        return out;
    }
    let base = Base::of(&cause);
    let top = select(inner.handlers.iter().cloned(), body, &base, |h| {
        for_reason(h, &cause)
    });
    let mut exec = Exec {
        inner,
        body,
        reason: cause.reason,
        now: crate::clock::now(),
        memo: call.memo,
        out: CycleOutcome::new(cause.reason),
        records: Vec::new(),
        rejected: call.rejected,
        conditions: call.conditions,
    };
    exec.supersede();
    let level = exec.run_level(top, &base).await;
    let mut out = exec.out;
    out.counts = (level.succeeded, level.failed);
    if level.done {
        // Every record of the resource's handlers goes (Kopf purges them all, not only this
        // cycle's), with their sub-handlers'.
        let mut ids = level.ids;
        for h in &inner.handlers {
            ids.push(h.id.clone());
            if let Some(Ok(record)) = persistence.progress.fetch(&h.id, body) {
                ids.extend(record.subrefs.unwrap_or_default());
            }
        }
        ids.sort();
        ids.dedup();
        for id in &ids {
            persistence
                .progress
                .purge(id, body, out.plan.merge_patch_mut());
        }
        if cause.reason != Reason::Delete {
            let stored = essence::stored(body, &persistence.essence).and_then(Result::ok);
            if stored.as_ref() != Some(&cause.new) {
                out.plan
                    .diff_base(&essence::store_patch(&cause.new, &persistence.essence));
            }
        }
        out.done = true;
    } else {
        for (id, record) in &exec.records {
            persistence
                .progress
                .store(id, record, body, out.plan.merge_patch_mut());
        }
        out.delay = Some(level.delay());
    }
    out
}

impl Exec<'_> {
    /// What a handler receives: the object as observed (its own and other handlers' patches
    /// are applied after the cycle, as in Kopf).
    fn cause(&self, base: &Base, record: &ProgressRecord) -> Cause {
        let mut cause = Cause::for_body(self.reason, self.body.clone());
        cause.diff = base.diff.clone();
        cause.old = base.old.clone();
        cause.new = base.new.clone();
        cause.retry = record.retries.unwrap_or(0);
        cause.started = record
            .started
            .clone()
            .unwrap_or_else(|| format_time(self.now));
        cause.memo = self.memo.clone();
        cause.extensions = self.inner.extensions.clone();
        cause.conditions = self.conditions.clone();
        cause
    }

    /// Purges the records that other causes left (e.g. a creation still retrying when the
    /// deletion comes), and says so as Kopf does.
    fn supersede(&mut self) {
        let progress = &self.inner.persistence.progress;
        let purpose = self.reason.purpose();
        let (mut succeeded, mut failed, mut left) = (0, 0, 0);
        let mut titles = Vec::new();
        for h in &self.inner.handlers {
            let Some(Ok(record)) = progress.fetch(&h.id, self.body) else {
                continue;
            };
            let Some(other) = record.purpose.as_deref().filter(|p| *p != purpose) else {
                continue;
            };
            match (record.success, record.failure) {
                (Some(true), _) => succeeded += 1,
                (_, Some(true)) => failed += 1,
                _ => left += 1,
            }
            if !titles.contains(&other.to_string()) {
                titles.push(other.to_string());
            }
            let patch = self.out.plan.merge_patch_mut();
            progress.purge(&h.id, self.body, patch);
            for sub in record.subrefs.iter().flatten() {
                progress.purge(sub, self.body, patch);
            }
        }
        if let Some(first) = titles.first() {
            let title = Reason::from_purpose(first).map_or(first.as_str(), |r| r.title());
            self.out.superseded = Some(format!(
                "{title} is superseded by {}: {succeeded} succeeded; {failed} failed; {left} left to the moment.",
                self.reason.title().to_lowercase()
            ));
        }
    }

    fn fresh_record(&self) -> ProgressRecord {
        ProgressRecord {
            started: Some(format_time(self.now)),
            purpose: Some(self.reason.purpose().into()),
            retries: Some(0),
            success: Some(false),
            failure: Some(false),
            ..Default::default()
        }
    }

    /// Runs the ready handlers of one level; sub-handlers recurse into their own level.
    fn run_level<'s>(
        &'s mut self,
        handlers: Vec<HandlerSpec>,
        base: &'s Base,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Level> + Send + 's>> {
        Box::pin(self.run_level_inner(handlers, base))
    }

    async fn run_level_inner(&mut self, handlers: Vec<HandlerSpec>, base: &Base) -> Level {
        let persistence = &self.inner.persistence;
        let now = self.now;
        // Records of another cause were purged as superseded: they start over.
        let purpose = self.reason.purpose();
        let mut stored: Vec<Option<ProgressRecord>> = Vec::with_capacity(handlers.len());
        for h in &handlers {
            let record = match persistence.progress.fetch(&h.id, self.body) {
                Some(Ok(record)) => Some(record),
                Some(Err(e)) => {
                    self.out.corrupt_records.push(format!(
                        "The progress record of handler '{}' is not readable: {} is '{}' ({}); it is treated as absent.",
                        h.id, e.key, e.value, e.problem
                    ));
                    None
                }
                None => None,
            };
            stored.push(record.filter(|r| r.purpose.as_deref().is_none_or(|p| p == purpose)));
        }
        // With a one-per-cycle lifecycle, only the picked ready handler runs now.
        let ready = stored.iter().enumerate().filter_map(|(i, r)| {
            let r = r.clone().unwrap_or_default();
            (!r.is_finished() && r.is_awake(now)).then_some((i, r.retries.unwrap_or(0)))
        });
        let picked: Option<usize> = match persistence.lifecycle {
            Lifecycle::AllAtOnce => None,
            Lifecycle::OneByOne => ready.map(|(i, _)| i).next(),
            Lifecycle::Asap => ready.min_by_key(|(_, r)| *r).map(|(i, _)| i),
        };
        let mut level = Level {
            done: true,
            succeeded: 0,
            failed: 0,
            delays: Vec::new(),
            ids: Vec::new(),
        };
        for (index, (h, stored)) in handlers.iter().zip(stored).enumerate() {
            let mut record = stored.clone().unwrap_or_default();
            level.ids.push(h.id.clone());
            level.ids.extend(record.subrefs.clone().unwrap_or_default());
            if record.is_finished() {
                if record.success == Some(true) {
                    level.succeeded += 1;
                } else {
                    level.failed += 1;
                }
                continue;
            }
            if !record.is_awake(now) {
                level.done = false;
                if let Some(d) = record.delayed.as_deref().and_then(parse_time) {
                    level.delays.push(Duration::from_millis(
                        (d.as_millisecond() - now.as_millisecond()).max(0) as u64,
                    ));
                }
                continue;
            }
            if picked.is_some_and(|p| p != index) {
                // Not this cycle's handler: it runs in the next cycle, at once.
                level.done = false;
                level.delays.push(Duration::ZERO);
                if stored.is_none() {
                    let fresh = self.fresh_record();
                    self.records.push((h.id.clone(), fresh));
                }
                continue;
            }
            record.started.get_or_insert_with(|| format_time(now));
            record.purpose = Some(self.reason.purpose().to_string());
            let hbase = base.for_handler(h);
            let call = HandlerCall {
                spec: h.clone(),
                cause: self.cause(&hbase, &record),
                record: record.clone(),
                now,
            };
            let attempt = match self.rejected.get(&h.id) {
                // Its last result was rejected by the API server: that was its attempt.
                Some(message) => self.inner.stack.reject(call, message.clone()).await,
                None => self.inner.stack.call(call).await,
            };
            let Attempt::Done {
                mut outcome,
                record: next,
                retry_in,
            } = attempt
            else {
                continue;
            };
            record = next;
            self.out.events.append(&mut outcome.events);
            let result = match (outcome.result, retry_in) {
                (Ok(value), _) => {
                    self.out.plan.merge(&outcome.patch);
                    if let Some(status) = outcome.patch.get("status").filter(|s| s.is_object()) {
                        self.out
                            .delivered
                            .push((h.id.clone(), json!({"status": status})));
                    }
                    let subs = std::mem::take(&mut outcome.subhandlers);
                    let waiting = if subs.is_empty() {
                        None
                    } else {
                        self.run_children(h, subs, &hbase, &mut record).await
                    };
                    match waiting {
                        Some(d) => {
                            // Like Kopf's HandlerChildrenRetry: called again when the
                            // sub-handlers may run; its result is delivered only then.
                            record = retrying(record, crate::clock::now(), d, None);
                            level.done = false;
                            level.delays.push(d);
                            HandlerOutcome::Waiting
                        }
                        None => {
                            if let Some(v) = value {
                                self.out
                                    .delivered
                                    .push((h.id.clone(), json!({"status": {&h.id: &v}})));
                                self.out.plan.status_result(&h.id, v);
                            }
                            level.succeeded += 1;
                            HandlerOutcome::Succeeded
                        }
                    }
                }
                (Err(e), Some(d)) => {
                    level.done = false;
                    level.delays.push(d);
                    HandlerOutcome::Retrying {
                        message: e.to_string(),
                    }
                }
                (Err(e), None) => {
                    level.failed += 1;
                    HandlerOutcome::Failed {
                        message: e.to_string(),
                    }
                }
            };
            level.ids.extend(record.subrefs.clone().unwrap_or_default());
            self.records.push((h.id.clone(), record));
            self.out.ran.push((h.id.clone(), result));
        }
        level.ids.sort();
        level.ids.dedup();
        level
    }

    /// Runs a parent's sub-handlers; records their ids in the parent's `subrefs`. Returns
    /// the delay until the parent must be called again, or None when all have finished.
    async fn run_children(
        &mut self,
        parent: &HandlerSpec,
        subs: Vec<HandlerSpec>,
        base: &Base,
        record: &mut ProgressRecord,
    ) -> Option<Duration> {
        let children: Vec<HandlerSpec> = subs
            .into_iter()
            .map(|mut s| {
                s.id = format!("{}/{}", parent.id, s.id);
                s
            })
            .collect();
        let children = select(children, self.body, base, |_| true);
        let level = self.run_level(children, base).await;
        let mut refs = record.subrefs.take().unwrap_or_default();
        refs.extend(level.ids.iter().cloned());
        refs.sort();
        refs.dedup();
        record.subrefs = (!refs.is_empty()).then_some(refs);
        if level.done {
            if self.inner.stack.posts_success_events() {
                self.out.events.push(EventSpec::success(&parent.id));
            }
            None
        } else {
            Some(level.delay())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::{ErrorsMode, HandlerError};
    use crate::plan::PatchRequest;

    fn kex() -> Value {
        json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "k", "namespace": "default", "resourceVersion": "5", "labels": {"a": "b"}},
            "spec": {"field": "value"}})
    }

    fn create_fn() -> HandlerSpec {
        HandlerSpec::new("create_fn", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!({"message": "hello world"})))
        })
    }

    #[tokio::test]
    async fn creation_writes_result_then_diffbase_one_patch_per_endpoint() {
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[create_fn()],
            &Persistence::default(),
        )
        .await;
        assert_eq!(out.reason, Reason::Create);
        assert!(out.done);
        let reqs = out.plan.requests(&kex(), true);
        assert_eq!(reqs.len(), 2, "{reqs:?}");
        // The result first: the diff-base may only claim the creation handled once it is stored.
        assert_eq!(
            reqs[0],
            PatchRequest::MergeStatus(json!({"status": {"create_fn": {"message": "hello world"}}}))
        );
        assert_eq!(
            reqs[1],
            PatchRequest::MergeObject(json!({"metadata": {"annotations": {
                "kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"}}}))
        );
        assert_eq!(
            out.delivered,
            vec![(
                "create_fn".to_string(),
                json!({"status": {"create_fn": {"message": "hello world"}}})
            )]
        );
    }

    fn in_status() -> Persistence {
        let mut p = Persistence {
            progress: ProgressStorage::status("kopf"),
            ..Persistence::default()
        };
        p.essence.location = essence::DiffBaseLocation::status();
        p
    }

    fn update_fn() -> HandlerSpec {
        HandlerSpec::new("update_fn", Some(Reason::Update), |c: Cause| async move {
            Ok(Some(json!({"field": c.body["spec"]["field"].clone()})))
        })
        .with_options(crate::handler::Options::new().field("spec.field"))
    }

    /// Kopf's `StatusDiffBaseStorage` with `StatusProgressStorage`: a creation and an update
    /// are one `/status` PATCH each, the result and the diff-base together.
    #[tokio::test]
    async fn diff_base_in_status_makes_one_status_write_per_cause() {
        let handlers = [create_fn(), update_fn()];
        let out = process(EventKind::Added, &kex(), false, &handlers, &in_status()).await;
        assert_eq!(out.reason, Reason::Create);
        assert!(out.plan.status_claims());
        let reqs = out.plan.requests(&kex(), true);
        assert_eq!(
            reqs,
            vec![PatchRequest::MergeStatus(json!({"status": {
                "create_fn": {"message": "hello world"},
                "kopf": {"last-handled-configuration":
                    "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}"},
            }}))]
        );
        // Without a status subresource: one object PATCH with both.
        assert!(matches!(
            out.plan.requests(&kex(), false).as_slice(),
            [PatchRequest::MergeObject(m)] if m["status"]["kopf"].is_object()
        ));
        // Its own write coming back is nothing to do.
        let created = out.plan.preview(&kex());
        let again = process(
            EventKind::Modified,
            &created,
            false,
            &handlers,
            &in_status(),
        )
        .await;
        assert_eq!(again.reason, Reason::Noop);
        assert!(again.plan.requests(&created, true).is_empty());
        // An update: one status write again.
        let mut changed = created.clone();
        changed["spec"]["field"] = json!("new");
        let upd = process(
            EventKind::Modified,
            &changed,
            false,
            &handlers,
            &in_status(),
        )
        .await;
        assert_eq!(upd.reason, Reason::Update);
        assert_eq!(
            upd.plan.requests(&changed, true),
            vec![PatchRequest::MergeStatus(json!({"status": {
                "update_fn/spec.field": {"field": "new"},
                "kopf": {"last-handled-configuration":
                    "{\"spec\":{\"field\":\"new\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}"},
            }}))]
        );
    }

    /// An object that Python Kopf handled with `StatusDiffBaseStorage` continues as an update;
    /// one handled with the annotation (before a switch) too.
    #[tokio::test]
    async fn kopf_status_diff_bases_and_old_annotations_are_continued() {
        let mut kopf_made = kex();
        kopf_made["spec"]["field"] = json!("new");
        kopf_made["status"] = json!({"create_fn": {"message": "hello world"},
            "kopf": {"last-handled-configuration": "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}"}});
        let handlers = [create_fn(), update_fn()];
        let out = process(
            EventKind::Modified,
            &kopf_made,
            false,
            &handlers,
            &in_status(),
        )
        .await;
        assert_eq!(out.reason, Reason::Update);
        assert_eq!(out.counts, (1, 0));
        let mut annotated = kex();
        annotated["metadata"]["annotations"] = json!({"kopf.zalando.org/last-handled-configuration":
            "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"});
        let out = process(EventKind::Added, &annotated, false, &handlers, &in_status()).await;
        assert_eq!(out.reason, Reason::Noop, "not a creation");
        assert!(
            out.plan.is_noop_for(&annotated),
            "the annotation stays valid: nothing to write"
        );
    }

    /// What the object still gets (a handler's own patch) goes first: the status write that
    /// claims the cause is the last. A retry keeps its progress in the status, no diff-base.
    #[tokio::test]
    async fn with_the_diff_base_in_status_the_claiming_write_is_last() {
        let labeller = HandlerSpec::new("labeller", Some(Reason::Create), |c: Cause| async move {
            c.patch
                .merge(json!({"metadata": {"labels": {"done": "yes"}}}));
            Ok(None)
        });
        let out = process(EventKind::Added, &kex(), false, &[labeller], &in_status()).await;
        let reqs = out.plan.requests(&kex(), true);
        assert!(
            matches!(reqs.as_slice(), [PatchRequest::MergeObject(o), PatchRequest::MergeStatus(s)]
                if o["metadata"]["labels"]["done"] == "yes" && s["status"]["kopf"]["last-handled-configuration"].is_string()),
            "{reqs:?}"
        );
        let flaky = HandlerSpec::new("flaky", Some(Reason::Create), |_c: Cause| async {
            Err(HandlerError::temporary("not yet", Duration::from_secs(5)))
        });
        let out = process(EventKind::Added, &kex(), false, &[flaky], &in_status()).await;
        assert!(!out.done && !out.plan.status_claims());
        let reqs = out.plan.requests(&kex(), true);
        assert!(
            matches!(reqs.as_slice(), [PatchRequest::MergeStatus(s)]
                if s["status"]["kopf"]["progress"]["flaky"]["retries"] == 1
                    && s["status"]["kopf"].get("last-handled-configuration").is_none()),
            "{reqs:?}"
        );
    }

    #[tokio::test]
    async fn temporary_errors_store_progress_and_retry_later() {
        let flaky = HandlerSpec::new("flaky", Some(Reason::Create), |c: Cause| async move {
            if c.retry == 0 {
                Err(HandlerError::temporary("not yet", Duration::from_secs(5)))
            } else {
                Ok(None)
            }
        });
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            std::slice::from_ref(&flaky),
            &Persistence::default(),
        )
        .await;
        assert!(!out.done);
        assert_eq!(out.delay, Some(Duration::from_secs(5)));
        let patch = out.plan.effective(&kex());
        let record: ProgressRecord = serde_json::from_str(
            patch["metadata"]["annotations"]["kopf.zalando.org/flaky"]
                .as_str()
                .unwrap_or("{}"),
        )
        .unwrap_or_default();
        assert_eq!(record.retries, Some(1));
        assert_eq!(record.message.as_deref(), Some("not yet"));
        assert_eq!(record.purpose.as_deref(), Some("create"));
        // The stored record survives a restart: the next cycle sees retry=1 once awake.
        let mut body = out.plan.preview(&kex());
        let mut rec = record.clone();
        rec.delayed = Some(format_time(Timestamp::now()));
        body["metadata"]["annotations"]["kopf.zalando.org/flaky"] = json!(rec.encode());
        let second = process(
            EventKind::Modified,
            &body,
            false,
            &[flaky],
            &Persistence::default(),
        )
        .await;
        assert!(second.done);
        let patch = second.plan.effective(&body);
        assert_eq!(
            patch["metadata"]["annotations"]["kopf.zalando.org/flaky"],
            Value::Null,
            "purged"
        );
        assert!(
            patch["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"]
                .is_string()
        );
    }

    #[tokio::test]
    async fn finalizer_first_then_delete_handler_releases() {
        let del = HandlerSpec::new("delete_fn", Some(Reason::Delete), |_c: Cause| async {
            Ok(None)
        });
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            std::slice::from_ref(&del),
            &Persistence::default(),
        )
        .await;
        // The finalizer first, alone: no handler runs before it is on the object.
        let reqs = out.plan.requests(&kex(), true);
        assert!(
            matches!(reqs.as_slice(), [PatchRequest::JsonObject(ops)]
                if ops.len() == 2 && ops[1]["path"] == "/metadata/finalizers"),
            "{reqs:?}"
        );
        assert!(!out.done && out.ran.is_empty());
        let mut with_finalizer = kex();
        with_finalizer["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
        let out = process(
            EventKind::Modified,
            &with_finalizer,
            false,
            std::slice::from_ref(&del),
            &Persistence::default(),
        )
        .await;
        assert!(out.done);
        assert_eq!(out.finalizer, None);
        assert!(
            matches!(out.plan.requests(&with_finalizer, true).as_slice(), [PatchRequest::MergeObject(m)]
                if m["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"].is_string()),
            "then the creation (no handlers) writes its diff-base"
        );
        let mut deleting = kex();
        deleting["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let out = process(
            EventKind::Modified,
            &deleting,
            false,
            &[del],
            &Persistence::default(),
        )
        .await;
        assert_eq!(out.reason, Reason::Delete);
        let reqs = out.plan.requests(&deleting, true);
        assert!(
            matches!(reqs.as_slice(), [PatchRequest::JsonObject(ops)] if ops[1] == json!({"op": "remove", "path": "/metadata/finalizers"})),
            "{reqs:?}"
        );
    }

    #[tokio::test]
    async fn panics_and_field_handlers() {
        let boom = HandlerSpec::new("boom", Some(Reason::Update), |_c: Cause| async {
            panic!("kaboom")
        });
        let mut field = HandlerSpec::new("field_fn/spec.field", None, |c: Cause| async move {
            Ok(Some(json!({"old": c.old, "new": c.new})))
        });
        field.field = Some(vec!["spec".into(), "field".into()]);
        let mut body = kex();
        body["metadata"]["annotations"] = json!({"kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"field\":\"old\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"});
        let out = process(
            EventKind::Modified,
            &body,
            false,
            &[boom, field],
            &Persistence::default(),
        )
        .await;
        assert_eq!(out.reason, Reason::Update);
        assert!(
            matches!(&out.ran[0].1, HandlerOutcome::Retrying { message } if message.contains("panicked"))
        );
        assert_eq!(out.ran[1].1, HandlerOutcome::Succeeded);
        assert_eq!(
            out.plan.preview(&body)["status"]["field_fn/spec.field"],
            json!({"old": "old", "new": "value"})
        );
    }

    #[tokio::test]
    async fn timeouts_cancel_a_running_handler() {
        let mut slow = HandlerSpec::new("slow", Some(Reason::Create), |_c: Cause| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(None)
        });
        slow.timeout = Some(Duration::from_millis(100));
        let started = std::time::Instant::now();
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[slow],
            &Persistence::default(),
        )
        .await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "cancelled at the deadline"
        );
        assert!(
            matches!(&out.ran[0].1, HandlerOutcome::Failed { message } if message.contains("timed out"))
        );
        assert!(out.done, "a permanent failure finishes the cause");
    }

    #[tokio::test]
    async fn filters_select_handlers_and_the_finalizer() {
        use crate::handler::MetaFilter;
        use std::sync::Arc;
        let mut labelled = HandlerSpec::new("labelled", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        });
        labelled.labels = vec![("a".into(), MetaFilter::Value("b".into()))];
        let mut absent = HandlerSpec::new("absent", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(2)))
        });
        absent.annotations = vec![("skip".into(), MetaFilter::Present)];
        let mut when = HandlerSpec::new("when", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(3)))
        });
        when.when = Some(Arc::new(|b: &Value| b["spec"]["field"] == "value"));
        let mut del = HandlerSpec::new("del", Some(Reason::Delete), |_c: Cause| async { Ok(None) });
        del.labels = vec![("a".into(), MetaFilter::Absent)];
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[labelled, absent, when, del],
            &Persistence::default(),
        )
        .await;
        let ran: Vec<&str> = out.ran.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ran, vec!["labelled", "when"]);
        assert_eq!(
            out.finalizer, None,
            "the delete handler does not match, so no finalizer"
        );
    }

    #[tokio::test]
    async fn an_object_no_handler_matches_gets_no_state() {
        use crate::handler::{MetaFilter, Options};
        let labelled = HandlerSpec::new("labelled", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        })
        .with_options(Options::new().label("a", MetaFilter::Value("other".into())));
        let owned = HandlerSpec::new("owned", None, |_c: Cause| async { Ok(Some(json!(2))) })
            .with_options(Options::new().owner("KopfExample"));
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[labelled, owned],
            &Persistence::default(),
        )
        .await;
        assert!(out.ran.is_empty());
        assert!(out.done);
        assert!(
            out.plan.is_empty(),
            "no diff-base, no progress (Kopf's prematch): {:?}",
            out.plan.merge_patch()
        );
    }

    #[tokio::test]
    async fn asap_lifecycle_runs_one_handler_per_cycle() {
        let a = HandlerSpec::new("a", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        });
        let b = HandlerSpec::new("b", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(2)))
        });
        let persistence = Persistence {
            lifecycle: Lifecycle::Asap,
            ..Default::default()
        };
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[a.clone(), b.clone()],
            &persistence,
        )
        .await;
        assert_eq!(out.ran.len(), 1);
        assert!(!out.done);
        assert_eq!(
            out.delay,
            Some(Duration::ZERO),
            "the next cycle follows at once"
        );
        // The next cycle (on the patched body) runs the other one and completes the cause.
        let mut body = out.plan.preview(&kex());
        body["metadata"]["resourceVersion"] = json!("6");
        let second = process(EventKind::Modified, &body, false, &[a, b], &persistence).await;
        assert_eq!(second.ran.len(), 1);
        assert_ne!(second.ran[0].0, out.ran[0].0);
        assert!(second.done);
    }

    #[tokio::test]
    async fn succeeded_handlers_are_not_rerun_while_others_retry() {
        let ok = HandlerSpec::new("ok", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        });
        let later = HandlerSpec::new("later", Some(Reason::Create), |c: Cause| async move {
            if c.retry == 0 {
                Err(HandlerError::temporary("wait", Duration::ZERO))
            } else {
                Ok(None)
            }
        });
        let first = process(
            EventKind::Added,
            &kex(),
            false,
            &[ok.clone(), later.clone()],
            &Persistence::default(),
        )
        .await;
        assert!(!first.done);
        let body = first.plan.preview(&kex());
        let second = process(
            EventKind::Modified,
            &body,
            false,
            &[ok, later],
            &Persistence::default(),
        )
        .await;
        let ran: Vec<&str> = second.ran.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ran, vec!["later"], "the succeeded handler is not run again");
        assert!(second.done);
    }

    fn annotations(patch: &Value) -> serde_json::Map<String, Value> {
        patch["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    fn record(patch: &Value, key: &str) -> ProgressRecord {
        serde_json::from_str(
            patch["metadata"]["annotations"][key]
                .as_str()
                .unwrap_or("{}"),
        )
        .unwrap_or_default()
    }

    fn parent_with_children() -> HandlerSpec {
        HandlerSpec::new("create_fn", Some(Reason::Create), |c: Cause| async move {
            c.subhandlers
                .register("a", |_c: Cause| async { Ok::<_, HandlerError>(json!(1)) });
            c.subhandlers.register("b", |c: Cause| async move {
                if c.retry == 0 {
                    Err(HandlerError::temporary("b not yet", Duration::ZERO))
                } else {
                    Ok(Some(json!(2)))
                }
            });
            Ok(Some(json!("parent")))
        })
    }

    #[tokio::test]
    async fn subhandlers_keep_progress_until_all_finish() {
        let handlers = [parent_with_children()];
        let first = process(
            EventKind::Added,
            &kex(),
            false,
            &handlers,
            &Persistence::default(),
        )
        .await;
        let ran: Vec<(&str, &HandlerOutcome)> =
            first.ran.iter().map(|(id, o)| (id.as_str(), o)).collect();
        assert_eq!(ran[0], ("create_fn/a", &HandlerOutcome::Succeeded));
        assert!(matches!(
            ran[1],
            ("create_fn/b", HandlerOutcome::Retrying { .. })
        ));
        assert_eq!(ran[2], ("create_fn", &HandlerOutcome::Waiting));
        assert!(!first.done);
        assert_eq!(first.delay, Some(Duration::ZERO));
        let patch = first.plan.effective(&kex());
        let parent = record(&patch, "kopf.zalando.org/create_fn");
        assert_eq!(
            parent.subrefs,
            Some(vec!["create_fn/a".to_string(), "create_fn/b".to_string()])
        );
        assert_eq!((parent.success, parent.retries), (Some(false), Some(1)));
        assert!(record(&patch, "kopf.zalando.org/create_fn.a").is_finished());
        assert_eq!(
            record(&patch, "kopf.zalando.org/create_fn.b").retries,
            Some(1)
        );
        assert_eq!(patch["status"]["create_fn/a"], json!(1));
        assert!(
            patch["status"].get("create_fn").is_none(),
            "the parent's result waits for its children"
        );

        // The next cycle: the parent runs again, the succeeded child does not.
        let mut body = first.plan.preview(&kex());
        body["metadata"]["resourceVersion"] = json!("6");
        let second = process(
            EventKind::Modified,
            &body,
            false,
            &handlers,
            &Persistence::default(),
        )
        .await;
        let ran: Vec<&str> = second.ran.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ran, vec!["create_fn/b", "create_fn"]);
        assert!(second.done);
        let patch = second.plan.effective(&body);
        assert_eq!(patch["status"]["create_fn"], json!("parent"));
        assert_eq!(patch["status"]["create_fn/b"], json!(2));
        let ann = annotations(&patch);
        for key in ["create_fn", "create_fn.a", "create_fn.b"] {
            assert_eq!(
                ann[&format!("kopf.zalando.org/{key}")],
                Value::Null,
                "{key} purged"
            );
        }
        assert!(ann["kopf.zalando.org/last-handled-configuration"].is_string());
    }

    #[tokio::test]
    async fn subhandlers_that_finish_at_once_write_no_records() {
        let parent = HandlerSpec::new("create_fn", Some(Reason::Create), |c: Cause| async move {
            for item in ["x", "y"] {
                c.subhandlers.register(item, move |_c: Cause| async move {
                    Ok::<_, HandlerError>(item)
                });
            }
            Ok(None)
        });
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[parent],
            &Persistence::default(),
        )
        .await;
        assert!(out.done);
        let patch = out.plan.effective(&kex());
        let ann = annotations(&patch);
        assert_eq!(
            ann.keys().collect::<Vec<_>>(),
            vec!["kopf.zalando.org/last-handled-configuration"]
        );
        assert_eq!(
            patch["status"],
            json!({"create_fn/x": "x", "create_fn/y": "y"})
        );
    }

    #[tokio::test]
    async fn field_filters_follow_kopfs_matching_order() {
        use crate::handler::{FieldFilter, Options};
        let body = {
            let mut b = kex();
            b["metadata"]["annotations"] = json!({"kopf.zalando.org/last-handled-configuration":
                "{\"spec\":{\"field\":\"old\",\"other\":1},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"});
            b["spec"]["other"] = json!(1);
            b
        };
        let ok = |id: &str, reason: Option<Reason>, options: Options| {
            HandlerSpec::new(id, reason, |c: Cause| async move {
                Ok(Some(json!({"old": c.old, "new": c.new})))
            })
            .with_options(options)
        };
        let handlers = vec![
            ok(
                "on_field_change",
                Some(Reason::Update),
                Options::new().field("spec.field"),
            ),
            ok(
                "on_other",
                Some(Reason::Update),
                Options::new().field("spec.other"),
            ),
            ok(
                "new_is_value",
                Some(Reason::Update),
                Options::new().field("spec.field").new_value("value"),
            ),
            ok(
                "old_is_other",
                Some(Reason::Update),
                Options::new().field("spec.field").old("nope"),
            ),
            ok(
                "value_pred",
                Some(Reason::Update),
                Options::new()
                    .field("spec.field")
                    .value(FieldFilter::Predicate(std::sync::Arc::new(
                        |v: Option<&Value>| v == Some(&json!("old")),
                    ))),
            ),
            ok(
                "absent",
                Some(Reason::Update),
                Options::new().field("spec.missing"),
            ),
        ];
        let out = process(
            EventKind::Modified,
            &body,
            false,
            &handlers,
            &Persistence::default(),
        )
        .await;
        let ran: Vec<&str> = out.ran.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(
            ran,
            vec![
                "on_field_change/spec.field",
                "new_is_value/spec.field",
                "value_pred/spec.field"
            ]
        );
        assert_eq!(
            out.plan.preview(&body)["status"]["on_field_change/spec.field"],
            json!({"old": "old", "new": "value"}),
            "old and new are the field's"
        );
    }

    #[tokio::test]
    async fn one_id_runs_once_per_cause_and_the_finalizer_is_reported() {
        let twice = HandlerSpec::new("same", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        });
        let del = HandlerSpec::new("del", Some(Reason::Delete), |_c: Cause| async { Ok(None) });
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[twice.clone(), twice, del],
            &Persistence::default(),
        )
        .await;
        assert_eq!(out.finalizer, Some(FinalizerChange::Added));
        assert!(out.ran.is_empty(), "the finalizer comes first, alone");
        let mut body = kex();
        body["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
        let twice = HandlerSpec::new("same", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        });
        let del = HandlerSpec::new("del", Some(Reason::Delete), |_c: Cause| async { Ok(None) });
        let out = process(
            EventKind::Added,
            &body,
            false,
            &[twice.clone(), twice, del],
            &Persistence::default(),
        )
        .await;
        assert_eq!(out.ran.len(), 1);
    }

    #[tokio::test]
    async fn success_events_only_when_enabled() {
        let quiet = Processor::new(vec![create_fn()], Persistence::default());
        let out = quiet
            .process(EventKind::Added, &kex(), false, &Memos::default())
            .await;
        assert!(out.events.is_empty());
        let loud = Processor::with_stack(
            vec![create_fn()],
            Persistence::default(),
            Stack::default().success_events(true),
        );
        let out = loud
            .process(EventKind::Added, &kex(), false, &Memos::default())
            .await;
        assert_eq!(out.events, vec![EventSpec::success("create_fn")]);
    }

    #[tokio::test]
    async fn a_deletion_supersedes_a_creation_in_progress() {
        let flaky = HandlerSpec::new("create_fn", Some(Reason::Create), |_c: Cause| async {
            Err(HandlerError::temporary("not yet", Duration::from_secs(60)))
        });
        let del = HandlerSpec::new("delete_fn", Some(Reason::Delete), |_c: Cause| async {
            Ok(None)
        });
        let handlers = [flaky, del];
        let mut created = kex();
        created["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
        let first = process(
            EventKind::Added,
            &created,
            false,
            &handlers,
            &Persistence::default(),
        )
        .await;
        let mut deleting = first.plan.preview(&created);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let out = process(
            EventKind::Modified,
            &deleting,
            false,
            &handlers,
            &Persistence::default(),
        )
        .await;
        assert_eq!(
            out.superseded.as_deref(),
            Some(
                "Creation is superseded by deletion: 0 succeeded; 0 failed; 1 left to the moment."
            )
        );
        assert_eq!(out.counts, (1, 0));
        let patch = out.plan.effective(&deleting);
        assert_eq!(
            patch["metadata"]["annotations"]["kopf.zalando.org/create_fn"],
            Value::Null
        );
    }

    #[tokio::test]
    async fn a_finished_cause_purges_records_of_handlers_not_selected_now() {
        let mut field =
            HandlerSpec::new("field_fn/spec.field", None, |_c: Cause| async { Ok(None) });
        field.field = Some(vec!["spec".into(), "field".into()]);
        field.field_needs_change = true;
        let other = HandlerSpec::new("update_fn", Some(Reason::Update), |_c: Cause| async {
            Ok(None)
        });
        // A record left by the field handler in an earlier update whose change was reverted.
        let mut body = kex();
        body["metadata"]["annotations"] = json!({
            "kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"field\":\"value\",\"x\":1},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n",
            "kopf.zalando.org/field_fn.spec.field": "{\"purpose\":\"update\",\"retries\":3,\"success\":false,\"failure\":false}"
        });
        let out = process(
            EventKind::Modified,
            &body,
            false,
            &[field, other],
            &Persistence::default(),
        )
        .await;
        let ran: Vec<&str> = out.ran.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ran, vec!["update_fn"], "the field did not change");
        assert!(out.done);
        assert_eq!(
            out.plan.effective(&body)["metadata"]["annotations"]["kopf.zalando.org/field_fn.spec.field"],
            Value::Null,
            "purged with the cause"
        );
    }

    #[tokio::test]
    async fn a_rejected_result_is_the_handlers_failed_attempt_by_its_errors_mode() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let mut create = HandlerSpec::new("create_fn", Some(Reason::Create), move |_c: Cause| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(Some(json!({"message": 42}))) }
        });
        let other = HandlerSpec::new("other_fn", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!("fine")))
        });
        let rejected = Arc::new(HashMap::from([(
            "create_fn".to_string(),
            "the API server refused to store the result: status.create_fn.message: must be a string".to_string(),
        )]));
        let processor = Processor::new(vec![create.clone(), other.clone()], Persistence::default());
        let out = processor
            .process_with(
                EventKind::Added,
                &kex(),
                false,
                &Memos::default(),
                rejected.clone(),
            )
            .await;
        assert_eq!(calls.load(Ordering::SeqCst), 0, "not called again");
        assert!(!out.done, "retried after its backoff (errors: temporary)");
        assert!(
            matches!(&out.ran[0], (id, HandlerOutcome::Retrying { message }) if id == "create_fn" && message.contains("refused"))
        );
        let rec = record(&out.plan.effective(&kex()), "kopf.zalando.org/create_fn");
        assert_eq!(rec.retries, Some(1));
        assert!(rec.delayed.is_some());
        assert_eq!(out.delay, Some(Duration::from_secs(60)));
        assert_eq!(
            out.plan.preview(&kex())["status"],
            json!({"other_fn": "fine"}),
            "the others' results are delivered"
        );
        // Permanent: failed for good, the cause is done.
        create.errors = ErrorsMode::Permanent;
        let processor = Processor::new(vec![create, other], Persistence::default());
        let out = processor
            .process_with(EventKind::Added, &kex(), false, &Memos::default(), rejected)
            .await;
        assert!(out.done);
        assert_eq!(out.counts, (1, 1));
        assert!(matches!(&out.ran[0], (_, HandlerOutcome::Failed { .. })));
    }

    #[tokio::test]
    async fn unreadable_progress_records_are_reported_and_treated_as_absent() {
        let mut body = kex();
        body["metadata"]["annotations"] = json!({"kopf.zalando.org/create_fn": "{not json"});
        let out = process(
            EventKind::Added,
            &body,
            false,
            &[create_fn()],
            &Persistence::default(),
        )
        .await;
        assert!(out.done, "the handler ran as if it had no record");
        assert_eq!(out.corrupt_records.len(), 1);
        assert!(out.corrupt_records[0].contains("kopf.zalando.org/create_fn"));
        assert_eq!(
            out.plan.effective(&body)["metadata"]["annotations"].get("kopf.zalando.org/create_fn"),
            Some(&Value::Null),
            "purged"
        );
    }

    #[tokio::test]
    async fn conditions_join_the_cycles_status_write() {
        use crate::conditions::{ConditionStatus, Conditions, ConditionsSpec};
        use crate::extract::IntoHandler;
        async fn create(c: Conditions) -> Result<(), HandlerError> {
            assert!(!c.is_true("Provisioned"), "not yet");
            c.set("Provisioned", ConditionStatus::True, "Created", "")?;
            Ok(())
        }
        let declared = ConditionsSpec::new()
            .declare("Ready", ConditionStatus::Unknown, "Pending", "")
            .per_handler(true)
            .summary("Ready")
            .into_spec();
        let processor = Processor::new(
            vec![
                declared,
                HandlerSpec::from_arc("create_fn", Some(Reason::Create), create.into_handler()),
            ],
            Persistence::default(),
        );
        let mut body = kex();
        body["metadata"]["generation"] = json!(3);
        let out = processor
            .process(EventKind::Added, &body, false, &Memos::default())
            .await;
        assert!(out.done);
        let reqs = out.plan.requests(&body, true);
        assert!(matches!(reqs[0], PatchRequest::JsonStatus(_)), "{reqs:?}");
        assert_eq!(reqs.len(), 2, "status, then the diff-base");
        let stored = out.plan.preview(&body);
        let types: Vec<(String, String)> = stored["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["type"].as_str().unwrap_or("").into(),
                    c["status"].as_str().unwrap_or("").into(),
                )
            })
            .collect();
        let pairs = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            types,
            pairs(&[
                ("Ready", "True"),
                ("Provisioned", "True"),
                ("CreateFnSucceeded", "True")
            ])
        );
        assert_eq!(stored["status"]["conditions"][0]["observedGeneration"], 3);
        // The next cycle (nothing changed): nothing is written.
        let again = processor
            .process(EventKind::Modified, &stored, false, &Memos::default())
            .await;
        assert_eq!(again.reason, Reason::Noop);
        assert!(again.plan.is_noop_for(&stored));
    }
}
