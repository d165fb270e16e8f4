#![warn(missing_docs)]
//! # kopf-watch
//!
//! Watching for kopf-rs: resolves resource names through discovery ([`resolve`]), lists and
//! watches them with `kube::runtime::watcher`, processes every object strictly serially (one
//! worker per object, always on its latest state, parallel across objects), applies each
//! cycle's [`PatchPlan`](kopf_core::plan::PatchPlan) with at most one request per endpoint, and
//! waits for its own writes to come back before processing the object again.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), kopf_watch::WatchError> {
//! let resource = kopf_watch::resolve(&client, "kopfexamples").await?;
//! let engine = kopf_watch::Engine::new(client, resource, vec![]);
//! engine.run(futures::future::pending()).await
//! # }
//! ```

mod namespaces;
mod selector;

pub use namespaces::{NamespacePattern, NamespaceSelector};
pub use selector::{Discovered, Selector};

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kopf_core::causes::{EventKind, Reason};
use kopf_core::events::{EventSpec, RateLimiter, Reporter, event_body};
use kopf_core::handler::HandlerSpec;
use kopf_core::plan::PatchRequest;
use kopf_core::processing::{FinalizerChange, HandlerOutcome, Persistence, process};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::discovery::{Discovery, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::watch;

/// Errors of watching.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Discovery failed.
    #[error("cannot discover the API resources: {0}")]
    Discovery(#[source] kube::Error),
    /// The selector names no served resource.
    #[error("no served resource matches {selector:?}{hint}")]
    UnknownResource {
        /// The selector.
        selector: String,
        /// Similar names, if any.
        hint: String,
    },
    /// The selector names several resources.
    #[error("{selector:?} is ambiguous: it matches {choices}; use plural.group to pick one")]
    Ambiguous {
        /// The selector.
        selector: String,
        /// The matches.
        choices: String,
    },
    /// The resource cannot be watched.
    #[error("{resource} cannot be served: it lacks the {verb:?} verb")]
    MissingVerb {
        /// The resource.
        resource: String,
        /// The missing verb.
        verb: String,
    },
}

/// A resolved resource.
#[derive(Debug, Clone)]
pub struct ResourceRef {
    /// Group, version, kind, plural.
    pub api_resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource (status goes to a separate PATCH).
    pub status_subresource: bool,
}

/// Everything the API server serves, from aggregated discovery (two requests; short names
/// included), or from the per-group documents on servers without it.
pub async fn discover(client: &kube::Client) -> Result<Vec<Discovered>, WatchError> {
    const ACCEPT: &str =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let mut all = Vec::new();
    let mut aggregated = true;
    for path in ["/api", "/apis"] {
        let request = http::Request::get(path)
            .header("Accept", ACCEPT)
            .body(Vec::new());
        let doc: Option<Value> = match request {
            Ok(r) => client.request::<Value>(r).await.ok(),
            Err(_) => None,
        };
        match doc {
            Some(d) if d.get("kind").and_then(Value::as_str) == Some("APIGroupDiscoveryList") => {
                all.extend(selector::from_aggregated(&d));
            }
            _ => {
                aggregated = false;
                break;
            }
        }
    }
    if aggregated {
        return Ok(all);
    }
    tracing::debug!("no aggregated discovery; using the per-group documents");
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(WatchError::Discovery)?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        let preferred = group.preferred_version_or_latest().to_string();
        for version in group.versions() {
            for (ar, caps) in group.versioned_resources(version) {
                out.push(Discovered {
                    singular: ar.kind.to_lowercase(),
                    short_names: Vec::new(),
                    namespaced: caps.scope == Scope::Namespaced,
                    verbs: caps.operations.clone(),
                    status_subresource: caps
                        .subresources
                        .iter()
                        .any(|(sub, _)| sub.plural == "status"),
                    preferred: ar.version == preferred,
                    api_resource: ar,
                });
            }
        }
    }
    Ok(out)
}

/// Resolves a resource name (plural, singular, kind, short name, `plural.group`,
/// `plural.version.group`) to the one resource it names. See [`Selector`] for the other forms.
pub async fn resolve(client: &kube::Client, selector: &str) -> Result<ResourceRef, WatchError> {
    let all = discover(client).await?;
    let found = Selector::from(selector).resolve(&all)?;
    found
        .into_iter()
        .next()
        .map(ResourceRef::from)
        .ok_or_else(|| WatchError::UnknownResource {
            selector: selector.into(),
            hint: String::new(),
        })
}

