//! Per-resource processing: one list+watch stream (kube's `watcher`), one worker per object
//! (strictly serial per object, always on its latest state, parallel across objects), each
//! cycle's patch plan applied with at most one request per endpoint, and our own writes
//! waited for before the object is processed again.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kopf_core::causes::{EventKind, Reason};
use kopf_core::daemons::{Deliver, Delivered, Delivery, ObjectDaemons, SpawnContext, StopReason};
use kopf_core::events::{EventSpec, RateLimiter, Reporter, aggregate, event_body, failure_message};
use kopf_core::handler::{Cause, ErrorsMode, Extensions, HandlerError, HandlerKind, HandlerSpec};
use kopf_core::index::Indexes;
use kopf_core::layers::{HandlerCall, Invoke, Stack};
use kopf_core::memo::{MemoSeed, Memos};
use kopf_core::metrics::Metrics;
use kopf_core::plan::PatchPlan;
use kopf_core::processing::{
    CycleOutcome, FinalizerChange, HandlerOutcome, Persistence, Processor,
};
use kopf_core::throttle::{KOPF_ERROR_DELAYS, Throttler};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::apply::{Applied, Pruned, Writer};
use crate::outage::{FailureLog, WatchBackoff};
use crate::{NamespaceSelector, ResourceRef, WatchError};
use kopf_core::text::for_log;
use kube::runtime::utils::Backoff;

/// How resources are watched and objects processed; the same for every resource of an
/// operator.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Which namespaces are served: exact names get one watch each; globs and negations
    /// filter one cluster-wide watch; empty serves all namespaces.
    pub namespaces: NamespaceSelector,
    /// At most this many objects are processed at the same time (None: no limit).
    pub worker_limit: Option<usize>,
    /// Events about one object: up to `event_burst` at once, then one per `event_interval`.
    pub event_interval: Duration,
    /// See `event_interval`.
    pub event_burst: u32,
    /// Start watches with a streaming list (`sendInitialEvents`) instead of list + watch.
    pub streaming_lists: bool,
    /// After our own PATCH, changing handlers wait this long at most for the written
    /// resourceVersion to come back through the watch (Kopf's consistency timeout).
    pub consistency_timeout: Duration,
    /// When a handler's retry delay is over and nothing else happened, touch the object
    /// (Kopf's touch-dummy annotation) to get a fresh event, instead of processing the last
    /// known state again. Off by default: it costs a PATCH per retry.
    pub touch_delays: bool,
    /// Delays after consecutive framework errors of one object (Kopf's error delays).
    pub error_delays: Vec<Duration>,
    /// The operator-wide memo each object's memo starts from.
    pub memo: Arc<MemoSeed>,
    /// Who posts Events.
    pub reporter: Reporter,
    /// Operator-wide values for handlers' extractors (the engine adds its API client).
    pub extensions: Extensions,
    /// The operator's indexes (index handlers fill them).
    pub indexes: Indexes,
    /// Handlers wait here until every indexed resource has been listed and indexed.
    pub gate: IndexGate,
    /// Where the engine reports queue depth, tracked objects and its watch's health.
    pub metrics: Option<Metrics>,
    /// Keep `metadata.managedFields` in the bodies kept per object and given to handlers
    /// (off by default: it is server bookkeeping, and often most of an object's size).
    pub keep_managed_fields: bool,
}

/// Holds handlers back until the initial listing of every indexed resource has been
/// indexed (Kopf's "operator indexed" condition).
#[derive(Clone, Debug)]
pub struct IndexGate(Arc<watch::Sender<HashSet<String>>>);

impl Default for IndexGate {
    fn default() -> Self {
        IndexGate(Arc::new(watch::channel(HashSet::new()).0))
    }
}

impl IndexGate {
    /// Handlers wait for the engine with this key to report its first listing indexed.
    pub fn expect(&self, key: &str) {
        self.0.send_modify(|pending| {
            pending.insert(key.to_string());
        });
    }

    /// The engine with this key has indexed its first listing.
    pub fn done(&self, key: &str) {
        self.0.send_if_modified(|pending| pending.remove(key));
    }

