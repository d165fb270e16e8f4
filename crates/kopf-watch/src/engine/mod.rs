//! Per-resource processing: one list+watch stream (kube's `watcher`), one worker per object
//! (strictly serial per object, always on its latest state, parallel across objects), each
//! cycle's patch plan applied with at most one request per endpoint, and our own writes
//! waited for before the object is processed again.
//!
//! The engine is wired from stages, each with one job: the [`source`] (list+watch, relists,
//! outages) produces the events; the [`gate`] decides whether the engine acts, stands by or
//! pauses; the shard scope ([`crate::shard`]) and the reconcile [`triggers`] come in beside
//! them; the [`dispatch`]er hands each object's state to its worker. The resource's
//! [`handlers`] are sorted and checked before anything is watched.

mod dispatch;
mod gate;
mod handlers;
mod source;
mod triggers;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use kopf_core::causes::EventKind;
use kopf_core::gate::Gate;
use kopf_core::handler::{HandlerKind, HandlerSpec};
use kopf_core::layers::Stack;
use kopf_core::processing::Persistence;
use kopf_core::reconcile::TriggerRef;
use serde_json::Value;

use crate::keeping::Arrival;
use crate::pause::{self, AfterPause};
use crate::raw::RawObject;
use crate::settings::{IndexGate, Settings};
use crate::shard::{self, Shards};
use crate::shared::api_for;
use crate::stream::WatchStream;
use crate::uid::Uid;
use crate::{NamespaceSelector, ResourceRef, WatchError};
use dispatch::Dispatcher;
use gate::{GateStage, Hold, Turn};
use handlers::{Parts, Sorted};
use source::{Source, SourceEvent};
use triggers::Triggers;

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

    /// Watches and processes until `shutdown` completes: the stages wired, then run until
    /// shutdown, or until the source fails for good (the workers are aborted then).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), WatchError> {
        let mut run = self.wire()?;
        let mut shutdown = std::pin::pin!(shutdown);
        run.until(&mut shutdown).await?;
        run.dispatcher.shut_down().await;
        Ok(())
    }

    /// The stages of this engine, its handlers sorted and checked.
    fn wire(self) -> Result<Run, WatchError> {
        // The watcher relists after 410 and resumes after disconnects (including the
        // client's read timeout on a silent connection); failures (the resource gone with its
        // CRD, the API server down) are retried with a short, capped, jittered backoff.
        // Selectors (the user's and the derived one) and streaming lists: crate::stream.
        let config = WatchStream::new(&self.settings, &self.handlers, &self.resource)?;
        let sorted = Sorted::new(&self.handlers, &self.resource)?;
        let indexed = self.has_indexes();
        let gate_key = self.gate_key();
        let plural = self.resource.api_resource.plural.clone();
        let name = pause::resource_name(&self.resource);
        // Sharded (unless it has index handlers, which must see every object): the watch
        // asks for the held ranges, and events of other ranges are dropped.
        let shards = Shards::new(self.settings.shards.as_ref(), indexed);
        let client = shards.client(self.client.clone());
        let api = api_for(&client, &self.resource, self.namespace.as_deref());
        let source = Source::new(
            config,
            api,
            self.settings.metrics.clone(),
            (plural.clone(), name.clone()),
            self.settings.namespaces.clone(),
        );
        let triggers = Triggers::new(sorted.reconcile.as_ref());
        log_watching(&self, &plural);
        let arrival = Arrival::new(&plural, &self.handlers, self.settings.keep_managed_fields);
        let index_gate = self.settings.gate.clone();
        let gate = self.gate.clone();
        let parts = Parts {
            client: self.client,
            resource: self.resource,
            handlers: self.handlers,
            persistence: self.persistence,
            stack: self.stack,
            settings: self.settings,
            gate: self.gate,
            arrival: arrival.clone(),
        };
        Ok(Run {
            plural,
            name,
            synced: Synced(index_gate, gate_key),
            arrival,
            gate,
            standing: GateStage::default(),
            source,
            shards,
            triggers,
            dispatcher: Dispatcher::new(handlers::shared(parts, sorted)),
        })
    }
}

