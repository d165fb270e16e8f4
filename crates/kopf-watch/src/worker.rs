//! One object's worker: strictly serial, always on the object's latest state. It runs the
//! changing cycle ([`kopf_core::processing::Processor`]), writes its plan, posts its events,
//! keeps the object's daemons and timers in step, waits for its own writes to come back
//! (consistency), sleeps until retry delays are over, and throttles framework errors.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kopf_core::causes::{EventKind, Reason};
use kopf_core::daemons::StopReason;
use kopf_core::events::failure_message;
use kopf_core::memo::Memos;
use kopf_core::plan::PatchPlan;
use kopf_core::processing::{CycleOutcome, FinalizerChange, HandlerOutcome};
use kopf_core::reconcile::{Kick, Schedule, Trigger};
use kopf_core::text::for_log;
use kopf_core::throttle::Throttler;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::conditions::ApiConditionsSync;
use crate::lanes::{Lane, Place, SLOW_CYCLE};
use crate::raw::RawObject;
use crate::shared::{Ended, Observed, Resume, Retired, WorkerShared, cycle_span, object_span, rv};
use crate::spawning::Spawned;
use crate::write::CycleEnd;

/// The longest a worker sleeps before looking at its object again (Kopf's keep-alive).
const MAX_SLEEP: Duration = Duration::from_secs(600);

/// After a write met a concurrent change and no newer state came, the object is processed
/// again after this long.
const CONFLICT_RECHECK: Duration = Duration::from_secs(1);

/// Conflicts in a row on one object after which they are worth a warning.
const CONFLICTS_WORTH_A_WARNING: u32 = 3;

impl WorkerShared {
    /// Processes one object serially, always on its latest observed state, until it has
    /// nothing left to do (it retires: the engine keeps what it leaves, and starts a worker
    /// again on the next state) or the object is gone (its daemons and timers are stopped).
    pub(crate) async fn work(
        self: Arc<Self>,
        uid: String,
        mut rx: watch::Receiver<Option<Observed>>,
        pending: Arc<std::sync::atomic::AtomicBool>,
        kick: Option<Arc<Kick>>,
        resume: Option<Box<Resume>>,
    ) -> Ended {
        let resume = self
            .work_tracked(&uid, &mut rx, &pending, kick.as_deref(), resume)
            .await;
        self.picked(&pending);
        Ended {
            uid,
            pending,
            retired: resume.map(|resume| Retired {
                rx,
                kick,
                resume: resume.boxed(),
            }),
        }
    }

    /// The worker's life: None when it ended for good, what it leaves when it retired.
    pub(crate) async fn work_tracked(
        self: &Arc<Self>,
        uid: &str,
        rx: &mut watch::Receiver<Option<Observed>>,
        pending: &std::sync::atomic::AtomicBool,
        kick: Option<&Kick>,
        resume: Option<Box<Resume>>,
    ) -> Option<Resume> {
        let uid = uid.to_string();
        // Nothing runs before the indexed resources are indexed (events meanwhile coalesce).
        loop {
            tokio::select! {
                _ = self.settings.gate.wait() => break,
                changed = rx.changed() => if changed.is_err() { return None },
            }
        }
        let resume = resume.map(|r| *r).unwrap_or_default();
        let mut spawned: Option<Spawned> = None;
        let retired = self
            .work_loop(&uid, rx, pending, &mut spawned, kick, resume)
            .await;
        if retired.is_some() {
            return retired;
        }
        if let Some(mut s) = spawned {
            let reason = if self.exiting.load(std::sync::atomic::Ordering::SeqCst) {
                StopReason::OperatorExiting
            } else if self.pausing.load(std::sync::atomic::Ordering::SeqCst) {
                StopReason::OperatorPausing
            } else {
                StopReason::Deleted
            };
            Box::pin(s.daemons.stop_all(reason)).await;
        }
        None
    }

