//! Daemons and timers: long-running tasks and periodic calls per object, for as long as the
//! object exists and matches the handler's filters.
//!
//! * A **daemon** is called once per object (after an optional `initial_delay`) and may run
//!   for as long as it likes; it polls or awaits its [`Stopped`] flag. Returning ends it for
//!   that object (for this process); a temporary error restarts it after the delay; a
//!   permanent error ends it.
//! * A **timer** is called every `interval` (`sharp`: aligned to the interval from the first
//!   call, not shifted by the calls' durations), optionally only once the object has not
//!   changed for `idle`. Errors are retried with the handler's backoff.
//!
//! Results go to `status.<handler-id>` and patches are applied after each call, with no
//! progress records (retry state is kept in memory). Stopping is staged: the flag is set
//! with a [`StopReason`]; the task gets `cancellation_backoff` to exit; then an async task is
//! cancelled and given `cancellation_timeout`; then it is abandoned with a warning. Plain
//! `fn` handlers run on blocking threads: they are never cancelled, only signalled, and
//! abandoned after the timeout. Without a `cancellation_timeout`, stopping waits for the task
//! (with a warning every `cancellation_polling`).
//!
//! ```
//! use kopf_core::daemons::{Stopped, StopReason};
//!
//! # async fn demo() {
//! let stopped = Stopped::new();
//! let flag = stopped.clone();
//! let daemon = tokio::spawn(async move {
//!     loop {
//!         // ... poll something ...
//!         if let Some(reason) = flag.sleep(std::time::Duration::from_secs(10)).await {
//!             return reason;
//!         }
//!     }
//! });
//! stopped.set(StopReason::Deleted);
//! assert_eq!(daemon.await.ok(), Some(StopReason::Deleted));
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::causes::Reason;
use crate::events::EventSpec;
use crate::handler::{BoxFuture, Cause, Extensions, HandlerKind, HandlerSpec};
use crate::layers::{Attempt, HandlerCall, Stack, Verdict};
use crate::memo::Memos;
use crate::plan::PatchPlan;
use crate::progress::{ProgressRecord, format_time};

/// Why a daemon or timer is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The object is being deleted (or is gone).
    Deleted,
    /// The object no longer matches the handler's filters (it restarts when it matches
    /// again).
    FiltersMismatch,
    /// The operator pauses (e.g. another operator took over).
    OperatorPausing,
    /// The operator exits.
    OperatorExiting,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Deleted => "the object is deleted",
            StopReason::FiltersMismatch => "the object does not match the filters anymore",
            StopReason::OperatorPausing => "the operator pauses",
            StopReason::OperatorExiting => "the operator exits",
        })
    }
}

struct Flag {
    reason: Mutex<Option<StopReason>>,
    cond: Condvar,
    tx: watch::Sender<Option<StopReason>>,
}

/// The stop flag of a daemon or timer (an extractor argument): poll it with
/// [`is_set`](Stopped::is_set), await it with [`wait`](Stopped::wait) or
/// [`sleep`](Stopped::sleep), or block on it in plain `fn` daemons with
/// [`wait_blocking`](Stopped::wait_blocking). Clones share the flag.
#[derive(Clone)]
pub struct Stopped(Arc<Flag>);

impl std::fmt::Debug for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Stopped").field(&self.reason()).finish()
    }
}

impl Default for Stopped {
    fn default() -> Self {
        Self::new()
    }
}

impl Stopped {
    /// A flag that is not set.
    pub fn new() -> Self {
        Stopped(Arc::new(Flag {
            reason: Mutex::new(None),
            cond: Condvar::new(),
            tx: watch::channel(None).0,
        }))
    }

    /// Sets the flag (the first reason stays).
    pub fn set(&self, reason: StopReason) {
        let mut current = self.0.reason.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_none() {
            *current = Some(reason);
            self.0.cond.notify_all();
            self.0.tx.send_replace(Some(reason));
        }
    }

    /// Whether the daemon should stop.
    pub fn is_set(&self) -> bool {
        self.reason().is_some()
    }