impl From<Discovered> for ResourceRef {
    fn from(d: Discovered) -> Self {
        ResourceRef {
            namespaced: d.namespaced,
            status_subresource: d.status_subresource,
            api_resource: d.api_resource,
        }
    }
}

/// One observed state of an object, for its worker.
#[derive(Debug, Clone)]
struct Observed {
    body: Value,
    event: EventKind,
    initial: bool,
}

/// Per-resource processing.
pub struct Engine {
    client: kube::Client,
    resource: ResourceRef,
    handlers: Arc<Vec<HandlerSpec>>,
    persistence: Persistence,
    namespace: Option<String>,
    consistency_timeout: Duration,
    handled_once: Arc<Mutex<HashSet<String>>>,
    filter: NamespaceSelector,
    worker_limit: Option<usize>,
    event_interval: Duration,
    streaming_lists: bool,
}

impl Engine {
    /// An engine for one resource with its handlers (cluster-wide, Kopf's persistence).
    pub fn new(client: kube::Client, resource: ResourceRef, handlers: Vec<HandlerSpec>) -> Self {
        Engine {
            client,
            resource,
            handlers: Arc::new(handlers),
            persistence: Persistence::default(),
            namespace: None,
            consistency_timeout: Duration::from_secs(5),
            handled_once: Arc::default(),
            filter: NamespaceSelector::default(),
            worker_limit: None,
            event_interval: Duration::from_secs(10),
            streaming_lists: false,
        }
    }

    /// Start with a streaming list (`sendInitialEvents`) instead of list + watch: one request
    /// instead of two, and no large list response held in memory (Kubernetes ≥ 1.27).
    pub fn streaming_lists(mut self, on: bool) -> Self {
        self.streaming_lists = on;
        self
    }

    /// The minimum interval between two Events about one object (default 10 s); events in
    /// between are counted into the next one.
    pub fn event_interval(mut self, interval: Duration) -> Self {
        self.event_interval = interval;
        self
    }

    /// Serve only objects in namespaces matching these patterns (with a cluster-wide watch).
    pub fn namespace_filter(mut self, filter: NamespaceSelector) -> Self {
        self.filter = filter;
        self
    }

    /// At most this many objects are processed at the same time (default: no limit).
    pub fn worker_limit(mut self, limit: Option<usize>) -> Self {
        self.worker_limit = limit;
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
        match &self.namespace {
            Some(ns) if self.resource.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &self.resource.api_resource)
            }
            _ => Api::all_with(self.client.clone(), &self.resource.api_resource),
        }
    }

    /// Watches and processes until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), WatchError> {
        // The watcher relists after 410 and resumes after disconnects; failures (the resource
        // gone with its CRD, the API server down) are retried with a jittered backoff, so a
        // resource whose CRD comes back is served again.
        let config = if self.streaming_lists {
            watcher::Config::default().streaming_lists()
        } else {
            watcher::Config::default()
        };
        let stream = watcher(self.api(), config).default_backoff();
        let mut gone = false;
        let mut stream = std::pin::pin!(stream);
        let mut shutdown = std::pin::pin!(shutdown);
        let mut workers: HashMap<String, watch::Sender<Option<Observed>>> = HashMap::new();
        let shared = Arc::new(WorkerShared {
            client: self.client.clone(),
            resource: self.resource.clone(),
            handlers: self.handlers.clone(),
            persistence: self.persistence.clone(),
            consistency_timeout: self.consistency_timeout,
            handled_once: self.handled_once.clone(),
            limit: self
                .worker_limit
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n.max(1)))),
            events: Mutex::new(RateLimiter::new(self.event_interval)),
            reporter: Reporter::default(),
        });
        tracing::info!(resource = %self.resource.api_resource.plural, "watching");
        loop {
            let item = tokio::select! {
                _ = &mut shutdown => break,
                item = stream.next() => item,
            };
            let Some(item) = item else { break };
            let (obj, kind) = match item {
                Ok(watcher::Event::InitApply(o)) => (o, EventKind::Listed),
                Ok(watcher::Event::Apply(o)) => (o, EventKind::Modified),
                Ok(watcher::Event::Delete(o)) => (o, EventKind::Deleted),
                Ok(watcher::Event::Init) => continue,
                Ok(watcher::Event::InitDone) => {
                    if gone {
                        gone = false;
                        tracing::info!(resource = %self.resource.api_resource.plural, "the resource is served again");
                    }
                    continue;
                }
                Err(e) => {
                    let not_found = matches!(&e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404);
                    if not_found && !gone {
                        gone = true;
                        tracing::warn!(
                            resource = %self.resource.api_resource.plural,
                            "the resource is not served anymore (its CRD was deleted?); waiting for it to come back"
                        );
                    } else if !not_found {
                        tracing::warn!(error = %e, "the watch stream failed; it restarts with backoff");
                    }
                    continue;
                }
            };
            if !self.filter.matches(obj.metadata.namespace.as_deref()) {
                continue;
            }
            let Some(uid) = obj.metadata.uid.clone() else {
                continue;
            };
            let body = match serde_json::to_value(&obj) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read an object");
                    continue;
                }
            };
            let initial = kind == EventKind::Listed && !shared.was_handled(&uid);
            let observed = Observed {
                body,
                event: kind,
                initial,
            };
            match workers.get(&uid) {
                Some(tx) if !tx.is_closed() => {
                    tx.send_replace(Some(observed));
                }
                _ => {
                    let (tx, rx) = watch::channel(Some(observed));
                    workers.insert(uid.clone(), tx);
                    let shared = shared.clone();
                    tokio::spawn(async move { shared.work(uid, rx).await });
                }
            }
            workers.retain(|_, tx| !tx.is_closed());
        }
        Ok(())
    }
}