    pub(crate) async fn work_loop(
        self: &Arc<Self>,
        uid: &str,
        rx: &mut watch::Receiver<Option<Observed>>,
        pending: &std::sync::atomic::AtomicBool,
        spawned: &mut Option<Spawned>,
        kick: Option<&Kick>,
        mut resume: Resume,
    ) -> Option<Resume> {
        let uid = uid.to_string();
        let memo = &resume
            .memo
            .take()
            .unwrap_or_else(|| Memos::new(self.settings.memo.clone()));
        let mut throttler = Throttler::new(self.settings.error_delays.clone());
        // First seen in a listing: resume handlers join until the object is handled once.
        let mut listed = resume.listed;
        // Our last write, until it comes back through the watch or the consistency timeout
        // (for a write a retired worker left, the timeout counts from now).
        let mut expected_rv: Option<(u64, Instant)> = resume
            .expected_rv
            .map(|r| (r, Instant::now() + self.settings.consistency_timeout));
        // A handler's retry delay, when the cycle wrote nothing (a write brings its own event).
        let mut retry_at: Option<Instant> = None;
        // The retry delay ended with no new event: process (or touch) now.
        let mut woken = false;
        // Handlers whose results the API server refused in the last cycle.
        let mut rejected: Arc<HashMap<String, String>> = Arc::default();
        // Writes in a row that met a concurrent change.
        let mut conflicts: u32 = 0;
        // The pending wake-up is a re-check after a conflict (never a touch).
        let mut recheck = false;
        // The object as read after our write did not come back in time (see below), and
        // its resourceVersion: states older than that are never processed.
        let mut fetched: Option<Observed> = None;
        let mut floor: Option<u64> = resume.floor;
        // The reconcile's schedule (one pending entry, the earliest wins), why the next one
        // is wanted once the latest state went through the cause handlers, the resource
        // version of our last write (its state coming back is no change to reconcile), and
        // whether the wake-up is the reconcile's.
        let mut schedule = Schedule::default();
        let mut wanted: Option<Trigger> = self.reconcile.as_ref().map(|_| Trigger::Listed);
        let mut written: Option<u64> = None;
        let mut reconcile_now = false;
        loop {
            let news = fetched.is_some() || rx.has_changed().unwrap_or(false);
            let observed = match fetched.take() {
                Some(fresh) => Some(fresh),
                None => rx.borrow_and_update().clone(),
            };
            let observed = observed?;
            if !self.operator_gate.is_open() {
                // No cycle starts (and nothing is spawned) while the operator pauses: the
                // engine ends this worker, or the gate opens first.
                if !self.gate_opened(rx).await {
                    return None;
                }
                continue;
            }
            if std::mem::take(&mut reconcile_now) && !news {
                // The reconcile's turn, and no newer state waits for the cause handlers
                // (nor our own last write: the state at hand would be older than it; the
                // pending entry then waits for that write to come back).
                if expected_rv.is_none()
                    && let Some(spec) = &self.reconcile
                    && let Some(why) = schedule.take_due(Instant::now())
                {
                    let end = Box::pin(self.reconcile_once(
                        spec,
                        &observed.body,
                        why,
                        &mut schedule,
                        memo,
                    ))
                    .await;
                    match end {
                        CycleEnd::Gone => return None,
                        CycleEnd::Next { rv: Some(r), .. } => {
                            written = Some(r);
                            expected_rv =
                                Some((r, Instant::now() + self.settings.consistency_timeout));
                        }
                        _ => {}
                    }
                }
            } else {
                listed |= observed.event == EventKind::Listed;
                if self.reconcile.is_some() {
                    if observed.event == EventKind::Deleted
                        || kopf_core::finalizers::is_deleting(&observed.body)
                    {
                        // Deletion is the cleanup's (a deletion handler), not the reconcile's.
                        wanted = None;
                        schedule.clear();
                    } else if written.is_none_or(|w| rv(&observed.body) != Some(w)) {
                        wanted.get_or_insert(Trigger::ObjectChanged);
                    }
                }
                if !self.spawners.is_empty() {
                    Box::pin(self.sync_daemons(&uid, &observed, memo, spawned)).await;
                }
                // States older than our last write are skipped until it comes back (or the
                // consistency timeout passes and the object is read), and states older than one
                // read are skipped for good; a DELETED event is never stale.
                let stale = observed.event != EventKind::Deleted
                    && (expected_rv.is_some_and(|(want, deadline)| {
                        rv(&observed.body).is_some_and(|have| have < want)
                            && Instant::now() < deadline
                    }) || floor
                        .is_some_and(|f| rv(&observed.body).is_some_and(|have| have < f)));
                if !stale {
                    expected_rv = None;
                    // Listed objects wait behind changed ones; a listed object that changes
                    // meanwhile moves to the changed objects' lane.
                    let lane = if observed.event == EventKind::Listed && !woken {
                        Lane::Listed
                    } else {
                        Lane::Changed
                    };
                    let mut permit = tokio::select! {
                        place = self.lanes.acquire(lane) => place,
                        changed = rx.changed(), if lane == Lane::Listed => {
                            if changed.is_err() {
                                return None;
                            }
                            continue;
                        }
                    };
                    if !self.operator_gate.is_open() {
                        // Paused while waiting for a permit: the state waits with the gate.
                        drop(permit);
                        continue;
                    }
                    self.picked(pending);
                    let initial = listed && !self.was_handled(&uid);
                    let end = if std::mem::take(&mut woken) && self.settings.touch_delays {
                        Box::pin(self.touch(&observed.body)).await
                    } else {
                        // Boxed: an idle worker (most of them, most of the time) then holds a
                        // small state, not room for a whole cycle.
                        let rejected = std::mem::take(&mut rejected);
                        let cycle = Box::pin(self.cycle(&uid, &observed, initial, memo, rejected));
                        self.holding(&mut permit, cycle).await
                    };
                    recheck = false;
                    if !matches!(end, CycleEnd::Conflict(_)) {
                        conflicts = 0;
                    }
                    drop(permit);
                    match end {
                        CycleEnd::Gone => return None,
                        CycleEnd::Next { delay, rv } => {
                            throttler.succeeded();
                            let now = Instant::now();
                            if let Some(r) = rv {
                                written = Some(r);
                            } else if let Some(why) = wanted.take() {
                                // The cause handlers are done with this state and wrote
                                // nothing: the reconcile runs on it.
                                let debounce =
                                    self.reconcile.as_ref().and_then(|s| s.config.debounce);
                                schedule.trigger(now, why, debounce);
                            }
                            expected_rv = rv.map(|r| (r, now + self.settings.consistency_timeout));
                            retry_at = match rv {
                                Some(_) => None,
                                None => delay.map(|d| now + d.min(MAX_SLEEP)),
                            };
                        }
                        CycleEnd::Failed(error) => {
                            let delay = throttler.failed().min(MAX_SLEEP);
                            object_span(&observed.body).in_scope(|| {
                                tracing::error!(
                                    "Throttling for {} seconds due to an unexpected error: {error}",
                                    delay.as_secs_f64()
                                )
                            });
                            // Events arriving meanwhile wait; the latest state is processed next.
                            let until = Instant::now() + delay;
                            loop {
                                tokio::select! {
                                    _ = tokio::time::sleep_until(until) => break,
                                    changed = rx.changed() => if changed.is_err() { return None },
                                }
                            }
                            rx.mark_changed();
                            retry_at = None;
                            continue;
                        }
                        CycleEnd::Rejected(refused) => {
                            // Processed again at once: the refused handlers' attempts are
                            // recorded as failures (nothing of this cycle was marked handled).
                            rejected = Arc::new(refused);
                            rx.mark_changed();
                            retry_at = None;
                            continue;
                        }
                        CycleEnd::Conflict(message) => {
                            conflicts += 1;
                            object_span(&observed.body).in_scope(|| {
                            if conflicts >= CONFLICTS_WORTH_A_WARNING {
                                tracing::warn!(
                                    "The object keeps changing while it is written ({conflicts} times in a row): {message}"
                                )
                            } else {
                                tracing::debug!(
                                    "The object changed while it was written ({message}); its newer state is processed next."
                                )
                            }
                        });
                            // The newer state comes through the watch; if it does not, the
                            // latest known state is processed again a little later.
                            retry_at = Some(Instant::now() + CONFLICT_RECHECK);
                            recheck = true;
                            expected_rv = None;
                        }
                    }
                }
            }
            // Nothing left to do but to wait for the next state: the worker retires (the engine
            // keeps what it leaves, and starts a worker again when a state comes).
            if self.reconcile.is_none()
                && retry_at.is_none()
                && !recheck
                && conflicts == 0
                && rejected.is_empty()
                && fetched.is_none()
                && self.spawners.is_empty()
                && !rx.has_changed().unwrap_or(true)
            {
                return Some(Resume {
                    listed: listed && !self.was_handled(&uid),
                    expected_rv: expected_rv.map(|(r, _)| r),
                    floor,
                    memo: (!memo.is_untouched()).then(|| memo.clone()),
                });
            }
            // The reconcile waits while our own write has not come back (its state is not
            // the latest yet).
            let reconcile_at = schedule.when().filter(|_| expected_rv.is_none());
            let wake = [
                retry_at,
                expected_rv.map(|(_, deadline)| deadline),
                reconcile_at,
            ]
            .into_iter()
            .flatten()
            .min();
            tokio::select! {
                why = async { match kick { Some(k) => k.kicked().await, None => std::future::pending().await } } => {
                    // An owned or related object changed.
                    let deleting = rx.borrow().as_ref().is_none_or(|o| kopf_core::finalizers::is_deleting(&o.body));
                    if !deleting {
                        let debounce = self.reconcile.as_ref().and_then(|s| s.config.debounce);
                        schedule.trigger(Instant::now(), why, debounce);
                    }
                    reconcile_now = true;
                }
                changed = rx.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    woken = false;
                    recheck = false;
                }
                _ = async { match wake { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                    let now = Instant::now();
                    if reconcile_at.is_some_and(|r| r <= now) && retry_at.is_none_or(|r| r > now) {
                        reconcile_now = true;
                        continue;
                    }
                    if retry_at.is_some_and(|r| r <= now) {
                        retry_at = None;
                        woken = !std::mem::take(&mut recheck);
                    }
                    if expected_rv.is_some_and(|(_, deadline)| deadline <= now) {
                        expected_rv = None;
                        // Our write has not come back through the watch in time (a slow
                        // watch): the object is read, rather than processing the state at
                        // hand, from before the write (that would run its handlers again).
                        let at_hand = rx.borrow().as_ref().map(|o| o.body.clone());
                        match at_hand {
                            Some(body) => match self.read_fresh(&body).await {
                                Fresh::Read(fresh) => {
                                    floor = rv(&fresh.body).max(floor);
                                    fetched = Some(fresh);
                                }
                                // Its deletion comes through the watch: waited for.
                                Fresh::Gone => {
                                    if rx.changed().await.is_err() {
                                        return None;
                                    }
                                }
                                Fresh::Unknown => rx.mark_changed(),
                            },
                            None => return None,
                        }
                        continue;
                    }
                    rx.mark_changed();
                }
            }
        }
    }

