//! The level-triggered model: one `reconcile(object, ctx) -> Action` per resource that
//! converges on the object's current state, beside (or instead of) Kopf's cause handlers.
//!
//! This module is the vocabulary and the pure parts: the [`Action`] a reconcile returns, the
//! [`Trigger`] that woke it, the [`Triggers`] bus that owned and related objects send on, the
//! settings ([`ReconcileConfig`], [`Backoff`]), the registered [`ReconcileSpec`], the
//! [`ReconcileContext`] a call receives, and [`run`]: one call turned into a [`PatchPlan`] and
//! the next schedule ([`Reconciled`]). Scheduling per object (one in flight, one pending,
//! the earliest wins, debounce) is the worker's, in `kopf-watch`, in the same serial lane as
//! the cause handlers.
//!
//! ```
//! use std::time::Duration;
//! use kopf_core::reconcile::{Action, ReconcileConfig, ReconcileContext, ReconcileSpec};
//! use kopf_core::handler::HandlerError;
//!
//! let spec = ReconcileSpec::new("reconcile", |body: serde_json::Value, ctx: ReconcileContext| async move {
//!     let replicas = body.pointer("/spec/replicas").and_then(|v| v.as_u64()).unwrap_or(1);
//!     ctx.patch().merge(serde_json::json!({"status": {"replicas": replicas}}));
//!     Ok::<_, HandlerError>(Action::requeue(Duration::from_secs(300)))
//! })
//! .config(ReconcileConfig::default().debounce(Duration::from_millis(500)));
//! assert_eq!(spec.id, "reconcile");
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::causes::Reason;
use crate::events::EventSpec;
use crate::extract::FromCause;
use crate::handler::context::{EventsHandle, Extensions, PatchHandle};
use crate::handler::error::HandlerError;
use crate::handler::spec::{BoxFuture, Cause};
use crate::memo::Memos;
use crate::plan::PatchPlan;

/// What a reconcile asks for next.
///
/// ```
/// use std::time::Duration;
/// use kopf_core::reconcile::Action;
///
/// assert_eq!(Action::requeue(Duration::from_secs(5)).requeue_after(), Some(Duration::from_secs(5)));
/// assert_eq!(Action::await_change().requeue_after(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile again this long after this call finished, unless a change comes first.
    pub fn requeue(after: Duration) -> Self {
        Action {
            requeue_after: Some(after),
        }
    }

    /// Reconcile again only when something changes (the object, an owned or related
    /// object).
    pub fn await_change() -> Self {
        Action {
            requeue_after: None,
        }
    }

    /// The requeue delay, if any.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

impl From<()> for Action {
    fn from((): ()) -> Self {
        Action::await_change()
    }
}

/// Why a reconcile runs (for logs and for the reconcile itself; never a reason to act
/// differently: a reconcile converges on the current state whatever woke it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// The object was seen for the first time by this process (a listing or a creation).
    Listed,
    /// The object changed (by someone else than this operator).
    ObjectChanged,
    /// An owned object changed (`kind/name`).
    Owned(String),
    /// A related object changed (`kind/name`), mapped by a `watches` mapper.
    Related(String),
    /// The last reconcile asked to be called again.
    Requeue,
    /// The last reconcile failed; this is its retry after the backoff.
    Backoff,
    /// The object is being deleted (a reconcile's cleanup).
    Deleting,
    /// Asked for through a [`Triggers`] handle (code outside the operator's watches).
    Requested,
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::Listed => f.write_str("listed"),
            Trigger::ObjectChanged => f.write_str("object changed"),
            Trigger::Owned(what) => write!(f, "owned {what} changed"),
            Trigger::Related(what) => write!(f, "related {what} changed"),
            Trigger::Requeue => f.write_str("requeue"),
            Trigger::Backoff => f.write_str("retry after an error"),
            Trigger::Deleting => f.write_str("deleting"),
            Trigger::Requested => f.write_str("requested"),
        }
    }
}

/// An object by namespace and name (what a `watches` mapper returns).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// The namespace (None: cluster-scoped).
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectRef {
    /// A namespaced object.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// A cluster-scoped object.
    pub fn cluster(name: impl Into<String>) -> Self {
        ObjectRef {
            namespace: None,
            name: name.into(),
        }
    }
}

