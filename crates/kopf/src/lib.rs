#![warn(missing_docs)]
//! # kopf
//!
//! Kubernetes operators in a few lines of Rust, with Kopf's handler model and wire format:
//! register handlers for resources, and the framework watches, detects causes from the
//! diff-base, runs the handlers with retries, keeps the finalizer, stores results in
//! `status.<handler-id>` and progress in annotations — with at most one PATCH per endpoint
//! per processing cycle.
//!
//! Handler arguments are extractors (the axum pattern): `Spec<T>`, `Status<T>`, `Body`,
//! `Meta`, `Name`, `Namespace`, `Uid`, `Labels`, `Annotations`, `Diff`, `Old<T>`, `New<T>`,
//! `Reason`, `Retry`, `Started`, `Runtime`, `Patch`, `Events`, `Logger`, `Memo<T>`,
//! `SubHandlers`, or the whole `Cause`. Handlers are `async fn`s, or plain `fn`s that run on
//! blocking threads.
//!
//! ```no_run
//! use kopf::{HandlerError, Name, Operator, Spec};
//! use serde_json::{json, Value};
//!
//! async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
//!     tracing::info!("created {name} with field {}", spec["field"]);
//!     Ok(json!({"message": "hello world"}))       // lands in status.create_fn
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), kopf::Error> {
//!     Operator::new()
//!         .on_create("kopfexamples", "create_fn", create_fn)
//!         .main()                                  // `run -A`, `run --fake`, ...
//!         .await
//! }
//! ```
//!
//! Options (filters, retries, timeouts...) go with `on_with`:
//!
//! ```no_run
//! use kopf::{HandlerError, Operator, Options, Reason};
//! use std::time::Duration;
//!
//! async fn gold_fn() -> Result<(), HandlerError> { Ok(()) }
//!
//! let operator = Operator::new().on_with(
//!     Reason::Create,
//!     "kopfexamples",
//!     "gold_fn",
//!     gold_fn,
//!     Options::new().label("tier", "gold").retries(3).timeout(Duration::from_secs(60)),
//! );
//! # let _ = operator;
//! ```
//!
//! Timers, daemons, raw event handlers, indexes and activities:
//!
//! ```no_run
//! use kopf::{DaemonOptions, HandlerError, Index, Name, Operator, Stopped, TimerOptions};
//! use std::collections::HashMap;
//! use std::time::Duration;
//!
//! async fn check(Name(name): Name) -> Result<String, HandlerError> { Ok(format!("{name} is fine")) }
//! async fn watch(stopped: Stopped) -> Result<(), HandlerError> {
//!     while stopped.sleep(Duration::from_secs(10)).await.is_none() { /* poll something */ }
//!     Ok(())
//! }
//! async fn by_name(Name(name): Name) -> Result<HashMap<String, bool>, HandlerError> {
//!     Ok(HashMap::from([(name, true)]))
//! }
//! async fn count(index: Index<String, bool>) -> Result<usize, HandlerError> { Ok(index.len()) }
//!
//! let operator = Operator::new()
//!     .timer("kopfexamples", "check", TimerOptions::every(Duration::from_secs(60)), check)
//!     .daemon("kopfexamples", "watch", DaemonOptions::new(), watch)
//!     .index("kopfexamples", "by_name", by_name)
//!     .on_probe("objects", count);
//! # let _ = operator;
//! ```
//!
//! Admission and conversion webhooks (feature `admission`, on by default) are served by an
//! HTTPS server that starts with the operator (see [`Operator::on_validate`]):
//!
//! ```no_run
//! use kopf::{AdmissionError, Operator, Patch, Spec, Warnings};
//! use serde_json::{json, Value};
//!
//! async fn check(Spec(spec): Spec, warnings: Warnings) -> Result<(), AdmissionError> {
//!     if spec.get("field").is_none() {
//!         return Err(AdmissionError::with_code("spec.field is required", 422));
//!     }
//!     warnings.push("kopfexamples are an example");
//!     Ok(())
//! }
//! async fn defaults(patch: Patch) -> Result<(), AdmissionError> {
//!     patch.merge(json!({"metadata": {"labels": {"checked": "yes"}}}));
//!     Ok(())
//! }
//!
//! let operator = Operator::new()
//!     .on_validate("kopfexamples", "check", check)
//!     .on_mutate("kopfexamples", "defaults", defaults)
//!     .webhooks_managed("kopfexamples.kopf.dev");
//! # let _ = operator;
//! ```
//!
//! Peering is not there yet.

pub mod cli;
pub mod registry;

// The attribute macros expand to `::kopf::...` paths, also inside this crate's own tests.
extern crate self as kopf;

#[doc(hidden)]
pub use inventory;
/// Timestamps as handlers get them ([`Started`]'s `jiff::Timestamp`), without a dependency of
/// your own on `jiff`.
pub use jiff;
#[doc(hidden)]
pub use serde_json;

/// Attribute macros that register handlers for [`run()`](fn@run) (and
/// [`Operator::from_registry`]), as Kopf's decorators do: the function below the attribute
/// is registered, with its name as the handler id unless `id = "..."` says otherwise.
///
/// | macro | Kopf | registers |
/// |---|---|---|
/// | [`create`](on::create), [`update`](on::update), [`delete`](on::delete), [`resume`](on::resume) | `@kopf.on.create`, ... | changing handlers |
/// | [`field`](on::field) | `@kopf.on.field` | a handler of a field's changes |
/// | [`timer`](on::timer) | `@kopf.timer` | a timer per object |
/// | [`daemon`](on::daemon) | `@kopf.daemon` | a daemon per object |
/// | [`index`](on::index) | `@kopf.index` | an in-memory index, read with [`Index<K, V>`](crate::Index) |
/// | [`event`](on::event) | `@kopf.on.event` | a raw watch-event handler |
/// | [`startup`](on::startup), [`cleanup`](on::cleanup), [`probe`](on::probe) | `@kopf.on.startup`, ... | operator activities |
/// | [`login`](on::login) | `@kopf.on.login` | the operator's credentials |
/// | `validate`, `mutate` | `@kopf.on.validate`, ... | admission handlers (feature `admission`) |
/// | `convert` | – | a CRD's conversion webhook (feature `admission`) |
///
/// Handlers of objects take the resource first, then options: filters (`labels(...)`,
/// `annotations(...)`, `when`, `field` and `value`), and what each kind has in Kopf
/// (`retries = 3`, `timeout = 60`, `backoff = 1.5`, `errors = "permanent"`, a timer's
/// `interval`...). Label and annotation keys are string literals, or plain identifiers:
/// `labels("app.kubernetes.io/name" = "web", tier = "gold", skip = absent)`. Seconds are
/// integers or floats. An option a macro does not take is a compile error that lists those
/// it takes; each macro's page lists its options.
///
/// # Changing handlers
///
/// ```no_run
/// use kopf::{HandlerError, Name, New, Old, Spec};
/// use serde_json::{json, Value};
///
/// #[kopf::on::create("kopfexamples", labels("tier" = "gold", skip = absent), retries = 3, timeout = 60)]
/// async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
///     Ok(json!({"message": format!("hello {name}: {}", spec["field"])})) // status.create_fn
/// }
///
/// #[kopf::on::update("kopfexamples", field = "spec.field", new = present, backoff = 1.5)]
/// async fn field_set(New(new): New) -> Result<(), HandlerError> {
///     tracing::info!("spec.field is now {new:?}");
///     Ok(())
/// }
///
/// /// A plain `fn`: it runs on a blocking thread.
/// #[kopf::on::field("kopfexamples", field = "spec.items", errors = "permanent")]
/// fn items_changed(Old(old): Old, New(new): New) -> Result<(), HandlerError> {
///     tracing::info!("spec.items: {old:?} -> {new:?}");
///     Ok(())
/// }
///
/// #[kopf::on::delete("kopfexamples", optional)]
/// async fn delete_fn(Name(name): Name) -> Result<(), HandlerError> {
///     tracing::info!("{name} is gone");
///     Ok(())
/// }
///
/// #[kopf::on::resume("kopfexamples", deleted, when = has_spec)]
/// async fn resume_fn(Name(name): Name) -> Result<(), HandlerError> {
///     tracing::info!("{name} was there before the operator started");
///     Ok(())
/// }
///
/// fn has_spec(body: &Value) -> bool {
///     body.get("spec").is_some()
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), kopf::Error> {
///     kopf::run!().await // `run -A`, `run --fake`, ...; --version: the crate's name and version
/// }
/// ```
///
/// # Timers and daemons
///
/// ```no_run
/// use kopf::{HandlerError, Name, Stopped};
/// use std::time::Duration;
///
/// /// Every minute, once the object has been unchanged for 10 s; the result goes to
/// /// `status.check`.
/// #[kopf::on::timer("kopfexamples", interval = 60, initial_delay = 5, idle = 10, sharp = true)]
/// async fn check(Name(name): Name) -> Result<String, HandlerError> {
///     Ok(format!("{name} is fine"))
/// }
///
/// /// Runs per object until the object is deleted or the operator exits.
/// #[kopf::on::daemon("kopfexamples", cancellation_backoff = 5, cancellation_timeout = 10.0)]
/// async fn monitor(Name(name): Name, stopped: Stopped) -> Result<(), HandlerError> {
///     while stopped.sleep(Duration::from_secs(10)).await.is_none() {
///         tracing::info!("{name} is still there");
///     }
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Indexes and raw events
///
/// ```no_run
/// use kopf::{EventType, HandlerError, Index, Name, Spec};
///
/// /// Object names by owner: `Index<String, String>` for every handler.
/// #[kopf::on::index("kopfexamples", field = "spec.owner")]
/// async fn by_owner(Spec(spec): Spec, Name(name): Name) -> Result<Option<(String, String)>, HandlerError> {
///     Ok(spec["owner"].as_str().map(|owner| (owner.to_string(), name)))
/// }
///
/// #[kopf::on::create("kopfexamples")]
/// async fn siblings(Spec(spec): Spec, owned: Index<String, String>) -> Result<Vec<String>, HandlerError> {
///     Ok(spec["owner"].as_str().map(|o| owned.get(&o.to_string())).unwrap_or_default())
/// }
///
/// #[kopf::on::event("kopfexamples", labels(watched = present))]
/// async fn seen(Name(name): Name, EventType(event): EventType) -> Result<(), HandlerError> {
///     tracing::info!("{name}: {}", event.as_deref().unwrap_or("listed"));
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Activities
///
/// ```no_run
/// use kopf::{HandlerError, Memo};
///
/// #[derive(Clone, Default)]
/// struct Settings {
///     region: String,
/// }
///
/// /// Before anything is watched; what it sets in the memo, objects start from.
/// #[kopf::on::startup(retries = 5, backoff = 2)]
/// async fn configure(settings: Memo<Settings>) -> Result<(), HandlerError> {
///     settings.update(|s| s.region = "eu-1".into());
///     Ok(())
/// }
///
/// #[kopf::on::cleanup]
/// async fn goodbye() -> Result<(), HandlerError> {
///     tracing::info!("bye");
///     Ok(())
/// }
///
/// /// Reported by the liveness endpoint (`run --liveness`) as `{"region": "eu-1"}`.
/// #[kopf::on::probe(id = "region")]
/// async fn region(settings: Memo<Settings>) -> Result<String, HandlerError> {
///     Ok(settings.get().region)
/// }
///
/// /// The operator connects with this instead of the kubeconfig (not with `run --fake`).
/// #[kopf::on::login]
/// async fn login() -> Result<kube::Config, HandlerError> {
///     let token = std::fs::read_to_string("/var/run/secrets/my-token")?;
///     let url = "https://kubernetes.example:6443".parse().map_err(HandlerError::other)?;
///     let mut config = kube::Config::new(url);
///     config.auth_info.token = Some(token.trim().to_string().into());
///     Ok(config)
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), kopf::Error> {
///     // The memo's type is registered with the operator, as with the builder.
///     kopf::Operator::from_registry().memo(Settings::default()).main().await
/// }
/// ```
///
/// # Admission and conversion webhooks (feature `admission`)
///
/// ```no_run
/// use kopf::{AdmissionError, Patch, Spec};
/// use serde_json::{json, Value};
///
/// #[kopf::on::validate("kopfexamples", operations = ["CREATE", "UPDATE"])]
/// async fn check(Spec(spec): Spec) -> Result<(), AdmissionError> {
///     match spec.get("field") {
///         Some(_) => Ok(()),
///         None => Err(AdmissionError::with_code("spec.field is required", 422)),
///     }
/// }
///
/// #[kopf::on::mutate("kopfexamples", operation = "CREATE", persistent)]
/// async fn defaults(patch: Patch) -> Result<(), AdmissionError> {
///     patch.merge(json!({"metadata": {"labels": {"checked": "yes"}}}));
///     Ok(())
/// }
///
/// /// v1 `spec.size: "1Gi"` ⇄ v2 `spec.storage.size: "1Gi"`.
/// #[kopf::on::convert("kopfexamples.kopf.dev")]
/// fn convert(mut obj: Value, version: &str) -> Result<Value, String> {
///     let spec = obj.get_mut("spec").and_then(Value::as_object_mut).ok_or("no spec")?;
///     match version {
///         "v2" => {
///             if let Some(size) = spec.remove("size") {
///                 spec.insert("storage".into(), json!({"size": size}));
///             }
///         }
///         "v1" => {
///             if let Some(size) = spec.remove("storage").and_then(|s| s.get("size").cloned()) {
///                 spec.insert("size".into(), size);
///             }
///         }
///         other => return Err(format!("no version {other}")),
///     }
///     Ok(obj)
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), kopf::Error> {
///     // The webhook server starts with the operator; this registers it in the cluster.
///     kopf::Operator::from_registry().webhooks_managed("kopf.dev").main().await
/// }
/// ```
pub mod on {
    pub use kopf_macros::{
        cleanup, create, daemon, delete, event, field, index, login, probe, resume, startup, timer,
        update,
    };
    #[cfg(feature = "admission")]
    pub use kopf_macros::{convert, mutate, validate};
}

/// Runs the handlers registered with the attribute macros: parses the command line
/// (`run -A`, `run --fake`...), connects, and serves until SIGINT/SIGTERM.
pub async fn run() -> Result<(), Error> {
    Operator::from_registry().main().await
}

mod client;
pub mod logging;
mod login;
mod rbac;
mod serve;
#[cfg(feature = "testing")]
pub mod testing;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use kopf_core::activities::{Probes, StartupFailed};
pub use kopf_core::causes::Reason;
pub use kopf_core::daemons::{DaemonOptions, StopReason, Stopped, TimerOptions};
pub use kopf_core::extract::{
    Annotations, Body, Diff, EventType, FromCause, IntoHandler, IntoHandlerResult, IntoIndexer,
    Labels, Logger, Meta, Name, Namespace, New, Old, PermanentError, Retry, Runtime, Spec, Started,
    Status, TemporaryError, Uid,
};
pub use kopf_core::index::{Index, IndexOutput, Indexes};

/// Making objects children of others: owner references, names, namespaces and labels from
/// the owner (`adopt`), on `serde_json::Value` bodies and typed resources alike.
pub mod hierarchy {
    pub use kopf_core::hierarchy::*;
}

/// The Kubernetes client of the operator, as a handler argument (for creating children,
/// reading other objects...).
#[derive(Clone)]
pub struct Client(pub kube::Client);

impl FromCause for Client {
    fn from_cause(cause: &Cause) -> Result<Self, HandlerError> {
        cause
            .extensions
            .get::<kube::Client>()
            .cloned()
            .map(Client)
            .ok_or_else(|| HandlerError::permanent("no Kubernetes client is available here"))
    }
}
pub use kopf_core::handler::{
    Cause, ErrorsMode, FieldFilter, Handler, HandlerError, HandlerResult, HandlerSpec, MetaFilter,
    Options, SubHandlers, WhenFilter,
};
pub use kopf_core::handler::{
    EventsHandle, EventsHandle as Events, PatchHandle, PatchHandle as Patch,
};
pub use kopf_core::layers::{CallOutcome, HandlerCall, HandlerService};
pub use kopf_core::memo::Memo;
pub use kopf_core::metrics::{Metrics, MetricsLayer};
pub use kopf_core::processing::{Lifecycle, Persistence};
pub use kopf_core::progress::ProgressStorage;
pub use kopf_watch::{Discovered, Selector};

#[cfg(feature = "admission")]
pub use kopf_admission::{
    AdmissionError, Converter, DryRun, Operation, SubResource, UserInfo, Warnings, WebhookOptions,
    WebhookServer,
};

/// Admission and conversion webhooks: everything of `kopf-admission` (the server, the
/// managed configurations, reviews...).
#[cfg(feature = "admission")]
pub mod admission {
    pub use kopf_admission::*;
}

/// Kopf's diffs: items of `add`/`change`/`remove` with a path, old and new values.
pub mod diff {
    pub use kopf_diff::{Diff, DiffItem, Op, diff, reduce, resolve};
}

/// Errors of running an operator. `Debug` prints the message and its causes, so that
/// `fn main() -> Result<(), kopf::Error>` ends with a readable line, not a dump.
#[derive(thiserror::Error)]
pub enum Error {
    /// No Kubernetes client could be built.
    #[error("cannot connect to Kubernetes: {0}")]
    Client(#[source] kube::Error),
    /// The kubeconfig or in-cluster configuration cannot be read.
    #[error("cannot configure the Kubernetes client: {0}")]
    Config(String),
    /// A resource could not be served.
    #[error(transparent)]
    Watch(#[from] kopf_watch::WatchError),
    /// A resource of the handlers is not served by the embedded API server of `run --fake`
    /// or `rbac`: the manifests applied to it lack its CustomResourceDefinition. (On a
    /// cluster, it is [`WatchError::UnknownResource`](kopf_watch::WatchError::UnknownResource).)
    #[error(
        "no served resource matches {}{similar}; {fix}",
        // A name in quotes; ("group", "version", "plural") as it is.
        if .selector.starts_with('(') { .selector.clone() } else { format!("{:?}", .selector) }
    )]
    MissingCrd {
        /// The selector.
        selector: String,
        /// Similar names, if any (`; similar: ...`).
        similar: String,
        /// What to do, for the command that failed (`--apply FILE`...).
        fix: String,
    },
    /// The embedded fake API server failed.
    #[cfg(feature = "testing")]
    #[error(transparent)]
    Fake(#[from] kopf_testing::FakeError),
    /// A startup handler failed for good.
    #[error(transparent)]
    Startup(#[from] StartupFailed),
    /// `--fake` was given to a binary built without the `testing` feature.
    #[error("--fake needs kopf's `testing` feature (on by default)")]
    NoFake,
    /// The API server does not answer.
    #[error(
        "cannot reach the Kubernetes API server at {url}: {cause}; is the cluster up, and is the kubeconfig's current context the right one? (`run --fake` runs without a cluster)"
    )]
    Unreachable {
        /// The server's URL.
        url: String,
        /// The root cause, in words.
        cause: String,
        /// The error (not a `source`: the message already says what matters).
        error: kube::Error,
    },
    /// The liveness or metrics endpoint cannot serve.
    #[error("{0}")]
    Serve(String),
    /// The webhook server could not start.
    #[cfg(feature = "admission")]
    #[error(transparent)]
    Webhooks(#[from] kopf_admission::SetupError),
    /// The output of a command (rbac, fake-apiserver) cannot be written.
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&with_causes(self))
    }
}

