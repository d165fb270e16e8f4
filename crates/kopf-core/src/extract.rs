//! Extractor arguments for handlers (the axum pattern): a handler is any async function whose
//! arguments implement [`FromCause`] and whose result implements [`IntoHandlerResult`].
//!
//! ```
//! use kopf_core::extract::{IntoHandler, Name, Spec};
//! use kopf_core::handler::HandlerError;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct ExampleSpec { field: String }
//!
//! async fn create_fn(Spec(spec): Spec<ExampleSpec>, Name(name): Name) -> Result<serde_json::Value, HandlerError> {
//!     Ok(serde_json::json!({"message": format!("{name}: {}", spec.field)}))
//! }
//!
//! let handler = create_fn.into_handler();
//! # let _ = handler;
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::causes::Reason;
use crate::daemons::stopped::Stopped;
use crate::handler::context::{EventsHandle, PatchHandle};
use crate::handler::error::{HandlerError, HandlerResult};
use crate::handler::options::Options;
use crate::handler::owners::OwnerRef;
use crate::handler::spec::{BoxFuture, Cause, Handler, HandlerSpec, SubHandlers};
use crate::index::{Index, Indexes};
use crate::memo::Memo;
use crate::reads::Reads;

pub use crate::handler::error::{PermanentError, TemporaryError};

/// Builds a handler argument from the cause (the list of extractors, which the note below
/// repeats, is `crates/kopf/src/extractors.md`; `cargo xtask layout` checks both). A failure is a permanent error of the handler
/// (the object does not fit the type it asks for; retrying would not help).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a handler argument",
    label = "not an extractor",
    note = "handler arguments are extractors: Spec<T>, Status<T>, Body, Meta, Name, Namespace, Uid, Owner, Owners, Labels, Annotations, Diff, Old<T>, New<T>, Reason, Retry, Started, Runtime, Patch, Events, Logger, Memo<T>, Index<K, V>, Indexes, Stopped, EventType, SubHandlers, Conditions, Client, LogLine, Captures, Operation, DryRun, UserInfo, SubResource, Warnings, or the whole Cause (the list: kopf::handler)"
)]
pub trait FromCause: Sized + Send + 'static {
    /// Extracts the value.
    fn from_cause(cause: &Cause) -> Result<Self, HandlerError>;

    /// What of the object it reads: the engine keeps, for a resource's daemons and timers,
    /// only what their arguments read ([`crate::reads`]). By default the whole object; an
    /// extractor of one's own that reads only the metadata or the status returns
    /// [`Reads::nothing`].
    fn reads() -> Reads {
        Reads::whole(std::any::type_name::<Self>())
    }
}

fn typed<T: DeserializeOwned>(v: &Value, what: &str) -> Result<T, HandlerError> {
    serde_json::from_value(v.clone()).map_err(|e| {
        HandlerError::permanent(format!(
            "the object's {what} does not fit the handler's type: {e}"
        ))
    })
}

impl FromCause for Cause {
    fn reads() -> Reads {
        Reads::whole("its argument Cause")
    }

    fn from_cause(cause: &Cause) -> Result<Self, HandlerError> {
        Ok(cause.clone())
    }
}

/// The whole object.
#[derive(Debug, Clone)]
pub struct Body(pub Value);
impl FromCause for Body {
    fn reads() -> Reads {
        Reads::whole("its argument Body")
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Body(c.body.clone()))
    }
}

/// `spec`, deserialized into `T` (`Value` for untyped access). A spec that does not fit
/// `T` fails the handler (by its errors mode) with serde's message.
///
/// ```
/// use kopf_core::extract::Spec;
/// use kopf_core::handler::HandlerError;
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Size { replicas: u32 }
///
/// // Typed:
/// async fn scale(Spec(size): Spec<Size>) -> Result<u32, HandlerError> {
///     Ok(size.replicas * 2)
/// }
/// // Untyped (a serde_json::Value):
/// async fn show(Spec(spec): Spec) -> Result<String, HandlerError> {
///     Ok(spec["field"].to_string())
/// }
/// # let _ = (scale, show);
/// ```
#[derive(Debug, Clone)]
pub struct Spec<T = Value>(pub T);
impl<T: DeserializeOwned + Send + 'static> FromCause for Spec<T> {
    /// The fields of `T` under `spec`, or the whole `spec` when `T` is not a plain struct.
    fn reads() -> Reads {
        Reads::fields_of::<T>("spec")
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        typed(c.body.get("spec").unwrap_or(&Value::Null), "spec").map(Spec)
    }
}

