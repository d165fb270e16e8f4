#![warn(missing_docs)]
//! # kopf
//!
//! Kubernetes operators in a few lines of Rust, with Kopf's handler model and wire format:
//! register handlers for resources, and the framework watches, detects causes from the
//! diff-base, runs the handlers with retries, keeps the finalizer, stores results in
//! `status.<handler-id>` and progress in annotations — with at most one PATCH per endpoint
//! per processing cycle.
//!
//! Handler arguments are extractors (the axum pattern): `Spec<T>`, `Name`, `Patch`, `Memo<T>`...
//! (the list, written once: [`handler`]). Handlers are `async fn`s, or plain `fn`s that run on
//! blocking threads. `use kopf::prelude::*;` brings what an operator needs; the rest is in
//! modules by purpose ([`handler`], [`reconcile`](mod@reconcile), [`conditions`],
//! [`webhooks`], [`peering`], [`persistence`], `testing` (with the feature of that name: dev
//! mode, off by default)...).
//!
//! ```no_run
//! use kopf::prelude::*;
//! use serde_json::{json, Value};
//!
//! async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
//!     kopf::tracing::info!("created {name} with field {}", spec["field"]);
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
//! use kopf::prelude::*;
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
//! use kopf::prelude::*;
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
//! use kopf::prelude::*;
//! use serde_json::json;
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
//! Several replicas of one operator coordinate: Kopf's peering ([`peering`],
//! [`PeeringMode`](peering::PeeringMode)), leader election on a Lease
//! ([`LeaderElection`](peering::LeaderElection)) or sharding ([`Sharding`](peering::Sharding));
//! see docs/replicas.md.

pub mod cli;
pub mod config;
pub mod handler;
pub mod logging;
#[cfg(feature = "otel")]
pub mod otel;
pub mod prelude;
pub mod registry;
#[cfg(feature = "testing")]
pub mod testing;

mod client;
mod crds;
mod embedded;
mod error;
mod fake;
mod login;
mod olm;
mod operator;
mod rbac;
mod running;
mod serve;
mod signals;
pub mod uninstall;

// The attribute macros expand to `::kopf::...` paths, also inside this crate's own tests.
extern crate self as kopf;

#[doc(hidden)]
pub use inventory;
/// Timestamps as handlers get them ([`Started`](handler::Started)'s `jiff::Timestamp`),
/// without a dependency of your own on `jiff`.
pub use jiff;
#[doc(hidden)]
pub use serde_json;
/// Logging, as handlers do it: `kopf::tracing::info!("...")` without a dependency of your own
/// on `tracing`. The operator's log output (`run --log-format`, `--verbose`) and the
/// per-object context of handlers' log lines come from kopf's subscriber.
pub use tracing;

// The root: the operator, its entry points, and what nearly every handler names. Everything
// else is in the modules below, grouped by purpose (the count of root items is kept at most
// 40 by `cargo xtask layout`).
pub use error::Error;
#[cfg(feature = "admission")]
pub use kopf_admission::AdmissionError;
pub use kopf_core::causes::Reason;
pub use kopf_core::daemons::{DaemonOptions, TimerOptions};
pub use kopf_core::handler::{
    Cause, HandlerError, HandlerResult, Options, PermanentError, TemporaryError,
};
pub use kopf_core::reconcile::{Action, ReconcileContext};
pub use kopf_watch::Selector;
pub use operator::{Operator, Reconciler};
pub use running::run;

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
/// | [`index`](on::index) | `@kopf.index` | an in-memory index, read with [`Index<K, V>`](crate::handler::Index) |
/// | [`event`](on::event) | `@kopf.on.event` | a raw watch-event handler |
/// | [`startup`](on::startup), [`cleanup`](on::cleanup), [`probe`](on::probe) | `@kopf.on.startup`, ... | operator activities |
/// | [`login`](on::login) | `@kopf.on.login` | the operator's credentials |
/// | `validate`, `mutate` | `@kopf.on.validate`, ... | admission handlers (feature `admission`) |
/// | `convert` | – | a CRD's conversion webhook (feature `admission`) |
/// | [`kopf::reconcile`](macro@crate::reconcile) (at the root) | – | a level-triggered reconcile ([`Operator::reconcile_with`]) |
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
/// use kopf::prelude::*;
/// use serde_json::{json, Value};
///
/// #[kopf::on::create("kopfexamples", labels("tier" = "gold", skip = absent), retries = 3, timeout = 60)]
/// async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
///     Ok(json!({"message": format!("hello {name}: {}", spec["field"])})) // status.create_fn
/// }
///
/// #[kopf::on::update("kopfexamples", field = "spec.field", new = present, backoff = 1.5)]
/// async fn field_set(New(new): New) -> Result<(), HandlerError> {
///     kopf::tracing::info!("spec.field is now {new:?}");
///     Ok(())
/// }
///
/// /// A plain `fn`: it runs on a blocking thread.
/// #[kopf::on::field("kopfexamples", field = "spec.items", errors = "permanent")]
/// fn items_changed(Old(old): Old, New(new): New) -> Result<(), HandlerError> {
///     kopf::tracing::info!("spec.items: {old:?} -> {new:?}");
///     Ok(())
/// }
///
/// #[kopf::on::delete("kopfexamples", optional)]
/// async fn delete_fn(Name(name): Name) -> Result<(), HandlerError> {
///     kopf::tracing::info!("{name} is gone");
///     Ok(())
/// }
///
/// #[kopf::on::resume("kopfexamples", deleted, when = has_spec)]
/// async fn resume_fn(Name(name): Name) -> Result<(), HandlerError> {
///     kopf::tracing::info!("{name} was there before the operator started");
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
/// use kopf::prelude::*;
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
///         kopf::tracing::info!("{name} is still there");
///     }
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Indexes and raw events
///
/// ```no_run
/// use kopf::prelude::*;
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
///     kopf::tracing::info!("{name}: {}", event.as_deref().unwrap_or("listed"));
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Activities
///
/// ```no_run
/// use kopf::prelude::*;
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
///     kopf::tracing::info!("bye");
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
/// use kopf::prelude::*;
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
        cleanup, create, daemon, delete, event, field, index, log, login, probe, resume, startup,
        timer, update,
    };
    #[cfg(feature = "admission")]
    pub use kopf_macros::{convert, mutate, validate};
}