    /// Why the daemon should stop (None: it should not).
    pub fn reason(&self) -> Option<StopReason> {
        *self.0.reason.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes when the flag is set, with the reason.
    pub async fn wait(&self) -> StopReason {
        let mut rx = self.0.tx.subscribe();
        loop {
            if let Some(reason) = *rx.borrow_and_update() {
                return reason;
            }
            if rx.changed().await.is_err() {
                // The sender lives in the flag we hold: this cannot happen.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sleeps for `duration` unless the flag is set first; returns the reason if it was.
    pub async fn sleep(&self, duration: Duration) -> Option<StopReason> {
        tokio::select! {
            reason = self.wait() => Some(reason),
            _ = tokio::time::sleep(duration) => self.reason(),
        }
    }

    /// For plain `fn` daemons: blocks the thread until the flag is set or `timeout` passes;
    /// returns the reason if it was set.
    pub fn wait_blocking(&self, timeout: Duration) -> Option<StopReason> {
        let guard = self.0.reason.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .0
            .cond
            .wait_timeout_while(guard, timeout, |r| r.is_none())
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }
}

/// How a daemon or timer is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopping {
    /// Time to exit on its own after the flag is set.
    pub backoff: Duration,
    /// Then: cancel (async handlers) and wait this long; then abandon. None: wait for the
    /// task as long as it takes.
    pub timeout: Option<Duration>,
    /// Without a timeout: how often to warn that the task is still running.
    pub polling: Duration,
}

impl Default for Stopping {
    fn default() -> Self {
        Stopping {
            backoff: Duration::ZERO,
            timeout: None,
            polling: Duration::from_secs(60),
        }
    }
}

/// Options of a daemon.
///
/// ```
/// use kopf_core::daemons::DaemonOptions;
/// use std::time::Duration;
///
/// let options = DaemonOptions::new()
///     .initial_delay(Duration::from_secs(1))
///     .cancellation_timeout(Duration::from_secs(5));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonOptions {
    /// Wait this long after the object appears before the first call.
    pub initial_delay: Duration,
    /// How it is stopped.
    pub stopping: Stopping,
}

impl DaemonOptions {
    /// No initial delay; stopping waits for the daemon to exit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait this long before the first call.
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Time to exit on its own after the stop flag is set, before being cancelled.
    pub fn cancellation_backoff(mut self, backoff: Duration) -> Self {
        self.stopping.backoff = backoff;
        self
    }

    /// After the backoff, cancel (async daemons) and wait this long, then abandon it with a
    /// warning (releasing the object).
    pub fn cancellation_timeout(mut self, timeout: Duration) -> Self {
        self.stopping.timeout = Some(timeout);
        self
    }

    /// Without a cancellation timeout: how often to warn that the daemon still runs.
    pub fn cancellation_polling(mut self, polling: Duration) -> Self {
        self.stopping.polling = polling;
        self
    }
}

/// Options of a timer.
///
/// ```
/// use kopf_core::daemons::TimerOptions;
/// use std::time::Duration;
///
/// let every_ten = TimerOptions::every(Duration::from_secs(10)).sharp(true);
/// let when_quiet = TimerOptions::every(Duration::from_secs(60)).idle(Duration::from_secs(30));
/// # let _ = (every_ten, when_quiet);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerOptions {
    /// Call every `interval` (None: once, or once per idle period with `idle`).
    pub interval: Option<Duration>,
    /// Wait this long after the object appears before the first call.
    pub initial_delay: Duration,
    /// Call only when the object has not changed (its essence) for this long.
    pub idle: Option<Duration>,
    /// Align calls to the interval from the first call, whatever the calls' durations.
    pub sharp: bool,
    /// How it is stopped (a running call is waited for; see [`Stopping`]).
    pub stopping: Stopping,
}

impl TimerOptions {
    /// A timer called every `interval`.
    pub fn every(interval: Duration) -> Self {
        TimerOptions {
            interval: Some(interval),
            ..Default::default()
        }
    }

    /// Wait this long before the first call.
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Call only once the object has been unchanged for `idle`.
    pub fn idle(mut self, idle: Duration) -> Self {
        self.idle = Some(idle);
        self
    }

    /// Align the calls to the interval.
    pub fn sharp(mut self, sharp: bool) -> Self {
        self.sharp = sharp;
        self
    }

