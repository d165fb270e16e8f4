//! Per-resource processing: one list+watch stream (kube's `watcher`), one worker per object
//! (strictly serial per object, always on its latest state, parallel across objects), each
//! cycle's patch plan applied with at most one request per endpoint, and our own writes
//! waited for before the object is processed again.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use kopf_core::causes::EventKind;
use kopf_core::gate::{Gate, GateState};
use kopf_core::handler::{HandlerKind, HandlerSpec};
use kopf_core::layers::Stack;
use kopf_core::processing::{Persistence, Processor};
use kopf_core::reconcile::ReconcileSpec;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::backlog::{Backlog, STARTED_AHEAD};
use crate::outage::{FailureLog, WatchBackoff};
use crate::pause::{self, AfterPause};
use crate::raw::RawObject;
use crate::settings::Settings;
use crate::shard;
use crate::shared::{Ended, Live, Observed, Setup, Slot, WorkerShared, api_for, rv};
use crate::stream::WatchStream;
use crate::uid::Uid;
use crate::{NamespaceSelector, ResourceRef, WatchError};

/// Per-resource processing.
pub struct Engine {
    client: kube::Client,
    resource: ResourceRef,
    handlers: Vec<HandlerSpec>,
    persistence: Persistence,
    stack: Stack,
    settings: Settings,
    namespace: Option<String>,
    gate: Gate,
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
            gate: Gate::open(),
        }
    }

    /// The operator's gate (default: always open). While it is paused, the engine closes
    /// its watch stream and sends no list or watch request, starts no handler cycle (one in
    /// progress finishes), and ends its objects' workers, whose daemons and timers stop
    /// with [`StopReason::OperatorPausing`](kopf_core::daemons::StopReason::OperatorPausing);
    /// indexes keep what they hold. When it opens again, the engine lists anew and every
    /// object goes through its worker as after a start (resume handlers included, daemons
    /// and timers spawned again). Shutdown works while paused.
    pub fn gate(mut self, gate: Gate) -> Self {
        self.gate = gate;
        self
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

    fn api(&self) -> Api<RawObject> {
        api_for(&self.client, &self.resource, self.namespace.as_deref())
    }

    /// The key of this engine in the [`IndexGate`](crate::IndexGate).
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
        // Selectors (the user's and the derived one) and streaming lists: crate::stream.
        let config = WatchStream::new(&self.settings, &self.handlers, &self.resource)?;
        // The backoff is ours, not kube's StreamBackoff: that one resets on every item,
        // including the `Init` the watcher emits before each attempt to list, so it never
        // grows during an outage of the listing.
        // Sharded (unless it has index handlers, which must see every object): the watch
        // asks for the held ranges, and events of other ranges are dropped.
        let mut observer = match &self.settings.shards {
            Some(control) if !self.has_indexes() => Some(control.observer()),
            _ => None,
        };
        let mut scope_now = observer.as_ref().map(|o| o.scope());
        let api = match &observer {
            Some(o) => api_for(
                &shard::sharded_client(self.client.clone(), o),
                &self.resource,
                self.namespace.as_deref(),
            ),
            None => self.api(),
        };
        let mut stream: BoxStream<'static, _> = config.open(&api);
        let mut backoff = WatchBackoff::default();
        let mut outage = FailureLog::default();
        let mut gone = false;
        let mut shutdown = std::pin::pin!(shutdown);
        let mut workers: HashMap<Uid, Slot> = HashMap::new();
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
        let reconciles: Vec<&ReconcileSpec> = self
            .handlers
            .iter()
            .filter_map(|h| h.declared::<ReconcileSpec>())
            .collect();
        let ar = &self.resource.api_resource;
        let full_name = || {
            if ar.group.is_empty() {
                ar.plural.clone()
            } else {
                format!("{}.{}", ar.plural, ar.group)
            }
        };
        let declared = self
            .handlers
            .iter()
            .filter_map(|h| h.declared::<kopf_core::conditions::ConditionsSpec>())
            .flat_map(|c| c.declared.iter());
        for intent in declared {
            if let Err(error) = intent.validate() {
                return Err(WatchError::InvalidConditions {
                    resource: full_name(),
                    error: Box::new(error),
                });
            }
        }
        if reconciles.len() > 1 {
            return Err(WatchError::SeveralReconciles {
                resource: full_name(),
                count: reconciles.len(),
                ids: reconciles
                    .iter()
                    .map(|r| format!("'{}'", r.id))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let reconcile = reconciles.first().map(|r| (*r).clone());
        let mut extensions = self.settings.extensions.clone();
        extensions.insert(self.client.clone());
        extensions.insert(self.settings.indexes.clone());
        for h in &indexers {
            if let HandlerKind::Index(types) = &h.kind {
                self.settings.indexes.declare(&h.id, *types);
            }
        }
        let shared = Arc::new(WorkerShared::new(Setup {
            client: self.client.clone(),
            resource: self.resource.clone(),
            processor: Processor::with_stack(self.handlers, self.persistence, self.stack.clone())
                .with_extensions(extensions.clone()),
            stack: self.stack,
            extensions,
            indexers,
            watchers,
            spawners,
            settings: self.settings.clone(),
            operator_gate: self.gate.clone(),
            reconcile: reconcile.clone(),
        }));
        // Reconcile requests of owned and related objects, and the names they may use.
        let mut triggers = reconcile.as_ref().map(|r| r.triggers.subscribe());
        let mut names = kopf_core::reconcile::Names::default();
        let mut gate = self.gate.clone();
        let resource_name = pause::resource_name(&self.resource);
        // The objects known when the operator paused: those missing from the listing after
        // the pause went away meanwhile (their index entries are forgotten).
        let mut known_before_pause: HashSet<String> = HashSet::new();
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
        let mut listing: Option<HashSet<Uid>> = None;
        // Listed objects that cannot start yet, compact (see `backlog`).
        let mut backlog = Backlog::default();
        let mut tasks = tokio::task::JoinSet::new();
        // While standing by (leader election: another replica leads): the latest body of
        // every object, from the open watch stream, processed when the gate opens.
        let mut standby: Option<HashMap<String, Arc<serde_json::Value>>> = None;
        loop {
            let state = gate.state();
            if state.is_open()
                && let Some(held) = standby.take()
            {
                // Elected: every object is processed as after a start (resume handlers
                // run again, as they would in a replica that just started).
                shared.forget_handled();
                tracing::info!(
                    resource = %plural,
                    objects = held.len(),
                    "Processing {resource_name}: this replica acts now."
                );
                for (uid, body) in held {
                    Self::dispatch(
                        &shared,
                        &mut workers,
                        (&mut tasks, &mut backlog),
                        uid,
                        body,
                        EventKind::Listed,
                    )
                    .await;
                }
            }
            if matches!(state, GateState::Standby { .. }) && standby.is_none() {
                pause::log_pausing(&resource_name, &state);
                // Nothing acts while standing by: the workers end (their daemons and timers
                // stopped with "operator pausing"), and the watch starts again with a
                // listing, whose objects are held, not processed (the workers' states are
                // gone with them).
                shared.end_workers(&mut workers, &mut known_before_pause);
                backlog.clear();
                tokio::select! {
                    _ = &mut shutdown => break,
                    _ = async { while tasks.join_next().await.is_some() {} } => {}
                }
                shared
                    .pausing
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                listing = None;
                stream = config.open(&api);
                standby = Some(HashMap::new());
            }
            if matches!(state, GateState::Paused { .. }) {
                if let Some(held) = standby.take() {
                    known_before_pause.extend(held.into_keys());
                }
                pause::log_pausing(&resource_name, &state);
                // Dropping the stream closes its connection; nothing is requested meanwhile.
                drop(std::mem::replace(
                    &mut stream,
                    futures::stream::pending().boxed(),
                ));
                listing = None;
                // Each worker ends (its pending state dropped, its daemons and timers stopped
                // with "operator pausing"); the listing after the pause brings them back.
                shared.end_workers(&mut workers, &mut known_before_pause);
                backlog.clear();
                let after = pause::wait_paused(
                    &mut gate,
                    &mut tasks,
                    &mut shutdown,
                    &mut observer,
                    &mut scope_now,
                )
                .await;
                shared
                    .pausing
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                if matches!(after, AfterPause::ShutDown) {
                    break;
                }
                // As after a start: resume handlers run for the listed objects again.
                shared.forget_handled();
                tracing::info!(resource = %plural, "Resuming the watch-stream for {resource_name}.");
                backoff.reset();
                stream = config.open(&api);
                // Resumed to stand by: the top of the loop starts standing by.
                continue;
            }
            let standing_by = standby.is_some();
            Self::feed(&shared, &mut workers, &mut tasks, &mut backlog);
            let item = tokio::select! {
                _ = &mut shutdown => break,
                Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Ok(ended) = joined {
                        Self::ended(&shared, &mut workers, &mut tasks, ended);
                    }
                    continue;
                }
                _ = pause::gate_moved(&mut gate, standing_by) => continue,
                live = shard::changed(&mut observer) => {
                    let before = workers.len();
                    let mut added = false;
                    if let (true, Some(o), Some(now)) = (live, &observer, scope_now.as_mut()) {
                        let handover = shard::adopt(o, now, &mut workers, standby.as_mut());
                        // The workers of the objects given up end; the others go on (a
                        // worker that retired meanwhile holds its channel until joined).
                        {
                            let mut ended = std::pin::pin!(handover.ended());
                            loop {
                                tokio::select! {
                                    _ = &mut ended => break,
                                    Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                                        if let Ok(e) = joined {
                                            Self::ended(&shared, &mut workers, &mut tasks, e);
                                        }
                                    }
                                }
                            }
                        }
                        added = handover.added;
                        handover.acknowledge(o, now);
                    }
                    for _ in workers.len()..before {
                        shared.untracked();
                    }
                    if added {
                        // New ranges: listed with the new selector.
                        listing = None;
                        stream = config.open(&api);
                    }
                    continue;
                }
                Some(request) = async { match triggers.as_mut() { Some(rx) => rx.recv().await, None => std::future::pending().await } } => {
                    if let Some(uid) = names.uid(&request.target)
                        && let Some(kick) = workers
                            .get(uid)
                            .and_then(|w| w.live.as_ref())
                            .and_then(|l| l.kick.as_ref())
                    {
                        kick.kick(request.trigger);
                    }
                    continue;
                }
                _ = shared.lanes.listed_moved(), if !backlog.is_empty() => continue,
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
                            .map(Uid::as_str)
                            .chain(known_before_pause.iter().map(String::as_str))
                            .filter(|uid| !seen.contains(*uid))
                            .map(str::to_string)
                            .collect();
                        let held = standby.iter().flat_map(|h| h.keys());
                        let vanished: Vec<String> = vanished
                            .into_iter()
                            .chain(held.filter(|uid| !seen.contains(uid.as_str())).cloned())
                            .collect();
                        for uid in vanished {
                            // Dropping the sender ends the worker once it is idle.
                            if workers.remove(uid.as_str()).is_some() {
                                shared.untracked();
                            }
                            if let Some(held) = standby.as_mut() {
                                held.remove(&uid);
                            }
                            shared.forget(&uid);
                            shared.settings.indexes.forget(&uid);
                        }
                        known_before_pause.clear();
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
                        outage.failed(&plural, &crate::outage::describe(&e));
                    }
                    let delay = backoff.next().unwrap_or_default();
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(delay) => {}
                        _ = pause::gate_moved(&mut gate, standing_by) => {}
                    }
                    continue;
                }
            };
            if !self.settings.namespaces.matches(obj.namespace()) {
                continue;
            }
            let Some(uid) = obj.uid().map(str::to_string) else {
                continue;
            };
            if scope_now.as_ref().is_some_and(|scope| !scope.owns(&uid)) {
                // Another replica's range (a server that ignores shardSelector).
                continue;
            }
            if let Some(seen) = listing.as_mut()
                && seen.insert(Uid::from(uid.as_str()))
                && kind == EventKind::Modified
                && standby.is_none()
            {
                // A change the early watch brought (see `early`) before the listing did: the
                // object is one of the listing's (its resume handlers are due), though its
                // change goes ahead of the listing in the changed objects' lane.
                Self::mark_listed(&shared, &mut workers, &uid);
            }
            let body = obj.into_body(self.settings.keep_managed_fields);
            // Indexes see every event, in order, also while standing by.
            shared.index(&uid, &body, kind).await;
            if shared.reconcile.is_some() {
                names.observe(&body, &uid, kind == EventKind::Deleted);
            }
            if let Some(held) = standby.as_mut() {
                if kind == EventKind::Deleted {
                    held.remove(&uid);
                    shared.forget(&uid);
                } else {
                    held.insert(uid, body);
                }
                continue;
            }
            Self::dispatch(
                &shared,
                &mut workers,
                (&mut tasks, &mut backlog),
                uid,
                body,
                kind,
            )
            .await;
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

    /// Hands an object's event to its worker (raw-event handlers see it first), starting
    /// a worker when the object has none running (a listed object beyond the places, later:
    /// it waits in the backlog).
    async fn dispatch(
        shared: &Arc<WorkerShared>,
        workers: &mut HashMap<Uid, Slot>,
        (tasks, backlog): (&mut tokio::task::JoinSet<Ended>, &mut Backlog),
        uid: String,
        body: Arc<serde_json::Value>,
        kind: EventKind,
    ) {
        let known = workers.contains_key(uid.as_str());
        // Raw-event handlers see every event, in order.
        shared.on_event(&uid, &body, kind, known).await;
        let observed = Observed { body, event: kind };
        let slot = Self::slot(shared, workers, &uid);
        if backlog.forget(&uid) {
            // A newer state replaces a waiting listed one, which stays listed (its resume
            // handlers are still due).
            slot.listed();
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
            live.tx.send_replace(Some(observed));
            return;
        }
        if kind != EventKind::Deleted {
            // No worker: states older than the last write are skipped, as a worker would,
            // and states that need no cycle (own writes coming back, mostly) are checked
            // here, without starting one.
            let resume = slot.resume.as_deref();
            if resume.is_some_and(|r| r.stale(rv(&observed.body))) {
                return;
            }
            let listed = kind == EventKind::Listed || resume.is_some_and(|r| r.listed);
            let initial = listed && !shared.was_handled(&uid);
            if shared.settled(kind, &observed.body, initial) {
                if let Some(mut r) = slot.resume.take().map(|r| *r) {
                    r.expected_rv = None;
                    r.floor = None;
                    slot.resume = r.boxed();
                }
                if tracing::enabled!(tracing::Level::DEBUG) {
                    crate::shared::object_span(&observed.body).in_scope(|| {
                        tracing::debug!(
                            "Something has changed, but we are not interested (the essence is the same)."
                        )
                    });
                }
                return;
            }
        }
        if kind == EventKind::Listed && shared.lanes.listed_waiting() >= STARTED_AHEAD {
            backlog.push(&uid, &observed.body);
            return;
        }
        Self::start(shared, slot, tasks, uid, observed);
    }

    /// Marks an object as listed (its resume handlers due) before its first state.
    fn mark_listed(shared: &Arc<WorkerShared>, workers: &mut HashMap<Uid, Slot>, uid: &str) {
        let slot = Self::slot(shared, workers, uid);
        if slot.live.is_none() {
            slot.listed();
        }
    }

    /// The slot of an object, new (and counted as tracked) if it has none.
    fn slot<'w>(
        shared: &Arc<WorkerShared>,
        workers: &'w mut HashMap<Uid, Slot>,
        uid: &str,
    ) -> &'w mut Slot {
        workers.entry(Uid::from(uid)).or_insert_with(|| {
            shared.tracked();
            Slot::default()
        })
    }

    /// Starts a worker for an object that has none.
    fn start(
        shared: &Arc<WorkerShared>,
        slot: &mut Slot,
        tasks: &mut tokio::task::JoinSet<Ended>,
        uid: String,
        observed: Observed,
    ) {
        let listed = observed.event == EventKind::Listed;
        let (tx, rx) = watch::channel(Some(observed));
        let pending = Arc::new(std::sync::atomic::AtomicBool::new(false));
        shared.queued(&pending);
        let kick = shared
            .reconcile
            .as_ref()
            .map(|_| Arc::new(kopf_core::reconcile::Kick::default()));
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
        tasks.spawn(async move {
            if listed {
                shared.lanes.arrived();
            }
            shared.work(uid, rx, pending, kick, resume).await
        });
    }

    /// Starts the backlog's next objects while the listed ones ahead are few.
    fn feed(
        shared: &Arc<WorkerShared>,
        workers: &mut HashMap<Uid, Slot>,
        tasks: &mut tokio::task::JoinSet<Ended>,
        backlog: &mut Backlog,
    ) {
        while !backlog.is_empty() && shared.lanes.listed_waiting() < STARTED_AHEAD {
            let Some((uid, body)) = backlog.pop() else {
                break;
            };
            // Gone meanwhile (a relist without it, another replica's range), or running.
            let Some(slot) = workers.get_mut(uid.as_str()).filter(|s| s.live.is_none()) else {
                continue;
            };
            let observed = Observed {
                body,
                event: EventKind::Listed,
            };
            Self::start(shared, slot, tasks, uid, observed);
        }
    }

    /// A worker's task ended. Retired with nothing new for it: the object keeps only what
    /// the worker left. Retired while a new state came: a worker goes on with it. Ended for
    /// good (the object is gone): the object is forgotten.
    fn ended(
        shared: &Arc<WorkerShared>,
        workers: &mut HashMap<Uid, Slot>,
        tasks: &mut tokio::task::JoinSet<Ended>,
        ended: Ended,
    ) {
        let Some(slot) = workers.get_mut(ended.uid.as_str()) else {
            // Removed meanwhile (gone from a listing, a pause, another replica's range).
            return;
        };
        if !slot.runs(&ended.pending) {
            return;
        }
        match ended.retired {
            Some(retired) if retired.rx.has_changed().unwrap_or(false) => {
                // The engine's latest state came after the worker's last look.
                let shared = shared.clone();
                let Ended { uid, pending, .. } = ended;
                tasks.spawn(async move {
                    shared
                        .work(uid, retired.rx, pending, retired.kick, retired.resume)
                        .await
                });
            }
            Some(retired) => {
                slot.live = None;
                slot.resume = retired.resume;
            }
            None => {
                workers.remove(ended.uid.as_str());
                shared.untracked();
            }
        }
    }
}
