//! The operator's finalizer, a step around a whole processing cycle of one object: added when
//! some handler that matches the object needs it (non-optional delete handlers, daemons and
//! timers), removed when none does any more, and removed once a deletion has been handled.
//!
//! As in Kopf, adding it is a cycle of its own, before any handler of the object runs: the
//! object cannot go away unhandled once a handler has started (a create handler that
//! provisioned something always has its delete handler run). The same goes for removing a
//! finalizer no handler needs any more. Only resources with such handlers pay for it: one
//! PATCH on an object's first cycle. The edits are JSON-patch operations guarded by a
//! resourceVersion test, so that other controllers' finalizers are never clobbered.

use std::future::Future;

use serde_json::Value;

use crate::causes::Reason;
use crate::cycle::{CycleCall, CycleOutcome, FinalizerChange};
use crate::finalizers;
use crate::plan::FinalizerEdit;

/// The change of the finalizer an object needs before any handler runs (none while it is
/// deleted: then the finalizer goes only once its deletion is handled). `required`: some
/// handler that matches the object needs it.
pub(super) fn change(
    required: bool,
    body: &Value,
    finalizer: &str,
    deleting: bool,
) -> Option<FinalizerChange> {
    let present = finalizers::has(body, finalizer);
    match (deleting, required, present) {
        (false, true, false) => Some(FinalizerChange::Added),
        (false, false, true) => Some(FinalizerChange::Removed),
        _ => None,
    }
}

/// Runs `cycle` with the finalizer kept right: a cycle of its own that only adds or removes
/// it when the object needs that, else the cycle, then the finalizer's removal once a
/// deletion is handled (every delete handler has finished).
pub(super) async fn around_cycle<F, Fut>(
    call: CycleCall,
    finalizer: &str,
    required: bool,
    cycle: F,
) -> CycleOutcome
where
    F: FnOnce(CycleCall) -> Fut,
    Fut: Future<Output = CycleOutcome>,
{
    let deleting = call.cause.reason == Reason::Delete;
    let present = finalizers::has(&call.body, finalizer);
    if let Some(change) = change(required, &call.body, finalizer, deleting) {
        // A cycle of its own: no handler runs before the finalizer is right.
        let mut out = CycleOutcome::new(call.cause.reason);
        out.plan.finalizer(match change {
            FinalizerChange::Added => FinalizerEdit::Add(finalizer.into()),
            FinalizerChange::Removed => FinalizerEdit::Remove(finalizer.into()),
        });
        out.finalizer = Some(change);
        return out;
    }
    let mut out = cycle(call).await;
    if deleting && out.done && present {
        // Released only when every delete handler has finished.
        out.plan.finalizer(FinalizerEdit::Remove(finalizer.into()));
        out.finalizer = Some(FinalizerChange::Removed);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causes::{EventKind, detect};
    use crate::memo::Memos;
    use crate::plan::PatchPlan;
    use crate::processing::HandlerOutcome;
    use kopf_diff::essence::EssenceSettings;
    use serde_json::json;
    use std::sync::Arc;

    const F: &str = finalizers::DEFAULT_FINALIZER;

    fn cycle(body: Value) -> CycleCall {
        let cause = detect(
            EventKind::Modified,
            &body,
            &EssenceSettings::default(),
            F,
            false,
        );
        CycleCall {
            body,
            cause,
            memo: Memos::default(),
            rejected: Arc::default(),
            conditions: Default::default(),
        }
    }

    async fn through(required: bool, done: bool, body: Value) -> CycleOutcome {
        around_cycle(
            cycle(body),
            F,
            required,
            move |call: CycleCall| async move {
                let mut out = CycleOutcome::new(call.cause.reason);
                out.done = done;
                out.ran.push(("h".into(), HandlerOutcome::Succeeded));
                out
            },
        )
        .await
    }

    fn ops(plan: &PatchPlan, body: &Value) -> Vec<Value> {
        match plan.requests(body, true).as_slice() {
            [crate::plan::PatchRequest::JsonObject(ops)] => ops.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn added_when_needed_removed_when_not_and_after_deletion() {
        let bare = json!({"metadata": {"name": "k", "resourceVersion": "3"}});
        let out = through(true, true, bare.clone()).await;
        assert_eq!(out.finalizer, Some(FinalizerChange::Added));
        assert_eq!(ops(&out.plan, &bare)[1]["op"], "add");
        assert!(
            out.ran.is_empty(),
            "no handler runs before the finalizer is on"
        );
        assert!(!out.done);
        let out = through(false, true, bare).await;
        assert_eq!(out.finalizer, None);
        assert_eq!(out.ran.len(), 1, "handlers run when no finalizer is needed");

        let held =
            json!({"metadata": {"name": "k", "resourceVersion": "4", "finalizers": ["other", F]}});
        let out = through(false, true, held.clone()).await;
        assert_eq!(out.finalizer, Some(FinalizerChange::Removed));
        assert!(out.ran.is_empty(), "a cycle of its own");
        assert_eq!(
            ops(&out.plan, &held)[1],
            json!({"op": "remove", "path": "/metadata/finalizers/1"}),
            "only our entry goes"
        );

        let mut deleting = held.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let unfinished = through(true, false, deleting.clone()).await;
        assert_eq!(
            unfinished.finalizer, None,
            "kept while delete handlers retry"
        );
        assert_eq!(unfinished.ran.len(), 1, "delete handlers run");
        let finished = through(true, true, deleting).await;
        assert_eq!(finished.finalizer, Some(FinalizerChange::Removed));
        let with_it = through(true, true, held).await;
        assert_eq!(with_it.finalizer, None);
        assert_eq!(with_it.ran.len(), 1, "handlers run once it is on");
    }
}
