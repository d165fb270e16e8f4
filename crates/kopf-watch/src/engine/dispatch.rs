//! The engine's dispatcher: the slot of every known object (its running worker's end, or
//! what its last worker left), the workers' tasks, and the listed objects waiting for a
//! place ([`crate::backlog`]). One method per thing that happens to the objects: an event,
//! a worker's end, a relist without them, a pause, a new shard scope, a reconcile request.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kopf_core::causes::EventKind;
use kopf_core::processing::Check;
use kopf_core::reconcile::{Kick, Trigger};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::backlog::{Backlog, STARTED_AHEAD};
use crate::shared::{Ended, Inbox, Live, Observed, Slot, WorkerShared, object_span, rv};
use crate::uid::Uid;

/// The engine's end of an object's worker: where its states go.
pub(crate) use crate::shared::StateSender;

/// The per-object slots of one resource and their workers.
pub(crate) struct Dispatcher {
    shared: Arc<WorkerShared>,
    slots: HashMap<Uid, Slot>,
    tasks: JoinSet<Ended>,
    /// Listed objects that cannot start yet, compact (see `backlog`).
    backlog: Backlog,
}

impl Dispatcher {
    /// No object known yet.
    pub(crate) fn new(shared: Arc<WorkerShared>) -> Self {
        Dispatcher {
            shared,
            slots: HashMap::new(),
            tasks: JoinSet::new(),
            backlog: Backlog::default(),
        }
    }

    /// Runs the index handlers on an event (they see every event, in order, also while
    /// standing by).
    pub(crate) async fn index(&self, uid: &str, body: &Value, kind: EventKind) {
        self.shared.index(uid, body, kind).await;
    }

    /// Hands an object's event to its worker (raw-event handlers see it first), starting
    /// a worker when the object has none running (a listed object beyond the places, later:
    /// it waits in the backlog).
    pub(crate) async fn dispatch(&mut self, uid: String, body: Arc<Value>, kind: EventKind) {
        let known = self.slots.contains_key(uid.as_str());
        // A diff-base too large to be stored is on the state as if it were.
        let body = match self.shared.cycle.oversized.restore(&uid, &body) {
            Some(restored) => Arc::new(restored),
            None => body,
        };
        // Raw-event handlers see every event, in order.
        self.shared.on_event(&uid, &body, kind, known).await;
        let mut observed = Observed::new(body, kind);
        let shared = &self.shared;
        let slot = slot(shared, &mut self.slots, &uid);
        if let Some(seen) = self.backlog.forget(&uid) {
            // A newer state replaces a waiting listed one, which stays listed (its resume
            // handlers are still due), and its change waits since that one came.
            slot.listed();
            observed.seen = observed.seen.min(seen);
        }
        if slot.live.as_ref().is_some_and(|l| l.tx.is_closed()) {
            // Its worker is gone without retiring (ended for good, or its task failed):
            // a new one takes this state.
            slot.live = None;
        }
        if let Some(live) = &slot.live {
            // Counted before it is sent: the worker (maybe on another thread) may pick it
            // at once, and its `picked` must see the flag, or the gauge stays up forever.
            shared.queued(&live.pending);
            live.tx.send_modify(|latest| {
                // A state the worker has not taken yet is replaced: its change waits since
                // that one came, and a listed one's resume handlers are still due.
                if let Some(older) = latest.as_ref().filter(|o| !o.taken) {
                    observed.seen = observed.seen.min(older.seen);
                    observed.listed |= older.listed;
                }
                *latest = Some(observed);
            });
            return;
        }
        if kind != EventKind::Deleted && settled(shared, slot, &uid, &mut observed) {
            return;
        }
        if kind == EventKind::Listed && shared.lanes.listed_waiting() >= STARTED_AHEAD {
            self.backlog.push(&uid, &observed.body, observed.seen);
            return;
        }
        start(shared, slot, &mut self.tasks, uid, observed);
    }

    /// Marks an object as listed (its resume handlers due) before its first state.
    pub(crate) fn mark_listed(&mut self, uid: &str) {
        let slot = slot(&self.shared, &mut self.slots, uid);
        if slot.live.is_none() {
            slot.listed();
        }
    }

    /// Starts the backlog's next objects while the listed ones ahead are few.
    pub(crate) fn feed(&mut self) {
        while !self.backlog.is_empty() && self.shared.lanes.listed_waiting() < STARTED_AHEAD {
            let Some((uid, body, seen)) = self.backlog.pop() else {
                break;
            };
            // Gone meanwhile (a relist without it, another replica's range), or running.
            let Some(slot) = self
                .slots
                .get_mut(uid.as_str())
                .filter(|s| s.live.is_none())
            else {
                continue;
            };
            let mut observed = Observed::new(body, EventKind::Listed);
            observed.seen = seen;
            start(&self.shared, slot, &mut self.tasks, uid, observed);
        }
    }