    /// After a stop request, wait this long for a running call, then abandon it.
    pub fn cancellation_timeout(mut self, timeout: Duration) -> Self {
        self.stopping.timeout = Some(timeout);
        self
    }
}

/// The latest state of an object, as its daemons and timers see it.
#[derive(Debug, Clone)]
pub struct Live {
    /// The object as last seen.
    pub body: Value,
    /// When its essence last changed (or when it was first seen).
    pub changed: Instant,
}

/// What a daemon's or timer's call produced, to apply to the object.
#[derive(Debug)]
pub struct Delivery {
    /// The object as last seen (the target of the patch).
    pub body: Value,
    /// The result (under `status.<handler-id>`) and the handler's patch.
    pub plan: PatchPlan,
    /// Events to post.
    pub events: Vec<EventSpec>,
    /// What the handler put into the status, as `(handler id, {"status": ...})` fragments
    /// (see [`CycleOutcome::delivered`](crate::processing::CycleOutcome::delivered)).
    pub delivered: Vec<(String, Value)>,
}

/// What became of a [`Delivery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Stored, or nothing to store, or a failure the writer has reported (the next call
    /// delivers anew).
    Done,
    /// The API server refused to store the handler's result (the server's message): the
    /// attempt counts as a failure of the handler, by its errors mode.
    Rejected(String),
}

/// Applies deliveries (the engine sends them as PATCH requests).
pub type Deliver = Arc<dyn Fn(Delivery) -> BoxFuture<Delivered> + Send + Sync>;

/// What the daemons and timers of an object share.
#[derive(Clone)]
pub struct SpawnContext {
    /// The object's memo.
    pub memo: Memos,
    /// Operator-wide values.
    pub extensions: Extensions,
    /// The per-handler stack (retries, timeouts, user layers).
    pub stack: Stack,
    /// Where results and patches go.
    pub deliver: Deliver,
    /// The object's log span.
    pub span: tracing::Span,
}

impl std::fmt::Debug for SpawnContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnContext").finish_non_exhaustive()
    }
}

struct Running {
    stopped: Stopped,
    task: JoinHandle<()>,
    blocking: bool,
    stopping: Stopping,
    title: String,
}

/// The daemons and timers of one object: spawned when the object appears or matches again,
/// stopped when it is deleted, stops matching, or the operator exits.
pub struct ObjectDaemons {
    live: watch::Sender<Live>,
    running: HashMap<String, Running>,
    /// Ended on their own (returned, or failed for good): not restarted for this object.
    finished: HashSet<String>,
    ctx: SpawnContext,
}

impl std::fmt::Debug for ObjectDaemons {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectDaemons")
            .field("running", &self.running.keys().collect::<Vec<_>>())
            .field("finished", &self.finished)
            .finish()
    }
}

impl ObjectDaemons {
    /// No daemons yet for an object.
    pub fn new(body: Value, ctx: SpawnContext) -> Self {
        ObjectDaemons {
            live: watch::channel(Live {
                body,
                changed: Instant::now(),
            })
            .0,
            running: HashMap::new(),
            finished: HashSet::new(),
            ctx,
        }
    }

    /// A new state of the object; `essential` when its essence changed (idle timers wait
    /// again).
    pub fn observe(&self, body: &Value, essential: bool) {
        self.live.send_modify(|live| {
            live.body = body.clone();
            if essential {
                live.changed = Instant::now();
            }
        });
    }

    /// Whether any daemon or timer still runs (after noting those that ended).
    pub fn is_running(&mut self) -> bool {
        self.reap();
        !self.running.is_empty()
    }

    /// Ids of the daemons and timers that run now.
    pub fn running_ids(&mut self) -> Vec<String> {
        self.reap();
        let mut ids: Vec<String> = self.running.keys().cloned().collect();
        ids.sort();
        ids
    }