/// `status`, deserialized into `T`.
#[derive(Debug, Clone)]
pub struct Status<T = Value>(pub T);
impl<T: DeserializeOwned + Send + 'static> FromCause for Status<T> {
    /// The status is always kept.
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        typed(c.body.get("status").unwrap_or(&Value::Null), "status").map(Status)
    }
}

/// `metadata`.
#[derive(Debug, Clone)]
pub struct Meta(pub Value);
impl FromCause for Meta {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Meta(c.body.get("metadata").cloned().unwrap_or(Value::Null)))
    }
}

/// `metadata.name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name(pub String);
impl FromCause for Name {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Name(c.name().to_string()))
    }
}

/// `metadata.namespace` (None for cluster-scoped objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace(pub Option<String>);
impl FromCause for Namespace {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Namespace(c.namespace().map(str::to_string)))
    }
}

/// `metadata.uid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uid(pub String);
impl FromCause for Uid {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Uid(c
            .body
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()))
    }
}

/// The object's owner: its controller (the owner reference marked `controller: true`),
/// else its first owner reference. An object without owners fails the handler for good
/// (register it with an owner filter, `Options::owner`, so that it only runs for owned
/// objects). Use [`Owners`] to see them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner(pub OwnerRef);
impl FromCause for Owner {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        let owners = OwnerRef::all(&c.body);
        owners
            .iter()
            .find(|o| o.controller)
            .or(owners.first())
            .cloned()
            .map(Owner)
            .ok_or_else(|| {
                HandlerError::permanent(format!(
                    "{:?} has no owner references (an `Owner` argument needs one: filter the handler with an owner filter)",
                    c.name()
                ))
            })
    }
}

/// All of the object's owner references, in their order (empty when it has none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners(pub Vec<OwnerRef>);
impl FromCause for Owners {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Owners(OwnerRef::all(&c.body)))
    }
}

