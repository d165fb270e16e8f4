//! Serving selectors: resolves them through one discovery, runs one [`Engine`] per resource
//! (and per namespace when exact namespaces are served), and — when some selector can match
//! resources that appear later (`everything`, predicates, or with `wait_for_resources`) —
//! watches CustomResourceDefinitions to start engines for resources that appear and stop
//! those whose resource disappears.

use kopf_core::text::for_log;
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use kopf_core::gate::Gate;
use kopf_core::handler::HandlerSpec;
use kopf_core::layers::Stack;
use kopf_core::processing::Persistence;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::{Discovered, Engine, ResourceRef, Selector, Settings, WatchError, discover};

/// What one engine serves.
struct Served {
    resource: Discovered,
    namespace: Option<String>,
    handlers: Vec<HandlerSpec>,
}

struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<Result<(), WatchError>>,
    plural: String,
}

/// Runs the engines of an operator's selectors.
///
/// ```no_run
/// # async fn demo(client: kube::Client, spec: kopf_core::handler::HandlerSpec) -> Result<(), kopf_watch::WatchError> {
/// use kopf_watch::{Orchestrator, Selector};
///
/// Orchestrator::new(client, vec![(Selector::from("kopfexamples"), spec)])
///     .run(futures::future::pending())
///     .await
/// # }
/// ```
pub struct Orchestrator {
    client: kube::Client,
    registrations: Vec<(Selector, HandlerSpec)>,
    settings: Settings,
    persistence: Persistence,
    stack: Stack,
    wait_for_resources: bool,
    gate: Gate,
    /// Engines that fail for good (e.g. forbidden to list at start) report their key here.
    failed: tokio::sync::mpsc::UnboundedSender<String>,
    failures: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
}

impl Orchestrator {
    /// An orchestrator for handlers registered per selector.
    pub fn new(client: kube::Client, registrations: Vec<(Selector, HandlerSpec)>) -> Self {
        let (failed, failures) = tokio::sync::mpsc::unbounded_channel();
        Orchestrator {
            client,
            registrations,
            settings: Settings::default(),
            persistence: Persistence::default(),
            stack: Stack::default(),
            wait_for_resources: false,
            gate: Gate::open(),
            failed,
            failures: Some(failures),
        }
    }

    /// Watching and processing settings of every engine.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Where state is kept on objects.
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// The per-handler stack.
    pub fn stack(mut self, stack: Stack) -> Self {
        self.stack = stack;
        self
    }

    /// Do not fail at start-up on selectors that name no served resource: warn, and serve
    /// them once their CRD appears (Kopf's behaviour). Off by default, so that a typo fails
    /// at once with a list of similar names.
    pub fn wait_for_resources(mut self, on: bool) -> Self {
        self.wait_for_resources = on;
        self
    }

    /// The operator's gate, passed to every engine (default: always open). While it is
    /// paused, the engines watch nothing and start no handler cycle, and the objects'
    /// daemons and timers are stopped; when it opens, every resource is listed anew and its
    /// objects are processed as after a start (see [`Engine::gate`]). Peering holds the
    /// other end ([`kopf_core::gate::GateControl`]).
    pub fn gate(mut self, gate: Gate) -> Self {
        self.gate = gate;
        self
    }

    /// Whether resources appearing later can matter.
    fn dynamic(&self) -> bool {
        self.wait_for_resources || self.registrations.iter().any(|(s, _)| !s.is_specific())
    }

    /// The engines the discovered resources call for, by key. At start-up (`strict`), a
    /// selector naming nothing is an error unless waiting for resources is on.
    fn plan(
        &self,
        all: &[Discovered],
        strict: bool,
    ) -> Result<BTreeMap<String, Served>, WatchError> {
        let mut by_resource: Vec<(Discovered, Vec<HandlerSpec>)> = Vec::new();
        for (selector, spec) in &self.registrations {
            let found = match selector.resolve(all) {
                Ok(found) => found,
                Err(e) if strict && !self.wait_for_resources => return Err(e),
                Err(e) if strict => {
                    tracing::warn!("{}; it is served when it appears", for_log(&e));
                    continue;
                }
                Err(e) => {
                    tracing::debug!("{e}");
                    continue;
                }
            };
            for d in found {
                match by_resource
                    .iter_mut()
                    .find(|(known, _)| known.api_resource == d.api_resource)
                {
                    Some((_, specs)) => specs.push(spec.clone()),
                    None => by_resource.push((d, vec![spec.clone()])),
                }
            }
        }
        let exact = self
            .settings
            .namespaces
            .exact()
            .filter(|names| !names.is_empty());
        let mut plan = BTreeMap::new();
        for (resource, handlers) in by_resource {
            let namespaces: Vec<Option<String>> = match (&exact, resource.namespaced) {
                (Some(names), true) => names.iter().cloned().map(Some).collect(),
                _ => vec![None],
            };
            for namespace in namespaces {
                let ar = &resource.api_resource;
                let key = format!(
                    "{}/{}/{}@{}",
                    ar.group,
                    ar.version,
                    ar.plural,
                    namespace.as_deref().unwrap_or("*")
                );
                plan.insert(
                    key,
                    Served {
                        resource: resource.clone(),
                        namespace,
                        handlers: handlers.clone(),
                    },
                );
            }
        }
        Ok(plan)
    }

