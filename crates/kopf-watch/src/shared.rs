//! What the workers of one resource share: the processor, the handlers that run outside the
//! changing cycle, the API client, settings and bookkeeping; and the small helpers all the
//! worker's steps use (the object's log span, its resourceVersion, its API).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kopf_core::causes::{EventKind, Reason};
use kopf_core::events::RateLimiter;
use kopf_core::handler::{Cause, Extensions, HandlerSpec};
use kopf_core::layers::{HandlerCall, Invoke, Stack};
use kopf_core::processing::Processor;
use kube::api::Api;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde_json::Value;
use tower::ServiceExt;

use crate::ResourceRef;
use crate::apply::Pruned;
use crate::settings::Settings;

/// One observed state of an object, for its worker (the body is shared, never cloned).
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub(crate) body: Arc<Value>,
    pub(crate) event: EventKind,
}

pub(crate) struct WorkerShared {
    pub(crate) client: kube::Client,
    pub(crate) resource: ResourceRef,
    pub(crate) processor: Processor,
    pub(crate) stack: Stack,
    pub(crate) extensions: Extensions,
    pub(crate) indexers: Vec<HandlerSpec>,
    pub(crate) watchers: Vec<HandlerSpec>,
    pub(crate) spawners: Vec<HandlerSpec>,
    /// Those of the spawners that need no finalizer (pod-log followers): they start on
    /// objects without it.
    pub(crate) free_spawners: Vec<HandlerSpec>,
    /// Some timer waits for objects to be idle (their essence changes matter).
    pub(crate) idle_timers: bool,
    /// The engine stops: daemons stop with "operator exiting".
    pub(crate) exiting: std::sync::atomic::AtomicBool,
    pub(crate) handled_once: Mutex<HashSet<crate::uid::Uid>>,
    /// Places for cycles: changed objects first, listed ones bounded (see `lanes`).
    pub(crate) lanes: Arc<crate::lanes::Lanes>,
    pub(crate) events: Mutex<RateLimiter>,
    /// Fields of results the API server dropped, already reported.
    pub(crate) pruned: Mutex<HashSet<Pruned>>,
    pub(crate) settings: Settings,
    /// The operator's gate: no cycle starts while it is paused.
    pub(crate) operator_gate: kopf_core::gate::Gate,
    /// The engine ends the workers for a pause: daemons stop with "operator pausing".
    pub(crate) pausing: std::sync::atomic::AtomicBool,
    /// The resource's reconcile, if it has one.
    pub(crate) reconcile: Option<kopf_core::reconcile::ReconcileSpec>,
}