fn string_map(c: &Cause, field: &str) -> BTreeMap<String, String> {
    c.body
        .pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.labels` (empty when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(pub BTreeMap<String, String>);
impl FromCause for Labels {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Labels(string_map(c, "labels")))
    }
}

/// `metadata.annotations` (empty when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotations(pub BTreeMap<String, String>);
impl FromCause for Annotations {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Annotations(string_map(c, "annotations")))
    }
}

/// The diff (relative to the field for field handlers).
#[derive(Debug, Clone)]
pub struct Diff(pub kopf_diff::Diff);
impl FromCause for Diff {
    fn reads() -> Reads {
        Reads::whole("its argument Diff")
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Diff(c.diff.clone()))
    }
}

/// The old value (the field's for field handlers), deserialized; None when absent.
#[derive(Debug, Clone)]
pub struct Old<T = Value>(pub Option<T>);
impl<T: DeserializeOwned + Send + 'static> FromCause for Old<T> {
    fn reads() -> Reads {
        Reads::whole("its argument Old")
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        c.old
            .as_ref()
            .map(|v| typed(v, "old value"))
            .transpose()
            .map(Old)
    }
}

/// The new value (the field's for field handlers), deserialized; None when absent.
#[derive(Debug, Clone)]
pub struct New<T = Value>(pub Option<T>);
impl<T: DeserializeOwned + Send + 'static> FromCause for New<T> {
    fn reads() -> Reads {
        Reads::whole("its argument New")
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        c.new
            .as_ref()
            .map(|v| typed(v, "new value"))
            .transpose()
            .map(New)
    }
}

impl FromCause for Reason {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(c.reason)
    }
}

/// Attempts before this one (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry(pub u32);
impl FromCause for Retry {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Retry(c.retry))
    }
}

/// When the first attempt started; displayed in Kopf's format
/// (`2026-11-22T05:04:57.126136+00:00`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started(pub jiff::Timestamp);

impl std::fmt::Display for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::progress::format_time(self.0))
    }
}

impl std::fmt::Display for Retry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3}s", self.0.as_secs_f64())
    }
}
impl FromCause for Started {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Started(
            crate::progress::parse_time(&c.started).unwrap_or_else(crate::clock::now),
        ))
    }
}

/// Time since the first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runtime(pub Duration);
impl FromCause for Runtime {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        let started = crate::progress::parse_time(&c.started).unwrap_or_else(crate::clock::now);
        let ms = (crate::clock::now().as_millisecond() - started.as_millisecond()).max(0) as u64;
        Ok(Runtime(Duration::from_millis(ms)))
    }
}

impl FromCause for PatchHandle {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(c.patch.clone())
    }
}

impl FromCause for EventsHandle {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(c.events.clone())
    }
}

impl FromCause for SubHandlers {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(c.subhandlers.clone())
    }
}

/// The object's memo value of type `T` (registered operator-wide with `Operator::memo`; each
/// object has its own copy, kept while the operator runs).
impl<T: Send + Sync + 'static> FromCause for Memo<T> {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        c.memo
            .get::<T>()
            .map_err(|e| HandlerError::permanent(e.to_string()))
    }
}

/// The watch event type, for raw event handlers (`on_event`): None for objects of the
/// initial listing, else `ADDED`, `MODIFIED` or `DELETED`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventType(pub Option<String>);
impl FromCause for EventType {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(EventType(c.event.clone()))
    }
}

/// The stop flag of a daemon or timer; other handlers cannot ask for it.
impl FromCause for Stopped {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        c.stopped.clone().ok_or_else(|| {
            HandlerError::permanent(
                "only daemons and timers can ask for `Stopped`: this handler is neither",
            )
        })
    }
}

/// All indexes of the operator (for picking one by id).
impl FromCause for Indexes {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(cause: &Cause) -> Result<Self, HandlerError> {
        Ok(cause
            .extensions
            .get::<Indexes>()
            .cloned()
            .unwrap_or_default())
    }
}

/// The one index of types `K` → `V`; a missing or ambiguous one fails the handler for good.
impl<K: Send + 'static, V: Send + 'static> FromCause for Index<K, V> {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(cause: &Cause) -> Result<Self, HandlerError> {
        Indexes::from_cause(cause)?
            .find::<K, V>()
            .map_err(|e| HandlerError::permanent(e.to_string()))
    }
}

/// A logger for the object being handled: every line carries its namespace, name, kind and
/// uid, as the framework's own lines about the object do (target `kopf.objects`, as Kopf's
/// per-object logger).
#[derive(Debug, Clone)]
pub struct Logger {
    namespace: String,
    name: String,
    kind: String,
    uid: String,
}

impl Logger {
    /// A logger for an object.
    pub fn for_body(body: &Value) -> Self {
        let field = |pointer: &str| {
            body.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        Logger {
            namespace: field("/metadata/namespace"),
            name: field("/metadata/name"),
            kind: field("/kind"),
            uid: field("/metadata/uid"),
        }
    }

    /// Logs at debug level.
    pub fn debug(&self, message: impl std::fmt::Display) {
        tracing::debug!(target: "kopf.objects", namespace = %self.namespace, name = %self.name, kind = %self.kind, uid = %self.uid, "{message}");
    }

    /// Logs at info level.
    pub fn info(&self, message: impl std::fmt::Display) {
        tracing::info!(target: "kopf.objects", namespace = %self.namespace, name = %self.name, kind = %self.kind, uid = %self.uid, "{message}");
    }

    /// Logs at warning level.
    pub fn warn(&self, message: impl std::fmt::Display) {
        tracing::warn!(target: "kopf.objects", namespace = %self.namespace, name = %self.name, kind = %self.kind, uid = %self.uid, "{message}");
    }

    /// Logs at error level.
    pub fn error(&self, message: impl std::fmt::Display) {
        tracing::error!(target: "kopf.objects", namespace = %self.namespace, name = %self.name, kind = %self.kind, uid = %self.uid, "{message}");
    }
}

impl FromCause for Logger {
    fn reads() -> Reads {
        Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        Ok(Logger::for_body(&c.body))
    }
}

/// What handlers may return: `Result<T, E>` with any serializable `T` (a mapping is merged
/// into `status.<handler-id>`, `()`/`None` deliver nothing) and any error convertible into
/// [`HandlerError`].
pub trait IntoHandlerResult {
    /// Converts the return value.
    fn into_handler_result(self) -> HandlerResult;
}

impl<T: Serialize, E: Into<HandlerError>> IntoHandlerResult for Result<T, E> {
    fn into_handler_result(self) -> HandlerResult {
        match self {
            Ok(v) => match serde_json::to_value(v) {
                Ok(Value::Null) => Ok(None),
                Ok(v) => Ok(Some(v)),
                Err(e) => Err(HandlerError::permanent(format!(
                    "the handler's result cannot be serialized: {e}"
                ))),
            },
            Err(e) => Err(e.into()),
        }
    }
}

/// Something that becomes a [`Handler`]: an `async fn` or a plain `fn` of extractors. The
/// `Args` parameter only tells the two kinds apart; callers never name it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a kopf handler",
    label = "not a handler",
    note = "a handler is an `async fn` or a `fn` of up to 8 extractor arguments (Spec<T>, Name, Body, Old<T>, New<T>, ... or Cause) returning `Result<T: Serialize, E: Into<HandlerError>>`"
)]
pub trait IntoHandler<Args>: Send + Sync + 'static {
    /// Wraps it.
    fn into_handler(self) -> Arc<dyn Handler>;
}

/// Marks async handlers in [`IntoHandler`]'s parameter.
#[derive(Debug)]
pub enum AsyncHandler {}

/// Marks sync handlers in [`IntoHandler`]'s parameter. Sync handlers run on tokio's
/// blocking threads; a timeout fails the attempt at the deadline, but the thread cannot be
/// stopped: it runs to its end and its late result is discarded.
#[derive(Debug)]
pub enum SyncHandler {}

struct FnHandler<F, Args> {
    f: Arc<F>,
    _args: std::marker::PhantomData<fn(Args)>,
}

macro_rules! impl_into_handler {
    ($($arg:ident),*) => {
        impl<F, Fut, R, $($arg),*> Handler for FnHandler<F, (AsyncHandler, $($arg,)*)>
        where
            F: Fn($($arg),*) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = R> + Send + 'static,
            R: IntoHandlerResult + 'static,
            $($arg: FromCause,)*
        {
            fn reads(&self) -> Reads {
                Reads::nothing()$(.and($arg::reads()))*
            }

            #[allow(non_snake_case, unused_variables)]
            fn call(&self, cause: Cause) -> BoxFuture<HandlerResult> {
                $(
                    let $arg = match $arg::from_cause(&cause) {
                        Ok(v) => v,
                        Err(e) => return Box::pin(async move { Err(e) }),
                    };
                )*
                let fut = (self.f)($($arg),*);
                Box::pin(async move { fut.await.into_handler_result() })
            }
        }

        impl<F, Fut, R, $($arg),*> IntoHandler<(AsyncHandler, $($arg,)*)> for F
        where
            F: Fn($($arg),*) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = R> + Send + 'static,
            R: IntoHandlerResult + 'static,
            $($arg: FromCause,)*
        {
            fn into_handler(self) -> Arc<dyn Handler> {
                Arc::new(FnHandler::<F, (AsyncHandler, $($arg,)*)> { f: Arc::new(self), _args: std::marker::PhantomData })
            }
        }

        impl<F, R, $($arg),*> Handler for FnHandler<F, (SyncHandler, $($arg,)*)>
        where
            F: Fn($($arg),*) -> R + Send + Sync + 'static,
            R: IntoHandlerResult + Send + 'static,
            $($arg: FromCause,)*
        {
            fn reads(&self) -> Reads {
                Reads::nothing()$(.and($arg::reads()))*
            }

            #[allow(non_snake_case, unused_variables)]
            fn call(&self, cause: Cause) -> BoxFuture<HandlerResult> {
                $(
                    let $arg = match $arg::from_cause(&cause) {
                        Ok(v) => v,
                        Err(e) => return Box::pin(async move { Err(e) }),
                    };
                )*
                let f = self.f.clone();
                let span = tracing::Span::current();
                let task = tokio::task::spawn_blocking(move || {
                    let _entered = span.enter();
                    f($($arg),*).into_handler_result()
                });
                Box::pin(async move { task.await.unwrap_or_else(|e| Err(HandlerError::from_join(e))) })
            }

            fn is_blocking(&self) -> bool {
                true
            }
        }

        impl<F, R, $($arg),*> IntoHandler<(SyncHandler, $($arg,)*)> for F
        where
            F: Fn($($arg),*) -> R + Send + Sync + 'static,
            R: IntoHandlerResult + Send + 'static,
            $($arg: FromCause,)*
        {
            fn into_handler(self) -> Arc<dyn Handler> {
                Arc::new(FnHandler::<F, (SyncHandler, $($arg,)*)> { f: Arc::new(self), _args: std::marker::PhantomData })
            }
        }
    };
}

/// Something that becomes an index handler: an `async fn` or a plain `fn` of extractors
/// returning `Result<O, E>` where `O` is a map, a vector of pairs, a pair, or an `Option` of
/// one of them ([`IndexOutput`](crate::index::IndexOutput)); the index is then read as
/// `Index<O::Key, O::Value>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an index handler",
    label = "not an index handler",
    note = "an index handler is an `async fn` or a `fn` of extractor arguments returning `Result<O, E>` where O is a HashMap<K, V>, BTreeMap<K, V>, Vec<(K, V)>, (K, V), or an Option of one of them"
)]
pub trait IntoIndexer<Args>: Send + Sync + 'static {
    /// The index's key type.
    type Key: 'static;
    /// The index's value type.
    type Value: 'static;
    /// Wraps it: the handler's result becomes `[[key, value], ...]`.
    fn into_indexer(self) -> Arc<dyn Handler>;
}