    /// Starts the planned engines that do not run yet, stops the running ones no longer
    /// planned.
    async fn reconcile(
        &self,
        running: &mut BTreeMap<String, Running>,
        mut plan: BTreeMap<String, Served>,
        initial: bool,
    ) {
        let gone: Vec<String> = running
            .keys()
            .filter(|k| !plan.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(r) = running.remove(&key) {
                tracing::info!(resource = %r.plural, "the resource is not served any more");
                stop(r).await;
            }
        }
        let new: Vec<String> = plan
            .keys()
            .filter(|k| !running.contains_key(*k))
            .cloned()
            .collect();
        let mut engines = Vec::new();
        for key in new {
            let Some(served) = plan.remove(&key) else {
                continue;
            };
            let plural = served.resource.api_resource.plural.clone();
            let engine = Engine::new(
                self.client.clone(),
                ResourceRef::from(served.resource),
                served.handlers,
            )
            .namespace(served.namespace)
            .settings(self.settings.clone())
            .persistence(self.persistence.clone())
            .stack(self.stack.clone())
            .gate(self.gate.clone());
            // At start-up, every handler waits for every watch's first listing: its own
            // resource's, the indexed ones', the owned and related kinds' (a handler never
            // works on a partial view of what the operator watches).
            if initial {
                self.settings.gate.expect(&engine.gate_key());
            }
            engines.push((key, plural, engine));
        }
        for (key, plural, engine) in engines {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let failed = self.failed.clone();
            let failed_key = key.clone();
            let task = tokio::spawn(async move {
                let result = engine
                    .run(async move {
                        let _ = rx.await;
                    })
                    .await;
                if result.is_err() {
                    let _ = failed.send(failed_key);
                }
                result
            });
            running.insert(
                key,
                Running {
                    stop: tx,
                    task,
                    plural,
                },
            );
        }
    }

    /// Serves until `shutdown` completes.
    ///
    /// A resource that cannot be served at all (the API server forbids listing it at start)
    /// stops the operator with that error.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), WatchError> {
        let mut failures = self.failures.take();
        let all = discover(&self.client).await?;
        let plan = self.plan(&all, true)?;
        let mut running = BTreeMap::new();
        self.reconcile(&mut running, plan, true).await;
        let held = tokio::spawn(
            self.settings
                .gate
                .clone()
                .warn_while_held(self.gate.clone()),
        );
        let mut shutdown = std::pin::pin!(shutdown);
        let failure = async {
            match failures.as_mut() {
                Some(f) => f.recv().await,
                None => std::future::pending().await,
            }
        };
        let failed = if self.dynamic() {
            tokio::select! {
                _ = self.follow_crds(&all, &mut running, &mut shutdown) => None,
                key = failure => key,
            }
        } else {
            tokio::select! {
                _ = &mut shutdown => None,
                key = failure => key,
            }
        };
        let mut error = None;
        if let Some(r) = failed.and_then(|key| running.remove(&key)) {
            error = match r.task.await {
                Ok(Err(e)) => Some(e),
                _ => None,
            };
        }
        held.abort();
        // All engines stop at once (each stops its daemons within their own timeouts).
        let stops: Vec<_> = std::mem::take(&mut running)
            .into_values()
            .map(|r| tokio::spawn(stop(r)))
            .collect();
        for s in stops {
            let _ = s.await;
        }
        error.map_or(Ok(()), Err)
    }

    /// Watches CRDs until shutdown; re-discovers (debounced) when they change.
    async fn follow_crds(
        &self,
        discovered: &[Discovered],
        running: &mut BTreeMap<String, Running>,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let known: HashSet<String> = discovered
            .iter()
            .map(|d| format!("{}.{}", d.api_resource.plural, d.api_resource.group))
            .collect();
        let mut initial = true;
        let mut listed: Vec<String> = Vec::new();
        let mut dirty = false;
        let mut forbidden = false;
        // Short to gather a burst of CRD changes; longer after each failed discovery.
        const DEBOUNCE: Duration = Duration::from_millis(300);
        let mut debounce = DEBOUNCE;
        loop {
            tokio::select! {
                _ = &mut *shutdown => return,
                _ = tokio::time::sleep(debounce), if dirty => {
                    match discover(&self.client).await {
                        Ok(all) => {
                            dirty = false;
                            debounce = DEBOUNCE;
                            match self.plan(&all, false) {
                                Ok(plan) => self.reconcile(running, plan, false).await,
                                Err(e) => tracing::warn!("{}", for_log(&e)),
                            }
                        }
                        Err(e) => {
                            debounce = (debounce * 2).min(Duration::from_secs(60));
                            tracing::warn!("{}; retrying in {debounce:?}", for_log(&e));
                        }
                    }
                }
                item = stream.next(), if !forbidden => match item {
                    Some(Ok(watcher::Event::InitApply(crd))) if initial => {
                        if established(&crd.data) {
                            listed.extend(crd.metadata.name.clone());
                        }
                    }
                    Some(Ok(watcher::Event::InitDone)) if initial => {
                        initial = false;
                        // A CRD established between discovery and this listing.
                        dirty = listed.iter().any(|n| !known.contains(n));
                    }
                    Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)) => {
                        dirty = true;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(watcher::Error::InitialListFailed(kube::Error::Api(s)))) if s.code == 403 => {
                        forbidden = true;
                        tracing::warn!(
                            "cannot watch CustomResourceDefinitions (403: {}); resources that appear later are not served until a restart. Grant list/watch on customresourcedefinitions to fix it.",
                            s.message
                        );
                    }
                    Some(Err(e)) => tracing::debug!(error = %e, "the CRD watch failed; it restarts with backoff"),
                    None => forbidden = true,
                },
            }
        }
    }
}

async fn stop(r: Running) {
    let _ = r.stop.send(());
    match r.task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(resource = %r.plural, "{}", for_log(&e)),
        Err(e) => {
            tracing::error!(resource = %r.plural, error = %for_log(&e), "a resource's watcher stopped abnormally")
        }
    }
}

fn established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Established")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}