/// Kopf's line when an engine starts, with its namespaces as given to `-n`: this watch's
/// namespace, or the patterns that filter the cluster-wide watch, or `*`.
fn log_watching(engine: &Engine, plural: &str) {
    let namespaces = &engine.settings.namespaces;
    tracing::info!(
        resource = %plural,
        namespaces = %match (&engine.namespace, engine.resource.namespaced) {
            (Some(namespace), _) => namespace.clone(),
            (None, true) if *namespaces != NamespaceSelector::default() => namespaces.to_string(),
            _ => "*".to_string(),
        },
        "watching"
    );
}

/// What the loop does next.
enum Flow {
    /// Goes on to the next event.
    Go,
    /// Looks at the gate again.
    Again,
    /// Stops (shutdown).
    Stop,
}

/// An engine's key in the gate every handler waits on at the start: done with its first
/// listing, or when the engine ends without one (a resource no longer served), so that it
/// never holds the others back for good.
struct Synced(IndexGate, String);

impl Synced {
    fn done(&self) {
        self.0.done(&self.1);
    }
}

impl Drop for Synced {
    fn drop(&mut self) {
        self.done();
    }
}

/// One engine's stages, wired: the source's events go through the gate to the dispatcher;
/// shard changes, reconcile requests and the workers' ends come in beside them.
struct Run {
    /// The resource's plural (logs).
    plural: String,
    /// `plural.group` (the gate's log lines).
    name: String,
    /// The gate every handler waits on at the start, and this engine's key in it (done
    /// with its first listing, indexed).
    synced: Synced,
    /// How its objects are read as they arrive.
    arrival: Arrival,
    /// The operator's gate.
    gate: Gate,
    /// What the engine does with it.
    standing: GateStage,
    source: Source,
    shards: Shards,
    triggers: Triggers,
    dispatcher: Dispatcher,
}