macro_rules! impl_into_indexer {
    ($($arg:ident),*) => {
        impl<F, Fut, O, E, $($arg),*> IntoIndexer<(AsyncHandler, O, E, $($arg,)*)> for F
        where
            F: Fn($($arg),*) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<O, E>> + Send + 'static,
            O: crate::index::IndexOutput + Send + 'static,
            E: Into<HandlerError> + 'static,
            $($arg: FromCause,)*
        {
            type Key = O::Key;
            type Value = O::Value;

            #[allow(non_snake_case)]
            fn into_indexer(self) -> Arc<dyn Handler> {
                let f = Arc::new(self);
                let wrapped = move |$($arg: $arg),*| {
                    let fut = f($($arg),*);
                    async move { fut.await.map(|o| crate::index::IndexPairs(o.into_pairs())) }
                };
                IntoHandler::<(AsyncHandler, $($arg,)*)>::into_handler(wrapped)
            }
        }

        impl<F, O, E, $($arg),*> IntoIndexer<(SyncHandler, O, E, $($arg,)*)> for F
        where
            F: Fn($($arg),*) -> Result<O, E> + Send + Sync + 'static,
            O: crate::index::IndexOutput + Send + 'static,
            E: Into<HandlerError> + Send + 'static,
            $($arg: FromCause,)*
        {
            type Key = O::Key;
            type Value = O::Value;

            #[allow(non_snake_case)]
            fn into_indexer(self) -> Arc<dyn Handler> {
                let wrapped = move |$($arg: $arg),*| {
                    self($($arg),*).map(|o| crate::index::IndexPairs(o.into_pairs()))
                };
                IntoHandler::<(SyncHandler, $($arg,)*)>::into_handler(wrapped)
            }
        }
    };
}