    fn reap(&mut self) {
        let ended: Vec<String> = self
            .running
            .iter()
            .filter(|(_, r)| r.task.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ended {
            self.running.remove(&id);
            self.finished.insert(id);
        }
    }

    /// Spawns the daemons and timers among `specs` that match the object and do not run
    /// yet; returns the stopping of those that run but no longer match, if any (the caller
    /// spawns it, or awaits it).
    pub fn spawn_matching(&mut self, specs: &[HandlerSpec], body: &Value) -> Option<BoxFuture<()>> {
        self.reap();
        let mut mismatched = Vec::new();
        for spec in specs {
            if !matches!(spec.kind, HandlerKind::Timer(_) | HandlerKind::Daemon(_)) {
                continue;
            }
            let matches = spec.matches(body);
            if !matches {
                if let Some(r) = self.running.remove(&spec.id) {
                    mismatched.push(r);
                }
                continue;
            }
            if self.running.contains_key(&spec.id) || self.finished.contains(&spec.id) {
                continue;
            }
            let stopped = Stopped::new();
            let run = Run {
                spec: spec.clone(),
                ctx: self.ctx.clone(),
                live: self.live.subscribe(),
                stopped: stopped.clone(),
            };
            let (title, stopping, run) = match &spec.kind {
                HandlerKind::Daemon(o) => (
                    format!("Daemon '{}'", spec.id),
                    o.stopping,
                    Box::pin(daemon_loop(run, o.clone())) as BoxFuture<()>,
                ),
                HandlerKind::Timer(o) => (
                    format!("Timer '{}'", spec.id),
                    o.stopping,
                    Box::pin(timer_loop(run, o.clone())) as BoxFuture<()>,
                ),
                _ => continue,
            };
            let task = tokio::spawn(run.instrument(self.ctx.span.clone()));
            self.running.insert(
                spec.id.clone(),
                Running {
                    stopped,
                    task,
                    blocking: spec.handler.is_blocking(),
                    stopping,
                    title,
                },
            );
        }
        if mismatched.is_empty() {
            return None;
        }
        let span = self.ctx.span.clone();
        Some(Box::pin(
            async move {
                let stops = mismatched
                    .into_iter()
                    .map(|r| stop_one(r, StopReason::FiltersMismatch));
                futures_join_all(stops).await;
            }
            .instrument(span),
        ))
    }

    /// Stops every daemon and timer of the object, staged (see the module docs); completes
    /// when all have exited or been abandoned.
    pub fn stop_all(&mut self, reason: StopReason) -> BoxFuture<()> {
        self.reap();
        let running: Vec<Running> = self.running.drain().map(|(_, r)| r).collect();
        if reason == StopReason::Deleted {
            // Deleted objects never restart their daemons.
            self.finished.clear();
        }
        let span = self.ctx.span.clone();
        Box::pin(
            async move {
                futures_join_all(running.into_iter().map(|r| stop_one(r, reason))).await;
            }
            .instrument(span),
        )
    }
}

/// Awaits all futures concurrently.
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl IntoIterator<Item = F>,
) {
    let mut set = tokio::task::JoinSet::new();
    for f in futures {
        set.spawn(f.in_current_span());
    }
    while set.join_next().await.is_some() {}
}

/// Waits up to `d` for the task; true if it ended.
async fn ended_within(task: &mut JoinHandle<()>, d: Duration) -> bool {
    tokio::time::timeout(d, task).await.is_ok()
}

/// Staged stopping of one daemon or timer.
async fn stop_one(mut r: Running, reason: StopReason) {
    r.stopped.set(reason);
    tracing::debug!("{} is signalled to exit: {reason}.", r.title);
    // A few turns of the scheduler for tasks that exit at once.
    for _ in 0..10 {
        if r.task.is_finished() {
            return;
        }
        tokio::task::yield_now().await;
    }
    if ended_within(&mut r.task, r.stopping.backoff).await {
        return;
    }
    match r.stopping.timeout {
        Some(timeout) => {
            if !r.blocking {
                tracing::debug!("{} is cancelled: it did not exit in time.", r.title);
                r.task.abort();
            }
            if ended_within(&mut r.task, timeout).await {
                return;
            }
            tracing::warn!(
                "{} did not exit in time and is abandoned; the object is released anyway.",
                r.title
            );
        }
        None => loop {
            if ended_within(&mut r.task, r.stopping.polling).await {
                return;
            }
            tracing::warn!(
                "{} is still running after the stop request ({reason}); it has no cancellation_timeout, so it is waited for.",
                r.title
            );
        },
    }
}