    /// Runs a cycle holding its place; without a worker limit, a cycle that runs longer than
    /// [`SLOW_CYCLE`] gives its place to the next (it waits on something slow, not on the CPU).
    async fn holding<F: std::future::Future + Unpin>(
        &self,
        place: &mut Option<Place>,
        mut cycle: F,
    ) -> F::Output {
        if place.is_none() || self.lanes.strict() {
            return cycle.await;
        }
        tokio::select! {
            end = &mut cycle => end,
            _ = tokio::time::sleep(SLOW_CYCLE) => {
                drop(place.take());
                cycle.await
            }
        }
    }

    /// The object as the API server has it now (one GET), for a worker whose own write has
    /// not come back through the watch within the consistency timeout.
    async fn read_fresh(&self, body: &Value) -> Fresh {
        let Some(name) = body.pointer("/metadata/name").and_then(Value::as_str) else {
            return Fresh::Unknown;
        };
        match self.api_for::<RawObject>(body).get_opt(name).await {
            Ok(Some(obj)) => Fresh::Read(Observed {
                body: obj.into_body(self.settings.keep_managed_fields),
                event: EventKind::Modified,
            }),
            // Gone: its deletion comes through the watch.
            Ok(None) => Fresh::Gone,
            Err(e) => {
                object_span(body).in_scope(|| {
                    tracing::debug!(
                        "Reading the object after a slow watch failed ({}); processing the state at hand.",
                        for_log(&e)
                    )
                });
                Fresh::Unknown
            }
        }
    }