impl Run {
    /// Runs until `shutdown` completes (Ok) or the source fails for good.
    async fn until(
        &mut self,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Result<(), WatchError> {
        loop {
            match self.follow_gate(shutdown).await {
                Flow::Go => {}
                Flow::Again => continue,
                Flow::Stop => return Ok(()),
            }
            let standing_by = self.standing.standing_by();
            self.dispatcher.feed();
            let event = tokio::select! {
                _ = &mut *shutdown => return Ok(()),
                ended = self.dispatcher.progress() => {
                    if let Some(ended) = ended {
                        self.dispatcher.ended(ended);
                    }
                    continue;
                }
                _ = pause::gate_moved(&mut self.gate, standing_by) => continue,
                live = self.shards.changed() => {
                    if live {
                        self.hand_over().await;
                    }
                    continue;
                }
                Some(TriggerRef { target, trigger }) = self.triggers.next() => {
                    if let Some(uid) = self.triggers.uid(&target) {
                        self.dispatcher.kick(uid, trigger);
                    }
                    continue;
                }
                event = self.source.next() => event?,
            };
            if let Flow::Stop = self.on_source(event, shutdown).await {
                return Ok(());
            }
        }
    }

    /// What the gate's state asks for (see [`GateStage::turn`]).
    async fn follow_gate(&mut self, shutdown: &mut (impl Future<Output = ()> + Unpin)) -> Flow {
        let state = self.gate.state();
        match self.standing.turn(&state) {
            Turn::Stay => Flow::Go,
            Turn::Act(held) => {
                self.act(held).await;
                Flow::Go
            }
            Turn::StandBy => {
                pause::log_pausing(&self.name, &state);
                self.stand_by(shutdown).await
            }
            Turn::Pause => {
                pause::log_pausing(&self.name, &state);
                self.pause(shutdown).await
            }
        }
    }

    /// Elected: every held object is processed as after a start (resume handlers run
    /// again, as they would in a replica that just started).
    async fn act(&mut self, held: HashMap<String, Arc<Value>>) {
        self.dispatcher.forget_handled();
        let resource_name = &self.name;
        tracing::info!(
            resource = %self.plural,
            objects = held.len(),
            "Processing {resource_name}: this replica acts now."
        );
        for (uid, body) in held {
            self.dispatcher.dispatch(uid, body, EventKind::Listed).await;
        }
    }

    /// Nothing acts while standing by: the workers end (their daemons and timers stopped
    /// with "operator pausing"), and the watch starts again with a listing, whose objects
    /// are held, not processed (the workers' states are gone with them).
    async fn stand_by(&mut self, shutdown: &mut (impl Future<Output = ()> + Unpin)) -> Flow {
        self.standing.ended(self.dispatcher.end_all());
        tokio::select! {
            _ = &mut *shutdown => return Flow::Stop,
            _ = self.dispatcher.drain() => {}
        }
        self.dispatcher.resumed();
        self.source.reopen();
        Flow::Go
    }

    /// Paused: the stream closes (nothing is requested meanwhile), each worker ends (its
    /// pending state dropped, its daemons and timers stopped with "operator pausing"); when
    /// the gate no longer pauses, a listing brings them back.
    async fn pause(&mut self, shutdown: &mut (impl Future<Output = ()> + Unpin)) -> Flow {
        self.source.close();
        self.standing.ended(self.dispatcher.end_all());
        let after = tokio::select! {
            _ = &mut *shutdown => AfterPause::ShutDown,
            _ = self.dispatcher.drain() => {
                pause::wait_paused(&mut self.gate, shutdown, &mut self.shards).await
            }
        };
        self.dispatcher.resumed();
        if matches!(after, AfterPause::ShutDown) {
            return Flow::Stop;
        }
        // As after a start: resume handlers run for the listed objects again.
        self.dispatcher.forget_handled();
        let resource_name = &self.name;
        tracing::info!(resource = %self.plural, "Resuming the watch-stream for {resource_name}.");
        self.source.resume();
        // Resumed to stand by: the gate's next look starts standing by.
        Flow::Again
    }

    /// The shard scope changed: the work on the objects of ranges given up ends before the
    /// new scope is acknowledged; new ranges are listed with the new selector.
    async fn hand_over(&mut self) {
        let Some((next, added)) = self.shards.next() else {
            return;
        };
        let ending = self.dispatcher.leave(|uid| next.owns(uid));
        self.standing.retain(|uid| next.owns(uid));
        // The others go on (a worker that retired meanwhile holds its channel until joined).
        self.dispatcher.join_until(shard::handed_over(ending)).await;
        self.shards.adopted(next);
        if added {
            self.source.reopen();
        }
    }

    /// One event of the source.
    async fn on_source(
        &mut self,
        event: SourceEvent,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> Flow {
        match event {
            SourceEvent::Object { obj, uid, kind } => self.object(obj, uid, kind).await,
            SourceEvent::Listed(seen) => self.listed(seen),
            SourceEvent::Failed(delay) => {
                let standing_by = self.standing.standing_by();
                tokio::select! {
                    _ = &mut *shutdown => return Flow::Stop,
                    _ = kopf_core::clock::sleep(delay, "a watch's retry") => {}
                    _ = pause::gate_moved(&mut self.gate, standing_by) => {}
                }
            }
            SourceEvent::Nothing => {}
            SourceEvent::Ended => return Flow::Stop,
        }
        Flow::Go
    }

    /// An object's event: indexes see every event, in order, also while standing by; its
    /// worker sees it while the engine acts.
    async fn object(&mut self, obj: RawObject, uid: String, kind: EventKind) {
        if !self.shards.owns(&uid) {
            // Another replica's range (a server that ignores shardSelector).
            return;
        }
        if self.source.saw(&uid) && kind == EventKind::Modified && !self.standing.standing_by() {
            // A change the early watch brought (see `early`) before the listing did: the
            // object is one of the listing's (its resume handlers are due), though its
            // change goes ahead of the listing in the changed objects' lane.
            self.dispatcher.mark_listed(&uid);
        }
        let body = self.arrival.body(obj);
        self.dispatcher.index(&uid, &body, kind).await;
        self.triggers
            .observe(&body, &uid, kind == EventKind::Deleted);
        match self.standing.hold(uid, body, kind) {
            Hold::Dispatch(uid, body) => self.dispatcher.dispatch(uid, body, kind).await,
            Hold::Forget(uid) => self.dispatcher.forget(&uid),
            Hold::Held => {}
        }
    }

    /// A listing is complete: the objects it went without went away while the watch was
    /// down (no DELETED event will come for them); with index handlers, the resource is
    /// indexed (indexing runs in this loop).
    fn listed(&mut self, seen: Option<HashSet<Uid>>) {
        if let Some(seen) = seen {
            let known = self.dispatcher.known().chain(self.standing.known());
            for uid in source::vanished(known, &seen) {
                self.dispatcher.vanished(&uid);
                self.standing.vanished(&uid);
            }
            self.standing.relisted();
        }
        self.synced.done();
    }
}
