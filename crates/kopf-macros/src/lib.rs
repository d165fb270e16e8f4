#![warn(missing_docs)]
//! Attribute macros of kopf-rs. Use them as `#[kopf::on::create("kopfexamples")]` (the
//! `kopf` crate re-exports them as `kopf::on::*`, where each has an example); each registers
//! the function for `kopf::run()` / `Operator::from_registry()`.
//!
//! `#[kopf::reconcile("kopfexamples")]` (at the crate's root, not under `on`) registers a
//! level-triggered reconcile.
//!
//! Handlers of objects take the resource first (a string literal), then Kopf's options, all
//! optional; activities (`startup`, `cleanup`, `probe`, `login`) take no resource;
//! `convert` takes the CRD's name. Which options each macro takes:
//!
//! | option | macros | meaning |
//! |---|---|---|
//! | `id = "name"` | all but `login`, `convert` | the handler id (default: the function's name) |
//! | `labels("key" = "value", other = present, "skip" = absent, "x" = some_fn)` | object handlers | label filters; keys are string literals or plain identifiers |
//! | `annotations(...)` | object handlers | annotation filters, same forms |
//! | `when = some_fn` | object handlers | `fn(&serde_json::Value) -> bool` on the whole object |
//! | `field = "spec.x"` | object handlers | the field (mandatory for `field`; restricts changing handlers to it; a presence filter for the others) |
//! | `value = "x"` / `present` / `absent` / `some_fn` | object handlers (with `field`) | the field's value must pass |
//! | `old = ...`, `new = ...` | `update`, `field` (with `field`) | the old/new value must pass |
//! | `retries = 3` | changing handlers, `timer`, `daemon`, `startup` | attempts |
//! | `timeout = 60`, `backoff = 1.5` | changing handlers, `timer`, `daemon`, `startup` (`timeout`: also `cleanup`, `probe`) | seconds |
//! | `errors = "temporary" \| "permanent" \| "ignored"` | changing handlers, `timer`, `daemon`, `index`, `startup` | arbitrary errors mode |
//! | `optional` | `delete` | no finalizer |
//! | `deleted` | `resume` | also objects being deleted |
//! | `interval`, `initial_delay`, `idle` (seconds), `sharp` | `timer` | Kopf's timer options |
//! | `initial_delay`, `cancellation_backoff`, `cancellation_timeout`, `cancellation_polling` (seconds) | `daemon` | Kopf's daemon options (`timer`: `cancellation_timeout` too) |
//! | `reads = "spec.x"` / `reads = ["spec.x", "data"]` | `timer`, `daemon` | what it reads: only that (with metadata and status) is kept of each object for it |
//! | `operations = ["CREATE", ...]`, `operation`, `subresource`, `persistent`, `side_effects`, `ignore_failures` | `validate`, `mutate` | admission options |
//! | `owns = [...]`, `watches(...)`, `cleanup = some_fn`, `debounce`, `concurrency`, `timeout`, `backoff = "1s..300s"` | `reconcile` | the reconcile's options (see `reconcile`) |
//!
//! Seconds are integers or floats (`timeout = 60`, `backoff = 1.5`); flags are written alone
//! (`sharp`) or as `sharp = true`. Handlers are `async fn`s or plain `fn`s (these run on
//! blocking threads).

mod args;
mod errors;
mod generate;
mod kind;
mod reconcile;
mod syntax;
mod values;

use proc_macro::TokenStream;

use crate::generate::expand;
use crate::kind::Kind;

/// Registers a creation handler (Kopf's `@kopf.on.create`):
/// `#[kopf::on::create("kopfexamples")]`.
///
/// Options: `id`, `labels(...)`, `annotations(...)`, `when`, `field`, `value`, `retries`,
/// `timeout`, `backoff`, `errors`.
#[proc_macro_attribute]
pub fn create(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Create)
}

/// Registers an update handler (Kopf's `@kopf.on.update`):
/// `#[kopf::on::update("kopfexamples")]`.
///
/// Options: those of `create`, and with a `field`, `old = ...` / `new = ...` filters on the
/// values before and after the change.
#[proc_macro_attribute]
pub fn update(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Update)
}

/// Registers a deletion handler (Kopf's `@kopf.on.delete`):
/// `#[kopf::on::delete("kopfexamples")]`. It holds a finalizer on the objects it matches,
/// unless it is `optional`.
///
/// Options: those of `create`, and `optional`.
#[proc_macro_attribute]
pub fn delete(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Delete)
}

