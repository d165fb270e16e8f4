//! The [`Operator`] builder: its state, and the settings of how it watches, retries,
//! persists and paces (the handlers are registered by the methods of the submodules, one
//! file per kind of handler, each its own `impl Operator` block).

mod activities;
mod conditions;
mod connect;
mod reconcile;
mod resource_handlers;
mod stack;
pub use stack::HandlerLayer;
#[cfg(feature = "admission")]
mod webhooks;

use std::time::Duration;

use kopf_core::handler::{HandlerSpec, Options};
use kopf_core::layers::{Attempt, CallOutcome};
use kopf_core::metrics::Metrics;
use kopf_core::processing::{Lifecycle, Persistence};
use kopf_core::progress::{ProgressLocation, ProgressStorage};
use kopf_diff::essence::DiffBaseLocation;
use kopf_watch::Selector;

pub use reconcile::Reconciler;
pub(crate) use stack::StackLayers;

use crate::{cli, client, login};

/// An operator: handlers per resource, run until stopped.
///
/// ```no_run
/// use std::time::Duration;
/// use kopf::{HandlerError, Operator, Options, Reason, TimerOptions, handler::{Name, Spec}};
/// use serde_json::{Value, json};
///
/// async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
///     Ok(json!({"message": format!("{name} has field {}", spec["field"])}))
/// }
///
/// async fn check(Name(name): Name) -> Result<(), HandlerError> {
///     kopf::tracing::info!("{name} is still there");
///     Ok(())
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), kopf::Error> {
///     Operator::new()
///         .on_create("kopfexamples", "create_fn", create_fn)
///         .on_with(Reason::Update, "kopfexamples", "gold_fn", create_fn,
///             Options::new().label("tier", "gold").retries(3))
///         .timer("kopfexamples", "check", TimerOptions::every(Duration::from_secs(60)), check)
///         .main()        // the command line: `run -A`, `run --fake`, `rbac`...
///         .await
/// }
/// ```
#[derive(Clone)]
pub struct Operator {
    pub(crate) registrations: Vec<(Selector, HandlerSpec)>,
    /// The registrations (by index) whose options set their own backoff.
    pub(crate) explicit_backoffs: std::collections::HashSet<usize>,
    /// The backoff of handlers that set none (Kopf's 60 s when None).
    pub(crate) default_backoff: Option<Duration>,
    pub(crate) settings: kopf_watch::Settings,
    pub(crate) persistence: Persistence,
    /// Whether the progress storage was chosen ([`progress_storage`](Self::progress_storage),
    /// [`persistence`](Self::persistence)); if not, it follows the diff-base's.
    pub(crate) progress_set: bool,
    /// The user layers of the handler stack, assembled when the operator starts.
    pub(crate) stack: StackLayers,
    pub(crate) memo: kopf_core::memo::MemoSeed,
    pub(crate) wait_for_resources: bool,
    pub(crate) gate: kopf_core::gate::Gate,
    /// Whether [`gate`](Self::gate) was called (then peering's gate is combined with it).
    pub(crate) gate_set: bool,
    pub(crate) peering: kopf_peering::PeeringSettings,
    /// Whether [`peering`](Self::peering) was called (the test runner leaves peering out
    /// unless it was).
    pub(crate) peering_set: bool,
    pub(crate) leader_election: Option<kopf_peering::LeaderElection>,
    pub(crate) sharding: Option<kopf_peering::Sharding>,
    pub(crate) inactivity_timeout: Duration,
    pub(crate) fake_manifests: Vec<std::path::PathBuf>,
    /// Registrations that cannot work (an invalid regex...): the operator refuses to start.
    pub(crate) invalid: Vec<String>,
    /// The CRDs the operator owns (`crd`, `run --fake`, `rbac`).
    pub(crate) crds: Vec<serde_json::Value>,
    pub(crate) startup: Vec<HandlerSpec>,
    pub(crate) cleanup: Vec<HandlerSpec>,
    pub(crate) probes: Vec<HandlerSpec>,
    pub(crate) login: Option<login::LoginFn>,
    pub(crate) metrics: Option<Metrics>,
    pub(crate) rate_limit: (f64, u32),
    pub(crate) request_timeout: Duration,
    /// Given when the operator stops: it ends the waits of the clients it wraps.
    pub(crate) stopping: client::Stop,
    pub(crate) grace_period: Duration,
    pub(crate) rbac_rules: Vec<serde_json::Value>,
    /// The name, version and description of `--version` and `--help`.
    pub(crate) about: Option<cli::About>,
    #[cfg(feature = "admission")]
    pub(crate) admission: kopf_admission::Admission,
}

impl Default for Operator {
    fn default() -> Self {
        Operator {
            registrations: Vec::new(),
            explicit_backoffs: std::collections::HashSet::new(),
            default_backoff: None,
            settings: kopf_watch::Settings::default(),
            persistence: Persistence::default(),
            progress_set: false,
            stack: StackLayers::default(),
            memo: kopf_core::memo::MemoSeed::default(),
            wait_for_resources: false,
            gate: kopf_core::gate::Gate::open(),
            gate_set: false,
            peering: kopf_peering::PeeringSettings::default(),
            peering_set: false,
            leader_election: None,
            sharding: None,
            inactivity_timeout: Duration::from_secs(70),
            fake_manifests: Vec::new(),
            crds: Vec::new(),
            invalid: Vec::new(),
            startup: Vec::new(),
            cleanup: Vec::new(),
            probes: Vec::new(),
            login: None,
            metrics: None,
            rate_limit: (100.0, 1000),
            request_timeout: client::DEFAULT_REQUEST_TIMEOUT,
            stopping: client::Stop::default(),
            grace_period: Duration::from_secs(20),
            rbac_rules: Vec::new(),
            about: None,
            #[cfg(feature = "admission")]
            admission: kopf_admission::Admission::default(),
        }
    }
}

impl Operator {
    /// An operator without handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a handler spec with options.
    pub fn register(
        mut self,
        resource: impl Into<Selector>,
        spec: HandlerSpec,
        options: Options,
    ) -> Self {
        if options.backoff.is_some() {
            self.explicit_backoffs.insert(self.registrations.len());
        }
        self.registrations
            .push((resource.into(), spec.with_options(options)));
        self
    }

    /// The delay before handlers retry after an arbitrary error, for every handler that does
    /// not set its own `backoff` (Kopf's default: 60 s). Tests set it short, so that a
    /// handler that fails once is retried at once.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let operator = kopf::Operator::new().backoff(Duration::from_millis(100));
    /// # let _ = operator;
    /// ```
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.default_backoff = Some(backoff);
        self
    }

    /// The delays after consecutive framework errors of one object (a write that failed
    /// for good...), the last one repeating (Kopf's: 1, 1, 2, 3, 5, 8, 13, 21 s... up to
    /// 610 s). Tests set them short.
    pub fn error_delays(mut self, delays: Vec<Duration>) -> Self {
        if !delays.is_empty() {
            self.settings.error_delays = delays;
        }
        self
    }

    /// How long the operator's client waits for the API server to answer a request (the
    /// status and headers; default 30 s, zero: no limit but the
    /// [`inactivity_timeout`](Self::inactivity_timeout)) before it gives up on the attempt
    /// and sends the request again (see [`wrap_client`](Self::wrap_client)). A warning is
    /// logged after 10 s without an answer (after a third of the timeout, if that is
    /// shorter). The bodies of watch streams are not limited by it.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The client's rate limit: `burst` requests at once, then `qps` per second on
    /// average (default 100 per second after a burst of 1000; `qps` 0 turns it off). Applies
    /// to the clients the operator builds ([`connect`](Self::connect), `run --fake`).
    pub fn rate_limit(mut self, qps: f64, burst: u32) -> Self {
        self.rate_limit = (qps, burst);
        self
    }

    /// Keep `metadata.managedFields` in the bodies handlers get (off by default: the
    /// operator drops it on arrival, as it is server-side-apply bookkeeping and often most of
    /// an object's size in memory).
    pub fn keep_managed_fields(mut self, on: bool) -> Self {
        self.settings.keep_managed_fields = on;
        self
    }

    /// The annotation that pauses one object by hand (default `kopf.dev/paused`; None turns
    /// pausing off). While an object carries it with any value but `false` (the value is a
    /// good place for who paused it and why), none of its handlers, timers, daemons or
    /// reconciles run and nothing is due; once it is removed, what changed meanwhile is
    /// handled, once. A paused object's deletion keeps the operator's finalizer until it is
    /// removed. Each move is logged once, posted as an Event, and counted in
    /// `kopf_objects_paused`. See `docs/operations.md`.
    ///
    /// ```
    /// let operator = kopf::Operator::new().paused_annotation(Some("example.com/hands-off"));
    /// # drop(operator);
    /// ```
    pub fn paused_annotation(mut self, annotation: Option<&str>) -> Self {
        self.settings.paused_annotation = annotation.map(str::to_string);
        self
    }

    /// Turns the metrics on (handler calls, durations, outcomes, retries, queue depth,
    /// tracked objects, API requests, watch restarts), and with them the health of the
    /// watch streams that the liveness endpoint reports. `run --metrics` and `run
    /// --liveness` turn them on.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// On shutdown, running handlers get this long to finish (default 20 s); then they are
    /// cancelled, and each cancelled attempt is stored as a temporary error, so that the
    /// handler runs again after a restart.
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.grace_period = grace;
        self
    }

    /// Serve only one namespace (default: all namespaces).
    pub fn namespace(self, namespace: impl Into<String>) -> Self {
        let ns: String = namespace.into();
        self.namespace_patterns(&[ns])
    }

    /// Serve namespaces matching `-n`-style patterns: exact names are watched one by one;
    /// globs and negations (`team-*`, `!kube-*`, `a,b`) filter one cluster-wide watch.
    pub fn namespace_patterns<S: AsRef<str>>(mut self, patterns: &[S]) -> Self {
        self.settings.namespaces = kopf_watch::NamespaceSelector::new(patterns);
        self
    }

    /// Which ready handlers run per cycle (default: all at once, one PATCH per endpoint;
    /// `Lifecycle::Asap` is Kopf's one-handler-per-cycle default).
    pub fn lifecycle(mut self, lifecycle: Lifecycle) -> Self {
        self.persistence.lifecycle = lifecycle;
        self
    }

    /// Start watching with streaming lists (`sendInitialEvents`) instead of list + watch
    /// (default: off). A server without them is detected (its refusal, or initial events
    /// that never end) and listed as before. See `docs/selectors.md`.
    pub fn streaming_lists(mut self, on: bool) -> Self {
        self.settings.streaming_lists = on;
        self
    }

    /// When a listing is still going after `after` (or after 500 objects), watch the
    /// changes made meanwhile with a second watch and handle them ahead of the rest of the
    /// listing (default: 250 ms; `None`: changes wait for the listing's end). It costs one
    /// list of one object and one watch per listing that takes longer. See
    /// `docs/scale.md`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let op = kopf::Operator::new().early_changes_after(Some(Duration::from_secs(1)));
    /// # drop(op);
    /// ```
    pub fn early_changes_after(mut self, after: Option<Duration>) -> Self {
        self.settings.early_changes_after = after;
        self
    }

    /// List and watch only the objects with these labels, for every resource (`run -l`;
    /// the command line wins). Checked when the operator starts: an invalid selector stops
    /// it with an error that says what is wrong. See `docs/selectors.md`.
    ///
    /// ```
    /// let op = kopf::Operator::new()
    ///     .label_selector("app.kubernetes.io/managed-by=my-operator,!legacy")
    ///     .field_selector("metadata.name!=ignored");
    /// # let _ = op;
    /// ```
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.settings.label_selector = Some(selector.into());
        self
    }

    /// List and watch only the objects with these fields, for every resource
    /// (`run --field-selector`; the command line wins).
    pub fn field_selector(mut self, selector: impl Into<String>) -> Self {
        self.settings.field_selector = Some(selector.into());
        self
    }

    /// Whether a resource whose handlers all filter on labels is watched with the label
    /// selector they have in common (default: on; never when a handler needs the
    /// finalizer). See `docs/selectors.md`.
    pub fn derive_label_selectors(mut self, on: bool) -> Self {
        self.settings.derive_label_selectors = on;
        self
    }

    /// Declares that the handlers of `resource` need only its objects' metadata: they are
    /// listed and watched as `PartialObjectMetadata` (`spec` and `status` never cross the
    /// wire), and every handler of the resource sees `apiVersion`, `kind` and `metadata`
    /// only. Update handlers then see changes of the metadata only (labels, annotations),
    /// and `Spec<T>` extractors fail; declared conditions are refused at start (their
    /// guarded write needs the status). See `docs/selectors.md`.
    ///
    /// ```
    /// use kopf::{Cause, HandlerError, Operator};
    ///
    /// async fn labelled(cause: Cause) -> Result<(), HandlerError> {
    ///     let _labels = &cause.body["metadata"]["labels"]; // `spec` is absent
    ///     Ok(())
    /// }
    ///
    /// let op = Operator::new()
    ///     .on_create("pods", "labelled", labelled)
    ///     .metadata_only("pods");
    /// # let _ = op;
    /// ```
    pub fn metadata_only(self, resource: impl Into<Selector>) -> Self {
        self.register(
            resource,
            HandlerSpec::declaration("metadata-only", kopf_watch::MetadataOnly),
            Options::default(),
        )
    }

    /// Process at most this many objects of a resource at the same time, whatever they wait
    /// on; objects that changed go ahead of those of a listing (in turn with them once a
    /// listed one has waited 5 s). Without it, objects are processed 64 at a time, a cycle
    /// waiting on something slow for more than a second giving its place to the next, up to
    /// 448 such slow cycles (see `docs/scale.md`).
    pub fn worker_limit(mut self, limit: usize) -> Self {
        self.settings.worker_limit = Some(limit);
        self
    }

    /// Where state is kept on objects (prefix, finalizer...).
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self.progress_set = true;
        self
    }

    /// Where progress records are kept: annotations (default) or
    /// `ProgressStorage::status("kopf")` for `status.kopf.progress`.
    pub fn progress_storage(mut self, storage: ProgressStorage) -> Self {
        self.persistence.progress = storage;
        self.progress_set = true;
        self
    }

    /// Where the diff-base (the last handled state, which marks a cause handled) is kept:
    /// the annotation `kopf.zalando.org/last-handled-configuration` (default), or
    /// [`DiffBaseLocation::status()`] for `status.kopf.last-handled-configuration`, as Kopf's
    /// `StatusDiffBaseStorage` (`run --diff-base-storage status`).
    ///
    /// In the status, a cycle writes the handlers' results and the diff-base in one `/status`
    /// PATCH: a creation or an update costs one request. Unless a progress storage was chosen
    /// ([`progress_storage`](Self::progress_storage)), progress records follow to
    /// `status.<name>.progress` (Kopf's `StatusProgressStorage`), so that a cycle whose
    /// handlers retry writes only the status too. Objects handled with the annotation are
    /// continued (it is read when the status has none); see `docs/persistence.md`.
    ///
    /// ```
    /// use kopf::{Operator, persistence::DiffBaseLocation};
    /// let operator = Operator::new().diff_base_storage(DiffBaseLocation::status());
    /// ```
    pub fn diff_base_storage(mut self, location: DiffBaseLocation) -> Self {
        if !self.progress_set {
            self.persistence.progress.location = match &location {
                DiffBaseLocation::Annotations => ProgressLocation::Annotations,
                DiffBaseLocation::Status { name } => {
                    ProgressLocation::Status { name: name.clone() }
                }
            };
        }
        self.persistence.essence.location = location;
        self
    }

    /// Adds a tower layer around every handler attempt (metrics, tracing, auth...): it sees
    /// each attempt with its classified outcome (temporary with its delay, permanent, or
    /// success), after the filters and before the errors mode's classification is made
    /// final. A handler whose last result the API server rejected does not reach it. The
    /// first added is the outermost. The places and the whole order of the handler stack:
    /// `docs/handlers.md` ("The handler stack").
    ///
    /// ```
    /// use kopf::{Operator, layers::{HandlerCall, HandlerService}};
    /// use tower::ServiceExt;
    ///
    /// let operator = Operator::new().layer(tower::layer::layer_fn(|inner: HandlerService| {
    ///     tower::service_fn(move |call: HandlerCall| {
    ///         let id = call.spec.id.clone();
    ///         let inner = inner.clone();
    ///         async move {
    ///             let outcome = inner.oneshot(call).await?;
    ///             kopf::tracing::info!(handler = %id, ok = outcome.result.is_ok(), "attempt");
    ///             Ok(outcome)
    ///         }
    ///     })
    /// }));
    /// # let _ = operator;
    /// ```
    pub fn layer(mut self, layer: impl stack::HandlerLayer<CallOutcome>) -> Self {
        self.stack.around_attempt(layer);
        self
    }

    /// Adds a tower layer before the handler stack's filters: it sees every call, those the
    /// filters skip ([`Attempt::Skipped`]) and rejected results too, and its [`Attempt`]
    /// with the events and the next progress record. The first added is the outermost.
    pub fn layer_before_filters(mut self, layer: impl stack::HandlerLayer<Attempt>) -> Self {
        self.stack.before_filters(layer);
        self
    }

    /// Adds a tower layer around the handler itself: inside the classification, outside
    /// the timeout, it sees the handler's own outcome (an arbitrary error before the errors
    /// mode makes it temporary, permanent or ignored). The first added is the outermost.
    pub fn layer_around_handler(mut self, layer: impl stack::HandlerLayer<CallOutcome>) -> Self {
        self.stack.around_handler(layer);
        self
    }

    /// Post a `Normal` event each time a handler succeeds (off by default).
    pub fn success_events(mut self, on: bool) -> Self {
        self.stack.success_events(on);
        self
    }

    /// The rate limit of Events per object: up to `burst` at once (default 5), then one per
    /// `interval` (default 10 s); the next event that passes says how many were suppressed.
    pub fn event_limit(mut self, burst: u32, interval: Duration) -> Self {
        self.settings.event_burst = burst;
        self.settings.event_interval = interval;
        self
    }

    /// An operator-wide memo value: each object gets its own copy, for [`Memo<T>`](crate::handler::Memo) arguments.
    pub fn memo<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.memo.insert(value);
        self
    }

    /// After a retry delay, touch the object (Kopf's `touch-dummy` annotation) to get a fresh
    /// event, instead of processing its last known state again (default: off, it costs a
    /// PATCH per retry).
    pub fn touch_delays(mut self, on: bool) -> Self {
        self.settings.touch_delays = on;
        self
    }

    /// How long changing handlers wait for our own write to come back through the watch
    /// (default 5 s, Kopf's consistency timeout). When it has not come back by then, the
    /// object is read (one GET) and that state is processed, not the older one at hand
    /// (which would run the handlers again); Kopf processes the state at hand.
    pub fn consistency_timeout(mut self, timeout: Duration) -> Self {
        self.settings.consistency_timeout = timeout;
        self
    }

    /// Do not fail at start-up on resources that are not served yet: serve them when their
    /// CRD appears (Kopf's behaviour; off by default so that typos fail at once).
    pub fn wait_for_resources(mut self, on: bool) -> Self {
        self.wait_for_resources = on;
        self
    }

    /// The operator's gate (default: always open), for peering or leader election to pause
    /// the operator: while the gate is paused, the operator sends no list or watch request
    /// for its resources, starts no handler cycle (one in progress finishes) and stops its
    /// daemons and timers (their [`Stopped`](crate::handler::Stopped) says
    /// [`StopReason::OperatorPausing`](crate::handler::StopReason::OperatorPausing)); when the gate
    /// opens, it lists every resource again and processes the objects as after a start
    /// (resume handlers, daemons and timers spawned again). Indexes keep their contents;
    /// shutdown works while paused.
    ///
    /// ```
    /// use kopf::{Operator, peering::Gate};
    ///
    /// let (control, gate) = Gate::channel();
    /// let operator = Operator::new().gate(gate);
    /// // Elsewhere (peering): pause while a higher-priority operator is alive.
    /// control.pause("in favour of other@host (priority 100)");
    /// control.resume();
    /// # let _ = operator;
    /// ```
    pub fn gate(mut self, gate: kopf_core::gate::Gate) -> Self {
        self.gate = gate;
        self.gate_set = true;
        self
    }

    /// How the operator takes part in peering (Kopf's): by default it joins the peering
    /// `default` when the cluster has the peering resources (`kopf_peering::PEERING_YAML`)
    /// and runs alone when it has not; while a live peer has a higher priority (or, by Kopf's
    /// rule, the same one), the operator pauses as with a closed [`gate`](Self::gate) (both
    /// gates apply when both are given). The command line's `--standalone`, `--peering`,
    /// `--priority` and `--dev` change these settings; operators started by
    /// [`kopf::testing`](crate::testing) run standalone unless this was called.
    ///
    /// ```
    /// use kopf::{Operator, peering::PeeringSettings};
    ///
    /// // A development copy that pauses the deployed operators (priority 0) while it runs.
    /// let operator = Operator::new().peering(PeeringSettings::default().priority(666));
    /// # let _ = operator;
    /// ```
    pub fn peering(mut self, settings: kopf_peering::PeeringSettings) -> Self {
        self.peering = settings;
        self.peering_set = true;
        self
    }

    /// Several replicas, one acting: leader election with a Lease (client-go's algorithm and
    /// timings). Until this replica holds the lease, it stands by: its watches stay open
    /// and its indexes current, but no handler, timer or daemon runs. When it leads, the
    /// objects are processed as after a start; when it cannot renew the lease within the
    /// renew deadline, it stands by again before anything else. At a graceful stop, the
    /// lease is released once the work in flight is done. Same-priority peers do not pause
    /// each other when leader election is on. The command line's `--leader-election` and
    /// its options override these settings.
    ///
    /// ```
    /// use kopf::{Operator, peering::LeaderElection};
    ///
    /// let operator = Operator::new().leader_election(LeaderElection::new("my-operator-leader"));
    /// # let _ = operator;
    /// ```
    pub fn leader_election(mut self, election: kopf_peering::LeaderElection) -> Self {
        self.leader_election = Some(election);
        self
    }

    /// Several replicas, each serving a part of the objects: the uids are hashed into
    /// `count` ranges, each a Lease held by one replica at a time; the replicas share them
    /// evenly, and take over those of a replica that stops or dies (after its Leases
    /// expire; a replica that gives a range up to a newcomer stops working on its objects
    /// first). The watches ask the API server for the held ranges only (`shardSelector`,
    /// Kubernetes 1.36+) and filter by the same hash where the server ignores it. Resources
    /// with index handlers are not sharded (an index sees every object). The command line's
    /// `--shards N` and the lease options override these settings.
    ///
    /// ```
    /// use kopf::{Operator, peering::Sharding};
    ///
    /// let operator = Operator::new().sharding(Sharding::new("my-operator-shards", 4));
    /// # let _ = operator;
    /// ```
    pub fn sharding(mut self, sharding: kopf_peering::Sharding) -> Self {
        self.sharding = Some(sharding);
        self
    }

    /// Reconnect a watch that has received nothing, not even a bookmark, for this long
    /// (default 70 s, as Kopf): it resumes from its last resourceVersion, without a relist.
    /// Applies to the clients the operator builds itself ([`main`](Self::main),
    /// [`run_with_args`](Self::run_with_args)); a client passed to
    /// [`run_until`](Self::run_until) keeps its own read timeout (see [`client_config`](crate::config::client_config)).
    pub fn inactivity_timeout(mut self, timeout: Duration) -> Self {
        self.inactivity_timeout = timeout;
        self
    }

    /// Manifests to apply to the embedded API server of `run --fake` when no `--apply` is
    /// given (typically the operator's CRDs and a sample object), so that `run --fake` alone
    /// gives a working setup.
    pub fn fake_manifests(mut self, files: Vec<std::path::PathBuf>) -> Self {
        self.fake_manifests = files;
        self
    }

    /// The operator's name, version and description for `--version` and `--help` of
    /// [`main`](Self::main): `.about(kopf::about!())` takes them from the operator's Cargo
    /// package (`my-operator 1.2.0 (kopf-rs 0.1.0)`), `.about(About::new("my-operator",
    /// "1.2.0"))` sets them. Without it, the binary's name and kopf-rs's version are shown.
    pub fn about(mut self, about: cli::About) -> Self {
        self.about = Some(about);
        self
    }

    /// The [`about`](Self::about) given, or what the binary tells.
    pub(crate) fn about_or_default(&self) -> cli::About {
        self.about.clone().unwrap_or_else(cli::About::from_binary)
    }

    /// A permission the handlers need beyond the served resources (children they create,
    /// objects they read), for the [`rbac`](Self::rbac) manifests:
    /// `.rbac_rule("", "configmaps", &["create"])`.
    pub fn rbac_rule(mut self, api_group: &str, resource: &str, verbs: &[&str]) -> Self {
        self.rbac_rules.push(serde_json::json!({
            "apiGroups": [api_group],
            "resources": [resource],
            "verbs": verbs,
        }));
        self
    }
}