/// # Example
///
/// ```no_run
/// use std::sync::Arc;
/// use kopf::prelude::*;
/// use serde_json::{Value, json};
///
/// /// Makes the world look like `obj.spec` says, whatever changed.
/// #[kopf::reconcile(
///     "kopfexamples",
///     owns = ["configmaps"],
///     debounce = "1s",
///     concurrency = 8,
///     timeout = 30,
///     backoff = "1s..300s",
///     cleanup = remove_children,
/// )]
/// async fn reconcile(obj: Arc<Value>, ctx: ReconcileContext) -> Result<Action, HandlerError> {
///     ctx.patch().merge(json!({"status": {"seen": obj["spec"]["field"]}}));
///     Ok(Action::await_change())
/// }
///
/// async fn remove_children(obj: Arc<Value>, _ctx: ReconcileContext) -> Result<(), HandlerError> {
///     Ok(())
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), kopf::Error> {
///     kopf::run!().await
/// }
/// ```
pub use kopf_macros::reconcile;

/// The conditions of objects (`status.conditions`): the [`Conditions`](conditions::Conditions) extractor, the
/// operator's default and automatic ones ([`ConditionsSpec`](conditions::ConditionsSpec), `Operator::conditions`), and
/// typed conditions for a status struct. See docs/conditions.md.
pub mod conditions {
    /// # In a typed status
    ///
    /// `Condition` and [`ConditionStatus`] implement `schemars::JsonSchema` (schemars 1, as kube's
    /// `derive` uses), so the status of a `#[derive(CustomResource)]` can hold the conditions
    /// the handlers set, typed, and its CRD declares them (a structural schema: every field
    /// typed, the five required ones, `metav1.Condition`'s lengths and patterns).
    /// [`list_schema`] adds the list's map semantics (keyed by `type`):
    ///
    /// ```
    /// use kopf::conditions::Condition;
    /// use kube::{CustomResource, CustomResourceExt};
    /// use schemars::JsonSchema;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
    /// #[kube(group = "example.com", version = "v1", kind = "Database", namespaced,
    ///        status = "DatabaseStatus")]
    /// pub struct DatabaseSpec {
    ///     pub size: String,
    /// }
    ///
    /// #[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
    /// pub struct DatabaseStatus {
    ///     /// Set by the handlers through the `Conditions` extractor.
    ///     #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ///     #[schemars(schema_with = "kopf::conditions::list_schema")]
    ///     pub conditions: Vec<Condition>,
    /// }
    ///
    /// # fn main() -> Result<(), serde_json::Error> {
    /// let crd = serde_json::to_value(Database::crd())?;
    /// let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    /// let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    /// assert_eq!(conditions["x-kubernetes-list-type"], "map");
    /// assert_eq!(conditions["x-kubernetes-list-map-keys"][0], "type");
    /// let fields = &conditions["items"]["properties"];
    /// for field in ["type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"] {
    ///     assert!(fields[field]["type"].is_string(), "{field} is typed: {fields}");
    /// }
    /// assert_eq!(fields["status"]["enum"], serde_json::json!(["True", "False", "Unknown"]));
    ///
    /// // The handlers' conditions, read back typed:
    /// let status: DatabaseStatus = serde_json::from_value(serde_json::json!({"conditions": [
    ///     {"type": "Ready", "status": "True", "reason": "Created", "message": "",
    ///      "lastTransitionTime": "2024-05-06T07:08:09Z", "observedGeneration": 1},
    /// ]}))?;
    /// assert_eq!(status.conditions[0].status, kopf::conditions::ConditionStatus::True);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Without [`list_schema`], a plain `Vec<Condition>` is declared as a list of the
    /// same items (an atomic list). See docs/conditions.md.
    pub use kopf_core::conditions::Condition;
    /// The schema of a `Vec<`[`Condition`]`>` as the API conventions declare
    /// `status.conditions`: map semantics keyed by `type` (`x-kubernetes-list-type: map`).
    /// For a field of a status type: `#[schemars(schema_with = "kopf::conditions::list_schema")]`
    /// (see [`Condition`]).
    pub use kopf_core::conditions::list_schema;
    pub use kopf_core::conditions::{AutoConditions, ConditionStatus, Conditions, ConditionsSpec};
}

/// The level-triggered model: a [`Reconciler`] per resource, what its function gets
/// ([`ReconcileContext`]) and answers ([`Action`]), what wakes it ([`Trigger`](reconcile::Trigger), [`ObjectRef`](reconcile::ObjectRef)
/// of owned and related objects) and its [`Backoff`](reconcile::Backoff). The attribute macro of the same name,
/// [`#[kopf::reconcile]`](macro@crate::reconcile), registers one. See docs/reconcile.md.
pub mod reconcile {
    pub use crate::operator::Reconciler;
    pub use kopf_core::reconcile::{
        Action, Backoff, ObjectRef, ReconcileConfig, ReconcileContext, Trigger, Triggers,
    };
}

/// Where the operator keeps its state on objects (Kopf's storages: progress in annotations
/// or the status, the diff-base) and how a cycle picks its handlers. See docs/persistence.md.
pub mod persistence {
    pub use kopf_core::processing::{Lifecycle, Persistence};
    pub use kopf_core::progress::{ProgressLocation, ProgressStorage};
    pub use kopf_diff::essence::DiffBaseLocation;
}

/// The handler call as a `tower` service, for user layers around every handler call
/// (`Operator::layer`).
pub mod layers {
    pub use crate::operator::HandlerLayer;
    pub use kopf_core::layers::{
        Attempt, AttemptService, CallOutcome, HandlerCall, HandlerService,
    };
}

/// The operator's metrics and watch health (`Operator::metrics`, `run --metrics`), and the
/// layer that counts handler calls.
pub mod metrics {
    pub use kopf_core::metrics::{Metrics, MetricsLayer};
}

/// Several replicas of one operator: Kopf's peering (its settings, the peering resources
/// `PEERING_YAML`, and the `freeze`, `resume` and `peers` operations of the `kopf` command),
/// leader election on a Lease, sharding, and the operator's [`Gate`](peering::Gate) that they control.
/// See docs/replicas.md.
pub mod peering {
    pub use kopf_core::gate::{Gate, GateControl, GateState};
    pub use kopf_peering::*;
}

/// Admission and conversion webhooks (feature `admission`): everything of `kopf-admission`
/// (the handlers' extractors and errors, the server, the managed configurations,
/// reviews...). See docs/webhooks.md.
#[cfg(feature = "admission")]
pub mod webhooks {
    pub use kopf_admission::*;
}

/// Which resources handlers are for: a [`Selector`] (by plural, by type, by group...) and
/// a resource as discovery describes it.
pub mod resources {
    pub use kopf_watch::{Discovered, Selector};
}

/// Making objects children of others: owner references, names, namespaces and labels from
/// the owner (`adopt`), on `serde_json::Value` bodies and typed resources alike.
pub mod hierarchy {
    pub use kopf_core::hierarchy::*;
}

/// Kopf's diffs: items of `add`/`change`/`remove` with a path, old and new values.
pub mod diff {
    pub use kopf_diff::{Diff, DiffItem, Op, diff, reduce, resolve};
}

/// What the attribute macros expand to, apart from the public paths: not an API.
#[doc(hidden)]
pub mod __private {
    #[cfg(feature = "admission")]
    pub use kopf_admission::{Converter, Operation, WebhookKind, WebhookOptions};
    pub use kopf_core::extract::IntoHandler;
    pub use kopf_core::handler::{ErrorsMode, FieldFilter, HandlerSpec, MetaFilter};
    pub use kopf_core::reconcile::Backoff;
    pub use kopf_watch::LogSpec;
}