/// Registers a resume handler (Kopf's `@kopf.on.resume`): it runs for the objects found
/// when the operator starts. `#[kopf::on::resume("kopfexamples")]`.
///
/// Options: those of `create`, and `deleted` (also objects being deleted).
#[proc_macro_attribute]
pub fn resume(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Resume)
}

/// Registers a field handler (Kopf's `@kopf.on.field`): it runs when the field changes
/// (also on creation when set). `#[kopf::on::field("kopfexamples", field = "spec.x")]`; its
/// id is `<id>/<field>`.
///
/// Options: `field` (mandatory), and those of `update`.
#[proc_macro_attribute]
pub fn field(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Field)
}

/// Registers a timer (Kopf's `@kopf.timer`): called for each matching object every
/// `interval` seconds, for as long as the object exists and matches.
/// `#[kopf::on::timer("kopfexamples", interval = 60)]`. Its result goes to
/// `status.<id>` after each call; it can ask for the `Stopped` flag.
///
/// Options:
/// * `interval = 60` (seconds): the period (without it, the timer is called once, or once
///   per `idle` period);
/// * `initial_delay = 5`: wait this long after the object appears;
/// * `idle = 10`: call only once the object has been unchanged this long;
/// * `sharp` / `sharp = true`: align calls to the interval, whatever their durations;
/// * `cancellation_timeout = 5`: on a stop request, wait this long for a running call;
/// * filters: `id`, `labels(...)`, `annotations(...)`, `when`, `field` (with `value`: a
///   filter on the field's value; the id becomes `<id>/<field>`);
/// * `reads = "spec.schedule"` or a list: what it reads, when its arguments do not say it
///   (a `Body` or `Cause` argument); only that, the metadata and the status are kept of each
///   object for it (`Options::reads`);
/// * `retries`, `timeout`, `backoff`, `errors`.
#[proc_macro_attribute]
pub fn timer(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Timer)
}

/// Registers a daemon (Kopf's `@kopf.daemon`): called once for each matching object and
/// left running for as long as it likes; it is asked to stop (its `Stopped` argument) when
/// the object is deleted or stops matching, or the operator exits.
/// `#[kopf::on::daemon("kopfexamples")]`.
///
/// Options:
/// * `initial_delay = 5` (seconds): wait this long after the object appears;
/// * `cancellation_backoff = 1`: after the stop request, time to exit on its own before
///   being cancelled;
/// * `cancellation_timeout = 10`: then, how long to wait for the cancelled daemon before
///   abandoning it (without it: as long as it takes);
/// * `cancellation_polling = 60`: without a timeout, how often to warn that it still runs;
/// * filters: `id`, `labels(...)`, `annotations(...)`, `when`, `field` (with `value`; the
///   id becomes `<id>/<field>`);
/// * `reads = "spec.schedule"` or a list: as for timers;
/// * `retries`, `timeout`, `backoff`, `errors`.
#[proc_macro_attribute]
pub fn daemon(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Daemon)
}

/// Registers an index (Kopf's `@kopf.index`): the function returns key/value pairs for
/// each object (a map, a vector of pairs, a pair, or an `Option` of one), and every handler
/// reads them with an `Index<K, V>` argument of the same key and value types.
/// `#[kopf::on::index("kopfexamples")]`.
///
/// Options: `id` (the index's name for `Indexes::get`), `labels(...)`, `annotations(...)`,
/// `when`, `field` (with `value`: a filter on the field's value), `errors` (default
/// `"ignored"`: an error keeps the object's previous entries).
#[proc_macro_attribute]
pub fn index(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Index)
}

/// Registers a raw event handler (Kopf's `@kopf.on.event`): called for every watch event
/// of matching objects (its `EventType` argument tells which), with no state kept and no
/// finalizer; its errors are logged and ignored. `#[kopf::on::event("kopfexamples")]`.
///
/// Options: `id`, `labels(...)`, `annotations(...)`, `when`, `field` (with `value`; the id
/// becomes `<id>/<field>`).
#[proc_macro_attribute]
pub fn event(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Event)
}

/// Registers a pod-log handler: called for each line of matching Pods' container logs that
/// the regex finds a match in, with its `LogLine` and `Captures` arguments (see
/// `Operator::on_log`). The regex is checked when the code compiles.
/// `#[kopf::on::log("pods", regex = r"accuracy=(?P<acc>\d+\.\d+)")]`.
///
/// Options: `regex` (required), `containers = ["main"]`, `from_start`, `idle_timeout`
/// (seconds), `id`, `labels(...)`, `annotations(...)`, `when`, `owner`,
/// `controller_owner`, `owner_when`.
#[proc_macro_attribute]
pub fn log(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Log)
}