/// One call through the stack, with the in-memory retry record; delivers the outcome.
async fn call_once(
    spec: &HandlerSpec,
    ctx: &SpawnContext,
    live: &watch::Receiver<Live>,
    stopped: &Stopped,
    record: &ProgressRecord,
) -> Attempt {
    let body = live.borrow().body.clone();
    let mut cause = Cause::for_body(Reason::Noop, body.clone());
    cause.retry = record.retries.unwrap_or(0);
    if let Some(started) = &record.started {
        cause.started = started.clone();
    }
    cause.memo = ctx.memo.clone();
    cause.extensions = ctx.extensions.clone();
    cause.stopped = Some(stopped.clone());
    let call = HandlerCall {
        spec: spec.clone(),
        cause,
        record: record.clone(),
        now: Timestamp::now(),
    };
    let attempt = ctx.stack.call(call.clone()).await;
    if let Attempt::Done { outcome, .. } = &attempt {
        let mut plan = PatchPlan::new();
        let mut delivered = Vec::new();
        if let Ok(Some(result)) = &outcome.result {
            delivered.push((spec.id.clone(), json!({"status": {&spec.id: result}})));
            plan.status_result(&spec.id, result.clone());
        }
        if let Some(status) = outcome.patch.get("status").filter(|s| s.is_object()) {
            delivered.push((spec.id.clone(), json!({"status": status})));
        }
        plan.merge(&outcome.patch);
        if !plan.is_empty() || !outcome.events.is_empty() {
            // The latest state: the object may have changed during a long call.
            let body = live.borrow().body.clone();
            let stored = (ctx.deliver)(Delivery {
                body: body.clone(),
                plan,
                events: outcome.events.clone(),
                delivered,
            })
            .await;
            if let Delivered::Rejected(message) = stored
                && outcome.result.is_ok()
            {
                // The server refused the result: that is how this attempt ended.
                let rejected = ctx.stack.reject(call, message).await;
                if let Attempt::Done { outcome, .. } = &rejected
                    && !outcome.events.is_empty()
                {
                    (ctx.deliver)(Delivery {
                        body,
                        plan: PatchPlan::new(),
                        events: outcome.events.clone(),
                        delivered: Vec::new(),
                    })
                    .await;
                }
                return rejected;
            }
        }
    }
    attempt
}

/// The in-memory retry record of a first attempt.
pub(crate) fn first_record() -> ProgressRecord {
    ProgressRecord {
        started: Some(format_time(Timestamp::now())),
        retries: Some(0),
        ..Default::default()
    }
}

/// What one daemon or timer task works with.
struct Run {
    spec: HandlerSpec,
    ctx: SpawnContext,
    live: watch::Receiver<Live>,
    stopped: Stopped,
}

async fn daemon_loop(run: Run, options: DaemonOptions) {
    let Run {
        spec,
        ctx,
        live,
        stopped,
    } = run;
    let title = format!("Daemon '{}'", spec.id);
    if stopped.sleep(options.initial_delay).await.is_some() {
        return;
    }
    let mut record = first_record();
    loop {
        match call_once(&spec, &ctx, &live, &stopped, &record)
            .await
            .verdict()
        {
            Verdict::Skipped => return,
            Verdict::Succeeded => {
                match stopped.reason() {
                    Some(reason) => tracing::info!("{title} has exited: {reason}."),
                    None => tracing::info!("{title} succeeded."),
                }
                return;
            }
            Verdict::Retry {
                error,
                delay,
                record: next,
            } => {
                if stopped.is_set() {
                    return;
                }
                tracing::error!(
                    "{title} failed temporarily: {error}; it restarts in {}s.",
                    delay.as_secs_f64()
                );
                record = next;
                if stopped.sleep(delay).await.is_some() {
                    return;
                }
            }
            Verdict::Failed(error) => {
                tracing::error!("{title} failed permanently: {error}");
                return;
            }
        }
    }
}