/// An operator: handlers per resource, run until stopped.
///
/// ```no_run
/// use std::time::Duration;
/// use kopf::{HandlerError, Name, Operator, Options, Reason, Spec, TimerOptions};
/// use serde_json::{Value, json};
///
/// async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
///     Ok(json!({"message": format!("{name} has field {}", spec["field"])}))
/// }
///
/// async fn check(Name(name): Name) -> Result<(), HandlerError> {
///     tracing::info!("{name} is still there");
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
    registrations: Vec<(Selector, HandlerSpec)>,
    /// The registrations (by index) whose options set their own backoff.
    explicit_backoffs: std::collections::HashSet<usize>,
    /// The backoff of handlers that set none (Kopf's 60 s when None).
    default_backoff: Option<Duration>,
    settings: kopf_watch::Settings,
    persistence: Persistence,
    stack: kopf_core::layers::Stack,
    memo: kopf_core::memo::MemoSeed,
    wait_for_resources: bool,
    inactivity_timeout: Duration,
    fake_manifests: Vec<std::path::PathBuf>,
    startup: Vec<HandlerSpec>,
    cleanup: Vec<HandlerSpec>,
    probes: Vec<HandlerSpec>,
    login: Option<login::LoginFn>,
    metrics: Option<Metrics>,
    rate_limit: (f64, u32),
    request_timeout: Duration,
    grace_period: Duration,
    rbac_rules: Vec<serde_json::Value>,
    /// The name, version and description of `--version` and `--help`.
    about: Option<cli::About>,
    #[cfg(feature = "admission")]
    admission: kopf_admission::Admission,
}