    /// Completes once nothing is pending.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(HashSet::is_empty).await;
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespaces: NamespaceSelector::default(),
            worker_limit: None,
            event_interval: Duration::from_secs(10),
            event_burst: 5,
            streaming_lists: false,
            consistency_timeout: Duration::from_secs(5),
            touch_delays: false,
            error_delays: KOPF_ERROR_DELAYS
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
            memo: Arc::default(),
            reporter: Reporter::default(),
            extensions: Extensions::default(),
            indexes: Indexes::default(),
            gate: IndexGate::default(),
            metrics: None,
            keep_managed_fields: false,
        }
    }
}

/// One observed state of an object, for its worker.
#[derive(Debug, Clone)]
struct Observed {
    body: Value,
    event: EventKind,
}

/// The engine's end of an object's worker: its latest state, and whether a state is
/// waiting for the worker (the queue depth of the metrics).
struct Slot {
    tx: watch::Sender<Option<Observed>>,
    pending: Arc<std::sync::atomic::AtomicBool>,
}

/// The longest a worker sleeps before looking at its object again (Kopf's keep-alive).
const MAX_SLEEP: Duration = Duration::from_secs(600);

/// After a write met a concurrent change and no newer state came, the object is processed
/// again after this long.
const CONFLICT_RECHECK: Duration = Duration::from_secs(1);

/// Conflicts in a row on one object after which they are worth a warning.
const CONFLICTS_WORTH_A_WARNING: u32 = 3;

/// Per-resource processing.
pub struct Engine {
    client: kube::Client,
    resource: ResourceRef,
    handlers: Vec<HandlerSpec>,
    persistence: Persistence,
    stack: Stack,
    settings: Settings,
    namespace: Option<String>,
}

impl Engine {
    /// An engine for one resource with its handlers (cluster-wide, Kopf's persistence).
    pub fn new(client: kube::Client, resource: ResourceRef, handlers: Vec<HandlerSpec>) -> Self {
        Engine {
            client,
            resource,
            handlers,
            persistence: Persistence::default(),
            stack: Stack::default(),
            settings: Settings::default(),
            namespace: None,
        }
    }

    /// Watching and processing settings.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The per-handler stack (user layers, success events).
    pub fn stack(mut self, stack: Stack) -> Self {
        self.stack = stack;
        self
    }

