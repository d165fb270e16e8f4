//! One object's worker: strictly serial, always on the object's latest state. It runs the
//! changing cycle ([`crate::cycle::Cycle`]), keeps the object's daemons and timers in step,
//! waits for its own writes to come back (consistency), sleeps until retry delays are over,
//! throttles framework errors, and runs the reconcile when it is due. What it remembers and
//! decides is a value of its own ([`state::WorkerState`]); this loop only waits, and runs
//! the steps that state asks for.

mod state;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kopf_core::causes::EventKind;
use kopf_core::daemons::StopReason;
use kopf_core::reconcile::{Kick, Trigger};
use kopf_core::throttle::Throttler;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cycle::Fresh;
use crate::lanes::Lane;
use crate::object::object_span;
use crate::shared::{Ended, Inbox, Observed, Resume, Retired, StateSender, WorkerShared};
use crate::spawning::Spawned;
use crate::write::CycleEnd;
use state::{After, Rules, Run, Turn, Woke, WorkerState};

/// Conflicts in a row on one object after which they are worth a warning.
const CONFLICTS_WORTH_A_WARNING: u32 = 3;

impl WorkerShared {
    /// Processes one object serially, always on its latest observed state, until it has
    /// nothing left to do (it retires: the engine keeps what it leaves, and starts a worker
    /// again on the next state) or the object is gone (its daemons and timers are stopped).
    pub(crate) async fn work(
        self: Arc<Self>,
        uid: String,
        mut inbox: Inbox,
        pending: Arc<AtomicBool>,
        kick: Option<Arc<Kick>>,
        resume: Option<Box<Resume>>,
    ) -> Ended {
        let resume = self
            .work_tracked(&uid, &mut inbox, &pending, kick.as_deref(), resume)
            .await;
        self.books.picked(&pending);
        Ended {
            uid,
            pending,
            retired: resume.map(|resume| Retired {
                inbox,
                kick,
                resume: resume.boxed(),
            }),
        }
    }

    /// The worker's life: None when it ended for good, what it leaves when it retired.
    async fn work_tracked(
        &self,
        uid: &str,
        inbox: &mut Inbox,
        pending: &AtomicBool,
        kick: Option<&Kick>,
        resume: Option<Box<Resume>>,
    ) -> Option<Resume> {
        let Inbox { rx, tx } = inbox;
        // Nothing runs before every watch of the operator has listed once, and the indexed
        // resources are indexed (events meanwhile coalesce).
        loop {
            tokio::select! {
                _ = self.settings.gate.wait() => break,
                changed = rx.changed() => if changed.is_err() { return None },
            }
        }
        let resume = resume.map(|r| *r).unwrap_or_default();
        let mut worker = Worker {
            shared: self,
            uid,
            rx,
            tx,
            pending,
            kick,
            spawned: None,
            since: None,
            state: WorkerState::new(
                self.rules(),
                resume,
                (
                    self.settings.memo.clone(),
                    Throttler::new(self.settings.error_delays.clone()),
                ),
                Instant::now(),
            ),
        };
        let retired = worker.run().await;
        if retired.is_some() {
            return retired;
        }
        if let Some(mut s) = worker.spawned {
            Box::pin(s.daemons.stop_all(self.stop_reason())).await;
        }
        None
    }

    /// The rules of this resource's workers' states.
    fn rules(&self) -> Rules {
        Rules {
            consistency_timeout: self.settings.consistency_timeout,
            touch_delays: self.settings.touch_delays,
            reconcile: self.reconcile.as_ref().map(|s| s.config.debounce),
            stays: self.reconcile.is_some() || !self.spawning.spawners.is_empty(),
        }
    }

    /// Why the daemons and timers of a worker that ended for good stop.
    fn stop_reason(&self) -> StopReason {
        if self.exiting.load(Ordering::SeqCst) {
            StopReason::OperatorExiting
        } else if self.pausing.load(Ordering::SeqCst) {
            StopReason::OperatorPausing
        } else {
            StopReason::Deleted
        }
    }
}

