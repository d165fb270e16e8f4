//! Daemons and timers of an object, as its worker sees them: spawned once the object carries
//! the finalizer, told about each new state, stopped (and waited for) when it is deleted;
//! their results go out through the worker's writes.

use std::sync::Arc;

use kopf_core::causes::EventKind;
use kopf_core::daemons::{Deliver, Delivered, Delivery, ObjectDaemons, SpawnContext, StopReason};
use kopf_core::handler::{Extensions, HandlerKind, HandlerSpec};
use kopf_core::layers::Stack;
use kopf_core::memo::Memos;
use kopf_core::processing::Persistence;
use serde_json::Value;

use crate::events::Poster;
use crate::object::{Observed, object_span};
use crate::write::{CycleEnd, Writes};

/// An object's daemons and timers, with the essence they last saw (kept only when some
/// timer waits for the object to be idle).
pub(crate) struct Spawned {
    pub(crate) daemons: ObjectDaemons,
    pub(crate) essence: Option<Value>,
}

/// The daemons and timers of one resource, and what they need to run and to deliver.
pub(crate) struct Spawning {
    /// The daemon and timer handlers.
    pub(crate) spawners: Vec<HandlerSpec>,
    /// Those of the spawners that need no finalizer (pod-log followers): they start on
    /// objects without it.
    free_spawners: Vec<HandlerSpec>,
    /// Some timer waits for objects to be idle (their essence changes matter).
    idle_timers: bool,
    persistence: Persistence,
    stack: Stack,
    extensions: Extensions,
    writes: Arc<Writes>,
    poster: Arc<Poster>,
}

impl Spawning {
    pub(crate) fn new(
        spawners: Vec<HandlerSpec>,
        persistence: Persistence,
        (stack, extensions): (Stack, Extensions),
        writes: Arc<Writes>,
        poster: Arc<Poster>,
    ) -> Self {
        Spawning {
            idle_timers: spawners
                .iter()
                .any(|h| matches!(&h.kind, HandlerKind::Timer(o) if o.idle.is_some())),
            free_spawners: spawners
                .iter()
                .filter(|h| !h.requires_finalizer)
                .cloned()
                .collect(),
            spawners,
            persistence,
            stack,
            extensions,
            writes,
            poster,
        }
    }

    /// The daemons' and timers' view of a new state: spawned when the object (with our
    /// finalizer) matches, stopped — and waited for — when it is being deleted.
    pub(crate) async fn sync(
        &self,
        uid: &str,
        observed: &Observed,
        memo: &Memos,
        spawned: &mut Option<Spawned>,
    ) {
        let body = &observed.body;
        // Only idle timers care when the essence last changed.
        let essence = self
            .idle_timers
            .then(|| kopf_diff::essence::essence(body, &self.persistence.essence));
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
            let stops = if kopf_core::finalizers::has(body, &self.persistence.finalizer) {
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

    /// What an object's daemons and timers run with; their outcomes are written and their
    /// events posted as a cycle's.
    fn spawn_context(&self, uid: &str, memo: &Memos, body: &Value) -> SpawnContext {
        let (writes, poster) = (self.writes.clone(), self.poster.clone());
        let uid = uid.to_string();
        let deliver: Deliver = Arc::new(move |d: Delivery| {
            let (writes, poster) = (writes.clone(), poster.clone());
            let uid = uid.clone();
            Box::pin(async move {
                let mut stored = Delivered::Done;
                if !d.plan.is_noop_for(&d.body) {
                    match writes.apply(&d.body, &d.plan, &d.delivered, None).await {
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
                poster.post(&uid, &d.body, d.events).await;
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