impl Default for Operator {
    fn default() -> Self {
        Operator {
            registrations: Vec::new(),
            explicit_backoffs: std::collections::HashSet::new(),
            default_backoff: None,
            settings: kopf_watch::Settings::default(),
            persistence: Persistence::default(),
            stack: kopf_core::layers::Stack::default(),
            memo: kopf_core::memo::MemoSeed::default(),
            wait_for_resources: false,
            inactivity_timeout: Duration::from_secs(70),
            fake_manifests: Vec::new(),
            startup: Vec::new(),
            cleanup: Vec::new(),
            probes: Vec::new(),
            login: None,
            metrics: None,
            rate_limit: (100.0, 1000),
            request_timeout: client::DEFAULT_REQUEST_TIMEOUT,
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

    /// A handler for a reason with options (filters, retries, timeout, backoff, errors
    /// mode). `Reason::Resume` registers a resume handler.
    pub fn on_with<Args>(
        self,
        reason: Reason,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: Options,
    ) -> Self {
        let handler = handler.into_handler();
        let spec = match reason {
            Reason::Resume => HandlerSpec::resume_handler(id, handler),
            reason => HandlerSpec::from_arc(id, Some(reason), handler),
        };
        self.register(resource, spec, options)
    }

    /// A validating admission handler (Kopf's `@kopf.on.validate`): it reviews creations,
    /// updates and deletions of the resource before the API server stores them; returning
    /// an error ([`AdmissionError`] for a chosen code) denies the request with its message.
    /// Extractors: `Body`, `Spec`, `Old`, `New`, `Diff`, [`Operation`], [`DryRun`],
    /// [`UserInfo`], [`SubResource`], [`Warnings`]...
    ///
    /// The webhook server starts with the operator (see [`webhook_server`](Self::webhook_server)),
    /// and with [`webhooks_managed`](Self::webhooks_managed) the operator registers it in
    /// the cluster itself.
    #[cfg(feature = "admission")]
    pub fn on_validate<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_validate_with(resource, id, handler, WebhookOptions::default())
    }

    /// [`on_validate`](Self::on_validate) with options: operations, subresource, filters,
    /// `persistent`, `side_effects`, `ignore_failures`.
    #[cfg(feature = "admission")]
    pub fn on_validate_with<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: WebhookOptions,
    ) -> Self {
        self.webhook(
            kopf_admission::WebhookKind::Validating,
            resource,
            id,
            handler,
            options,
        )
    }