    /// Waits until the operator's gate opens or a new state comes (false: the channel is
    /// closed, the worker ends).
    async fn gate_opened(&self, rx: &mut watch::Receiver<Option<Observed>>) -> bool {
        let mut gate = self.operator_gate.clone();
        tokio::select! {
            _ = gate.opened() => true,
            changed = rx.changed() => changed.is_ok(),
        }
    }

    /// Touches the object so that its next state comes through the watch (Kopf's way of
    /// waking up after a delay), through the same plan as any cycle's writes.
    pub(crate) async fn touch(&self, body: &Value) -> CycleEnd {
        let mut plan = PatchPlan::new();
        plan.merge(
            &self
                .processor
                .persistence()
                .progress
                .touch_patch(kopf_core::clock::now()),
        );
        self.apply(body, &plan, &[], None).await
    }

    /// One cycle, in the object's log span: the processor's outcome, its writes, then its
    /// log lines and events.
    pub(crate) async fn cycle(
        &self,
        uid: &str,
        observed: &Observed,
        initial: bool,
        memo: &Memos,
        rejected: Arc<HashMap<String, String>>,
    ) -> CycleEnd {
        use tracing::Instrument;
        let span = cycle_span(&observed.body, &self.resource.api_resource.plural);
        let cycle = span.clone();
        async move {
            let body = &observed.body;
            // Handlers' `Conditions::sync()` writes through the object's API at once.
            let sync = Arc::new(ApiConditionsSync::new(
                self.api_for(body),
                body,
                self.resource.status_subresource,
            ));
            let outcome = self
                .processor
                .process_synced(
                    observed.event,
                    body,
                    initial,
                    memo,
                    rejected,
                    Some(sync.clone()),
                )
                .await;
            // After a handler's sync, the writes go against the object as it returned it.
            let synced = sync.synced_body();
            let written = synced.as_ref().unwrap_or(body);
            log_cause(&outcome, body);
            if outcome.reason == Reason::Gone {
                self.forget(uid);
                record_cycle(&cycle, outcome.reason, outcome.done, &CycleEnd::Gone);
                return CycleEnd::Gone;
            }
            let end = self
                .apply(written, &outcome.plan, &outcome.delivered, outcome.delay)
                .await;
            // Outcomes are reported once the writes went through: a result the API server
            // refused is not a success, and a cause whose writes failed is not processed.
            let stored = matches!(end, CycleEnd::Next { .. });
            log_handlers(&outcome, &end);
            record_cycle(&cycle, outcome.reason, outcome.done, &end);
            if outcome.done && stored {
                self.handled_once
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(crate::uid::Uid::from(uid));
            }
            self.post_events(uid, body, outcome.events).await;
            end
        }
        .instrument(span)
        .await
    }
}