    /// Until a worker's task ends (its end, None if the task failed) or the backlog may
    /// move on (a listed object ahead got its place: None); never while neither can happen.
    pub(crate) async fn progress(&mut self) -> Option<Ended> {
        let waiting = !self.backlog.is_empty();
        tokio::select! {
            Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => joined.ok(),
            _ = self.shared.lanes.listed_moved(), if waiting => None,
            else => std::future::pending().await,
        }
    }

    /// A worker's task ended. Retired with nothing new for it: the object keeps only what
    /// the worker left. Retired while a new state came: a worker goes on with it. Ended for
    /// good (the object is gone): the object is forgotten.
    pub(crate) fn ended(&mut self, ended: Ended) {
        let Some(slot) = self.slots.get_mut(ended.uid.as_str()) else {
            // Removed meanwhile (gone from a listing, a pause, another replica's range).
            return;
        };
        if !slot.runs(&ended.pending) {
            return;
        }
        match ended.retired {
            Some(retired) if retired.inbox.rx.has_changed().unwrap_or(false) => {
                // The engine's latest state came after the worker's last look.
                let shared = self.shared.clone();
                let Ended { uid, pending, .. } = ended;
                self.tasks.spawn(async move {
                    shared
                        .work(uid, retired.inbox, pending, retired.kick, retired.resume)
                        .await
                });
            }
            Some(retired) => {
                slot.live = None;
                slot.resume = retired.resume;
            }
            None => {
                self.slots.remove(ended.uid.as_str());
                self.shared.untracked();
            }
        }
    }

    /// Joins the workers' tasks as they end until `until` completes.
    pub(crate) async fn join_until(&mut self, until: impl Future<Output = ()>) {
        let mut until = std::pin::pin!(until);
        loop {
            tokio::select! {
                _ = &mut until => break,
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Ok(e) = joined {
                        self.ended(e);
                    }
                }
            }
        }
    }

    /// Waits until every worker's task has ended (their ends not looked at).
    pub(crate) async fn drain(&mut self) {
        while self.tasks.join_next().await.is_some() {}
    }

    /// The uids of the known objects.
    pub(crate) fn known(&self) -> impl Iterator<Item = &str> {
        self.slots.keys().map(Uid::as_str)
    }

    /// An object went away unseen (a relist without it): its slot goes (dropping the
    /// sender ends its worker once it is idle), its marks and index entries are forgotten.
    pub(crate) fn vanished(&mut self, uid: &str) {
        if self.slots.remove(uid).is_some() {
            self.shared.untracked();
        }
        self.forget(uid);
        self.shared.settings.indexes.forget(uid);
    }

    /// Forgets a deleted object's marks (handled once, its event budget).
    pub(crate) fn forget(&self, uid: &str) {
        self.shared.forget(uid);
    }

    /// Ends every worker for a pause or a standby (each drops its pending state and stops
    /// its daemons and timers with "operator pausing"), and forgets the backlog; the uids
    /// of the objects it knew. Then `drain`, then `resumed`.
    pub(crate) fn end_all(&mut self) -> HashSet<String> {
        let mut known = HashSet::new();
        self.shared.end_workers(&mut self.slots, &mut known);
        self.backlog.clear();
        known
    }

    /// The workers ended for a pause are all gone: the next ones stop as usual.
    pub(crate) fn resumed(&self) {
        self.shared.pausing.store(false, Ordering::SeqCst);
    }

    /// As after a start: resume handlers run for the listed objects again.
    pub(crate) fn forget_handled(&self) {
        self.shared.forget_handled();
    }

    /// The objects `keep` does not accept leave (a shard scope given up): their slots go,
    /// and their running workers are told to end; the senders of those, closed once each
    /// has ended.
    pub(crate) fn leave(&mut self, keep: impl Fn(&str) -> bool) -> Vec<Arc<StateSender>> {
        let leaving: Vec<Uid> = self
            .slots
            .keys()
            .filter(|uid| !keep(uid.as_str()))
            .cloned()
            .collect();
        let mut ending = Vec::new();
        for uid in leaving {
            let Some(slot) = self.slots.remove(&uid) else {
                continue;
            };
            self.shared.untracked();
            if let Some(p) = &self.shared.pauses {
                p.forget(uid.as_str());
            }
            // Idle objects (no worker) just leave.
            if let Some(live) = slot.live {
                live.tx.send_replace(None);
                ending.push(live.tx);
            }
        }
        ending
    }

    /// A reconcile request for an object: its running worker is kicked.
    pub(crate) fn kick(&self, uid: &str, trigger: Trigger) {
        if let Some(kick) = self
            .slots
            .get(uid)
            .and_then(|w| w.live.as_ref())
            .and_then(|l| l.kick.as_ref())
        {
            kick.kick(trigger);
        }
    }

    /// The engine stops: workers end when their channel closes, each stopping its daemons
    /// and timers (staged, within their cancellation settings) before it ends.
    pub(crate) async fn shut_down(mut self) {
        self.shared.exiting.store(true, Ordering::SeqCst);
        drop(std::mem::take(&mut self.slots));
        self.drain().await;
    }
}