    /// Watch only one namespace.
    pub fn namespace(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    /// Where state is kept on objects.
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    fn api(&self) -> Api<DynamicObject> {
        api_for(&self.client, &self.resource, self.namespace.as_deref())
    }

    /// The key of this engine in the [`IndexGate`].
    pub fn gate_key(&self) -> String {
        let ar = &self.resource.api_resource;
        format!(
            "{}/{}/{}@{}",
            ar.group,
            ar.version,
            ar.plural,
            self.namespace.as_deref().unwrap_or("*")
        )
    }

    /// Whether it has index handlers (others wait for its first listing to be indexed).
    pub fn has_indexes(&self) -> bool {
        self.handlers
            .iter()
            .any(|h| matches!(h.kind, HandlerKind::Index(_)))
    }

    /// Watches and processes until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), WatchError> {
        // The watcher relists after 410 and resumes after disconnects (including the
        // client's read timeout on a silent connection); failures (the resource gone with its
        // CRD, the API server down) are retried with a short, capped, jittered backoff.
        let config = if self.settings.streaming_lists {
            watcher::Config::default().streaming_lists()
        } else {
            watcher::Config::default()
        };
        // The backoff is ours, not kube's StreamBackoff: that one resets on every item,
        // including the `Init` the watcher emits before each attempt to list, so it never
        // grows during an outage of the listing.
        let stream = watcher(self.api(), config);
        let mut backoff = WatchBackoff::default();
        let mut outage = FailureLog::default();
        let mut gone = false;
        let mut stream = std::pin::pin!(stream);
        let mut shutdown = std::pin::pin!(shutdown);
        let mut workers: HashMap<String, Slot> = HashMap::new();
        let metrics = self.settings.metrics.clone();
        // Failures of the watch stream since its last event.
        let mut failing = true;
        // A listing has succeeded (a 403 before that means the operator cannot serve it).
        let mut listed_once = false;
        let plural = self.resource.api_resource.plural.clone();
        let gate_key = self.gate_key();
        let indexed = self.has_indexes();
        let kind_of = |k: fn(&HandlerKind) -> bool| -> Vec<HandlerSpec> {
            self.handlers
                .iter()
                .filter(|h| k(&h.kind))
                .cloned()
                .collect()
        };
        let indexers = kind_of(|k| matches!(k, HandlerKind::Index(_)));
        let watchers = kind_of(|k| matches!(k, HandlerKind::Event));
        let spawners = kind_of(|k| matches!(k, HandlerKind::Timer(_) | HandlerKind::Daemon(_)));
        let mut extensions = self.settings.extensions.clone();
        extensions.insert(self.client.clone());
        extensions.insert(self.settings.indexes.clone());
        for h in &indexers {
            if let HandlerKind::Index(types) = &h.kind {
                self.settings.indexes.declare(&h.id, *types);
            }
        }
        let shared = Arc::new(WorkerShared {
            client: self.client.clone(),
            resource: self.resource.clone(),
            processor: Processor::with_stack(self.handlers, self.persistence, self.stack.clone())
                .with_extensions(extensions.clone()),
            stack: self.stack,
            extensions,
            indexers,
            watchers,
            idle_timers: spawners
                .iter()
                .any(|h| matches!(&h.kind, HandlerKind::Timer(o) if o.idle.is_some())),
            spawners,
            exiting: std::sync::atomic::AtomicBool::new(false),
            handled_once: Mutex::default(),
            limit: self
                .settings
                .worker_limit
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n.max(1)))),
            events: Mutex::new(RateLimiter::with_burst(
                self.settings.event_interval,
                self.settings.event_burst,
            )),
            pruned: Mutex::default(),
            settings: self.settings.clone(),
        });
        tracing::info!(
            resource = %plural,
            // As given to `-n`: this watch's namespace, or the patterns that filter the
            // cluster-wide watch (read from their Debug form, the only one they have), or `*`.
            namespaces = %match (&self.namespace, self.resource.namespaced) {
                (Some(namespace), _) => namespace.clone(),
                (None, true) if self.settings.namespaces != NamespaceSelector::default() => {
                    // The quoted words of a Debug text.
                    let quoted = |s: &str| {
                        s.split('"')
                            .skip(1)
                            .step_by(2)
                            .map(str::to_string)
                            .collect::<Vec<_>>()
                    };
                    format!("{:?}", self.settings.namespaces)
                        .split("NamespacePattern")
                        .skip(1)
                        .flat_map(|pattern| {
                            let (includes, excludes) =
                                pattern.split_once("excludes").unwrap_or((pattern, ""));
                            let excludes = quoted(excludes).into_iter().map(|e| format!("!{e}"));
                            quoted(includes).into_iter().chain(excludes)
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                }
                _ => "*".to_string(),
            },
            "watching"
        );
        // The uids of the listing in progress: objects missing from a relist went away while
        // the watch was down (no DELETED event will come for them).
        let mut listing: Option<HashSet<String>> = None;
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let item = tokio::select! {
                _ = &mut shutdown => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
                item = stream.next() => item,
            };
            let Some(item) = item else {
                if let Some(m) = &metrics {
                    m.watch_ended(&plural);
                }
                break;
            };
            // What the API server sent (an `Init` is the watcher's own: it comes before
            // every attempt to list, failed or not).
            let alive = matches!(&item, Ok(e) if !matches!(e, watcher::Event::Init));
            match (&item, &metrics) {
                (Err(_), Some(m)) => {
                    failing = true;
                    m.watch_failed(&plural);
                }
                (Ok(_), Some(m)) if failing && alive => {
                    failing = false;
                    m.watch_alive(&plural);
                }
                _ => {}
            }
            if alive {
                outage.alive(&plural);
                backoff.reset();
            }
            let (obj, kind) = match item {
                Ok(watcher::Event::InitApply(o)) => (o, EventKind::Listed),
                Ok(watcher::Event::Apply(o)) => (o, EventKind::Modified),
                Ok(watcher::Event::Delete(o)) => (o, EventKind::Deleted),
                Ok(watcher::Event::Init) => {
                    listing = Some(HashSet::new());
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    listed_once = true;
                    if let Some(seen) = listing.take() {
                        let vanished: Vec<String> = workers
                            .keys()
                            .filter(|uid| !seen.contains(*uid))
                            .cloned()
                            .collect();
                        for uid in vanished {
                            // Dropping the sender ends the worker once it is idle.
                            workers.remove(&uid);
                            shared.forget(&uid);
                            shared.settings.indexes.forget(&uid);
                        }
                    }
                    if indexed {
                        // Indexing runs in this loop: the listing is indexed by now.
                        shared.settings.gate.done(&gate_key);
                    }
                    if gone {
                        gone = false;
                        tracing::info!(resource = %plural, "the resource is served again");
                    }
                    continue;
                }
                Err(watcher::Error::InitialListFailed(kube::Error::Api(s)))
                    if s.code == 403 && !listed_once =>
                {
                    let ar = &self.resource.api_resource;
                    return Err(WatchError::Forbidden {
                        resource: if ar.group.is_empty() {
                            ar.plural.clone()
                        } else {
                            format!("{}.{}", ar.plural, ar.group)
                        },
                        message: s.message,
                    });
                }
                Err(e) => {
                    let not_found = matches!(&e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404);
                    if not_found && !gone {
                        gone = true;
                        tracing::warn!(
                            resource = %plural,
                            "the resource is not served anymore (its CRD was deleted?); waiting for it to come back"
                        );
                    } else if !not_found {
                        outage.failed(&plural, &e);
                    }
                    let delay = backoff.next().unwrap_or_default();
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    continue;
                }
            };
            if !self
                .settings
                .namespaces
                .matches(obj.metadata.namespace.as_deref())
            {
                continue;
            }
            let Some(uid) = obj.metadata.uid.clone() else {
                continue;
            };
            if let Some(seen) = listing.as_mut() {
                seen.insert(uid.clone());
            }
            let mut obj = obj;
            if !self.settings.keep_managed_fields {
                // Server-side apply bookkeeping: often the larger part of an object, and of
                // no use to handlers; not kept per object.
                obj.metadata.managed_fields = None;
            }
            let body = match serde_json::to_value(&obj) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(error = %for_log(&e), "cannot read an object");
                    continue;
                }
            };
            let known = workers.get(&uid).is_some_and(|w| !w.tx.is_closed());
            // Indexes and raw-event handlers see every event, in order.
            shared.index(&uid, &body, kind).await;
            shared.on_event(&uid, &body, kind, known).await;
            let observed = Observed { body, event: kind };
            if known && let Some(w) = workers.get(&uid) {
                // Counted before it is sent: the worker (maybe on another thread) may pick it
                // at once, and its `picked` must see the flag, or the gauge stays up forever.
                shared.queued(&w.pending);
                w.tx.send_replace(Some(observed));
            } else {
                let (tx, rx) = watch::channel(Some(observed));
                let pending = Arc::new(std::sync::atomic::AtomicBool::new(false));
                shared.queued(&pending);
                workers.insert(
                    uid.clone(),
                    Slot {
                        tx,
                        pending: pending.clone(),
                    },
                );
                let shared = shared.clone();
                tasks.spawn(async move { shared.work(uid, rx, pending).await });
            }
            if kind == EventKind::Deleted {
                workers.retain(|_, w| !w.tx.is_closed());
            }
        }
        // Workers end when their channel closes: each stops its daemons and timers (staged,
        // within their cancellation settings) before it ends.
        shared
            .exiting
            .store(true, std::sync::atomic::Ordering::SeqCst);
        drop(workers);
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

