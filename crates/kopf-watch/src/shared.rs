//! What the workers of one resource share, in the parts that own it: the cycle
//! ([`crate::cycle::Cycle`]), the handlers that see every event ([`crate::observe::Observers`]),
//! daemons and timers ([`crate::spawning::Spawning`]), the Events ([`crate::events::Poster`]),
//! the bookkeeping across workers ([`crate::books::Books`]); what the engine calls on them;
//! and what the engine keeps of each object between its workers ([`Slot`], [`Resume`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kopf_core::causes::EventKind;
use kopf_core::events::RateLimiter;
use kopf_core::handler::{Extensions, HandlerSpec};
use kopf_core::layers::Stack;
use kopf_core::processing::Check;
use kopf_core::processing::Processor;
use kopf_core::reconcile::ReconcileSpec;
use serde_json::Value;

use crate::books::Books;
use crate::cycle::Cycle;
use crate::events::Poster;
use crate::lanes::Lanes;
use crate::object_pause::Pauses;
use crate::observe::Observers;
use crate::resource::ResourceRef;
use crate::settings::Settings;
use crate::spawning::Spawning;
use crate::uid::Uid;
use crate::write::Writes;

pub(crate) use crate::object::{Observed, api_for, object_span, rv};

/// What the engine gives the workers of a resource.
pub(crate) struct Setup {
    pub(crate) client: kube::Client,
    pub(crate) resource: ResourceRef,
    pub(crate) processor: Processor,
    pub(crate) stack: Stack,
    pub(crate) extensions: Extensions,
    pub(crate) indexers: Vec<HandlerSpec>,
    pub(crate) watchers: Vec<HandlerSpec>,
    pub(crate) spawners: Vec<HandlerSpec>,
    pub(crate) settings: Settings,
    /// The operator's gate: no cycle starts while it is paused.
    pub(crate) operator_gate: kopf_core::gate::Gate,
    /// The resource's reconcile, if it has one.
    pub(crate) reconcile: Option<ReconcileSpec>,
    /// How its objects are read as they arrive.
    pub(crate) arrival: crate::keeping::Arrival,
}

/// The workers of one resource: the parts their steps run with, and the engine's switches.
pub(crate) struct WorkerShared {
    /// The changing cycle, its writes and the reconcile step.
    pub(crate) cycle: Cycle,
    /// Index and raw event handlers.
    pub(crate) observers: Observers,
    /// Daemons and timers.
    pub(crate) spawning: Spawning,
    pub(crate) books: Arc<Books>,
    pub(crate) poster: Arc<Poster>,
    /// The objects paused by hand (None: the pause annotation is off).
    pub(crate) pauses: Option<Pauses>,
    /// Places for cycles: changed objects first, listed ones bounded (see `lanes`).
    pub(crate) lanes: Arc<Lanes>,
    pub(crate) settings: Settings,
    /// The operator's gate: no cycle starts while it is paused.
    pub(crate) operator_gate: kopf_core::gate::Gate,
    /// The resource's reconcile, if it has one.
    pub(crate) reconcile: Option<ReconcileSpec>,
    /// The engine stops: daemons stop with "operator exiting".
    pub(crate) exiting: AtomicBool,
    /// The engine ends the workers for a pause: daemons stop with "operator pausing".
    pub(crate) pausing: AtomicBool,
}

impl WorkerShared {
    /// The parts of a resource's workers, from what the engine gives.
    pub(crate) fn new(setup: Setup) -> Self {
        let Setup {
            client,
            resource,
            processor,
            stack,
            extensions,
            indexers,
            watchers,
            spawners,
            settings,
            operator_gate,
            reconcile,
            arrival,
        } = setup;
        let metrics = settings.metrics.clone();
        let plural = resource.api_resource.plural.clone();
        let writes = Arc::new(Writes::new(client.clone(), resource, metrics.clone()));
        let limiter = RateLimiter::with_burst(settings.event_interval, settings.event_burst);
        let poster = Arc::new(Poster::new(client, settings.reporter.clone(), limiter));
        let books = Arc::new(Books::new(metrics.clone(), plural.clone()));
        let pauses = settings.paused_annotation.clone().map(|annotation| {
            Pauses::new(annotation, poster.clone(), metrics.clone(), plural.clone())
        });
        let lanes = Lanes::new(settings.worker_limit);
        let spawning = Spawning::new(
            (&plural, spawners, &arrival),
            processor.persistence().clone(),
            (stack, extensions.clone()),
            writes.clone(),
            poster.clone(),
        );
        let observers = Observers {
            indexers,
            watchers,
            extensions: extensions.clone(),
            indexes: settings.indexes.clone(),
            writes: writes.clone(),
            poster: poster.clone(),
        };
        let oversized = crate::oversized::Oversized::new(processor.persistence().essence.clone());
        let cycle = Cycle {
            processor,
            writes,
            poster: poster.clone(),
            books: books.clone(),
            lanes: lanes.clone(),
            extensions,
            metrics,
            arrival,
            oversized,
        };
        WorkerShared {
            cycle,
            observers,
            spawning,
            books,
            poster,
            pauses,
            lanes,
            settings,
            operator_gate,
            reconcile,
            exiting: AtomicBool::new(false),
            pausing: AtomicBool::new(false),
        }
    }