impl_into_indexer!();
impl_into_indexer!(A1);
impl_into_indexer!(A1, A2);
impl_into_indexer!(A1, A2, A3);
impl_into_indexer!(A1, A2, A3, A4);
impl_into_indexer!(A1, A2, A3, A4, A5);
impl_into_indexer!(A1, A2, A3, A4, A5, A6);

impl_into_handler!();
impl_into_handler!(A1);
impl_into_handler!(A1, A2);
impl_into_handler!(A1, A2, A3);
impl_into_handler!(A1, A2, A3, A4);
impl_into_handler!(A1, A2, A3, A4, A5);
impl_into_handler!(A1, A2, A3, A4, A5, A6);
impl_into_handler!(A1, A2, A3, A4, A5, A6, A7);
impl_into_handler!(A1, A2, A3, A4, A5, A6, A7, A8);

/// Registering functions of extractors as sub-handlers (here, where [`IntoHandler`] is).
impl SubHandlers {
    /// Registers a sub-handler with default options.
    pub fn register<Args>(&self, id: &str, handler: impl IntoHandler<Args>) {
        self.register_with(id, handler, Options::default());
    }

    /// Registers a sub-handler with options (filters, retries, timeout, backoff, errors).
    pub fn register_with<Args>(&self, id: &str, handler: impl IntoHandler<Args>, options: Options) {
        let spec = HandlerSpec::from_arc(id, None, handler.into_handler()).with_options(options);
        self.push(spec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    struct ExampleSpec {
        field: String,
    }

    fn cause() -> Cause {
        let mut c = Cause::for_body(
            Reason::Create,
            json!({"metadata": {"name": "k", "namespace": "ns", "labels": {"a": "b"}}, "spec": {"field": "v"}}),
        );
        c.new = Some(json!({"spec": {"field": "v"}}));
        c.retry = 2;
        c.started = "2026-01-01T00:00:00.000000+00:00".into();
        c
    }

    fn sync_handler(Name(name): Name, logger: Logger) -> Result<String, HandlerError> {
        logger.info("running on a blocking thread");
        Ok(format!("sync {name}"))
    }

    #[derive(Clone)]
    struct Counter(u32);

    async fn memo_handler(memo: Memo<Counter>) -> Result<u32, HandlerError> {
        Ok(memo.update(|c| {
            c.0 += 1;
            c.0
        }))
    }

    #[tokio::test]
    async fn sync_handlers_and_memos() {
        assert_eq!(
            sync_handler.into_handler().call(cause()).await,
            Ok(Some(json!("sync k")))
        );
        let boom = (|_c: Cause| -> Result<(), HandlerError> { panic!("sync boom") }).into_handler();
        assert!(
            matches!(boom.call(cause()).await, Err(HandlerError::Other { message, .. }) if message.contains("panicked"))
        );
        let missing = memo_handler.into_handler().call(cause()).await;
        assert!(
            matches!(&missing, Err(HandlerError::Permanent { message, .. }) if message.contains("Operator::memo")),
            "{missing:?}"
        );
        let mut seed = crate::memo::MemoSeed::default();
        seed.insert(Counter(10));
        let mut c = cause();
        c.memo = crate::memo::Memos::new(seed.into());
        let h = memo_handler.into_handler();
        assert_eq!(h.call(c.clone()).await, Ok(Some(json!(11))));
        assert_eq!(h.call(c).await, Ok(Some(json!(12))), "kept per object");
    }

    async fn typed_handler(
        Spec(spec): Spec<ExampleSpec>,
        Name(name): Name,
        Retry(retry): Retry,
        labels: Labels,
    ) -> Result<Value, HandlerError> {
        Ok(json!({"msg": format!("{name}/{}/{retry}/{}", spec.field, labels.0["a"])}))
    }

    async fn unit_handler(patch: PatchHandle) -> Result<(), TemporaryError> {
        patch.merge(json!({"metadata": {"labels": {"seen": "yes"}}}));
        Ok(())
    }

    async fn bad_spec(Spec(_spec): Spec<Vec<u8>>) -> Result<(), HandlerError> {
        Ok(())
    }

    #[tokio::test]
    async fn extractors_and_results() {
        let h = typed_handler.into_handler();
        assert_eq!(h.call(cause()).await, Ok(Some(json!({"msg": "k/v/2/b"}))));
        let c = cause();
        let patch = c.patch.clone();
        assert_eq!(unit_handler.into_handler().call(c).await, Ok(None));
        assert_eq!(patch.get()["metadata"]["labels"]["seen"], "yes");
        let err = bad_spec.into_handler().call(cause()).await;
        assert!(
            matches!(err, Err(HandlerError::Permanent { message, .. }) if message.contains("does not fit"))
        );
        let whole = (|c: Cause| async move { Ok::<_, HandlerError>(c.retry) }).into_handler();
        assert_eq!(whole.call(cause()).await, Ok(Some(json!(2))));
    }

    #[test]
    fn extractors_people_print_display_as_kopf_writes_them() {
        let t: jiff::Timestamp = "2026-11-22T05:04:57.126136Z".parse().expect("a time");
        assert_eq!(Started(t).to_string(), "2026-11-22T05:04:57.126136+00:00");
        assert_eq!(Retry(2).to_string(), "2");
        assert_eq!(Runtime(Duration::from_millis(1500)).to_string(), "1.500s");
        assert_eq!(crate::causes::Reason::Update.to_string(), "update");
    }
}
