//! Daemons and timers of an object, as its worker sees them: spawned once the object carries
//! the finalizer, told about each new state, stopped (and waited for) when it is deleted;
//! their results go out through the worker's writes.

use std::sync::Arc;

use kopf_core::causes::EventKind;
use kopf_core::daemons::{Deliver, Delivered, Delivery, ObjectDaemons, SpawnContext, StopReason};
use kopf_core::memo::Memos;
use serde_json::Value;

use crate::shared::{Observed, WorkerShared, object_span};
use crate::write::CycleEnd;

/// An object's daemons and timers, with the essence they last saw (kept only when some
/// timer waits for the object to be idle).
pub(crate) struct Spawned {
    pub(crate) daemons: ObjectDaemons,
    pub(crate) essence: Option<Value>,
}

impl WorkerShared {
    /// The daemons' and timers' view of a new state: spawned when the object (with our
    /// finalizer) matches, stopped — and waited for — when it is being deleted.
    pub(crate) async fn sync_daemons(
        self: &Arc<Self>,
        uid: &str,
        observed: &Observed,
        memo: &Memos,
        spawned: &mut Option<Spawned>,
    ) {
        let body = &observed.body;
        // Only idle timers care when the essence last changed.
        let essence = self
            .idle_timers
            .then(|| kopf_diff::essence::essence(body, &self.processor.persistence().essence));
        let s = spawned.get_or_insert_with(|| Spawned {
            daemons: ObjectDaemons::new(Value::clone(body), self.spawn_context(uid, memo, body)),
            essence: essence.clone(),
        });
        let essential = s.essence != essence;
        s.essence = essence;
        s.daemons.observe(body, essential);
        let deleting = observed.event == EventKind::Deleted
            || body
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|v| !v.is_null());
        if deleting {
            if s.daemons.is_running() {
                // The deletion is handled (and the finalizer released) once they are gone.
                s.daemons.stop_all(StopReason::Deleted).await;
            }
        } else {
            // Daemons that need the finalizer start once it is there; those that do not (the
            // followers of pod-log handlers) start at once.
            let stops = if kopf_core::finalizers::has(body, &self.processor.persistence().finalizer)
            {
                s.daemons.spawn_matching(&self.spawners, body)
            } else if !self.free_spawners.is_empty() {
                s.daemons.spawn_matching(&self.free_spawners, body)
            } else {
                None
            };
            if let Some(stops) = stops {
                tokio::spawn(stops);
            }
        }
    }

    pub(crate) fn spawn_context(
        self: &Arc<Self>,
        uid: &str,
        memo: &Memos,
        body: &Value,
    ) -> SpawnContext {
        let shared = self.clone();
        let uid = uid.to_string();
        let deliver: Deliver = Arc::new(move |d: Delivery| {
            let shared = shared.clone();
            let uid = uid.clone();
            Box::pin(async move {
                let mut stored = Delivered::Done;
                if !d.plan.is_noop_for(&d.body) {
                    match shared.apply(&d.body, &d.plan, &d.delivered, None).await {
                        CycleEnd::Rejected(rejected) => {
                            if let Some(message) = rejected.into_values().next() {
                                stored = Delivered::Rejected(message);
                            }
                        }
                        CycleEnd::Failed(error) | CycleEnd::Conflict(error) => {
                            tracing::error!(
                                "Writing a daemon's or timer's outcome failed: {error}"
                            );
                        }
                        CycleEnd::Next { .. } | CycleEnd::Gone => {}
                    }
                }
                shared.post_events(&uid, &d.body, d.events).await;
                stored
            })
        });
        SpawnContext {
            memo: memo.clone(),
            extensions: self.extensions.clone(),
            stack: self.stack.clone(),
            deliver,
            span: object_span(body),
        }
    }
}