    /// Ends every worker for a pause or a standby (each drops its pending state and stops
    /// its daemons and timers with "operator pausing"); their uids go to `known`, so that
    /// the listing afterwards can tell which objects went away meanwhile. The caller waits
    /// for the workers' tasks, then clears `pausing`.
    pub(crate) fn end_workers(
        &self,
        workers: &mut HashMap<Uid, Slot>,
        known: &mut HashSet<String>,
    ) {
        self.pausing.store(true, Ordering::SeqCst);
        for (uid, slot) in workers.drain() {
            if let Some(live) = slot.live {
                live.tx.send_replace(None);
            }
            self.untracked();
            known.insert(uid.as_str().to_string());
        }
    }

    /// Whether the object's cause handlers finished once.
    pub(crate) fn was_handled(&self, uid: &str) -> bool {
        self.books.was_handled(uid)
    }

    /// Forgets an object that is gone: its "handled once" mark and its event budget.
    pub(crate) fn forget(&self, uid: &str) {
        self.books.forget(uid);
        self.poster.forget(uid);
        self.cycle.oversized.forget(uid);
        if let Some(p) = &self.pauses {
            p.forget(uid);
        }
    }

    /// Whether the object's state `body` is paused by hand (see [`Pauses`]).
    pub(crate) fn is_paused(&self, body: &Value) -> bool {
        self.pauses
            .as_ref()
            .is_some_and(|p| p.reason(body).is_some())
    }

    /// Forgets which objects were handled once (after a pause: as after a start, the
    /// listed objects get their resume handlers).
    pub(crate) fn forget_handled(&self) {
        self.books.forget_all();
    }

    /// Whether a state of an object with no worker needs one: [`Check::Settled`] when the
    /// cycle on it would do nothing (the essence is the stored diff-base, the finalizer is as
    /// the handlers need it, no condition is declared, no resume handler is due; own writes
    /// coming back are such states, checked here, in the engine, without a task or a held
    /// body), else the cause the processor detected to decide, for the cycle to take.
    pub(crate) fn check(&self, event: EventKind, body: &Value, initial: bool) -> Check {
        // Objects with daemons, timers or a reconcile keep their worker: it is where those
        // run, so its first state always starts one. Whether the state needs a cycle is the
        // processor's rule.
        if !self.spawning.spawners.is_empty() || self.reconcile.is_some() {
            return Check::Cycle(None);
        }
        self.cycle.processor.check(event, body, initial)
    }

    /// An object became known (a slot was made for it).
    pub(crate) fn tracked(&self) {
        self.books.tracked();
    }

    /// An object is not known anymore (its slot was removed).
    pub(crate) fn untracked(&self) {
        self.books.untracked();
    }

    /// A new state waits for the worker of `pending`.
    pub(crate) fn queued(&self, pending: &AtomicBool) {
        self.books.queued(pending);
    }

    /// Runs the index handlers on an event (see [`Observers::index`]).
    pub(crate) async fn index(&self, uid: &str, body: &Value, kind: EventKind) {
        self.observers.index(uid, body, kind).await;
    }

    /// Runs the raw event handlers on an event (see [`Observers::on_event`]).
    pub(crate) async fn on_event(&self, uid: &str, body: &Value, kind: EventKind, known: bool) {
        // A paused object's raw-event handlers wait too (but its deletion is always seen).
        if kind != EventKind::Deleted && self.is_paused(body) {
            return;
        }
        self.observers.on_event(uid, body, kind, known).await;
    }
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

/// The engine's end of an object's channel to its worker.
pub(crate) type StateSender = tokio::sync::watch::Sender<Option<Observed>>;

/// A worker's end of its object's channel: the states it receives, and a weak hold on the
/// engine's end, through which an idle worker slims the state the channel keeps (weak: the
/// engine dropping its end still closes the channel and ends the worker).
pub(crate) struct Inbox {
    pub(crate) rx: tokio::sync::watch::Receiver<Option<Observed>>,
    pub(crate) tx: std::sync::Weak<StateSender>,
}

/// The engine's end of an object's running worker: its latest state, and whether a state
/// is waiting for the worker (the queue depth of the metrics).
pub(crate) struct Live {
    pub(crate) tx: Arc<StateSender>,
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
    /// When that write was made.
    pub(crate) wrote_at: Option<tokio::time::Instant>,
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
    pub(crate) inbox: Inbox,
    pub(crate) kick: Option<Arc<kopf_core::reconcile::Kick>>,
    pub(crate) resume: Option<Box<Resume>>,
}
