//! The cycle itself: the handlers of the cause selected and run level by level (see
//! `level`), then either everything finished (every record of the resource's handlers
//! purged, the new diff-base) or the records of the unfinished ones stored, with the delay
//! until the next attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kopf_diff::essence;
use serde_json::Value;

use super::Inner;
use super::select::{Base, for_reason, select};
use super::supersede::supersede;
use crate::causes::{ChangingCause, Reason};
use crate::conditions::ConditionsHandle;
use crate::cycle::{CycleCall, CycleOutcome};
use crate::handler::spec::{Cause, HandlerKind};
use crate::memo::Memos;
use crate::progress::{ProgressRecord, format_time, parse_time};

/// The state of one cycle while its handlers run.
pub(super) struct Exec<'a> {
    pub(super) inner: &'a Inner,
    pub(super) body: &'a Value,
    pub(super) reason: Reason,
    pub(super) now: Timestamp,
    memo: Memos,
    pub(super) out: CycleOutcome,
    /// Records of handlers that ran, and first records of those that did not run yet:
    /// written only if the cause stays unfinished.
    pub(super) records: Vec<(String, ProgressRecord)>,
    /// Handlers whose results the API server rejected (see [`CycleCall::rejected`]).
    pub(super) rejected: Arc<HashMap<String, String>>,
    /// The cycle's conditions, shared by its handlers.
    conditions: ConditionsHandle,
}

/// What a level of handlers (top-level, or one parent's sub-handlers) came to.
pub(super) struct Level {
    pub(super) done: bool,
    pub(super) succeeded: usize,
    pub(super) failed: usize,
    pub(super) delays: Vec<Duration>,
    /// Every handler id of the level, with all their descendants (for purging).
    pub(super) ids: Vec<String>,
}

impl Level {
    pub(super) fn new() -> Self {
        Level {
            done: true,
            succeeded: 0,
            failed: 0,
            delays: Vec::new(),
            ids: Vec::new(),
        }
    }

    /// The delay until the level's next attempt: the shortest of its handlers'.
    pub(super) fn delay(&self) -> Duration {
        self.delays.iter().min().copied().unwrap_or(Duration::ZERO)
    }

    /// A handler of the level is not finished; its next attempt is due after `delay`.
    pub(super) fn wait(&mut self, delay: Duration) {
        self.done = false;
        self.delays.push(delay);
    }

    /// A handler that finished in an earlier cycle.
    pub(super) fn finished(&mut self, record: &ProgressRecord) {
        if record.success == Some(true) {
            self.succeeded += 1;
        } else {
            self.failed += 1;
        }
    }

    /// A handler whose retry delay has not passed yet.
    pub(super) fn asleep(&mut self, record: &ProgressRecord, now: Timestamp) {
        self.done = false;
        if let Some(d) = record.delayed.as_deref().and_then(parse_time) {
            self.delays.push(Duration::from_millis(
                (d.as_millisecond() - now.as_millisecond()).max(0) as u64,
            ));
        }
    }
}

/// Runs the handlers of one cycle (inside the finalizer's step) and folds their outcomes.
pub(super) async fn run_cycle(inner: &Inner, call: CycleCall) -> CycleOutcome {
    let cause = call.cause;
    let body = &call.body;
    if cause.reason == Reason::Noop
        || !inner
            .handlers
            .iter()
            .any(|h| matches!(h.kind, HandlerKind::Changing) && h.matches(body))
    {
        // Nothing changed. Or only timers, daemons, indexes or raw events: no diff-base to
        // keep. Or Kopf's prematch: the resource has changing handlers, but their filters
        // (labels, annotations, owners, `when`) leave this object out: be blind to it, store
        // nothing.
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
    exec.out.superseded = supersede(
        &inner.handlers,
        &inner.persistence.progress,
        body,
        cause.reason,
        &mut exec.out.plan,
    );
    let level = exec.run_level(top, &base).await;
    exec.out.counts = (level.succeeded, level.failed);
    if level.done {
        exec.finished(level.ids, &cause)
    } else {
        exec.unfinished(&level)
    }
}

impl Exec<'_> {
    /// What a handler receives: the object as observed (its own and other handlers' patches
    /// are applied after the cycle, as in Kopf).
    pub(super) fn cause(&self, base: &Base, record: &ProgressRecord) -> Cause {
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

    /// The first record of a handler of this cause.
    pub(super) fn fresh_record(&self) -> ProgressRecord {
        ProgressRecord {
            started: Some(format_time(self.now)),
            purpose: Some(self.reason.purpose().into()),
            retries: Some(0),
            success: Some(false),
            failure: Some(false),
            ..Default::default()
        }
    }

    /// Every handler of the cause finished: every record of the resource's handlers goes
    /// (Kopf purges them all, not only this cycle's), with their sub-handlers'; the new
    /// diff-base is stored (not on deletion).
    fn finished(self, mut ids: Vec<String>, cause: &ChangingCause) -> CycleOutcome {
        let persistence = &self.inner.persistence;
        let body = self.body;
        let mut out = self.out;
        for h in &self.inner.handlers {
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
                store_diff_base(&mut out, body, &cause.new, &persistence.essence);
            }
        }
        out.done = true;
        out
    }

    /// Some handler of the cause has not finished: the records are stored, and the next
    /// cycle comes after the level's shortest delay.
    fn unfinished(self, level: &Level) -> CycleOutcome {
        let progress = &self.inner.persistence.progress;
        let mut out = self.out;
        for (id, record) in &self.records {
            progress.store(id, record, self.body, out.plan.merge_patch_mut());
        }
        out.delay = Some(level.delay());
        out
    }
}

/// Stores the new diff-base with the cycle's writes, unless it would take the object's
/// annotations beyond what kube allows: then it is left out (the writes would all be refused,
/// and the handlers run again and again), and the outcome says so.
fn store_diff_base(
    out: &mut CycleOutcome,
    body: &Value,
    new: &Value,
    settings: &essence::EssenceSettings,
) {
    let patch = essence::store_patch(new, settings);
    if settings.location == essence::DiffBaseLocation::Annotations {
        // The annotations the plan writes, with the diff-base among them.
        let path = "/metadata/annotations";
        let mut annotations = out.plan.merge_patch().pointer(path).cloned();
        let annotations = match (annotations.as_mut(), patch.pointer(path)) {
            (Some(Value::Object(set)), Some(Value::Object(diff_base))) => {
                set.extend(diff_base.clone());
                annotations
            }
            _ => patch.pointer(path).cloned(),
        };
        let after = serde_json::json!({"metadata": {"annotations": annotations}});
        let size = essence::annotations_size_after(body, &after);
        if size > essence::ANNOTATIONS_LIMIT {
            out.unstored_diff_base = Some(crate::cycle::UnstoredDiffBase {
                essence: new.clone(),
                annotations_size: size,
            });
            // An older diff-base that fitted goes: left there, it would be taken for the last
            // handled state (the one kept in memory is the engine's to put back).
            let key = settings.annotation();
            if body
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(&key))
                .is_some()
            {
                out.plan
                    .merge(&serde_json::json!({"metadata": {"annotations": {key: null}}}));
            }
            return;
        }
    }
    out.plan.diff_base(&patch);
}