/// The slot of an object, new (and counted as tracked) if it has none.
fn slot<'w>(shared: &WorkerShared, slots: &'w mut HashMap<Uid, Slot>, uid: &str) -> &'w mut Slot {
    slots.entry(Uid::from(uid)).or_insert_with(|| {
        shared.tracked();
        Slot::default()
    })
}

/// Whether a state of an object with no worker needs none: older than the last write (as a
/// worker would skip it), or one that needs no cycle (own writes coming back, mostly),
/// checked here, without starting one.
fn settled(shared: &WorkerShared, slot: &mut Slot, uid: &str, observed: &mut Observed) -> bool {
    let have = rv(&observed.body);
    if slot.resume.as_deref().is_some_and(|r| r.stale(have)) {
        return true;
    }
    echoed(shared, slot, have);
    let resume = slot.resume.as_deref();
    if shared
        .pauses
        .as_ref()
        .is_some_and(|p| p.moves(uid, &observed.body))
    {
        // Paused or resumed by hand: a worker says so (and stops or starts the daemons).
        return false;
    }
    let kind = observed.event;
    let listed = kind == EventKind::Listed || resume.is_some_and(|r| r.listed);
    let initial = listed && !shared.was_handled(uid);
    if let Check::Cycle(detected) = shared.check(kind, &observed.body, initial) {
        // The cycle takes the cause detected here (for this state) instead of detecting it
        // again.
        observed.detected = detected.map(Arc::new);
        return false;
    }
    if let Some(mut r) = slot.resume.take().map(|r| *r) {
        r.expected_rv = None;
        r.floor = None;
        slot.resume = r.boxed();
    }
    if tracing::enabled!(tracing::Level::DEBUG) {
        object_span(&observed.body).in_scope(|| {
            tracing::debug!(
                "Something has changed, but we are not interested (the essence is the same)."
            )
        });
    }
    true
}

/// A state of an object with no worker that is not older than its last write (`have`): the
/// write came back through the watch, which the metrics see, and newer states need not be
/// compared with it anymore.
fn echoed(shared: &WorkerShared, slot: &mut Slot, have: Option<u64>) {
    let Some(r) = slot.resume.as_deref_mut() else {
        return;
    };
    if let (Some(want), Some(have)) = (r.expected_rv, have)
        && have >= want
    {
        if let Some(at) = r.wrote_at.take() {
            shared.books.echo(tokio::time::Instant::now() - at, true);
        }
        r.expected_rv = None;
    }
}

/// Starts a worker for an object that has none.
fn start(
    shared: &Arc<WorkerShared>,
    slot: &mut Slot,
    tasks: &mut JoinSet<Ended>,
    uid: String,
    observed: Observed,
) {
    let listed = observed.event == EventKind::Listed;
    let (tx, rx) = watch::channel(Some(observed));
    let tx = Arc::new(tx);
    let inbox = Inbox {
        rx,
        tx: Arc::downgrade(&tx),
    };
    let pending = Arc::new(AtomicBool::new(false));
    shared.queued(&pending);
    let kick = shared.reconcile.as_ref().map(|_| Arc::new(Kick::default()));
    slot.live = Some(Live {
        tx,
        pending: pending.clone(),
        kick: kick.clone(),
    });
    let resume = slot.resume.take();
    let shared = shared.clone();
    if listed {
        shared.lanes.arriving();
    }
    let mut closed = inbox.rx.clone();
    tasks.spawn(async move {
        if listed {
            // A listed object's worker waiting at the start gate still counts as arriving:
            // the backlog starts no more of them meanwhile (or every object of the listing
            // would wait there with its body).
            loop {
                tokio::select! {
                    _ = shared.settings.gate.wait() => break,
                    changed = closed.changed() => if changed.is_err() { break },
                }
            }
            shared.lanes.arrived();
        }
        drop(closed);
        shared.work(uid, inbox, pending, kick, resume).await
    });
}