/// Which object a trigger is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// By uid (from an ownerReference).
    Uid(String),
    /// By namespace and name (from a mapper).
    Ref(ObjectRef),
}

/// A request to reconcile one object, from an owned or related object's event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRef {
    /// The object to reconcile.
    pub target: Target,
    /// Why.
    pub trigger: Trigger,
}

/// The bus that owned and related objects' watches send reconcile requests on; the engines
/// of the reconciled resource (one per namespace watched) subscribe. Requests for objects an
/// engine does not know are dropped by it.
#[derive(Clone, Default)]
pub struct Triggers(Arc<Mutex<Vec<mpsc::UnboundedSender<TriggerRef>>>>);

impl std::fmt::Debug for Triggers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("Triggers").field("subscribers", &n).finish()
    }
}

impl Triggers {
    /// A new subscriber (an engine of the reconciled resource).
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<TriggerRef> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
        rx
    }

    /// Sends a request to every subscriber (the ones gone are forgotten).
    pub fn send(&self, request: TriggerRef) {
        let mut subs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        subs.retain(|tx| tx.send(request.clone()).is_ok());
    }

    /// Asks for a reconcile of an object by namespace and name, from anywhere (a timer of
    /// another resource, a webhook, a task of the operator's own): it runs as if the object
    /// had changed (debounced, one pending entry). Objects no engine knows are ignored.
    ///
    /// ```
    /// use kopf_core::reconcile::{ObjectRef, Triggers};
    ///
    /// let triggers = Triggers::default();
    /// let mut engine = triggers.subscribe();
    /// triggers.reconcile(ObjectRef::namespaced("default", "x"));
    /// assert!(engine.try_recv().is_ok());
    /// ```
    pub fn reconcile(&self, object: ObjectRef) {
        self.send(TriggerRef {
            target: Target::Ref(object),
            trigger: Trigger::Requested,
        });
    }

    /// The uids of an object's ownerReferences (what `owns` triggers; with
    /// `controller_only`, only the one marked `controller: true`), with the object's
    /// `kind/name` for the logs.
    pub fn owners(body: &Value, controller_only: bool) -> (Vec<String>, String) {
        let uids = body
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter(|r| {
                        !controller_only
                            || r.get("controller").and_then(Value::as_bool) == Some(true)
                    })
                    .filter_map(|r| r.get("uid").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        (uids, kind_name(body))
    }
}

/// `kind/name` of an object, for the logs.
pub fn kind_name(body: &Value) -> String {
    let field = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or("");
    format!("{}/{}", field("/kind"), field("/metadata/name"))
}

/// Exponential backoff of failed reconciles, per object, reset by a success: `base`,
/// `2 × base`, `4 × base`... up to `max`, each shortened by a random part of up to
/// `jitter` (0.0–1.0) so that objects failing together do not retry together.
///
/// ```
/// use std::time::Duration;
/// use kopf_core::reconcile::Backoff;
///
/// let b = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60)).jitter(0.0);
/// assert_eq!(b.delay(1), Duration::from_secs(1));
/// assert_eq!(b.delay(3), Duration::from_secs(4));
/// assert_eq!(b.delay(30), Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first delay.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
    /// The random part (0.0: none).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// Doubling from `base` up to `max`, with the default jitter (0.2).
    pub fn exponential(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            ..Backoff::default()
        }
    }

    /// With this random part (clamped to 0.0–1.0).
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter.clamp(0.0, 1.0);
        self
    }

    /// The delay after `failures` failures in a row (1: the first).
    pub fn delay(&self, failures: u32) -> Duration {
        crate::backoff::Backoff::new(
            self.base,
            self.max,
            crate::backoff::Jitter::Shorten(self.jitter),
        )
        .delay(failures)
    }
}

/// The settings of a reconcile.
#[derive(Debug, Clone, Default)]
pub struct ReconcileConfig {
    /// Wait this long after a trigger for more triggers before reconciling (a burst of
    /// changes becomes one reconcile); an object that never stops changing is still
    /// reconciled at least every 10 × `debounce`.
    pub debounce: Option<Duration>,
    /// At most this many reconciles of the resource at once, across all objects (one per
    /// object always). None: no limit beyond the operator's worker limit.
    pub concurrency: Option<usize>,
    /// A reconcile that runs longer is cancelled and counts as failed.
    pub timeout: Option<Duration>,
    /// The backoff of failed reconciles.
    pub backoff: Backoff,
}