/// Registers a startup handler (Kopf's `@kopf.on.startup`): all of them run, and must
/// succeed, before anything is watched (temporary errors are retried); a permanent failure
/// stops the operator. What they put in the operator's `Memo<T>` is what objects start
/// from. `#[kopf::on::startup]`.
///
/// Options: `id`, `retries`, `timeout`, `backoff`, `errors`.
#[proc_macro_attribute]
pub fn startup(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Startup)
}

/// Registers a cleanup handler (Kopf's `@kopf.on.cleanup`): it runs once when the operator
/// exits, after every resource has stopped; errors are logged. `#[kopf::on::cleanup]`.
///
/// Options: `id`, `timeout`.
#[proc_macro_attribute]
pub fn cleanup(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Cleanup)
}

/// Registers a probe handler (Kopf's `@kopf.on.probe`): its result is reported under its id
/// by the liveness endpoint (`run --liveness`) and `Operator::probes()`.
/// `#[kopf::on::probe]` or `#[kopf::on::probe(id = "objects")]`.
///
/// Options: `id`, `timeout`.
#[proc_macro_attribute]
pub fn probe(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Probe)
}

/// Registers a login handler (Kopf's `@kopf.on.login`): a function of no arguments
/// returning `Result<kube::Config, E>` (`E: Into<HandlerError>`); the operator connects
/// with that configuration instead of the kubeconfig, and calls it again after a 401
/// Unauthorized. With several, they are tried in source order until one succeeds.
/// `#[kopf::on::login]`, without options. Not used by `run --fake`.
#[proc_macro_attribute]
pub fn login(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Login)
}

/// Registers the conversion webhook of a CRD (as `Operator::on_convert`; Kopf has none): a
/// function
/// `fn(serde_json::Value, &str) -> Result<serde_json::Value, E>` (`E: Display`) that
/// returns the object in the version given (e.g. `"v2"`); the framework sets its
/// `apiVersion`. `#[kopf::on::convert("kopfexamples.kopf.dev")]`: the CRD's name, and no
/// options.
#[proc_macro_attribute]
pub fn convert(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Convert)
}

/// Registers a validating admission handler (Kopf's `@kopf.on.validate`):
/// `#[kopf::on::validate("kopfexamples")]`.
///
/// Options: `operations = ["CREATE", "UPDATE"]` (or one `operation`), `subresource =
/// "status"`, `id`, `labels(...)`, `annotations(...)`, `field`, `value`, `when`,
/// `persistent`, `side_effects`, `ignore_failures`.
#[proc_macro_attribute]
pub fn validate(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Validate)
}

/// Registers a mutating admission handler (Kopf's `@kopf.on.mutate`):
/// `#[kopf::on::mutate("kopfexamples")]`, with the options of `validate`.
#[proc_macro_attribute]
pub fn mutate(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Mutate)
}

/// Registers a level-triggered reconcile (as `Operator::reconcile_with`; Kopf has none):
/// an `async fn(Arc<K>, ReconcileContext) -> Result<Action, E>` (`K`: any type the object
/// deserializes into; `E: Into<HandlerError>`) called once for every object at start, after
/// every change of it or of the objects it owns or watches, and when its `Action` asks.
/// `#[kopf::reconcile("kopfexamples", owns = ["configmaps"])]`; its id is the function's
/// name.
///
/// Options:
/// * `id = "name"`: its id (logs, metrics; its cleanup's id is `<id>/cleanup`);
/// * `owns = ["configmaps", "deployments.apps"]` (or one string): objects of these
///   resources whose ownerReferences name an object trigger its reconcile;
/// * `watches("secrets" = secret_owners)`: objects of these resources trigger the
///   reconcile of the objects their mapper, a `fn(&T) -> Vec<kopf::reconcile::ObjectRef>`, names;
/// * `cleanup = remove_children`: an `async fn(Arc<K>, ReconcileContext) -> Result<(), E>`
///   run when an object is deleted, behind the operator's finalizer;
/// * `debounce = "500ms"`, `timeout = 30`: durations, as seconds (integers or floats) or
///   strings with a unit (`"500ms"`, `"30s"`, `"5m"`, `"1h"`);
/// * `concurrency = 8`: at most this many reconciles of the resource at once;
/// * `backoff = "1s..300s"`: failed reconciles are retried after delays doubling from the
///   first up to the second (bare numbers are seconds).
#[proc_macro_attribute]
pub fn reconcile(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Reconcile)
}
