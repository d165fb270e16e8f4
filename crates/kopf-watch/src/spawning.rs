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
use kopf_core::reads::Reads;
use serde_json::Value;

use crate::events::Poster;
use crate::keeping::Arrival;
use crate::object::{Observed, object_span};
use crate::write::{CycleEnd, Writes};

/// An object's daemons and timers, with a digest of the essence they last saw (kept only
/// when some timer waits for the object to be idle: only its changes matter), and the state
/// they keep (trimmed to what they read) with a weak hold on the state it was made from.
pub(crate) struct Spawned {
    pub(crate) daemons: ObjectDaemons,
    pub(crate) essence: Option<u64>,
    pub(crate) kept: Arc<Value>,
    /// Weak: it keeps the state's allocation (not its contents), so that its address is
    /// not another state's.
    kept_from: std::sync::Weak<Value>,
}

impl Spawned {
    /// What the daemons keep of `state`, if it is the state they last saw.
    pub(crate) fn kept_of(&self, state: &Arc<Value>) -> Option<Arc<Value>> {
        std::ptr::eq(self.kept_from.as_ptr(), Arc::as_ptr(state)).then(|| self.kept.clone())
    }
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
    /// What the daemons and timers read: all that is kept of each object for them (and of
    /// the state an idle worker's channel keeps, see `Worker::slim`).
    pub(crate) keep: Arc<Reads>,
    /// They keep the state as it arrived (they read all of it, or exactly what arrival
    /// kept): shared, not trimmed again.
    pub(crate) shares: bool,
    persistence: Persistence,
    stack: Stack,
    extensions: Extensions,
    writes: Arc<Writes>,
    poster: Arc<Poster>,
}

impl Spawning {
    pub(crate) fn new(
        (plural, spawners, arrival): (&str, Vec<HandlerSpec>, &Arrival),
        persistence: Persistence,
        (stack, extensions): (Stack, Extensions),
        writes: Arc<Writes>,
        poster: Arc<Poster>,
    ) -> Self {
        let keep = Arc::new(crate::keeping::for_spawners(plural, &spawners, arrival));
        Spawning {
            shares: keep.is_whole() || arrival.keeps_just(&keep),
            keep,
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
        let essence = self.idle_timers.then(|| {
            digest(&kopf_diff::essence::essence(
                body,
                &self.persistence.essence,
            ))
        });
        // One copy: the engine's own where they read what arrival kept.
        let kept = if self.shares {
            observed.body.clone()
        } else {
            Arc::new(self.keep.trim(body))
        };
        let s = spawned.get_or_insert_with(|| Spawned {
            daemons: ObjectDaemons::new(kept.clone(), self.spawn_context(uid, memo, body)),
            essence,
            kept: kept.clone(),
            kept_from: std::sync::Weak::new(),
        });
        let essential = s.essence != essence;
        s.essence = essence;
        s.kept_from = Arc::downgrade(&observed.body);
        s.kept = kept.clone();
        s.daemons.observe(kept, essential);
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
        let keep = self.keep.clone();
        let uid = uid.to_string();
        let deliver: Deliver = Arc::new(move |d: Delivery| {
            let (writes, poster, keep) = (writes.clone(), poster.clone(), keep.clone());
            let uid = uid.clone();
            Box::pin(async move {
                let mut stored = Delivered::Done;
                // The body was trimmed: what the patch writes outside it is sent as it is.
                let unknowns = keep.with_unknowns(&d.body, d.plan.merge_patch());
                let target = unknowns.as_ref().unwrap_or(&d.body);
                if !d.plan.is_noop_for(target) {
                    match writes.apply(target, &d.plan, &d.delivered, None).await {
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

/// A digest of a value (the essence: only whether it changed matters).
fn digest(value: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}
