//! The operator's finalizer, around a whole processing cycle of one object: added when some
//! handler that matches the object needs it (non-optional delete handlers, daemons and
//! timers), removed when none does any more, and removed once a deletion has been handled.
//!
//! As in Kopf, adding it is a cycle of its own, before any handler of the object runs: the
//! object cannot go away unhandled once a handler has started (a create handler that
//! provisioned something always has its delete handler run). The same goes for removing a
//! finalizer no handler needs any more. Only resources with such handlers pay for it: one
//! PATCH on an object's first cycle. The edits are JSON-patch operations guarded by a
//! resourceVersion test, so that other controllers' finalizers are never clobbered.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;
use tower::{Layer, Service};

use crate::causes::Reason;
use crate::cycle::{CycleCall, CycleOutcome, FinalizerChange};
use crate::finalizers;
use crate::handler::spec::BoxFuture;
use crate::plan::FinalizerEdit;

/// Whether an object needs the finalizer (its handlers' "prematch").
pub type RequiresFinalizer = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// Keeps the finalizer right around a cycle.
///
/// ```
/// use std::sync::Arc;
/// use kopf_core::layers::FinalizerLayer;
///
/// let layer = FinalizerLayer::new("kopf.zalando.org/KopfFinalizerMarker", Arc::new(|_body: &serde_json::Value| true));
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct FinalizerLayer {
    finalizer: String,
    requires: RequiresFinalizer,
}

impl std::fmt::Debug for FinalizerLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinalizerLayer")
            .field("finalizer", &self.finalizer)
            .finish_non_exhaustive()
    }
}

impl FinalizerLayer {
    /// A layer for a finalizer name and the test of whether an object needs it.
    pub fn new(finalizer: impl Into<String>, requires: RequiresFinalizer) -> Self {
        FinalizerLayer {
            finalizer: finalizer.into(),
            requires,
        }
    }
}

/// The service of [`FinalizerLayer`].
#[derive(Clone)]
pub struct Finalizer<S> {
    inner: S,
    finalizer: String,
    requires: RequiresFinalizer,
}

impl<S> Layer<S> for FinalizerLayer {
    type Service = Finalizer<S>;
    fn layer(&self, inner: S) -> Finalizer<S> {
        Finalizer {
            inner,
            finalizer: self.finalizer.clone(),
            requires: self.requires.clone(),
        }
    }
}

impl<S> Service<CycleCall> for Finalizer<S>
where
    S: Service<CycleCall, Response = CycleOutcome, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = CycleOutcome;
    type Error = Infallible;
    type Future = BoxFuture<Result<CycleOutcome, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: CycleCall) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let finalizer = self.finalizer.clone();
        let required = (self.requires)(&call.body);
        Box::pin(async move {
            let deleting = call.cause.reason == Reason::Delete;
            let present = finalizers::has(&call.body, &finalizer);
            if !deleting && required != present {
                // A cycle of its own: no handler runs before the finalizer is right.
                let mut out = CycleOutcome::new(call.cause.reason);
                let (change, edit) = if required {
                    (FinalizerChange::Added, FinalizerEdit::Add(finalizer))
                } else {
                    (FinalizerChange::Removed, FinalizerEdit::Remove(finalizer))
                };
                out.plan.finalizer(edit);
                out.finalizer = Some(change);
                return Ok(out);
            }
            let mut out = inner.call(call).await?;
            if deleting && out.done && present {
                // Released only when every delete handler has finished.
                out.plan.finalizer(FinalizerEdit::Remove(finalizer));
                out.finalizer = Some(FinalizerChange::Removed);
            }
            Ok(out)
        })
    }
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
        let inner = tower::service_fn(move |call: CycleCall| async move {
            let mut out = CycleOutcome::new(call.cause.reason);
            out.done = done;
            out.ran.push(("h".into(), HandlerOutcome::Succeeded));
            Ok::<_, Infallible>(out)
        });
        let layer = FinalizerLayer::new(F, Arc::new(move |_b: &Value| required));
        let svc = layer.layer(inner);
        match tower::ServiceExt::oneshot(svc, cycle(body)).await {
            Ok(o) => o,
            Err(never) => match never {},
        }
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