    /// A mutating admission handler (Kopf's `@kopf.on.mutate`): what it merges into the
    /// [`Patch`] is applied to the object before it is stored (sent to the API server as an
    /// RFC 6902 JSON patch). Mutating handlers skip deletions unless they are for
    /// `DELETE` only.
    #[cfg(feature = "admission")]
    pub fn on_mutate<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_mutate_with(resource, id, handler, WebhookOptions::default())
    }

    /// [`on_mutate`](Self::on_mutate) with options.
    #[cfg(feature = "admission")]
    pub fn on_mutate_with<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: WebhookOptions,
    ) -> Self {
        self.webhook(
            kopf_admission::WebhookKind::Mutating,
            resource,
            id,
            handler,
            options,
        )
    }

    #[cfg(feature = "admission")]
    fn webhook<Args>(
        mut self,
        kind: kopf_admission::WebhookKind,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: WebhookOptions,
    ) -> Self {
        self.admission
            .handlers
            .push(kopf_admission::WebhookHandler::new(
                kind,
                resource,
                id,
                handler.into_handler(),
                options,
            ));
        self
    }

    /// A conversion webhook for the CRD `crd` (`<plural>.<group>`): `convert(object,
    /// version)` returns the object in `version` (e.g. `"v2"`); the framework sets its
    /// `apiVersion`. With [`webhooks_managed`](Self::webhooks_managed), the operator sets the
    /// CRD's `spec.conversion` to call it. See [`Converter`].
    #[cfg(feature = "admission")]
    pub fn on_convert<E: std::fmt::Display>(
        mut self,
        crd: &str,
        convert: impl Fn(serde_json::Value, &str) -> Result<serde_json::Value, E>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.admission.converters.push(Converter::new(crd, convert));
        self
    }

    /// Where and how the webhook server listens (default: all interfaces, port 9443, a
    /// generated certificate for `localhost`); the `run` options `--webhook-*` override it.
    #[cfg(feature = "admission")]
    pub fn webhook_server(mut self, server: WebhookServer) -> Self {
        self.admission.settings.server = server;
        self
    }

    /// Creates and keeps patched a ValidatingWebhookConfiguration and a
    /// MutatingWebhookConfiguration of this name (one entry per handler, as Kopf's
    /// `settings.admission.managed`), and points the converters' CRDs at the server. On
    /// exit, only the persistent entries stay.
    #[cfg(feature = "admission")]
    pub fn webhooks_managed(mut self, name: impl Into<String>) -> Self {
        self.admission.settings.managed = Some(name.into());
        self
    }

    /// A creation handler: runs once per object, when it is first seen with no diff-base
    /// (Kopf's `@kopf.on.create`); what it returns lands in `status.<id>`.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator, Selector, Spec};
    ///
    /// async fn create_fn(Spec(spec): Spec) -> Result<String, HandlerError> {
    ///     Ok(format!("created with {}", spec["field"]))
    /// }
    /// let operator = Operator::new()
    ///     .on_create("kopfexamples", "create_fn", create_fn)
    ///     // Or by type: Selector::of::<MyResource>() for a #[derive(CustomResource)] type.
    ///     .on_create(Selector::of::<k8s_openapi::api::core::v1::ConfigMap>(), "cm_fn", create_fn);
    /// # let _ = operator;
    /// ```
    pub fn on_create<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_with(Reason::Create, resource, id, handler, Options::default())
    }

    /// An update handler: runs when the object's essence (spec, labels, annotations...)
    /// changed since the last handled state; `Diff`, `Old` and `New` tell what changed.
    ///
    /// ```
    /// use kopf::{Diff, HandlerError, Operator};
    ///
    /// let operator = Operator::new().on_update("kopfexamples", "update_fn", |Diff(diff): Diff| async move {
    ///     Ok::<_, HandlerError>(format!("{} change(s)", diff.len()))
    /// });
    /// # let _ = operator;
    /// ```
    pub fn on_update<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_with(Reason::Update, resource, id, handler, Options::default())
    }

    /// A deletion handler: runs when the object is being deleted, before it goes (the
    /// operator puts its finalizer on every object before any handler of it runs, unless the
    /// handler is registered with `Options::optional`).
    ///
    /// ```
    /// use kopf::{HandlerError, Name, Operator};
    ///
    /// let operator = Operator::new().on_delete("kopfexamples", "delete_fn", |Name(name): Name| async move {
    ///     tracing::info!("cleaning up after {name}");
    ///     Ok::<_, HandlerError>(())
    /// });
    /// # let _ = operator;
    /// ```
    pub fn on_delete<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_with(Reason::Delete, resource, id, handler, Options::default())
    }

    /// A resume handler: runs for objects found when the operator starts (already handled,
    /// unchanged since), e.g. to restart in-memory work.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator};
    ///
    /// let operator = Operator::new().on_resume("kopfexamples", "resume_fn", || async {
    ///     Ok::<_, HandlerError>(())
    /// });
    /// # let _ = operator;
    /// ```
    pub fn on_resume<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_with(Reason::Resume, resource, id, handler, Options::default())
    }

    /// A field handler: runs when the dotted `field` changes (also on creation when set).
    /// Its id gets the field as a suffix: `<id>/<field>`; `Old` and `New` are the field's.
    ///
    /// ```
    /// use kopf::{HandlerError, New, Old, Operator};
    ///
    /// let operator = Operator::new().on_field("kopfexamples", "field_fn", "spec.size",
    ///     |Old(old): Old, New(new): New| async move {
    ///         Ok::<_, HandlerError>(format!("{old:?} -> {new:?}"))
    ///     });
    /// # let _ = operator;
    /// ```
    pub fn on_field<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        field: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_field_with(resource, id, field, handler, Options::default())
    }

    /// A field handler with options (`old`/`new`/`value` filters among them).
    pub fn on_field_with<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        field: &str,
        handler: impl IntoHandler<Args>,
        options: Options,
    ) -> Self {
        let spec = HandlerSpec::field_handler(id, field, handler.into_handler());
        self.register(resource, spec, options)
    }

    /// A raw event handler: called for every watch event of matching objects (the
    /// [`EventType`] argument tells which), with no state kept; errors are logged and
    /// ignored; it needs no finalizer.
    pub fn on_event<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let spec = HandlerSpec::event(id, handler.into_handler());
        self.register(resource, spec, Options::default())
    }

    /// An index: the handler returns key/value pairs for each object (a map, a vector of
    /// pairs, a pair, or an `Option` of one: `None` keeps the previous entries); every
    /// handler reads them with the [`Index<K, V>`] argument. Entries go when the object is
    /// deleted or stops matching; handlers start only once the first listing of every
    /// indexed resource is indexed.
    pub fn index<Args, H: IntoIndexer<Args>>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: H,
    ) -> Self {
        let types = kopf_core::index::IndexTypes::of::<H::Key, H::Value>();
        self.settings.indexes.declare(id, types);
        let spec = HandlerSpec::index(id, types, handler.into_indexer());
        self.register(resource, spec, Options::default())
    }

    /// A timer for each matching object (see [`TimerOptions`]); its result goes to
    /// `status.<id>` after each call. Filters go with [`register`](Self::register) and
    /// [`HandlerSpec::timer`].
    pub fn timer<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        options: TimerOptions,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let spec = HandlerSpec::timer(id, options, handler.into_handler());
        self.register(resource, spec, Options::default())
    }

    /// A daemon for each matching object (see [`DaemonOptions`]): it runs until it
    /// returns, and is asked to stop (the [`Stopped`] argument) when the object is deleted
    /// or stops matching, or the operator exits.
    pub fn daemon<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        options: DaemonOptions,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let spec = HandlerSpec::daemon(id, options, handler.into_handler());
        self.register(resource, spec, Options::default())
    }

    /// A startup handler: all of them run (and succeed, retried on temporary errors)
    /// before anything is watched; a permanent failure stops the operator. They see the
    /// operator's memo itself: what they set there, objects start from.
    pub fn on_startup<Args>(mut self, id: &str, handler: impl IntoHandler<Args>) -> Self {
        self.startup
            .push(HandlerSpec::from_arc(id, None, handler.into_handler()));
        self
    }

    /// A cleanup handler: runs once when the operator exits, after every resource has
    /// stopped.
    pub fn on_cleanup<Args>(mut self, id: &str, handler: impl IntoHandler<Args>) -> Self {
        self.cleanup
            .push(HandlerSpec::from_arc(id, None, handler.into_handler()));
        self
    }

    /// A probe handler: its result is reported under its id by [`probes`](Self::probes)
    /// (the liveness endpoint).
    pub fn on_probe<Args>(mut self, id: &str, handler: impl IntoHandler<Args>) -> Self {
        self.probes
            .push(HandlerSpec::from_arc(id, None, handler.into_handler()));
        self
    }

    /// A login handler: the operator connects with the configuration it returns (instead
    /// of the kubeconfig or the in-cluster account), and calls it again whenever the API
    /// server answers 401 Unauthorized. Used by [`connect`](Self::connect) and
    /// [`main`](Self::main) (not with `--fake`).
    ///
    /// ```no_run
    /// use kopf::{HandlerError, Operator};
    ///
    /// let operator = Operator::new().on_login(|| async {
    ///     let token = std::fs::read_to_string("/var/run/secrets/my-token")?;
    ///     let mut config = kube::Config::new("https://kubernetes.example:6443".parse().map_err(HandlerError::other)?);
    ///     config.auth_info.token = Some(token.trim().to_string().into());
    ///     Ok::<_, HandlerError>(config)
    /// });
    /// # let _ = operator;
    /// ```
    pub fn on_login<F, Fut, E>(mut self, login: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<kube::Config, E>> + Send + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.login = Some(Arc::new(move || {
            let fut = login();
            Box::pin(async move { fut.await.map_err(Into::into) })
        }));
        self
    }

    /// The operator's client: from the login handler if there is one (logging in again
    /// after 401 answers), else from `KUBECONFIG` / `~/.kube/config` / the in-cluster
    /// account (see [`client_config`]).
    ///
    /// The client is rate-limited ([`rate_limit`](Self::rate_limit)), gives up on an attempt
    /// after the [`request_timeout`](Self::request_timeout), sends requests again after
    /// transient failures (429, 502, 503, 504, 500 for GET and PATCH, no answer; up to 5 times,
    /// with a WARNING line for each failure), and counts its requests and retries in the
    /// [`metrics`](Self::metrics) if they are on.
    pub async fn connect(&self) -> Result<kube::Client, Error> {
        Ok(self.connect_to().await?.0)
    }

    /// [`connect`](Self::connect), with the server's URL when it comes from the kubeconfig
    /// (for a readable error when the server cannot be reached).
    async fn connect_to(&self) -> Result<(kube::Client, Option<http::Uri>), Error> {
        let (client, server, url) = match &self.login {
            Some(login) => {
                // (The login logs the server's URL once it knows it.)
                let (client, server) =
                    login::connect(login.clone(), self.inactivity_timeout).await?;
                (client, server, None)
            }
            None => {
                let config = client_config(None, self.inactivity_timeout).await?;
                let url = config.cluster_url.clone();
                tracing::info!(
                    "Connecting to the Kubernetes API server at {}.",
                    url.to_string().trim_end_matches('/')
                );
                let client = kube::Client::try_from(config).map_err(Error::Client)?;
                (client, url.clone(), Some(url))
            }
        };
        Ok((self.wrap_client_at(client, Some(&server)), url))
    }

    /// The operator's client behaviour around `client`: the [rate limit](Self::rate_limit),
    /// the [request timeout](Self::request_timeout), retries of transient failures (`429 Too
    /// Many Requests` after its `Retry-After`; 502, 503, 504; 500 for GET and PATCH; no
    /// answer) with a WARNING line for each failure, and the request
    /// [metrics](Self::metrics). [`connect`](Self::connect) and `run --fake` use it; use it
    /// for a client given to [`run_until`](Self::run_until). The client should not retry by
    /// itself (kube's `default_retry` off, as [`client_config`] sets it), or failures are
    /// retried, silently, twice over.
    pub fn wrap_client(&self, client: kube::Client) -> kube::Client {
        self.wrap_client_at(client, None)
    }

    /// [`wrap_client`](Self::wrap_client), naming the API server at `server` in errors.
    fn wrap_client_at(&self, client: kube::Client, server: Option<&http::Uri>) -> kube::Client {
        let (qps, burst) = self.rate_limit;
        client::wrap(
            client,
            client::Settings {
                limit: client::RateLimit::new(qps, burst),
                metrics: self.metrics.clone(),
                request_timeout: self.request_timeout,
                server: server.map(|url| url.to_string().trim_end_matches('/').to_string()),
            },
        )
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

    /// The probe handlers with the operator's memo and indexes, results cached for 10 s:
    /// `probes().run().await` gives `{probe-id: result}`.
    pub fn probes(&self) -> Arc<Probes> {
        Arc::new(Probes::new(
            self.probes.clone(),
            self.activity_context(None),
            Duration::from_secs(10),
        ))
    }

    fn activity_context(
        &self,
        client: Option<&kube::Client>,
    ) -> kopf_core::activities::ActivityContext {
        let mut extensions = self.settings.extensions.clone();
        extensions.insert(self.settings.indexes.clone());
        if let Some(client) = client {
            extensions.insert(client.clone());
        }
        kopf_core::activities::ActivityContext {
            memo: kopf_core::memo::Memos::operator(Arc::new(self.memo.clone())),
            extensions,
            stack: self.stack.clone(),
        }
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

    /// Start watching with streaming lists (`sendInitialEvents`) instead of list + watch.
    pub fn streaming_lists(mut self, on: bool) -> Self {
        self.settings.streaming_lists = on;
        self
    }

    /// Process at most this many objects at the same time.
    pub fn worker_limit(mut self, limit: usize) -> Self {
        self.settings.worker_limit = Some(limit);
        self
    }

    /// Where state is kept on objects (prefix, finalizer...).
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Where progress records are kept: annotations (default) or
    /// `ProgressStorage::status("kopf")` for `status.kopf.progress`.
    pub fn progress_storage(mut self, storage: ProgressStorage) -> Self {
        self.persistence.progress = storage;
        self
    }

    /// Adds a tower layer around every handler call (metrics, tracing, auth...). It sees
    /// each attempt with its classified outcome; see [`kopf_core::layers::Stack::layer`].
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<HandlerService> + Send + Sync + 'static,
        L::Service: tower::Service<HandlerCall, Response = CallOutcome, Error = std::convert::Infallible>
            + Clone
            + Send
            + 'static,
        <L::Service as tower::Service<HandlerCall>>::Future: Send + 'static,
    {
        self.stack = self.stack.layer(layer);
        self
    }

    /// Post a `Normal` event each time a handler succeeds (off by default).
    pub fn success_events(mut self, on: bool) -> Self {
        self.stack = self.stack.success_events(on);
        self
    }

    /// The rate limit of Events per object: up to `burst` at once (default 5), then one per
    /// `interval` (default 10 s); the next event that passes says how many were suppressed.
    pub fn event_limit(mut self, burst: u32, interval: Duration) -> Self {
        self.settings.event_burst = burst;
        self.settings.event_interval = interval;
        self
    }

    /// An operator-wide memo value: each object gets its own copy, for [`Memo<T>`] arguments.
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
    /// (default 5 s, Kopf's consistency timeout).
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

    /// Reconnect a watch that has received nothing, not even a bookmark, for this long
    /// (default 70 s, as Kopf): it resumes from its last resourceVersion, without a relist.
    /// Applies to the clients the operator builds itself ([`main`](Self::main),
    /// [`run_with_args`](Self::run_with_args)); a client passed to
    /// [`run_until`](Self::run_until) keeps its own read timeout (see [`client_config`]).
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

    /// The whole program: parses the command line (`run -n NS -A --fake ...`), sets up
    /// logging, connects to the cluster of the current kubeconfig (or, with `--fake`, to an
    /// embedded fake API server with the given manifests), and runs until SIGINT/SIGTERM.
    ///
    /// `--version` and `--help` show the operator's [`about`](Self::about) (by default: the
    /// binary's name and kopf-rs's version).
    pub async fn main(self) -> Result<(), Error> {
        let cli = cli::Cli::parse_args_for(&self.about_or_default());
        self.main_with(cli).await
    }

    /// Like [`main`](Self::main) with an already parsed command line: `run`, `rbac` or
    /// `fake-apiserver` (or the hidden probe of `kopf run`, answered on stdout).
    pub async fn main_with(self, cli: cli::Cli) -> Result<(), Error> {
        match cli.command {
            cli::Command::Run(args) => self.run_with_args(args).await,
            cli::Command::Rbac(args) => self.print_rbac(args).await,
            cli::Command::FakeApiserver(args) => fake_apiserver(args).await,
            cli::Command::Probe => {
                use std::io::Write;
                let line = format!("{}\n", self.about_or_default().probe_answer());
                std::io::stdout()
                    .write_all(line.as_bytes())
                    .map_err(Error::Output)
            }
        }
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
    fn about_or_default(&self) -> cli::About {
        self.about.clone().unwrap_or_else(cli::About::from_binary)
    }

    /// `rbac`: prints the RBAC manifests the handlers need.
    async fn print_rbac(&self, args: cli::RbacArgs) -> Result<(), Error> {
        use std::io::Write;
        let text = self.rbac(&args).await?;
        std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(Error::Output)
    }

    /// The RBAC manifests (ServiceAccount, ClusterRole, ClusterRoleBinding) the handlers
    /// need, as YAML: list and watch on every served resource, patch on it and its status
    /// when some handler writes, create on Events, list and watch on CRDs. Resources are
    /// resolved on an embedded API server with the operator's
    /// [manifests](Self::fake_manifests) (or `args.apply`), or on the current cluster
    /// with `args.cluster`.
    ///
    /// A resource without its CRD there is an [`Error::MissingCrd`] that says how to give it
    /// (`--apply`, `--cluster`); on the cluster, the [`WatchError`](kopf_watch::WatchError)
    /// itself.
    pub async fn rbac(&self, args: &cli::RbacArgs) -> Result<String, Error> {
        let all = if args.cluster {
            kopf_watch::discover(&self.connect().await?).await?
        } else {
            #[cfg(feature = "testing")]
            {
                let server = kopf_testing::FakeApiServer::start().await?;
                let manifests = if args.apply.is_empty() {
                    &self.fake_manifests
                } else {
                    &args.apply
                };
                for m in manifests {
                    server.apply_file(m)?;
                }
                let all = kopf_watch::discover(&server.try_client()?).await;
                server.shutdown().await;
                all?
            }
            #[cfg(not(feature = "testing"))]
            {
                return Err(Error::Config(
                    "without kopf's `testing` feature, `rbac` needs --cluster".into(),
                ));
            }
        };
        #[allow(unused_mut)]
        let mut extra = self.rbac_rules.clone();
        #[cfg(feature = "admission")]
        if self.admission.settings.managed.is_some() {
            // The managed webhook configurations are created, then patched.
            extra.push(serde_json::json!({
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                "verbs": ["create", "patch"],
            }));
            if !self.admission.converters.is_empty() {
                extra.push(serde_json::json!({
                    "apiGroups": ["apiextensions.k8s.io"],
                    "resources": ["customresourcedefinitions"],
                    "verbs": ["patch"],
                }));
            }
        }
        rbac::manifests(
            &self.registrations,
            &extra,
            &all,
            &args.name,
            &args.account_namespace,
        )
        .map_err(|e| {
            if args.cluster {
                e
            } else {
                cli::missing_crd(e, || {
                    cli::crd_fix(cli::Embedded::Rbac, &args.apply, &self.fake_manifests)
                })
            }
        })
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

    /// Like [`main`](Self::main) with already parsed arguments.
    ///
    /// On SIGINT/SIGTERM, the operator stops watching, lets running handlers finish within
    /// `--grace-period` (then cancels them), stops the daemons, runs the cleanup handlers
    /// and returns `Ok`. A second signal exits the process at once (status 1), and so does
    /// `--shutdown-timeout` after the first signal, whatever is still running.
    pub async fn run_with_args(mut self, args: cli::RunArgs) -> Result<(), Error> {
        // What a missing CRD's message says to do depends on the manifests the user gave.
        let given = args.apply.clone();
        let args = args.with_default_manifests(&self.fake_manifests);
        logging::init(&args);
        let namespaces = args.namespace_patterns();
        if !args.all_namespaces && !namespaces.is_empty() {
            self = self.namespace_patterns(&namespaces);
        }
        self.rate_limit = (args.qps, args.burst);
        self.request_timeout = args.request_timeout;
        if args.worker_limit > 0 {
            self.settings.worker_limit = Some(args.worker_limit);
        }
        self.grace_period = args.grace_period;
        #[cfg(feature = "admission")]
        self.apply_webhook_args(&args);
        if (args.metrics.is_some() || args.liveness.is_some()) && self.metrics.is_none() {
            self.metrics = Some(Metrics::new());
        }
        let endpoints = match &self.metrics {
            Some(metrics) => {
                serve::start(
                    args.liveness.clone().map(|l| (l.addr, l.path)),
                    args.metrics,
                    serve::Endpoints {
                        probes: self.probes(),
                        metrics: metrics.clone(),
                    },
                )
                .await?
            }
            None => Vec::new(),
        };
        // Listening for SIGINT/SIGTERM from now on (a task, polled at once), not from when
        // the watching starts: a stop signal that comes early still stops gracefully.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (grace, timeout) = (args.grace_period, args.shutdown_timeout);
        let signals = tokio::spawn(async move {
            stop_signal_then_deadline(grace, timeout).await;
            let _ = stop.send(());
        });
        let shutdown = async move {
            let _ = stopped.await;
        };
        let result = self.run_process(&args, &given, shutdown).await;
        signals.abort();
        for task in endpoints {
            task.abort();
        }
        result
    }

    /// Runs on the cluster, or with `--fake` on an embedded API server with the manifests of
    /// `args.apply` (`given`: those of the command line, for the messages).
    async fn run_process(
        self,
        args: &cli::RunArgs,
        given: &[std::path::PathBuf],
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        if !args.fake {
            let (client, url) = self.connect_to().await?;
            return self
                .run_until(client, shutdown)
                .await
                .map_err(|e| match (e, url) {
                    (Error::Watch(kopf_watch::WatchError::Discovery(error)), Some(url))
                        if !matches!(error, kube::Error::Api(_)) =>
                    {
                        Error::Unreachable {
                            url: url.to_string(),
                            cause: root_cause(&error),
                            error,
                        }
                    }
                    (e, _) => e,
                });
        }
        #[cfg(feature = "testing")]
        {
            let server = kopf_testing::FakeApiServer::start().await?;
            for m in &args.apply {
                let n = server.apply_file(m)?;
                tracing::info!("applied {n} object(s) from {}", m.display());
            }
            server.write_kubeconfig(&args.fake_kubeconfig)?;
            // The served resources, for kubectl (an in-process discovery: two requests).
            let all = kopf_watch::discover(&server.try_client()?)
                .await
                .unwrap_or_default();
            let get = cli::kubectl_get(&self.registrations, &all);
            tracing::info!(
                "Running against the embedded fake API server at {}. Point kubectl at it: KUBECONFIG={} {get}",
                server.url(),
                args.fake_kubeconfig.display()
            );
            let config = client_config(Some(&server.url()), self.inactivity_timeout).await?;
            let url = config.cluster_url.clone();
            let client = self.wrap_client_at(
                kube::Client::try_from(config).map_err(Error::Client)?,
                Some(&url),
            );
            let fake_manifests = self.fake_manifests.clone();
            let result = self.run_until(client, shutdown).await.map_err(|e| {
                cli::missing_crd(e, || {
                    cli::crd_fix(cli::Embedded::RunFake, given, &fake_manifests)
                })
            });
            server.shutdown().await;
            if args.fake_kubeconfig == cli::default_fake_kubeconfig() {
                cli::remove_fake_kubeconfig(&args.fake_kubeconfig);
            }
            result
        }
        #[cfg(not(feature = "testing"))]
        {
            Err(Error::NoFake)
        }
    }

    #[cfg(feature = "admission")]
    fn apply_webhook_args(&mut self, args: &cli::RunArgs) {
        let server = &mut self.admission.settings.server;
        if let Some(addr) = args.webhook_addr {
            server.addr = addr;
        }
        if let Some(port) = args.webhook_port {
            server.port = port;
        }
        if let Some(host) = &args.webhook_host {
            server.host = Some(host.clone());
        }
        if let (Some(cert), Some(key)) = (&args.webhook_cert, &args.webhook_key) {
            server.cert = Some((cert.clone(), key.clone()));
        }
        if let Some(ca) = &args.webhook_ca {
            server.ca = Some(ca.clone());
        }
        if let Some(name) = &args.webhook_managed {
            self.admission.settings.managed = Some(name.clone());
        }
    }

    /// Starts the webhook server when there are admission handlers or converters: one
    /// discovery (two requests) resolves their resources.
    #[cfg(feature = "admission")]
    async fn start_webhooks(
        &self,
        client: &kube::Client,
        activities: &kopf_core::activities::ActivityContext,
    ) -> Result<Option<kopf_admission::Running>, Error> {
        if self.admission.is_empty() {
            return Ok(None);
        }
        let discovered = kopf_watch::discover(client)
            .await
            .map_err(|e| Error::Webhooks(kopf_admission::SetupError::Discovery(e)))?;
        let running = self
            .admission
            .clone()
            .start(client.clone(), &discovered, activities.extensions.clone())
            .await?;
        Ok(Some(running))
    }

    /// Runs until SIGINT or SIGTERM.
    pub async fn run(self, client: kube::Client) -> Result<(), Error> {
        self.run_until(client, stop_signal()).await
    }

    /// Runs until `shutdown` completes: one discovery for all selectors, one watch per
    /// resource (per namespace when exact namespaces are served). Then handlers still
    /// running get the [grace period](Self::grace_period) to finish.
    pub async fn run_until(
        mut self,
        client: kube::Client,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        let activities = self.activity_context(Some(&client));
        let (end_grace, grace) = kopf_core::layers::GraceOver::new();
        self.settings.extensions.insert(grace);
        if let Some(metrics) = &self.metrics {
            self.settings.metrics = Some(metrics.clone());
            self.stack = self.stack.layer(MetricsLayer(metrics.clone()));
        }
        let grace_period = self.grace_period;
        let shutdown = async move {
            shutdown.await;
            tokio::spawn(async move {
                tokio::time::sleep(grace_period).await;
                tracing::warn!(
                    "The grace period of {}s is over: cancelling the handlers still running.",
                    grace_period.as_secs_f64()
                );
                end_grace.end();
            });
        };
        let mut shutdown = std::pin::pin!(shutdown);
        // Startup handlers run before any request of the operator's own.
        tokio::select! {
            biased;
            started = kopf_core::activities::run_startup(&self.startup, &activities) => started?,
            _ = &mut shutdown => return Ok(()),
        }
        #[cfg(feature = "admission")]
        let webhooks = match self.start_webhooks(&client, &activities).await {
            Ok(running) => running,
            Err(e) => {
                kopf_core::activities::run_cleanup(&self.cleanup, &activities).await;
                return Err(e);
            }
        };
        let mut settings = self.settings;
        settings.memo = Arc::new(self.memo);
        let mut registrations = self.registrations;
        if let Some(backoff) = self.default_backoff {
            for (i, (_, spec)) in registrations.iter_mut().enumerate() {
                if !self.explicit_backoffs.contains(&i) {
                    spec.backoff = backoff;
                }
            }
        }
        let served = kopf_watch::Orchestrator::new(client, registrations)
            .settings(settings)
            .persistence(self.persistence)
            .stack(self.stack)
            .wait_for_resources(self.wait_for_resources)
            .run(shutdown)
            .await;
        #[cfg(feature = "admission")]
        if let Some(webhooks) = webhooks {
            webhooks.stop().await;
        }
        kopf_core::activities::run_cleanup(&self.cleanup, &activities).await;
        served?;
        Ok(())
    }
}

/// `fake-apiserver`: the in-memory Kubernetes API server until SIGINT/SIGTERM. Prints
/// `listening on URL` on stdout once it serves (after the kubeconfig is written and the
/// manifests are applied).
pub async fn fake_apiserver(args: cli::FakeApiserverArgs) -> Result<(), Error> {
    #[cfg(feature = "testing")]
    {
        use std::io::Write;
        let (major, minor) = &args.kube_version;
        let server = kopf_testing::FakeApiServer::builder()
            .port(args.port)
            .version(major, minor)
            .history_limit(args.history_limit)
            .bookmark_interval(Duration::from_secs(args.bookmark_interval.max(1)))
            .crd_establish_delay(Duration::from_millis(args.crd_establish_delay_ms))
            .start()
            .await?;
        if let Some(path) = &args.kubeconfig {
            server.write_kubeconfig(path)?;
        }
        for file in &args.apply {
            let n = server.apply_file(file)?;
            tracing::info!("applied {n} object(s) from {}", file.display());
        }
        let mut out = format!("listening on {}\n", server.url());
        if let Some(path) = &args.kubeconfig {
            out.push_str(&format!(
                "kubeconfig written to {p}; try: KUBECONFIG={p} kubectl get namespaces\n",
                p = path.display()
            ));
        }
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(out.as_bytes())
            .and_then(|()| stdout.flush())
            .map_err(Error::Output)?;
        drop(stdout);
        stop_signal().await;
        server.shutdown().await;
        Ok(())
    }
    #[cfg(not(feature = "testing"))]
    {
        let _ = args;
        Err(Error::NoFake)
    }
}

/// The User-Agent of operators' requests (visible in API server audit logs).
pub const USER_AGENT: &str = concat!("kopf-rs/", env!("CARGO_PKG_VERSION"));

/// The client configuration operators use: the given URL (the embedded fake server), or
/// `KUBECONFIG` / `~/.kube/config` / the in-cluster service account; with a read timeout of
/// `inactivity`, so that a watch connection that went silent (no events, no bookmarks) is
/// reconnected, and [`USER_AGENT`]. kube's own retry of 429, 503 and 504 answers is off: it
/// is silent and slow to notice a recovered server; [`Operator::wrap_client`] retries
/// instead, visibly.
pub async fn client_config(url: Option<&str>, inactivity: Duration) -> Result<kube::Config, Error> {
    let mut config = match url {
        Some(url) => {
            let uri = url
                .parse()
                .map_err(|e| Error::Config(format!("the URL {url} is not valid: {e}")))?;
            kube::Config::new(uri)
        }
        None => infer_config().await?,
    };
    config.read_timeout = Some(inactivity);
    config.default_retry = false;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(config)
}

/// The configuration from `KUBECONFIG` (named in the error when it cannot be read),
/// `~/.kube/config`, or the in-cluster service account.
async fn infer_config() -> Result<kube::Config, Error> {
    const FIX: &str = "set KUBECONFIG to a valid kubeconfig, run inside a cluster, or try `run --fake` for an embedded API server";
    if let Some(paths) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
        for path in std::env::split_paths(&paths) {
            if let Err(e) = kube::config::Kubeconfig::read_from(&path) {
                return Err(Error::Config(format!(
                    "cannot read the kubeconfig {} (from KUBECONFIG): {}; {FIX}",
                    path.display(),
                    one_line(&e)
                )));
            }
        }
    }
    kube::Config::infer()
        .await
        .map_err(|e| Error::Config(format!("{}; {FIX}", one_line(&e))))
}

/// An error's message and, after it, the causes it does not already quote.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text = format!("{text}: {line}");
        }
        source = cause.source();
    }
    text
}