/// What a read of the object after a slow watch found.
enum Fresh {
    /// The object as it is now.
    Read(Observed),
    /// It is gone.
    Gone,
    /// The read failed: the state at hand is processed (Kopf's consistency timeout).
    Unknown,
}

/// Kopf's log lines for the cause of a cycle, what it found on the object, and its
/// finalizer change (before its writes).
fn log_cause(outcome: &CycleOutcome, body: &Value) {
    match outcome.reason {
        Reason::Gone => tracing::debug!("Deleted, really deleted, and we are notified."),
        Reason::Free => tracing::debug!("Deletion, but we are done with it, and we do not care."),
        Reason::Noop => tracing::debug!(
            "Something has changed, but we are not interested (the essence is the same)."
        ),
        reason => tracing::debug!("{} is in progress: {}", reason.title(), for_log(body)),
    }
    if let Some(why) = &outcome.corrupt_diffbase {
        tracing::warn!("{why}; the object is handled as newly created.");
    }
    for why in &outcome.corrupt_records {
        tracing::warn!("{why}");
    }
    if let Some(superseded) = &outcome.superseded {
        tracing::info!("{superseded}");
    }
    match outcome.finalizer {
        Some(FinalizerChange::Added) => {
            tracing::debug!("Adding the finalizer, thus preventing the actual deletion.")
        }
        Some(FinalizerChange::Removed) if outcome.reason == Reason::Delete => {
            tracing::debug!("Removing the finalizer, thus allowing the actual deletion.")
        }
        Some(FinalizerChange::Removed) => {
            tracing::debug!("Removing the finalizer, as there are no handlers requiring it.")
        }
        None => {}
    }
}