async fn timer_loop(run: Run, options: TimerOptions) {
    let Run {
        spec,
        ctx,
        mut live,
        stopped,
    } = run;
    let title = format!("Timer '{}'", spec.id);
    if stopped.sleep(options.initial_delay).await.is_some() {
        return;
    }
    let mut record = first_record();
    // The essence change an idle-only timer has already been called for.
    let mut called_for: Option<Instant> = None;
    loop {
        if let Some(idle) = options.idle {
            // Wait until the object has been unchanged for `idle` (and, for idle-only
            // timers, until it changed since the last call).
            loop {
                let changed = live.borrow_and_update().changed;
                let quiet = changed.elapsed();
                let fresh = options.interval.is_some() || called_for != Some(changed);
                if fresh && quiet >= idle {
                    called_for = Some(changed);
                    break;
                }
                let wait = if fresh {
                    idle - quiet
                } else {
                    Duration::from_secs(3600)
                };
                tokio::select! {
                    _ = stopped.wait() => return,
                    _ = tokio::time::sleep(wait) => {}
                    r = live.changed() => if r.is_err() { return },
                }
            }
        }
        let start = Instant::now();
        let delay = match call_once(&spec, &ctx, &live, &stopped, &record)
            .await
            .verdict()
        {
            Verdict::Skipped => None,
            Verdict::Succeeded => {
                tracing::debug!("{title} succeeded.");
                record = first_record();
                None
            }
            Verdict::Retry {
                error,
                delay,
                record: next,
            } => {
                tracing::error!(
                    "{title} failed temporarily: {error}; it is called again in {}s.",
                    delay.as_secs_f64()
                );
                record = next;
                Some(delay)
            }
            Verdict::Failed(error) => {
                tracing::error!("{title} failed permanently: {error}");
                record = first_record();
                None
            }
        };
        if stopped.is_set() {
            return;
        }
        let sleep = match (delay, options.interval) {
            (Some(delay), _) => delay,
            (None, Some(interval)) if options.sharp => {
                // The next multiple of the interval since this call started.
                let spent = start.elapsed().as_nanos();
                let step = interval.as_nanos().max(1);
                Duration::from_nanos((step - spent % step) as u64)
            }
            (None, Some(interval)) => interval,
            (None, None) if options.idle.is_some() => Duration::ZERO,
            (None, None) => return,
        };
        if stopped.sleep(sleep).await.is_some() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::{HandlerError, HandlerResult};
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Log = Arc<Mutex<Vec<(String, Instant, Value)>>>;

    fn context(log: Log) -> SpawnContext {
        SpawnContext {
            memo: Memos::default(),
            extensions: Extensions::default(),
            stack: Stack::default(),
            deliver: Arc::new(move |d: Delivery| {
                let log = log.clone();
                Box::pin(async move {
                    if d.plan.is_empty() {
                        return Delivered::Done; // only events (warnings about failures)
                    }
                    let name = d.body["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    log.lock().unwrap_or_else(|e| e.into_inner()).push((
                        name,
                        Instant::now(),
                        d.plan.merge_patch().clone(),
                    ));
                    Delivered::Done
                })
            }),
            span: tracing::Span::none(),
        }
    }

    /// Spawns what matches and waits for the stopping of what no longer does.
    async fn sync(o: &mut ObjectDaemons, spec: &HandlerSpec, body: &Value) {
        if let Some(stops) = o.spawn_matching(std::slice::from_ref(spec), body) {
            stops.await;
        }
    }

    /// When the deliveries arrived, in whole seconds since `t0`.
    fn seconds_since(log: &Log, t0: Instant) -> Vec<u64> {
        log.lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, t, _)| (*t - t0).as_secs())
            .collect()
    }

    fn body(name: &str) -> Value {
        json!({"metadata": {"name": name, "uid": name}, "spec": {}})
    }

    fn timer(
        options: TimerOptions,
        f: impl Fn(Cause) -> BoxFuture<HandlerResult> + Send + Sync + 'static,
    ) -> HandlerSpec {
        let mut spec = HandlerSpec::new("tick", None, move |c: Cause| f(c));
        spec.kind = HandlerKind::Timer(options);
        spec
    }

    fn daemon(
        options: DaemonOptions,
        f: impl Fn(Cause) -> BoxFuture<HandlerResult> + Send + Sync + 'static,
    ) -> HandlerSpec {
        let mut spec = HandlerSpec::new("watch", None, move |c: Cause| f(c));
        spec.kind = HandlerKind::Daemon(options);
        spec
    }

    #[tokio::test(start_paused = true)]
    async fn a_hundred_sharp_timers_tick_on_schedule_for_a_minute() {
        let log: Log = Arc::default();
        let interval = Duration::from_secs(1);
        // Each call takes a fifth of the interval: a non-aligned timer would drift by 12 s.
        let spec = timer(TimerOptions::every(interval).sharp(true), |_c| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(Some(json!("tick")))
            })
        });
        let t0 = Instant::now();
        let mut objects: Vec<ObjectDaemons> = (0..100)
            .map(|i| ObjectDaemons::new(body(&format!("o{i}")), context(log.clone())))
            .collect();
        for (i, o) in objects.iter_mut().enumerate() {
            sync(o, &spec, &body(&format!("o{i}"))).await;
        }
        tokio::time::sleep(Duration::from_secs(60) + Duration::from_millis(500)).await;
        for o in &mut objects {
            o.stop_all(StopReason::OperatorExiting).await;
        }
        let log = log.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..100 {
            let name = format!("o{i}");
            let ticks: Vec<Duration> = log
                .iter()
                .filter(|(n, _, _)| *n == name)
                .map(|(_, t, _)| *t - t0)
                .collect();
            assert_eq!(ticks.len(), 61, "{name}: {ticks:?}");
            for (k, t) in ticks.iter().enumerate() {
                let due = interval * k as u32;
                assert!(
                    *t >= due && *t < due + interval,
                    "{name}: tick {k} at {t:?}, due at {due:?}"
                );
            }
        }
        assert_eq!(log[0].2, json!({"status": {"tick": "tick"}}));
    }

    #[tokio::test(start_paused = true)]
    async fn plain_timers_wait_the_interval_after_each_call_and_retry_errors_with_backoff() {
        let log: Log = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let mut spec = timer(TimerOptions::every(Duration::from_secs(10)), move |_c| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if n == 1 {
                    Err(HandlerError::other("flaky"))
                } else {
                    Ok(Some(json!(n)))
                }
            })
        });
        spec.backoff = Duration::from_secs(3);
        let mut o = ObjectDaemons::new(body("x"), context(log.clone()));
        sync(&mut o, &spec, &body("x")).await;
        let t0 = Instant::now();
        // Calls at 0 (ok), 10 (fails), 13 (ok), 23 (ok).
        tokio::time::sleep(Duration::from_secs(24)).await;
        o.stop_all(StopReason::OperatorExiting).await;
        let at = seconds_since(&log, t0);
        assert_eq!(at, vec![0, 13, 23]);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timers_wait_for_a_quiet_object() {
        let log: Log = Arc::default();
        let spec = timer(TimerOptions::default().idle(Duration::from_secs(5)), |_c| {
            Box::pin(async { Ok(Some(json!("quiet"))) })
        });
        let t0 = Instant::now();
        let mut o = ObjectDaemons::new(body("x"), context(log.clone()));
        sync(&mut o, &spec, &body("x")).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        o.observe(&body("x"), true); // changed at 3 s: quiet at 8 s
        tokio::time::sleep(Duration::from_secs(20)).await;
        o.observe(&body("x"), true); // changed at 23 s: quiet at 28 s
        tokio::time::sleep(Duration::from_secs(10)).await;
        o.stop_all(StopReason::OperatorExiting).await;
        let at = seconds_since(&log, t0);
        assert_eq!(at, vec![8, 28]);
    }

    #[tokio::test(start_paused = true)]
    async fn daemons_see_why_they_stop_and_restart_only_after_temporary_errors() {
        let reasons = Arc::new(Mutex::new(Vec::new()));
        let r = reasons.clone();
        let attempts = Arc::new(AtomicUsize::new(0));
        let a = attempts.clone();
        let spec = daemon(
            DaemonOptions::new().initial_delay(Duration::from_secs(1)),
            move |c| {
                let r = r.clone();
                let n = a.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    if n == 0 {
                        return Err(HandlerError::temporary("not yet", Duration::from_secs(2)));
                    }
                    let stopped = c.stopped.clone().unwrap_or_default();
                    let reason = stopped.wait().await;
                    r.lock().unwrap_or_else(|e| e.into_inner()).push(reason);
                    Ok(None)
                })
            },
        );
        let mut o = ObjectDaemons::new(body("x"), context(Arc::default()));
        sync(&mut o, &spec, &body("x")).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        assert!(o.is_running());
        o.stop_all(StopReason::Deleted).await;
        assert!(!o.is_running());
        assert_eq!(
            *reasons.lock().unwrap_or_else(|e| e.into_inner()),
            vec![StopReason::Deleted]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_returned_daemon_is_not_restarted_but_a_mismatched_one_is() {
        let starts = Arc::new(AtomicUsize::new(0));
        let s = starts.clone();
        let mut spec = daemon(DaemonOptions::new(), move |c| {
            s.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let stopped = c.stopped.clone().unwrap_or_default();
                stopped.wait().await;
                Ok(None)
            })
        });
        spec.labels = vec![(
            "run".into(),
            crate::handler::MetaFilter::Value("yes".into()),
        )];
        let on = json!({"metadata": {"name": "x", "labels": {"run": "yes"}}});
        let off = json!({"metadata": {"name": "x", "labels": {"run": "no"}}});
        let mut o = ObjectDaemons::new(on.clone(), context(Arc::default()));
        sync(&mut o, &spec, &on).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        sync(&mut o, &spec, &off).await;
        assert!(!o.is_running());
        sync(&mut o, &spec, &on).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(o.is_running());
        assert_eq!(starts.load(Ordering::SeqCst), 2);

        // A daemon that returns by itself stays finished.
        let once = daemon(DaemonOptions::new(), |_c| Box::pin(async { Ok(None) }));
        let mut o = ObjectDaemons::new(on.clone(), context(Arc::default()));
        sync(&mut o, &once, &on).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!o.is_running());
        sync(&mut o, &once, &on).await;
        assert!(!o.is_running());
    }

    #[tokio::test(start_paused = true)]
    async fn a_daemon_ignoring_the_flag_is_cancelled_after_the_backoff() {
        let spec = daemon(
            DaemonOptions::new()
                .cancellation_backoff(Duration::from_secs(2))
                .cancellation_timeout(Duration::from_secs(3)),
            |_c| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(None)
                })
            },
        );
        let mut o = ObjectDaemons::new(body("x"), context(Arc::default()));
        sync(&mut o, &spec, &body("x")).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        let t0 = Instant::now();
        o.stop_all(StopReason::Deleted).await;
        // Waited for the backoff, then cancelled at once.
        assert_eq!(t0.elapsed().as_secs(), 2);
        assert!(!o.is_running());
    }

    #[tokio::test]
    async fn a_sync_daemon_ignoring_the_flag_is_abandoned_after_the_timeout() {
        use crate::extract::IntoHandler;
        let release = Stopped::new();
        let hold = release.clone();
        // A plain fn that ignores its own flag (it waits for the test's).
        let handler = move || -> Result<(), HandlerError> {
            hold.wait_blocking(Duration::from_secs(30));
            Ok(())
        };
        let mut spec = HandlerSpec::from_arc("stubborn", None, handler.into_handler());
        spec.kind = HandlerKind::Daemon(
            DaemonOptions::new()
                .cancellation_backoff(Duration::from_millis(50))
                .cancellation_timeout(Duration::from_millis(100)),
        );
        assert!(spec.handler.is_blocking());
        let mut o = ObjectDaemons::new(body("x"), context(Arc::default()));
        sync(&mut o, &spec, &body("x")).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = std::time::Instant::now();
        o.stop_all(StopReason::Deleted).await;
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(150), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        release.set(StopReason::OperatorExiting);
    }

    #[test]
    fn sync_waits_on_the_flag_return_its_reason() {
        let stopped = Stopped::new();
        assert_eq!(stopped.wait_blocking(Duration::from_millis(10)), None);
        let s = stopped.clone();
        let t = std::thread::spawn(move || s.wait_blocking(Duration::from_secs(30)));
        stopped.set(StopReason::FiltersMismatch);
        stopped.set(StopReason::Deleted);
        assert_eq!(t.join().ok().flatten(), Some(StopReason::FiltersMismatch));
        assert_eq!(stopped.reason(), Some(StopReason::FiltersMismatch));
    }
}