/// An error and its causes on one line (YAML errors come with a multi-line excerpt).
fn one_line(e: &dyn std::error::Error) -> String {
    with_causes(e)
        .lines()
        .map(str::trim)
        // Drop the excerpt lines of YAML errors (`-->`, `1 | text`, `  ^`).
        .filter(|l| {
            let gutter = l
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            !l.is_empty()
                && !l.starts_with("-->")
                && !gutter.starts_with('|')
                && !gutter.starts_with('^')
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The root cause of an error (e.g. "Connection refused (os error 111)").
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut last = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        last = cause.to_string();
        source = cause.source();
    }
    last
}

/// Completes on the first SIGINT/SIGTERM. From then on, a second signal exits the process
/// at once, and so does the end of `hard_timeout`.
async fn stop_signal_then_deadline(grace: Duration, hard_timeout: Duration) {
    stop_signal().await;
    tracing::info!(
        "Stopping: running handlers get {}s to finish; a second signal exits at once; the process exits within {}s.",
        grace.as_secs_f64(),
        hard_timeout.as_secs_f64()
    );
    // A thread, not a task: it fires even if the runtime is stuck.
    std::thread::spawn(move || {
        std::thread::sleep(hard_timeout);
        tracing::error!(
            "Still running {}s after the stop signal: exiting now.",
            hard_timeout.as_secs_f64()
        );
        std::process::exit(1);
    });
    tokio::spawn(async {
        stop_signal().await;
        tracing::warn!("A second stop signal: exiting at once.");
        std::process::exit(1);
    });
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("Stop requested; stopping.");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_debug_as_readable_lines() {
        let e = Error::Config("no kubeconfig".into());
        assert_eq!(
            format!("{e:?}"),
            "cannot configure the Kubernetes client: no kubeconfig"
        );
        let fake = Error::Watch(kopf_watch::WatchError::UnknownResource {
            selector: "kex2".into(),
            hint: "; similar: kopfexamples.kopf.dev/v1".into(),
        });
        assert_eq!(
            format!("{fake:?}"),
            "no served resource matches \"kex2\"; similar: kopfexamples.kopf.dev/v1; is its CustomResourceDefinition applied? (kubectl get crd)"
        );
    }
}