struct WorkerShared {
    client: kube::Client,
    resource: ResourceRef,
    handlers: Arc<Vec<HandlerSpec>>,
    persistence: Persistence,
    consistency_timeout: Duration,
    handled_once: Arc<Mutex<HashSet<String>>>,
    limit: Option<Arc<tokio::sync::Semaphore>>,
    events: Mutex<RateLimiter>,
    reporter: Reporter,
}

fn rv(body: &Value) -> Option<u64> {
    body.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

impl WorkerShared {
    fn was_handled(&self, uid: &str) -> bool {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(uid)
    }

    /// Processes one object serially, always on its latest observed state.
    async fn work(self: Arc<Self>, uid: String, mut rx: watch::Receiver<Option<Observed>>) {
        let mut retry_at: Option<tokio::time::Instant> = None;
        let mut expected_rv: Option<(u64, tokio::time::Instant)> = None;
        loop {
            let observed = rx.borrow_and_update().clone();
            let Some(observed) = observed else { return };
            // Wait for our own write to come back before processing again.
            let stale = expected_rv.is_some_and(|(want, deadline)| {
                rv(&observed.body).is_some_and(|have| have < want)
                    && tokio::time::Instant::now() < deadline
            });
            if !stale {
                let _permit = match &self.limit {
                    Some(sem) => sem.clone().acquire_owned().await.ok(),
                    None => None,
                };
                let (next_delay, patched_rv, gone) = self.cycle(&uid, &observed).await;
                if gone {
                    return;
                }
                retry_at = next_delay.map(|d| tokio::time::Instant::now() + d);
                expected_rv =
                    patched_rv.map(|r| (r, tokio::time::Instant::now() + self.consistency_timeout));
            }
            let wake = match (retry_at, expected_rv) {
                (Some(r), Some((_, c))) => Some(r.min(c)),
                (Some(r), None) => Some(r),
                (None, Some((_, c))) => Some(c),
                (None, None) => None,
            };
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return },
                _ = async { match wake { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                    if retry_at.is_some_and(|r| r <= tokio::time::Instant::now()) {
                        retry_at = None;
                    }
                    expected_rv = None;
                    rx.mark_changed();
                }
            }
        }
    }

    /// One cycle: process, then apply the requests. Returns (retry delay, RV of our last
    /// write, object gone).
    async fn cycle(&self, uid: &str, observed: &Observed) -> (Option<Duration>, Option<u64>, bool) {
        use tracing::Instrument;
        let body = &observed.body;
        let name = body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let namespace = body
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let span = tracing::info_span!("object", namespace = %namespace, name = %name);
        self.cycle_in_span(uid, observed).instrument(span).await
    }

    async fn cycle_in_span(
        &self,
        uid: &str,
        observed: &Observed,
    ) -> (Option<Duration>, Option<u64>, bool) {
        let body = &observed.body;
        let name = body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let namespace = body
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        let outcome = process(
            observed.event,
            body,
            observed.initial,
            &self.handlers,
            &self.persistence,
        )
        .await;
        if let Some(why) = &outcome.corrupt_diffbase {
            tracing::warn!("{why}; handling the object as newly created");
        }
        for (id, result) in &outcome.ran {
            match result {
                HandlerOutcome::Succeeded => tracing::info!("Handler '{id}' succeeded."),
                HandlerOutcome::Retrying { message } => {
                    tracing::error!("Handler '{id}' failed temporarily: {message}")
                }
                HandlerOutcome::Failed { message } => {
                    tracing::error!("Handler '{id}' failed permanently: {message}")
                }
            }
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
        if outcome.reason == Reason::Gone {
            self.handled_once
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(uid);
            return (None, None, true);
        }
        if outcome.done {
            if !outcome.ran.is_empty() {
                let failed = outcome
                    .ran
                    .iter()
                    .filter(|(_, o)| matches!(o, HandlerOutcome::Failed { .. }))
                    .count();
                tracing::info!(
                    "{} is processed: {} succeeded; {} failed.",
                    outcome.reason.title(),
                    outcome.ran.len() - failed,
                    failed
                );
            }
            self.handled_once
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(uid.to_string());
        }
        let api: Api<DynamicObject> = match (&namespace, self.resource.namespaced) {
            (Some(ns), true) => {
                Api::namespaced_with(self.client.clone(), ns, &self.resource.api_resource)
            }
            _ => Api::all_with(self.client.clone(), &self.resource.api_resource),
        };
        let params = PatchParams {
            field_manager: Some("kopf-rs".into()),
            ..Default::default()
        };
        let mut last_rv = None;
        for request in outcome
            .plan
            .requests(body, self.resource.status_subresource)
        {
            let result = match &request {
                PatchRequest::MergeObject(p) => api.patch(&name, &params, &Patch::Merge(p)).await,
                PatchRequest::MergeStatus(p) => {
                    api.patch_status(&name, &params, &Patch::Merge(p)).await
                }
                PatchRequest::JsonObject(ops) => {
                    match serde_json::from_value::<json_patch::Patch>(Value::Array(ops.clone())) {
                        Ok(jp) => api.patch(&name, &params, &Patch::Json::<()>(jp)).await,
                        Err(e) => {
                            tracing::error!(error = %e, "an internal JSON patch is malformed");
                            continue;
                        }
                    }
                }
            };
            match result {
                Ok(obj) => {
                    last_rv = obj
                        .metadata
                        .resource_version
                        .as_deref()
                        .and_then(|s| s.parse().ok());
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    tracing::debug!("the object does not exist anymore");
                    return (None, None, false);
                }
                Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => {
                    tracing::debug!(
                        "the object changed meanwhile ({}); a new event will follow",
                        s.message
                    );
                    if matches!(request, PatchRequest::JsonObject(_)) {
                        // Keep the handlers' outcomes: send the object's merge part alone; the
                        // finalizer change waits for the next cycle.
                        let fallback = outcome
                            .plan
                            .merge_only_requests(body, self.resource.status_subresource);
                        for request in fallback {
                            if let PatchRequest::MergeObject(p) = request {
                                match api.patch(&name, &params, &Patch::Merge(&p)).await {
                                    Ok(obj) => {
                                        last_rv = obj
                                            .metadata
                                            .resource_version
                                            .as_deref()
                                            .and_then(|s| s.parse().ok())
                                    }
                                    Err(e) => {
                                        tracing::warn!(error = %e, "patching after a conflict failed")
                                    }
                                }
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "patching failed; retrying soon");
                    return (Some(Duration::from_secs(1)), None, false);
                }
            }
        }
        self.post_events(uid, body, outcome.events).await;
        (outcome.delay, last_rv, false)
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
        for mut spec in events {
            let admitted = self.events.lock().unwrap_or_else(|e| e.into_inner()).admit(
                uid,
                &mut spec,
                std::time::Instant::now(),
            );
            if !admitted {
                continue;
            }
            let Some((ns, event)) = event_body(body, &spec, &self.reporter, jiff::Timestamp::now())
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