/// Where the loop goes after a step.
#[derive(Debug, PartialEq)]
enum Flow {
    /// To the next state at once.
    Again,
    /// To retiring, or waiting for what comes next.
    Wait,
    /// The worker ends for good (the object is gone, or the engine ended it).
    End,
}

/// One object's worker while it runs: its state, its channel and its daemons.
struct Worker<'a> {
    shared: &'a WorkerShared,
    uid: &'a str,
    rx: &'a mut watch::Receiver<Option<Observed>>,
    /// The engine's end of the channel, to slim the state it keeps once idle.
    tx: &'a std::sync::Weak<StateSender>,
    /// Set while a state waits for this worker (the queue depth of the metrics).
    pending: &'a AtomicBool,
    /// Reconcile requests from owned and related objects (only with a reconcile).
    kick: Option<&'a Kick>,
    spawned: Option<Spawned>,
    state: WorkerState,
    /// Since when a change waits to be handled (see `Cycle::converged`).
    since: Option<Instant>,
}

impl Worker<'_> {
    /// The loop: the latest state through a step, then retire or wait. None: it ended for
    /// good; what it leaves when it retired.
    async fn run(&mut self) -> Option<Resume> {
        loop {
            let news = self.state.has_fetched() || self.rx.has_changed().unwrap_or(false);
            let observed = match self.state.take_fetched() {
                Some(fresh) => fresh,
                None => self.take()?,
            };
            // Boxed: a worker that waits (for its daemons, a retry, its own write) then
            // holds the wait's few fields, not room for a whole step.
            match Box::pin(self.step(&observed, news)).await {
                Flow::End => return None,
                Flow::Again => continue,
                Flow::Wait => {}
            }
            let news = self.rx.has_changed().unwrap_or(true);
            let (books, uid) = (&self.shared.books, self.uid);
            if let Some(resume) = self.state.retire(news, || books.was_handled(uid)) {
                return Some(resume);
            }
            if self.state.is_idle(news) {
                self.slim(&observed);
            }
            drop(observed);
            if self.wait().await == Flow::End {
                return None;
            }
        }
    }

    /// The latest state from the channel, marked there as taken (see `Observed::taken`);
    /// None: the engine ended the worker.
    fn take(&mut self) -> Option<Observed> {
        let observed = self.rx.borrow_and_update().clone()?;
        if let Some(tx) = self.tx.upgrade() {
            tx.send_if_modified(|latest| {
                if let Some(o) = latest
                    && Arc::ptr_eq(&o.body, &observed.body)
                {
                    o.taken = true;
                }
                // Not a new state: the worker is not woken.
                false
            });
        }
        Some(observed)
    }

    /// An idle worker that stays for its daemons and timers: the state its channel keeps
    /// becomes what they keep (trimmed to what they read, see `Spawning::keep`). Nothing else
    /// reads that state before the next one comes: there is no reconcile (no kick), and no
    /// wake-up is due (no retry, and no own write still to come back, whose late arrival
    /// would have the state at hand read again or processed again). Left as it is when a
    /// newer state came meanwhile.
    fn slim(&self, processed: &Observed) {
        if self.shared.spawning.shares
            || self.shared.reconcile.is_some()
            || self.state.next_wake().is_some()
        {
            return;
        }
        // What the daemons keep of this very state (the one copy of it).
        let Some(kept) = self
            .spawned
            .as_ref()
            .and_then(|s| s.kept_of(&processed.body))
        else {
            return;
        };
        let Some(tx) = self.tx.upgrade() else {
            return;
        };
        tx.send_if_modified(|latest| {
            if let Some(o) = latest
                && Arc::ptr_eq(&o.body, &processed.body)
            {
                o.body = kept;
                o.detected = None;
            }
            // Not a new state: the worker is not woken.
            false
        });
    }

    /// One state at hand: nothing while the operator pauses, else the reconcile or the
    /// cause handlers, as the state says.
    async fn step(&mut self, observed: &Observed, news: bool) -> Flow {
        if !self.shared.operator_gate.is_open() {
            // No cycle starts (and nothing is spawned) while the operator pauses: the
            // engine ends this worker, or the gate opens first.
            return self.gate_opened().await;
        }
        if let Some(held) = self.held(observed).await {
            return held;
        }
        match self.state.on_state(observed, news, Instant::now()) {
            Turn::Reconcile(why) => self.reconcile(observed, why).await,
            Turn::Causes => self.causes(observed).await,
            Turn::Nobody => Flow::Wait,
        }
    }

    /// The object's pause annotation (see [`crate::object_pause`]): while it is on, the
    /// state is left alone, nothing is due, and its daemons and timers stop (they start
    /// again when it is taken off); `Some(Flow::Wait)` then. None: the state goes on (the
    /// annotation is off, or the object is gone from the API).
    async fn held(&mut self, observed: &Observed) -> Option<Flow> {
        let pauses = self.shared.pauses.as_ref()?;
        if observed.event == EventKind::Deleted {
            // Gone from the API: not paused any more, and nothing to hold.
            pauses.forget(self.uid);
            return None;
        }
        // A state older than our own write or a read says nothing about the pause: left
        // alone while paused, else the cause handlers skip it as usual.
        if self.state.is_stale(observed, Instant::now()) {
            return pauses.is_paused(self.uid).then_some(Flow::Wait);
        }
        if !pauses.hold(self.uid, &observed.body).await {
            return None;
        }
        self.state.hold(observed);
        // Nothing waits for this worker while it holds the state (the queue's gauge).
        self.shared.books.picked(self.pending);
        if let Some(s) = &mut self.spawned {
            Box::pin(s.daemons.stop_all(StopReason::Paused)).await;
        }
        Some(Flow::Wait)
    }

    /// The reconcile's turn on the state at hand.
    async fn reconcile(&mut self, observed: &Observed, why: Trigger) -> Flow {
        let Some(spec) = &self.shared.reconcile else {
            return Flow::Wait;
        };
        let state = &mut self.state;
        let end = Box::pin(self.shared.cycle.reconcile_once(
            spec,
            &observed.body,
            why,
            &mut state.schedule,
            &state.memo,
        ))
        .await;
        if state.on_reconciled(&end, Instant::now()) {
            Flow::Wait
        } else {
            Flow::End
        }
    }

    /// The cause handlers' turn: the daemons and timers see the state, then a cycle runs on
    /// it in its lane, unless it is stale.
    async fn causes(&mut self, observed: &Observed) -> Flow {
        let shared = self.shared;
        if !shared.spawning.spawners.is_empty() {
            let sync =
                shared
                    .spawning
                    .sync(self.uid, observed, &self.state.memo, &mut self.spawned);
            Box::pin(sync).await;
        }
        let admitted = self.state.admit(observed, Instant::now());
        self.report_echo();
        let Some(lane) = admitted else {
            return Flow::Wait;
        };
        // A listed object that changes while it waits moves to the changed objects' lane.
        let mut place = tokio::select! {
            place = shared.lanes.acquire(lane) => place,
            changed = self.rx.changed(), if lane == Lane::Listed => {
                return if changed.is_err() { Flow::End } else { Flow::Again };
            }
        };
        if !shared.operator_gate.is_open() {
            // Paused while waiting for a place: the state waits with the gate.
            return Flow::Again;
        }
        shared.books.picked(self.pending);
        let end = match self.state.run(shared.books.was_handled(self.uid)) {
            Run::Touch => Box::pin(shared.cycle.touch(&observed.body)).await,
            Run::Cycle { initial, rejected } => {
                let since = self.since.map_or(observed.seen, |s| s.min(observed.seen));
                self.since = Some(since);
                // Boxed: an idle worker (most of them, most of the time) then holds a
                // small state, not room for a whole cycle.
                let cycle = shared.cycle.run(
                    self.uid,
                    observed,
                    initial,
                    &self.state.memo,
                    rejected,
                    since,
                );
                shared.lanes.hold(&mut place, Box::pin(cycle)).await
            }
        };
        drop(place);
        if matches!(end, CycleEnd::Next { delay: None, .. } | CycleEnd::Gone) {
            // Handled (or gone): the next change waits from its own state.
            self.since = None;
        }
        let after = self.state.on_cycle_end(end, Instant::now());
        self.after(observed, after).await
    }

    /// How the wait for our own last write ended, if it just did (the metrics).
    fn report_echo(&mut self) {
        if let Some(echo) = self.state.take_echo() {
            self.shared.books.echo(echo.waited, echo.seen);
        }
    }

    /// What follows a cycle: its log lines, and throttling after a framework error.
    async fn after(&mut self, observed: &Observed, after: After) -> Flow {
        match after {
            After::Gone => Flow::End,
            After::Wait => Flow::Wait,
            After::Throttled { delay, error } => {
                object_span(&observed.body).in_scope(|| {
                    tracing::error!(
                        "Throttling for {} seconds due to an unexpected error: {error}",
                        delay.as_secs_f64()
                    )
                });
                self.throttle(Instant::now() + delay).await
            }
            After::Again => {
                self.rx.mark_changed();
                Flow::Again
            }
            After::Conflicted { times, message } => {
                object_span(&observed.body).in_scope(|| {
                    if times >= CONFLICTS_WORTH_A_WARNING {
                        tracing::warn!(
                            "The object keeps changing while it is written ({times} times in a row): {message}"
                        )
                    } else {
                        tracing::debug!(
                            "The object changed while it was written ({message}); its newer state is processed next."
                        )
                    }
                });
                Flow::Wait
            }
        }
    }

    /// Sleeps until `until`; states arriving meanwhile wait, and the latest is processed
    /// next.
    async fn throttle(&mut self, until: Instant) -> Flow {
        loop {
            tokio::select! {
                _ = kopf_core::clock::sleep_until(until, "a throttled object's next cycle") => break,
                changed = self.rx.changed() => if changed.is_err() { return Flow::End },
            }
        }
        self.rx.mark_changed();
        Flow::Again
    }

    /// Waits for what comes first: a reconcile request, a new state, or the state's next
    /// wake-up.
    async fn wait(&mut self) -> Flow {
        let wake = self.state.next_wake();
        let kick = self.kick;
        tokio::select! {
            why = async { match kick { Some(k) => k.kicked().await, None => std::future::pending().await } } => {
                // An owned or related object changed.
                let deleting = self.rx.borrow().as_ref().is_none_or(|o| kopf_core::finalizers::is_deleting(&o.body));
                self.state.on_kick(why, deleting, Instant::now());
                Flow::Again
            }
            changed = self.rx.changed() => {
                if changed.is_err() {
                    return Flow::End;
                }
                self.state.on_news();
                Flow::Again
            }
            _ = async { match wake { Some(t) => kopf_core::clock::sleep_until(t, "an object's next cycle (a retry, a reconcile, a read)").await, None => std::future::pending().await } } => {
                let woke = self.state.on_wake(Instant::now());
                self.report_echo();
                match woke {
                    Woke::Reconcile => Flow::Again,
                    Woke::Read => Box::pin(self.read_after_slow_watch()).await,
                    Woke::Again => {
                        self.rx.mark_changed();
                        Flow::Again
                    }
                }
            }
        }
    }

    /// Our write has not come back through the watch in time (a slow watch): the object is
    /// read, rather than processing the state at hand, from before the write (that would
    /// run its handlers again).
    async fn read_after_slow_watch(&mut self) -> Flow {
        let at_hand = self.rx.borrow().as_ref().map(|o| o.body.clone());
        let Some(body) = at_hand else {
            return Flow::End;
        };
        match self.shared.cycle.read_fresh(&body).await {
            Fresh::Read(fresh) => self.state.on_read(fresh),
            // Its deletion comes through the watch: waited for.
            Fresh::Gone => {
                if self.rx.changed().await.is_err() {
                    return Flow::End;
                }
            }
            Fresh::Unknown => self.rx.mark_changed(),
        }
        Flow::Again
    }

    /// Waits until the operator's gate opens or a new state comes (it ends when the channel
    /// is closed).
    async fn gate_opened(&mut self) -> Flow {
        let mut gate = self.shared.operator_gate.clone();
        tokio::select! {
            _ = gate.opened() => Flow::Again,
            changed = self.rx.changed() => if changed.is_ok() { Flow::Again } else { Flow::End },
        }
    }
}