pub(crate) fn rv(body: &Value) -> Option<u64> {
    body.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

impl WorkerShared {
    /// Ends every worker for a pause or a standby (each drops its pending state and stops
    /// its daemons and timers with "operator pausing"); their uids go to `known`, so that
    /// the listing afterwards can tell which objects went away meanwhile. The caller waits
    /// for the workers' tasks, then clears `pausing`.
    pub(crate) fn end_workers(
        &self,
        workers: &mut std::collections::HashMap<crate::uid::Uid, Slot>,
        known: &mut HashSet<String>,
    ) {
        self.pausing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for (uid, slot) in workers.drain() {
            if let Some(live) = slot.live {
                live.tx.send_replace(None);
            }
            self.untracked();
            known.insert(uid.as_str().to_string());
        }
    }

    pub(crate) fn was_handled(&self, uid: &str) -> bool {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(uid)
    }

    /// Forgets an object that is gone: its "handled once" mark and its event budget.
    pub(crate) fn forget(&self, uid: &str) {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(uid);
    }

    /// Forgets which objects were handled once (after a pause: as after a start, the
    /// listed objects get their resume handlers).
    pub(crate) fn forget_handled(&self) {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub(crate) fn api_for<K>(&self, body: &Value) -> Api<K>
    where
        K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>,
    {
        let namespace = body.pointer("/metadata/namespace").and_then(Value::as_str);
        api_for(&self.client, &self.resource, namespace)
    }

    /// Whether a state of an object with no worker needs none: the cycle on it would do
    /// nothing (the essence is the stored diff-base, the finalizer is as the handlers need
    /// it, no condition is declared, no resume handler is due). Own writes coming back are
    /// such states: they are checked here, in the engine, without a task or a held body.
    pub(crate) fn settled(&self, event: EventKind, body: &Value, initial: bool) -> bool {
        // Objects with daemons, timers or a reconcile keep their worker: it is where those
        // run, so its first state always starts one. Whether the state needs a cycle is the
        // processor's rule.
        self.spawners.is_empty()
            && self.reconcile.is_none()
            && !self.processor.needs_cycle(event, body, initial)
    }

    /// An object became known (a slot was made for it).
    pub(crate) fn tracked(&self) {
        if let Some(m) = &self.settings.metrics {
            m.tracked(&self.resource.api_resource.plural, 1);
        }
    }

    /// An object is not known anymore (its slot was removed).
    pub(crate) fn untracked(&self) {
        if let Some(m) = &self.settings.metrics {
            m.tracked(&self.resource.api_resource.plural, -1);
        }
    }

    /// A new state waits for the worker of `pending`.
    pub(crate) fn queued(&self, pending: &std::sync::atomic::AtomicBool) {
        if !pending.swap(true, std::sync::atomic::Ordering::SeqCst)
            && let Some(m) = &self.settings.metrics
        {
            m.queue(&self.resource.api_resource.plural, 1);
        }
    }

    /// The worker of `pending` has taken its latest state.
    pub(crate) fn picked(&self, pending: &std::sync::atomic::AtomicBool) {
        if pending.swap(false, std::sync::atomic::Ordering::SeqCst)
            && let Some(m) = &self.settings.metrics
        {
            m.queue(&self.resource.api_resource.plural, -1);
        }
    }

    /// A cause for handlers outside the changing cycle (indexes, raw events).
    pub(crate) fn plain_cause(&self, body: &Value) -> Cause {
        let mut cause = Cause::for_body(Reason::Noop, body.clone());
        cause.extensions = self.extensions.clone();
        cause
    }

    /// One call of a handler, without retries (a panic is an error of the handler).
    pub(crate) async fn invoke(
        &self,
        spec: &HandlerSpec,
        cause: Cause,
    ) -> kopf_core::layers::CallOutcome {
        let call = HandlerCall {
            spec: spec.clone(),
            cause,
            record: Default::default(),
            now: jiff::Timestamp::now(),
        };
        match Invoke.oneshot(call).await {
            Ok(outcome) => outcome,
            Err(never) => match never {},
        }
    }
}

/// The API of a resource in a namespace (None, or a cluster-scoped resource: all).
pub(crate) fn api_for<K>(
    client: &kube::Client,
    resource: &ResourceRef,
    namespace: Option<&str>,
) -> Api<K>
where
    K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>,
{
    match namespace {
        Some(ns) if resource.namespaced => {
            Api::namespaced_with(client.clone(), ns, &resource.api_resource)
        }
        _ => Api::all_with(client.clone(), &resource.api_resource),
    }
}

/// The log span of an object: every line inside carries its namespace and name.
pub(crate) fn object_span(body: &Value) -> tracing::Span {
    let field = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or("");
    tracing::info_span!(
        "object",
        namespace = %field("/metadata/namespace"),
        name = %field("/metadata/name"),
        kind = %field("/kind"),
        uid = %field("/metadata/uid"),
    )
}

/// The span of one processing cycle of an object: its log span (named `object`, like
/// [`object_span`]'s, so its lines carry the object) with what tracing exports of the cycle
/// (OpenTelemetry, with `kopf`'s `otel` feature): the resource, and, recorded at its end by
/// `worker::record_cycle`, the cause's `reason` and the cycle's `outcome`. The handler calls of
/// the cycle are its children (the `handler` spans of `kopf_core::layers`).
pub(crate) fn cycle_span(body: &Value, resource: &str) -> tracing::Span {
    let field = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or("");
    tracing::info_span!(
        "object",
        namespace = %field("/metadata/namespace"),
        name = %field("/metadata/name"),
        kind = %field("/kind"),
        uid = %field("/metadata/uid"),
        resource = %resource,
        otel.name = "cycle",
        reason = tracing::field::Empty,
        outcome = tracing::field::Empty,
        delay = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    )
}

/// What the engine keeps of one object: its worker's end while a worker runs, and what a
/// retired worker left for the next one. An idle object has no worker, no task and no body.
#[derive(Default)]
pub(crate) struct Slot {
    /// The running worker, if any.
    pub(crate) live: Option<Live>,
    /// What the last worker left (None: nothing worth keeping).
    pub(crate) resume: Option<Box<Resume>>,
}

impl Slot {
    /// Marks the object as listed for its next worker: its resume handlers are due.
    pub(crate) fn listed(&mut self) {
        let mut resume = self.resume.take().map(|r| *r).unwrap_or_default();
        resume.listed = true;
        self.resume = resume.boxed();
    }

    /// Whether `pending` is the flag of this slot's running worker.
    pub(crate) fn runs(&self, pending: &Arc<std::sync::atomic::AtomicBool>) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(&l.pending, pending))
    }
}

