//! How resources are watched and objects processed ([`Settings`], the same for every
//! resource of an operator), and the [`IndexGate`] that holds handlers back at the start
//! until every watched resource is listed (and indexed).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kopf_core::events::Reporter;
use kopf_core::handler::Extensions;
use kopf_core::index::Indexes;
use kopf_core::memo::MemoSeed;
use kopf_core::metrics::Metrics;
use kopf_core::throttle::KOPF_ERROR_DELAYS;
use tokio::sync::watch;

use crate::NamespaceSelector;

/// How resources are watched and objects processed; the same for every resource of an
/// operator.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Which namespaces are served: exact names get one watch each; globs and negations
    /// filter one cluster-wide watch; empty serves all namespaces.
    pub namespaces: NamespaceSelector,
    /// At most this many objects of a resource are processed at the same time, changed
    /// objects before listed ones (in turn once a listed one waited 5 s). None: 64 at a
    /// time, each counted for at most a second, and at most 448 slow ones beyond.
    pub worker_limit: Option<usize>,
    /// Events about one object: up to `event_burst` at once, then one per `event_interval`.
    pub event_interval: Duration,
    /// See `event_interval`.
    pub event_burst: u32,
    /// Start watches with a streaming list (`sendInitialEvents`) instead of list + watch;
    /// servers without them are detected and listed as before (see docs/selectors.md).
    /// Off by default: it saves one request per listing, not bytes.
    pub streaming_lists: bool,
    /// A listing still going after this long (and past its first object), or past 500
    /// objects, gets a second watch, from the current resourceVersion, whose changes go
    /// ahead of the rest of the listing: one list of one object and one watch more per long
    /// listing. `None`: the changes made during a listing wait for its end. Default 250 ms.
    pub early_changes_after: Option<Duration>,
    /// Only objects with these labels are listed and watched (`run -l`), for every
    /// resource; combined (AND) with a derived selector.
    pub label_selector: Option<String>,
    /// Only objects with these fields are listed and watched (`run --field-selector`), for
    /// every resource.
    pub field_selector: Option<String>,
    /// Ask the API server only for the objects that pass the label filters common to all
    /// the handlers of a resource, when that is safe (on by default; see
    /// [`derive_label_selector`](crate::derive_label_selector)).
    pub derive_label_selectors: bool,
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
    /// Handlers wait here at the start until every watched resource has been listed once
    /// (and indexed).
    pub gate: IndexGate,
    /// Where the engine reports queue depth, tracked objects and its watch's health.
    pub metrics: Option<Metrics>,
    /// Keep `metadata.managedFields` in the bodies kept per object and given to handlers
    /// (off by default: it is server bookkeeping, and often most of an object's size).
    pub keep_managed_fields: bool,
    /// The annotation that pauses one object (`kopf.dev/paused` by default; None: objects
    /// are never paused): while an object carries it with any value but `false`, none of
    /// its handlers, timers, daemons or reconciles run; its deletion waits for it to be
    /// removed. See `docs/operations.md`.
    pub paused_annotation: Option<String>,
    /// The ranges this replica serves, when the operator is sharded (resources with index
    /// handlers are not: an index must see every object).
    pub shards: Option<kopf_core::shards::ScopeControl>,
}

/// The annotation that pauses one object, unless the settings name another.
pub const DEFAULT_PAUSED_ANNOTATION: &str = "kopf.dev/paused";

/// How long handlers wait for the first listings before it is worth a warning (and again).
pub const HELD_WARNING: std::time::Duration = std::time::Duration::from_secs(60);

/// Holds handlers back at the start until every watched resource (handled, indexed, owned
/// or related) has been listed once, and indexed (Kopf's "operator indexed" condition,
/// extended to every watch, as controller-runtime waits for its caches to sync).
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

    /// Warns every minute while something is pending, naming what (a watch that
    /// cannot list holds every handler back), unless the operator itself is paused or stands
    /// by (`operator`: its watches wait for that); ends when nothing is pending.
    pub async fn warn_while_held(self, operator: kopf_core::gate::Gate) {
        loop {
            tokio::select! {
                _ = self.wait() => return,
                _ = kopf_core::clock::sleep(HELD_WARNING, "the warning that handlers wait for listings") => {}
            }
            let mut pending: Vec<String> = self.0.borrow().iter().cloned().collect();
            if pending.is_empty() {
                return;
            }
            if !operator.is_open() {
                continue;
            }
            pending.sort();
            tracing::warn!(
                "No handler runs yet: they wait for the first listing of {} (see the errors of those watches above).",
                pending.join(", ")
            );
        }
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
            early_changes_after: Some(Duration::from_millis(250)),
            label_selector: None,
            field_selector: None,
            derive_label_selectors: true,
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
            paused_annotation: Some(DEFAULT_PAUSED_ANNOTATION.to_string()),
            shards: None,
        }
    }
}