/// Kopf's log lines for the handlers of a cycle, once its writes are done: handlers whose
/// results the API server refused are reported by the writer (and fail in the next cycle),
/// and a cause is processed only when its writes went through.
fn log_handlers(outcome: &CycleOutcome, end: &CycleEnd) {
    let refused = match end {
        CycleEnd::Rejected(refused) => Some(refused),
        _ => None,
    };
    for (id, result) in &outcome.ran {
        if refused.is_some_and(|r| r.contains_key(id)) {
            continue;
        }
        match result {
            HandlerOutcome::Succeeded => tracing::info!("Handler '{id}' succeeded."),
            HandlerOutcome::Waiting => {
                tracing::debug!("Handler '{id}' has unfinished sub-handlers. Will retry soon.")
            }
            HandlerOutcome::Retrying { message } => {
                tracing::error!("{}", failure_message(id, message, true))
            }
            HandlerOutcome::Failed { message } => {
                tracing::error!("{}", failure_message(id, message, false))
            }
        }
    }
    if outcome.done && !outcome.ran.is_empty() && matches!(end, CycleEnd::Next { .. }) {
        let (succeeded, failed) = outcome.counts;
        tracing::info!(
            "{} is processed: {succeeded} succeeded; {failed} failed.",
            outcome.reason.title()
        );
    }
}

/// Records how a cycle ended on its [`cycle_span`]: the cause (`create`, `update`,
/// `delete`, `resume`, `noop`...), and the `outcome`: `done` (every handler of the cause
/// finished), `pending` (handlers left, `delay` seconds until the next cycle), `gone`,
/// `conflict`, `rejected` (the API server refused handlers' results) or `failed` (its
/// writes failed: the span's status is an error).
pub(crate) fn record_cycle(span: &tracing::Span, reason: Reason, done: bool, end: &CycleEnd) {
    if span.is_disabled() {
        return;
    }
    span.record("reason", reason.purpose());
    let outcome = match end {
        CycleEnd::Next { delay, .. } => match (done, delay) {
            (false, Some(delay)) => {
                span.record("delay", delay.as_secs_f64());
                "pending"
            }
            (false, None) => "pending",
            (true, _) => "done",
        },
        CycleEnd::Gone => "gone",
        CycleEnd::Conflict(_) => "conflict",
        CycleEnd::Rejected(_) => "rejected",
        CycleEnd::Failed(error) => {
            span.record("otel.status_code", "error");
            span.record("otel.status_description", error.as_str());
            "failed"
        }
    };
    span.record("outcome", outcome);
}