impl ReconcileConfig {
    /// With a debounce.
    pub fn debounce(mut self, d: Duration) -> Self {
        self.debounce = Some(d);
        self
    }

    /// With a concurrency limit (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n.max(1));
        self
    }

    /// With a timeout per reconcile.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// With this backoff of failed reconciles.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}

/// A reconcile function over the object's body.
pub type ReconcileFn =
    Arc<dyn Fn(Value, ReconcileContext) -> BoxFuture<Result<Action, HandlerError>> + Send + Sync>;

/// A registered reconcile (one per resource).
#[derive(Clone)]
pub struct ReconcileSpec {
    /// Its id (logs, metrics; its cleanup handler is `<id>/cleanup`).
    pub id: String,
    /// The function.
    pub function: ReconcileFn,
    /// Its settings.
    pub config: ReconcileConfig,
    /// Where owned and related objects' watches send their requests.
    pub triggers: Triggers,
    /// The concurrency limit, shared by the resource's engines.
    pub limit: Option<Arc<tokio::sync::Semaphore>>,
}

impl std::fmt::Debug for ReconcileSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileSpec")
            .field("id", &self.id)
            .field("config", &self.config)
            .finish()
    }
}

impl ReconcileSpec {
    /// A reconcile over the object's body (the facade's `Operator::reconcile` wraps typed
    /// functions into this).
    pub fn new<F, Fut, E>(id: impl Into<String>, f: F) -> Self
    where
        F: Fn(Value, ReconcileContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: Into<HandlerError>,
    {
        let function: ReconcileFn = Arc::new(move |body, ctx| {
            let fut = f(body, ctx);
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        ReconcileSpec {
            id: id.into(),
            function,
            config: ReconcileConfig::default(),
            triggers: Triggers::default(),
            limit: None,
        }
    }

    /// With these settings.
    pub fn config(mut self, config: ReconcileConfig) -> Self {
        self.limit = config
            .concurrency
            .map(|n| Arc::new(tokio::sync::Semaphore::new(n.max(1))));
        self.config = config;
        self
    }
}

/// What a reconcile receives beside the object: the handles its writes go through (folded
/// into one PATCH per endpoint after it returns, like a cause handler's), why it runs, how
/// many times in a row it failed before, and every extractor of a handler through
/// [`extract`](Self::extract) (`Memo<T>`, `Index<K, V>`, the client...).
#[derive(Debug, Clone)]
pub struct ReconcileContext {
    cause: Cause,
    trigger: Trigger,
    failures: u32,
}

impl ReconcileContext {
    /// A context for `body` (the framework makes them; public for tests of reconciles).
    pub fn new(body: Value, trigger: Trigger, failures: u32) -> Self {
        let mut cause = Cause::for_body(Reason::Noop, body);
        cause.retry = failures;
        ReconcileContext {
            cause,
            trigger,
            failures,
        }
    }

    /// A context over a handler's cause (a reconcile's cleanup runs as a deletion handler).
    pub fn from_cause(cause: Cause, trigger: Trigger) -> Self {
        let failures = cause.retry;
        ReconcileContext {
            cause,
            trigger,
            failures,
        }
    }

    /// With the object's memo and the operator-wide values.
    pub fn with(mut self, memo: Memos, extensions: Extensions) -> Self {
        self.cause.memo = memo;
        self.cause.extensions = extensions;
        self
    }

    /// With the writer of `Conditions::sync()` (the framework gives one; without it, a
    /// sync is an error).
    pub fn with_conditions_sync(
        mut self,
        sync: Arc<dyn crate::conditions::ConditionsSync>,
    ) -> Self {
        self.cause.conditions = self.cause.conditions.clone().with_sync(sync);
        self
    }

    /// Why it runs.
    pub fn trigger(&self) -> &Trigger {
        &self.trigger
    }

    /// Failed reconciles of this object in a row before this one (0 after a success).
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The object as this reconcile sees it.
    pub fn body(&self) -> &Value {
        &self.cause.body
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.cause.name()
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> Option<&str> {
        self.cause.namespace()
    }

    /// The object's merge patch, sent after the reconcile returns (status changes go to
    /// `/status` first, as with cause handlers).
    pub fn patch(&self) -> &PatchHandle {
        &self.cause.patch
    }

    /// Kubernetes Events about the object, posted after the reconcile.
    pub fn events(&self) -> &EventsHandle {
        &self.cause.events
    }

    /// Any handler extractor: `ctx.extract::<Memo<App>>()`, `ctx.extract::<Index<K, V>>()`,
    /// `ctx.extract::<kopf::handler::Client>()`...
    pub fn extract<T: FromCause>(&self) -> Result<T, HandlerError> {
        T::from_cause(&self.cause)
    }

    /// The cause the extractors read.
    pub fn cause(&self) -> &Cause {
        &self.cause
    }
}

/// One reconcile's outcome: what it returned, and what to write.
#[derive(Debug)]
pub struct Reconciled {
    /// What the function returned (a panic, a timeout: an error).
    pub result: Result<Action, HandlerError>,
    /// What to write (its patch, its conditions).
    pub plan: PatchPlan,
    /// Events to post.
    pub events: Vec<EventSpec>,
}

/// Runs one reconcile of `ctx`'s object: in a task of its own (a panic is an error), within
/// the timeout; its writes folded into a plan.
pub async fn run(spec: &ReconcileSpec, ctx: ReconcileContext) -> Reconciled {
    let patch = ctx.cause.patch.clone();
    let events = ctx.cause.events.clone();
    let conditions = ctx.cause.conditions.clone();
    let body = ctx.cause.body.clone();
    let fut = (spec.function)(body, ctx);
    let task = tokio::spawn(fut);
    let abort = task.abort_handle();
    let joined = match spec.config.timeout {
        Some(t) => match tokio::time::timeout(t, task).await {
            Ok(joined) => joined.map_err(HandlerError::from_join),
            Err(_) => {
                abort.abort();
                Err(HandlerError::other(format!(
                    "the reconcile timed out after {}s",
                    t.as_secs_f64()
                )))
            }
        },
        None => task.await.map_err(HandlerError::from_join),
    };
    let result = joined.and_then(|r| r);
    let mut plan = PatchPlan::new();
    plan.merge(&patch.get());
    // The conditions it set (`ctx.extract::<Conditions>()`) go with its status write.
    let intents = conditions.take_intents();
    if !intents.is_empty() {
        plan.conditions(intents);
        plan.condition_clock(conditions.generation(), crate::clock::now());
    }
    Reconciled {
        result,
        plan,
        events: events.take(),
    }
}

/// When the next reconcile of an object is due after `result`, and its failures in a row
/// after it: a success resets the failures and follows the action; a temporary error with
/// a delay retries after it; a permanent error waits for a change; other errors back off.
pub fn next_after(
    result: &Result<Action, HandlerError>,
    failures: u32,
    backoff: &Backoff,
) -> (Option<Duration>, u32) {
    match result {
        Ok(action) => (action.requeue_after(), 0),
        Err(HandlerError::Temporary { delay: Some(d), .. }) => {
            (Some(*d), failures.saturating_add(1))
        }
        Err(HandlerError::Permanent { .. } | HandlerError::Admission { .. }) => {
            (None, failures.saturating_add(1))
        }
        Err(_) => {
            let n = failures.saturating_add(1);
            (Some(backoff.delay(n)), n)
        }
    }
}

/// The per-object bookkeeping of the reconcile scheduler: one pending entry per object (the
/// earliest wins; a debounce moves it later, never beyond its cap), the failures in a row.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// When the pending reconcile is due, and why.
    pub due: Option<(tokio::time::Instant, Trigger)>,
    /// Since when a debounced trigger waits (the cap counts from it).
    pub waiting_since: Option<tokio::time::Instant>,
    /// Failed reconciles in a row.
    pub failures: u32,
    /// The pending entry is a debounced trigger (later triggers push it back).
    debounced: bool,
}

impl Schedule {
    /// A trigger at `now`: due at once, or after the debounce (pushed back by every
    /// trigger within it, up to 10 × the debounce after the first; an earlier requeue
    /// still wins).
    pub fn trigger(&mut self, now: tokio::time::Instant, why: Trigger, debounce: Option<Duration>) {
        let Some(d) = debounce else {
            self.at(now, why);
            return;
        };
        let since = *self.waiting_since.get_or_insert(now);
        let at = (now + d).min(since + d * 10);
        match self.due.take() {
            Some((t, w)) if !self.debounced && t <= at => self.due = Some((t, w)),
            // The first reason is kept.
            Some((_, w)) if self.debounced => self.due = Some((at, w)),
            _ => {
                self.due = Some((at, why));
                self.debounced = true;
            }
        }
    }

    /// A requeue or retry at `at`: the earliest pending entry wins.
    pub fn at(&mut self, at: tokio::time::Instant, why: Trigger) {
        if self.due.as_ref().is_none_or(|(t, _)| at < *t) {
            self.due = Some((at, why));
            self.debounced = false;
        }
    }

    /// Takes the pending entry if it is due at `now`.
    pub fn take_due(&mut self, now: tokio::time::Instant) -> Option<Trigger> {
        match &self.due {
            Some((t, _)) if *t <= now => {
                self.waiting_since = None;
                self.debounced = false;
                self.due.take().map(|(_, w)| w)
            }
            _ => None,
        }
    }

    /// Drops the pending entry (the object is being deleted); the failures stay.
    pub fn clear(&mut self) {
        self.due = None;
        self.waiting_since = None;
        self.debounced = false;
    }

    /// When the pending entry is due.
    pub fn when(&self) -> Option<tokio::time::Instant> {
        self.due.as_ref().map(|(t, _)| *t)
    }
}

/// The reconcile requests of a worker's object from other watches: set by the engine, taken
/// by the worker.
#[derive(Debug, Default)]
pub struct Kick {
    notify: tokio::sync::Notify,
    pending: Mutex<Option<Trigger>>,
}

impl Kick {
    /// Asks for a reconcile (the first reason is kept until the worker takes it).
    pub fn kick(&self, why: Trigger) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
        self.notify.notify_one();
    }

    /// Waits for a request.
    pub async fn kicked(&self) -> Trigger {
        loop {
            if let Some(why) = self.take() {
                return why;
            }
            self.notify.notified().await;
        }
    }

    /// Takes a request, if there is one.
    pub fn take(&self) -> Option<Trigger> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Name → uid of the objects an engine knows (a `watches` mapper names objects).
#[derive(Debug, Default)]
pub struct Names(HashMap<ObjectRef, String>);

impl Names {
    /// Remembers an object (or forgets it, when deleted).
    pub fn observe(&mut self, body: &Value, uid: &str, deleted: bool) {
        let Some(name) = body.pointer("/metadata/name").and_then(Value::as_str) else {
            return;
        };
        let key = ObjectRef {
            namespace: body
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_string),
            name: name.to_string(),
        };
        if deleted {
            self.0.remove(&key);
        } else {
            self.0.insert(key, uid.to_string());
        }
    }

    /// The uid of a target.
    pub fn uid<'a>(&'a self, target: &'a Target) -> Option<&'a str> {
        match target {
            Target::Uid(uid) => Some(uid),
            Target::Ref(r) => self.0.get(r).map(String::as_str),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_jitter_only_shortens() {
        let b = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(10));
        let plain = b.jitter(0.0);
        let delays: Vec<_> = (1..=10).map(|n| plain.delay(n)).collect();
        assert_eq!(delays[0], Duration::from_millis(100));
        assert_eq!(delays[1], Duration::from_millis(200));
        assert_eq!(delays[6], Duration::from_millis(6400));
        assert_eq!(delays[7], Duration::from_secs(10));
        assert_eq!(plain.delay(u32::MAX), Duration::from_secs(10));
        for n in 1..20 {
            let d = b.delay(n);
            assert!(
                d <= plain.delay(n) && d >= plain.delay(n).mul_f64(0.8),
                "{n}: {d:?}"
            );
        }
    }

    #[test]
    fn next_after_resets_on_success_and_backs_off_on_errors() {
        let b = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60)).jitter(0.0);
        let ok = Ok(Action::requeue(Duration::from_secs(5)));
        assert_eq!(next_after(&ok, 7, &b), (Some(Duration::from_secs(5)), 0));
        let other = Err(HandlerError::other("x"));
        assert_eq!(next_after(&other, 0, &b), (Some(Duration::from_secs(1)), 1));
        assert_eq!(next_after(&other, 3, &b), (Some(Duration::from_secs(8)), 4));
        let temporary = Err(HandlerError::temporary("x", Duration::from_secs(3)));
        assert_eq!(
            next_after(&temporary, 3, &b),
            (Some(Duration::from_secs(3)), 4)
        );
        let permanent = Err(HandlerError::permanent("x"));
        assert_eq!(next_after(&permanent, 0, &b), (None, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_earliest_entry_wins_and_a_debounce_is_capped() {
        let now = Instant::now();
        let mut s = Schedule::default();
        s.at(now + Duration::from_secs(10), Trigger::Requeue);
        s.trigger(now + Duration::from_secs(1), Trigger::ObjectChanged, None);
        assert_eq!(s.when(), Some(now + Duration::from_secs(1)));
        s.at(now + Duration::from_secs(5), Trigger::Requeue);
        assert_eq!(
            s.when(),
            Some(now + Duration::from_secs(1)),
            "earliest wins"
        );
        assert_eq!(s.take_due(now), None, "not yet due");
        assert_eq!(
            s.take_due(now + Duration::from_secs(1)),
            Some(Trigger::ObjectChanged)
        );
        assert_eq!(s.when(), None, "one pending entry, taken");

        // Debounce: every trigger pushes it back, up to 10 × the debounce.
        let d = Some(Duration::from_secs(1));
        let mut s = Schedule::default();
        for i in 0..30u64 {
            s.trigger(
                now + Duration::from_millis(500 * i),
                Trigger::ObjectChanged,
                d,
            );
        }
        assert_eq!(s.when(), Some(now + Duration::from_secs(10)), "capped");
    }

    #[tokio::test]
    async fn a_run_folds_the_patch_and_contains_panics_and_timeouts() {
        let spec = ReconcileSpec::new("r", |_b: Value, ctx: ReconcileContext| async move {
            ctx.patch()
                .merge(serde_json::json!({"status": {"seen": ctx.failures()}}));
            ctx.events().info("Reconciled", "fine");
            let conditions = ctx.extract::<crate::conditions::Conditions>()?;
            conditions.set(
                "Ready",
                crate::conditions::ConditionStatus::True,
                "Reconciled",
                "",
            )?;
            Ok::<_, HandlerError>(Action::await_change())
        });
        let out = run(
            &spec,
            ReconcileContext::new(Value::Null, Trigger::Listed, 2),
        )
        .await;
        assert_eq!(out.result, Ok(Action::await_change()));
        assert_eq!(out.plan.merge_patch()["status"]["seen"], 2);
        assert_eq!(out.plan.condition_intents().len(), 1, "its conditions too");
        assert_eq!(out.events.len(), 1);

        let panics = ReconcileSpec::new("p", |_b: Value, _c: ReconcileContext| async move {
            if true {
                panic!("boom");
            }
            Ok::<_, HandlerError>(Action::await_change())
        });
        let out = run(
            &panics,
            ReconcileContext::new(Value::Null, Trigger::Listed, 0),
        )
        .await;
        assert!(
            matches!(out.result, Err(HandlerError::Other { message, .. }) if message.contains("panicked"))
        );

        let slow = ReconcileSpec::new("s", |_b: Value, _c: ReconcileContext| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, HandlerError>(Action::await_change())
        })
        .config(ReconcileConfig::default().timeout(Duration::from_millis(20)));
        let out = run(
            &slow,
            ReconcileContext::new(Value::Null, Trigger::Listed, 0),
        )
        .await;
        assert!(
            matches!(out.result, Err(HandlerError::Other { message, .. }) if message.contains("timed out"))
        );
    }

    #[test]
    fn owners_and_names_resolve_targets() {
        let child = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "c", "ownerReferences": [{"uid": "u1"}, {"uid": "u2", "controller": true}]}});
        assert_eq!(
            Triggers::owners(&child, false),
            (
                vec!["u1".to_string(), "u2".to_string()],
                "ConfigMap/c".to_string()
            )
        );
        assert_eq!(Triggers::owners(&child, true).0, vec!["u2".to_string()]);
        let mut names = Names::default();
        let obj = serde_json::json!({"metadata": {"name": "x", "namespace": "ns"}});
        names.observe(&obj, "u9", false);
        let target = Target::Ref(ObjectRef::namespaced("ns", "x"));
        assert_eq!(names.uid(&target), Some("u9"));
        names.observe(&obj, "u9", true);
        assert_eq!(names.uid(&target), None);
    }
}