struct WorkerShared {
    client: kube::Client,
    resource: ResourceRef,
    processor: Processor,
    stack: Stack,
    extensions: Extensions,
    indexers: Vec<HandlerSpec>,
    watchers: Vec<HandlerSpec>,
    spawners: Vec<HandlerSpec>,
    /// Some timer waits for objects to be idle (their essence changes matter).
    idle_timers: bool,
    /// The engine stops: daemons stop with "operator exiting".
    exiting: std::sync::atomic::AtomicBool,
    handled_once: Mutex<HashSet<String>>,
    limit: Option<Arc<tokio::sync::Semaphore>>,
    events: Mutex<RateLimiter>,
    /// Fields of results the API server dropped, already reported.
    pruned: Mutex<HashSet<Pruned>>,
    settings: Settings,
}

fn rv(body: &Value) -> Option<u64> {
    body.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

/// An object's daemons and timers, with the essence they last saw (kept only when some
/// timer waits for the object to be idle).
struct Spawned {
    daemons: ObjectDaemons,
    essence: Option<Value>,
}

/// How a cycle ended for the worker.
enum CycleEnd {
    /// Processed: run again after `delay` (retries), and wait for our write `rv` to come
    /// back first.
    Next {
        delay: Option<Duration>,
        rv: Option<u64>,
    },
    /// The object is gone: the worker ends.
    Gone,
    /// A framework error (not a handler's), e.g. a failed write: the object is throttled.
    Failed(String),
    /// The object changed while it was written: its newer state is processed next.
    Conflict(String),
    /// The API server refused handlers' results (id → message): the next cycle, at once,
    /// records that as their failure.
    Rejected(HashMap<String, String>),
}

impl WorkerShared {
    fn was_handled(&self, uid: &str) -> bool {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(uid)
    }

    /// Forgets an object that is gone: its "handled once" mark and its event budget.
    fn forget(&self, uid: &str) {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(uid);
    }

    fn api_for(&self, body: &Value) -> Api<DynamicObject> {
        let namespace = body.pointer("/metadata/namespace").and_then(Value::as_str);
        api_for(&self.client, &self.resource, namespace)
    }

    /// Processes one object serially, always on its latest observed state; stops its
    /// daemons and timers when it ends.
    async fn work(
        self: Arc<Self>,
        uid: String,
        mut rx: watch::Receiver<Option<Observed>>,
        pending: Arc<std::sync::atomic::AtomicBool>,
    ) {
        if let Some(m) = &self.settings.metrics {
            m.tracked(&self.resource.api_resource.plural, 1);
        }
        self.work_tracked(&uid, &mut rx, &pending).await;
        self.picked(&pending);
        if let Some(m) = &self.settings.metrics {
            m.tracked(&self.resource.api_resource.plural, -1);
        }
    }

    /// A new state waits for the worker of `pending`.
    fn queued(&self, pending: &std::sync::atomic::AtomicBool) {
        if !pending.swap(true, std::sync::atomic::Ordering::SeqCst)
            && let Some(m) = &self.settings.metrics
        {
            m.queue(&self.resource.api_resource.plural, 1);
        }
    }

    /// The worker of `pending` has taken its latest state.
    fn picked(&self, pending: &std::sync::atomic::AtomicBool) {
        if pending.swap(false, std::sync::atomic::Ordering::SeqCst)
            && let Some(m) = &self.settings.metrics
        {
            m.queue(&self.resource.api_resource.plural, -1);
        }
    }

    async fn work_tracked(
        self: &Arc<Self>,
        uid: &str,
        rx: &mut watch::Receiver<Option<Observed>>,
        pending: &std::sync::atomic::AtomicBool,
    ) {
        let uid = uid.to_string();
        // Nothing runs before the indexed resources are indexed (events meanwhile coalesce).
        loop {
            tokio::select! {
                _ = self.settings.gate.wait() => break,
                changed = rx.changed() => if changed.is_err() { return },
            }
        }
        let memo = Memos::new(self.settings.memo.clone());
        let mut spawned: Option<Spawned> = None;
        self.work_loop(&uid, rx, pending, &memo, &mut spawned).await;
        if let Some(mut s) = spawned {
            let reason = if self.exiting.load(std::sync::atomic::Ordering::SeqCst) {
                StopReason::OperatorExiting
            } else {
                StopReason::Deleted
            };
            Box::pin(s.daemons.stop_all(reason)).await;
        }
    }

    /// The daemons' and timers' view of a new state: spawned when the object (with our
    /// finalizer) matches, stopped — and waited for — when it is being deleted.
    async fn sync_daemons(
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
            daemons: ObjectDaemons::new(body.clone(), self.spawn_context(uid, memo, body)),
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
        } else if kopf_core::finalizers::has(body, &self.processor.persistence().finalizer)
            && let Some(stops) = s.daemons.spawn_matching(&self.spawners, body)
        {
            tokio::spawn(stops);
        }
    }

    fn spawn_context(self: &Arc<Self>, uid: &str, memo: &Memos, body: &Value) -> SpawnContext {
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

    /// A cause for handlers outside the changing cycle (indexes, raw events).
    fn plain_cause(&self, body: &Value) -> Cause {
        let mut cause = Cause::for_body(Reason::Noop, body.clone());
        cause.extensions = self.extensions.clone();
        cause
    }

    /// One call of a handler, without retries (a panic is an error of the handler).
    async fn invoke(&self, spec: &HandlerSpec, cause: Cause) -> kopf_core::layers::CallOutcome {
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

    /// Runs the index handlers on an event: their pairs replace the object's entries; a
    /// deletion, a filter mismatch or a failure removes them (an error in `Ignored` mode,
    /// the default for indexes, keeps the previous entries).
    async fn index(&self, uid: &str, body: &Value, kind: EventKind) {
        use tracing::Instrument;
        if self.indexers.is_empty() {
            return;
        }
        let indexes = &self.settings.indexes;
        for h in &self.indexers {
            if kind == EventKind::Deleted || !h.matches(body) {
                indexes.remove(&h.id, uid);
                continue;
            }
            let span = object_span(body);
            let outcome = self
                .invoke(h, self.plain_cause(body))
                .instrument(span.clone())
                .await;
            match outcome.result {
                Ok(Some(result)) => indexes.replace(&h.id, uid, &result),
                Ok(None) => {}
                Err(e) => {
                    let keep =
                        matches!(e, HandlerError::Other { .. }) && h.errors == ErrorsMode::Ignored;
                    span.in_scope(|| {
                        tracing::error!(
                            "Indexing handler '{}' failed: {e}; {}",
                            h.id,
                            if keep {
                                "the previous entries are kept"
                            } else {
                                "the object's entries are removed"
                            }
                        )
                    });
                    if !keep {
                        indexes.remove(&h.id, uid);
                    }
                }
            }
        }
    }

    /// Runs the raw event handlers on an event: no state, errors logged and ignored; their
    /// results and patches are applied like any handler's.
    async fn on_event(&self, uid: &str, body: &Value, kind: EventKind, known: bool) {
        use tracing::Instrument;
        if self.watchers.is_empty() {
            return;
        }
        let event = match kind {
            EventKind::Listed => None,
            EventKind::Deleted => Some("DELETED"),
            _ if known => Some("MODIFIED"),
            _ => Some("ADDED"),
        };
        let span = object_span(body);
        let mut plan = PatchPlan::new();
        let mut events = Vec::new();
        let mut delivered = Vec::new();
        for h in &self.watchers {
            if !h.matches(body) {
                continue;
            }
            let mut cause = self.plain_cause(body);
            cause.event = event.map(str::to_string);
            let outcome = self.invoke(h, cause).instrument(span.clone()).await;
            match outcome.result {
                Ok(Some(result)) => {
                    delivered.push((
                        h.id.clone(),
                        serde_json::json!({"status": {&h.id: &result}}),
                    ));
                    plan.status_result(&h.id, result);
                }
                Ok(None) => {}
                Err(e) => span.in_scope(|| {
                    tracing::error!(
                        "Handler '{}' failed with an exception and will ignore it: {e}",
                        h.id
                    )
                }),
            }
            plan.merge(&outcome.patch);
            events.extend(outcome.events);
        }
        if kind != EventKind::Deleted && !plan.is_noop_for(body) {
            let end = self
                .apply(body, &plan, &delivered, None)
                .instrument(span.clone())
                .await;
            if let CycleEnd::Failed(error) | CycleEnd::Conflict(error) = end {
                span.in_scope(|| {
                    tracing::error!("Writing the outcome of raw event handlers failed: {error}")
                });
            }
        }
        self.post_events(uid, body, events).await;
    }

    async fn work_loop(
        self: &Arc<Self>,
        uid: &str,
        rx: &mut watch::Receiver<Option<Observed>>,
        pending: &std::sync::atomic::AtomicBool,
        memo: &Memos,
        spawned: &mut Option<Spawned>,
    ) {
        let uid = uid.to_string();
        let mut throttler = Throttler::new(self.settings.error_delays.clone());
        // First seen in a listing: resume handlers join until the object is handled once.
        let mut listed = false;
        // Our last write, until it comes back through the watch or the consistency timeout.
        let mut expected_rv: Option<(u64, Instant)> = None;
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
        loop {
            let observed = rx.borrow_and_update().clone();
            let Some(observed) = observed else { return };
            listed |= observed.event == EventKind::Listed;
            if !self.spawners.is_empty() {
                Box::pin(self.sync_daemons(&uid, &observed, memo, spawned)).await;
            }
            // States older than our last write are skipped until it comes back (or the
            // consistency timeout passes); a DELETED event is never stale.
            let stale = observed.event != EventKind::Deleted
                && expected_rv.is_some_and(|(want, deadline)| {
                    rv(&observed.body).is_some_and(|have| have < want) && Instant::now() < deadline
                });
            if !stale {
                expected_rv = None;
                let permit = match &self.limit {
                    Some(sem) => sem.clone().acquire_owned().await.ok(),
                    None => None,
                };
                self.picked(pending);
                let initial = listed && !self.was_handled(&uid);
                let end = if std::mem::take(&mut woken) && self.settings.touch_delays {
                    Box::pin(self.touch(&observed.body)).await
                } else {
                    // Boxed: an idle worker (most of them, most of the time) then holds a
                    // small state, not room for a whole cycle.
                    let rejected = std::mem::take(&mut rejected);
                    Box::pin(self.cycle(&uid, &observed, initial, memo, rejected)).await
                };
                recheck = false;
                if !matches!(end, CycleEnd::Conflict(_)) {
                    conflicts = 0;
                }
                drop(permit);
                match end {
                    CycleEnd::Gone => return,
                    CycleEnd::Next { delay, rv } => {
                        throttler.succeeded();
                        let now = Instant::now();
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
                                changed = rx.changed() => if changed.is_err() { return },
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
            let wake = [retry_at, expected_rv.map(|(_, deadline)| deadline)]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    woken = false;
                    recheck = false;
                }
                _ = async { match wake { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                    let now = Instant::now();
                    if retry_at.is_some_and(|r| r <= now) {
                        retry_at = None;
                        woken = !std::mem::take(&mut recheck);
                    }
                    // Past the consistency deadline, the state at hand counts as consistent.
                    if expected_rv.is_some_and(|(_, deadline)| deadline <= now) {
                        expected_rv = None;
                    }
                    rx.mark_changed();
                }
            }
        }
    }

    /// Touches the object so that its next state comes through the watch (Kopf's way of
    /// waking up after a delay), through the same plan as any cycle's writes.
    async fn touch(&self, body: &Value) -> CycleEnd {
        let mut plan = PatchPlan::new();
        plan.merge(
            &self
                .processor
                .persistence()
                .progress
                .touch_patch(jiff::Timestamp::now()),
        );
        self.apply(body, &plan, &[], None).await
    }

    /// One cycle in the object's log span.
    async fn cycle(
        &self,
        uid: &str,
        observed: &Observed,
        initial: bool,
        memo: &Memos,
        rejected: Arc<HashMap<String, String>>,
    ) -> CycleEnd {
        use tracing::Instrument;
        let span = object_span(&observed.body);
        self.cycle_in_span(uid, observed, initial, memo, rejected)
            .instrument(span)
            .await
    }

    async fn cycle_in_span(
        &self,
        uid: &str,
        observed: &Observed,
        initial: bool,
        memo: &Memos,
        rejected: Arc<HashMap<String, String>>,
    ) -> CycleEnd {
        let body = &observed.body;
        let outcome = self
            .processor
            .process_with(observed.event, body, initial, memo, rejected)
            .await;
        log_cause(&outcome, body);
        if outcome.reason == Reason::Gone {
            self.forget(uid);
            return CycleEnd::Gone;
        }
        let end = self
            .apply(body, &outcome.plan, &outcome.delivered, outcome.delay)
            .await;
        // Outcomes are reported once the writes went through: a result the API server
        // refused is not a success, and a cause whose writes failed is not processed.
        let stored = matches!(end, CycleEnd::Next { .. });
        log_handlers(&outcome, &end);
        if outcome.done && stored {
            self.handled_once
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(uid.to_string());
        }
        self.post_events(uid, body, outcome.events).await;
        end
    }

    /// Sends a plan's requests (at most one per endpoint, results first; see [`crate::apply`]);
    /// `delay` is the cycle's retry delay, `delivered` what handlers put into the status.
    async fn apply(
        &self,
        body: &Value,
        plan: &PatchPlan,
        delivered: &[(String, Value)],
        delay: Option<Duration>,
    ) -> CycleEnd {
        let writer = Writer {
            api: self.api_for(body),
            status_subresource: self.resource.status_subresource,
            metrics: self.settings.metrics.as_ref(),
        };
        match writer.apply(body, plan, delivered).await {
            Applied::Written { rv, pruned } => {
                self.report_pruned(pruned);
                CycleEnd::Next { delay, rv }
            }
            Applied::Gone => CycleEnd::Next {
                delay: None,
                rv: None,
            },
            Applied::Conflict(message) => CycleEnd::Conflict(message),
            Applied::Rejected { endpoint, handlers } => {
                let mut rejected = HashMap::new();
                for r in handlers {
                    tracing::error!(
                        "Handler '{}' returned a result the API server refuses to store (422 on the PATCH of the object{}): {}{}. This counts as a failure of the handler. Make the CRD's schema accept it: declare {} with the right type, or set `x-kubernetes-preserve-unknown-fields: true` on it.",
                        r.handler,
                        if endpoint == "status" {
                            "'s status"
                        } else {
                            ""
                        },
                        if r.fields.is_empty() {
                            String::new()
                        } else {
                            format!("{}: ", r.fields.join(", "))
                        },
                        r.message,
                        r.fields
                            .first()
                            .map_or_else(|| format!("status.{}", r.handler), |f| f.clone()),
                    );
                    rejected.insert(
                        r.handler,
                        format!("the API server refused to store the result: {}", r.message),
                    );
                }
                CycleEnd::Rejected(rejected)
            }
            Applied::Failed(failure) => CycleEnd::Failed(failure.to_string()),
        }
    }

    /// Warns once per handler and field of this resource about results the API server did
    /// not store (pruned by the CRD's structural schema).
    fn report_pruned(&self, pruned: Vec<Pruned>) {
        if pruned.is_empty() {
            return;
        }
        let ar = &self.resource.api_resource;
        let mut reported = self.pruned.lock().unwrap_or_else(|e| e.into_inner());
        for p in pruned {
            if !reported.insert(p.clone()) {
                continue;
            }
            tracing::warn!(
                "Handler '{}': the API server dropped {} from its result, because the CRD of {}{} does not declare it in its schema. Declare the field, or set `x-kubernetes-preserve-unknown-fields: true` on status (or on status.{}). Reported once per field.",
                p.handler,
                p.path,
                ar.plural,
                if ar.group.is_empty() {
                    String::new()
                } else {
                    format!(".{}", ar.group)
                },
                p.handler,
            );
        }
    }

    /// Posts events about an object, rate-limited per object; failures are only logged.
    async fn post_events(&self, uid: &str, body: &Value, events: Vec<EventSpec>) {
        if events.is_empty() {
            return;
        }
        let ar = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("", "v1", "Event"),
            "events",
        );
        for mut spec in aggregate(events) {
            let admitted = self.events.lock().unwrap_or_else(|e| e.into_inner()).admit(
                uid,
                &mut spec,
                std::time::Instant::now(),
            );
            if !admitted {
                continue;
            }
            let Some((ns, event)) =
                event_body(body, &spec, &self.settings.reporter, jiff::Timestamp::now())
            else {
                continue;
            };
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
            let obj: DynamicObject = match serde_json::from_value(event) {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot build an event");
                    continue;
                }
            };
            if let Err(e) = api.create(&kube::api::PostParams::default(), &obj).await {
                tracing::debug!(error = %e, "posting an event failed");
            }
        }
    }
}

/// The API of a resource in a namespace (None, or a cluster-scoped resource: all).
fn api_for(
    client: &kube::Client,
    resource: &ResourceRef,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) if resource.namespaced => {
            Api::namespaced_with(client.clone(), ns, &resource.api_resource)
        }
        _ => Api::all_with(client.clone(), &resource.api_resource),
    }
}

/// The log span of an object: every line inside carries its namespace and name.
fn object_span(body: &Value) -> tracing::Span {
    let field = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or("");
    tracing::info_span!(
        "object",
        namespace = %field("/metadata/namespace"),
        name = %field("/metadata/name"),
        kind = %field("/kind"),
        uid = %field("/metadata/uid"),
    )
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