/// The engine's end of an object's running worker: its latest state, and whether a state
/// is waiting for the worker (the queue depth of the metrics).
pub(crate) struct Live {
    pub(crate) tx: tokio::sync::watch::Sender<Option<Observed>>,
    pub(crate) pending: Arc<std::sync::atomic::AtomicBool>,
    /// Reconcile requests from owned and related objects (only with a reconcile).
    pub(crate) kick: Option<Arc<kopf_core::reconcile::Kick>>,
}

/// What a worker that ended because it had nothing left to do hands to the next worker of
/// its object, so that ending it changes nothing: the object was first seen in a listing
/// (its resume handlers are still due), the resourceVersion of its last write (older
/// states are skipped until that write comes back), the floor of a read after a slow watch,
/// and its memo once a handler used it.
#[derive(Debug, Default)]
pub(crate) struct Resume {
    pub(crate) listed: bool,
    pub(crate) expected_rv: Option<u64>,
    pub(crate) floor: Option<u64>,
    pub(crate) memo: Option<kopf_core::memo::Memos>,
}

impl Resume {
    /// Whether a state of resourceVersion `have` is older than the last write or read.
    pub(crate) fn stale(&self, have: Option<u64>) -> bool {
        have.is_some_and(|have| {
            self.expected_rv.is_some_and(|want| have < want)
                || self.floor.is_some_and(|floor| have < floor)
        })
    }

    /// Boxed when there is anything to keep (most objects keep nothing).
    pub(crate) fn boxed(self) -> Option<Box<Resume>> {
        let empty = !self.listed
            && self.expected_rv.is_none()
            && self.floor.is_none()
            && self.memo.is_none();
        (!empty).then(|| Box::new(self))
    }
}

/// How a worker's task ended.
pub(crate) struct Ended {
    pub(crate) uid: String,
    pub(crate) pending: Arc<std::sync::atomic::AtomicBool>,
    /// It retired (nothing left to do): its receiver, in case a state came meanwhile, and
    /// what it leaves. None: the object is gone, or the engine ended the worker.
    pub(crate) retired: Option<Retired>,
}

/// A retired worker's receiver and leftovers.
pub(crate) struct Retired {
    pub(crate) rx: tokio::sync::watch::Receiver<Option<Observed>>,
    pub(crate) kick: Option<Arc<kopf_core::reconcile::Kick>>,
    pub(crate) resume: Option<Box<Resume>>,
}
