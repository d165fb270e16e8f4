//! A registered handler: the [`Handler`] function, the [`Cause`] it is called with (and the
//! [`SubHandlers`] a call registers), and the [`HandlerSpec`] that says when it runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf_diff::Diff;
use serde_json::Value;

use super::context::{EventsHandle, Extensions, PatchHandle};
use super::error::{ErrorsMode, HandlerResult};
use super::options::{FieldFilter, MetaFilter, Options, WhenFilter, split_field};
use super::owners::OwnerFilter;
use crate::causes::Reason;
use crate::conditions::ConditionsHandle;
use crate::daemons::options::{DaemonOptions, TimerOptions};
use crate::daemons::stopped::Stopped;
use crate::index::IndexTypes;
use crate::memo::Memos;
use crate::progress::format_time;

/// A boxed future, as handlers return them.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Everything a changing handler receives.
#[derive(Debug, Clone)]
pub struct Cause {
    /// Why it runs.
    pub reason: Reason,
    /// The object as last seen.
    pub body: Value,
    /// The diff (relative to the field for field handlers).
    pub diff: Diff,
    /// The old value (the field's for field handlers, else the stored essence).
    pub old: Option<Value>,
    /// The new value (the field's for field handlers, else the current essence).
    pub new: Option<Value>,
    /// Attempts before this one (0-based).
    pub retry: u32,
    /// When the first attempt started (Kopf's timestamp format).
    pub started: String,
    /// The handler's own merge patch, sent with the cycle's PATCH.
    pub patch: PatchHandle,
    /// Kubernetes Events to post about the object.
    pub events: EventsHandle,
    /// Sub-handlers registered during the call; they run when the handler returns.
    pub subhandlers: SubHandlers,
    /// The object's memo: in-memory values kept per object while the operator runs.
    pub memo: Memos,
    /// The watch event type for raw event handlers: None for the initial listing, else
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub event: Option<String>,
    /// The stop flag of daemons and timers (None for other handlers).
    pub stopped: Option<Stopped>,
    /// Operator-wide values handlers can ask for (the API client, the indexes...).
    pub extensions: Extensions,
    /// The object's `status.conditions` for this cycle, shared by its handlers (read with
    /// the [`Conditions`](crate::conditions::Conditions) extractor).
    pub conditions: ConditionsHandle,
}

impl Cause {
    /// A cause for a body with no diff and no history (for tests and tools).
    pub fn for_body(reason: Reason, body: Value) -> Self {
        let conditions = ConditionsHandle::new(&body);
        Cause {
            reason,
            body,
            diff: Diff::default(),
            old: None,
            new: None,
            retry: 0,
            started: format_time(crate::clock::now()),
            patch: PatchHandle::default(),
            events: EventsHandle::default(),
            subhandlers: SubHandlers::default(),
            memo: Memos::default(),
            event: None,
            stopped: None,
            extensions: Extensions::default(),
            conditions,
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `metadata.namespace` (None for cluster-scoped objects).
    pub fn namespace(&self) -> Option<&str> {
        self.body
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }

    /// `spec` (Null when absent).
    pub fn spec(&self) -> &Value {
        self.body.get("spec").unwrap_or(&Value::Null)
    }
}

/// Sub-handlers that a handler registers while it runs (Kopf's `@kopf.subhandler`). They run
/// after the handler returns, each with its own progress record (id `<parent-id>/<id>`); the
/// parent counts as finished only when all of them have finished, and is called again until
/// then (so it must register the same sub-handlers every time).
///
/// Functions of extractors are registered with `register` and `register_with` (where
/// [`IntoHandler`](crate::extract::IntoHandler) is); ready-made specs with
/// [`push`](Self::push).
#[derive(Debug, Clone, Default)]
pub struct SubHandlers(Arc<Mutex<Vec<HandlerSpec>>>);

impl SubHandlers {
    /// Registers a ready-made spec (its id is relative to the parent).
    pub fn push(&self, spec: HandlerSpec) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(spec);
    }

    /// Takes the registered sub-handlers.
    pub fn take(&self) -> Vec<HandlerSpec> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A handler function.
pub trait Handler: Send + Sync + 'static {
    /// Runs the handler.
    fn call(&self, cause: Cause) -> BoxFuture<HandlerResult>;

    /// Whether it runs on a blocking thread (a plain `fn`): such a handler cannot be
    /// cancelled, only asked to stop.
    fn is_blocking(&self) -> bool {
        false
    }

    /// What of the object it reads (a function of extractors: what they read; anything
    /// else: the whole object).
    fn reads(&self) -> crate::reads::Reads {
        crate::reads::Reads::whole("a function of the whole Cause")
    }
}

impl<F, Fut> Handler for F
where
    F: Fn(Cause) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn call(&self, cause: Cause) -> BoxFuture<HandlerResult> {
        Box::pin(self(cause))
    }
}

/// What kind of handler a spec registers.
#[derive(Clone, Debug, Default)]
pub enum HandlerKind {
    /// Create, update, delete, resume and field handlers (and sub-handlers).
    #[default]
    Changing,
    /// Raw watch events (`on_event`): no state, errors logged and ignored.
    Event,
    /// An index: the handler's key/value pairs per object.
    Index(IndexTypes),
    /// A timer per object.
    Timer(TimerOptions),
    /// A daemon per object.
    Daemon(DaemonOptions),
    /// Not a handler: something the resource's engine reads (its reconcile, its declared
    /// conditions), registered and routed to the resource like a handler.
    Declaration(Declaration),
}

/// A value of any type declared for a resource (see [`HandlerKind::Declaration`]); the
/// module that owns the type reads it back with [`HandlerSpec::declared`]. Type-erased so
/// that this vocabulary module depends on none of them.
#[derive(Clone)]
pub struct Declaration(Arc<dyn std::any::Any + Send + Sync>, &'static str);

impl std::fmt::Debug for Declaration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.1)
    }
}

/// A registered handler.
#[derive(Clone)]
pub struct HandlerSpec {
    /// The handler id (progress key, status key).
    pub id: String,
    /// What kind of handler it is.
    pub kind: HandlerKind,
    /// The reason it runs for; None for field handlers, resume handlers and sub-handlers.
    pub reason: Option<Reason>,
    /// Also run in the first cycle of objects found by the initial listing (resume).
    pub initial: bool,
    /// Resume also objects being deleted.
    pub deleted: bool,
    /// The field it is about (diff, old and new are relative to it; tracked in the essence).
    pub field: Option<Vec<String>>,
    /// Runs only when the field's value changed (update and field handlers).
    pub field_needs_change: bool,
    /// The field's value (old or new) must pass this filter; without it, the field must be
    /// present in the old or the new state.
    pub value: Option<FieldFilter>,
    /// The field's old value must pass this filter.
    pub old: Option<FieldFilter>,
    /// The field's new value must pass this filter.
    pub new: Option<FieldFilter>,
    /// Whether the object needs the finalizer for this handler (non-optional delete handlers).
    pub requires_finalizer: bool,
    /// What to do with other errors.
    pub errors: ErrorsMode,
    /// Delay before retrying after other errors.
    pub backoff: Duration,
    /// Maximum attempts.
    pub retries: Option<u32>,
    /// Maximum time since the first attempt.
    pub timeout: Option<Duration>,
    /// Label filters (all must hold).
    pub labels: Vec<(String, MetaFilter)>,
    /// Annotation filters (all must hold).
    pub annotations: Vec<(String, MetaFilter)>,
    /// A filter on the whole object, evaluated last.
    pub when: Option<WhenFilter>,
    /// Owner filters (all must hold).
    pub owners: Vec<OwnerFilter>,
    /// The paths it reads, as declared ([`Options::reads`]), beside what its arguments say.
    pub declared_reads: Vec<String>,
    /// The function.
    pub handler: Arc<dyn Handler>,
}

impl std::fmt::Debug for HandlerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerSpec")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("reason", &self.reason)
            .field("field", &self.field)
            .finish()
    }
}

impl HandlerSpec {
    /// A handler for a reason, with Kopf's defaults (temporary errors, 60 s backoff).
    pub fn new(id: impl Into<String>, reason: Option<Reason>, handler: impl Handler) -> Self {
        Self::from_arc(id, reason, Arc::new(handler))
    }

    /// Like [`new`](Self::new) with a shared handler (e.g. from
    /// [`IntoHandler`](crate::extract::IntoHandler)).
    pub fn from_arc(
        id: impl Into<String>,
        reason: Option<Reason>,
        handler: Arc<dyn Handler>,
    ) -> Self {
        HandlerSpec {
            id: id.into(),
            kind: HandlerKind::Changing,
            reason,
            initial: false,
            deleted: false,
            field: None,
            field_needs_change: reason == Some(Reason::Update),
            value: None,
            old: None,
            new: None,
            requires_finalizer: reason == Some(Reason::Delete),
            errors: ErrorsMode::Temporary,
            backoff: Duration::from_secs(60),
            retries: None,
            timeout: None,
            labels: Vec::new(),
            annotations: Vec::new(),
            when: None,
            owners: Vec::new(),
            declared_reads: Vec::new(),
            handler,
        }
    }

    /// A field handler (Kopf's `on.field`): runs for any reason where the field's value
    /// changed, creation included; its id gets the field as a suffix (`<id>/<field>`).
    pub fn field_handler(id: &str, field: &str, handler: Arc<dyn Handler>) -> Self {
        let mut spec = HandlerSpec::from_arc(format!("{id}/{field}"), None, handler);
        spec.field = Some(split_field(field));
        spec.field_needs_change = true;
        spec
    }

    /// A resume handler: joins the first cycle of objects found by the initial listing.
    pub fn resume_handler(id: &str, handler: Arc<dyn Handler>) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler);
        spec.initial = true;
        spec
    }

    /// A raw event handler (`on_event`): every watch event, errors logged and ignored.
    pub fn event(id: &str, handler: Arc<dyn Handler>) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler);
        spec.kind = HandlerKind::Event;
        spec.errors = ErrorsMode::Ignored;
        spec
    }

    /// An index handler (its results are read as `Index<K, V>` with these types). Errors
    /// keep the object's previous entries by default (`ErrorsMode::Ignored`).
    pub fn index(id: &str, types: IndexTypes, handler: Arc<dyn Handler>) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler);
        spec.kind = HandlerKind::Index(types);
        spec.errors = ErrorsMode::Ignored;
        spec
    }

    /// A timer per object; it requires the finalizer, so that it stops before the object
    /// goes.
    pub fn timer(id: &str, options: TimerOptions, handler: Arc<dyn Handler>) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler);
        spec.kind = HandlerKind::Timer(options);
        spec.requires_finalizer = true;
        spec
    }

    /// A daemon per object; it requires the finalizer, so that it stops before the object
    /// goes.
    pub fn daemon(id: &str, options: DaemonOptions, handler: Arc<dyn Handler>) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler);
        spec.kind = HandlerKind::Daemon(options);
        spec.requires_finalizer = true;
        spec
    }

    /// A declaration for the resource's engine (not a handler: it is never called).
    ///
    /// ```
    /// use kopf_core::handler::HandlerSpec;
    ///
    /// #[derive(Debug, PartialEq)]
    /// struct Settings(u32);
    /// let spec = HandlerSpec::declaration("settings", Settings(7));
    /// assert_eq!(spec.declared::<Settings>(), Some(&Settings(7)));
    /// assert_eq!(spec.declared::<String>(), None);
    /// ```
    pub fn declaration<T: Send + Sync + 'static>(id: &str, value: T) -> Self {
        let noop = |_: Cause| async { Ok(None) };
        let mut spec = HandlerSpec::new(id, None, noop);
        spec.kind =
            HandlerKind::Declaration(Declaration(Arc::new(value), std::any::type_name::<T>()));
        spec.requires_finalizer = false;
        spec
    }

    /// The declared value of type `T`, if this spec declares one.
    pub fn declared<T: Send + Sync + 'static>(&self) -> Option<&T> {
        match &self.kind {
            HandlerKind::Declaration(Declaration(value, _)) => value.downcast_ref::<T>(),
            _ => None,
        }
    }

    /// Applies registration options. A `field` option on a handler without one restricts it
    /// to that field and suffixes its id with `/<field>`, as Kopf does.
    pub fn with_options(mut self, options: Options) -> Self {
        if let Some(r) = options.retries {
            self.retries = Some(r);
        }
        self.timeout = options.timeout.or(self.timeout);
        if let Some(b) = options.backoff {
            self.backoff = b;
        }
        if let Some(e) = options.errors {
            self.errors = e;
        }
        if options.optional {
            self.requires_finalizer = false;
        }
        if options.deleted {
            self.deleted = true;
        }
        self.labels.extend(options.labels);
        self.annotations.extend(options.annotations);
        if options.when.is_some() {
            self.when = options.when;
        }
        self.owners.extend(options.owners);
        self.declared_reads.extend(options.reads);
        if let Some(field) = options.field
            && self.field.is_none()
        {
            self.id = format!("{}/{field}", self.id);
            self.field = Some(split_field(&field));
        }
        self.value = options.value.or(self.value);
        self.old = options.old.or(self.old);
        self.new = options.new.or(self.new);
        self
    }

    /// What of the object the handler reads: what its arguments read, with the declared
    /// paths ([`Options::reads`]) added (they stand for the "whole object" of a `Body` or
    /// `Cause` argument), and its field (`Options::field`).
    ///
    /// ```
    /// use kopf_core::extract::{IntoHandler, Name, Spec};
    /// use kopf_core::handler::{HandlerError, HandlerSpec, Options};
    /// use kopf_core::reads::Reads;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Schedule { cron: String }
    ///
    /// async fn tick(Spec(s): Spec<Schedule>, Name(n): Name) -> Result<(), HandlerError> {
    ///     let _ = (s.cron, n);
    ///     Ok(())
    /// }
    /// let spec = HandlerSpec::from_arc("tick", None, tick.into_handler());
    /// assert_eq!(spec.reads(), Reads::field("spec.cron"));
    /// // Declared paths add to what the arguments read.
    /// let declared = spec.with_options(Options::new().reads("data"));
    /// assert_eq!(declared.reads().to_string(), "metadata, status and data, spec.cron");
    /// ```
    pub fn reads(&self) -> crate::reads::Reads {
        use crate::reads::Reads;
        let own = match self.handler.reads() {
            Reads::Whole(_) if !self.declared_reads.is_empty() => Reads::nothing(),
            derived => derived,
        };
        let own = own.and(Reads::Fields(self.declared_reads.iter().cloned().collect()));
        match &self.field {
            Some(field) => own.and(Reads::field(&field.join("."))),
            None => own,
        }
    }

    /// Whether the object passes the handler's filters on the body (labels, annotations,
    /// owners, `when`): the "prematch" that also decides whether the finalizer is needed.
    pub fn matches(&self, body: &Value) -> bool {
        let get = |field: &str, key: &str| {
            body.pointer(&format!("/metadata/{field}"))
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
        };
        self.labels.iter().all(|(k, f)| f.check(get("labels", k)))
            && self
                .annotations
                .iter()
                .all(|(k, f)| f.check(get("annotations", k)))
            && self.owners.iter().all(|o| o.matches(body))
            && self.when.as_ref().is_none_or(|w| w(body))
    }

    /// Whether the handler's field filters pass for the old and new states (essences):
    /// the value filter on either state, then (if the handler needs a change) a change of
    /// the field, then the old/new filters. True for handlers without a field.
    pub fn matches_field(&self, old: Option<&Value>, new: Option<&Value>) -> bool {
        let Some(field) = &self.field else {
            return true;
        };
        let old = kopf_diff::resolve(old, field);
        let new = kopf_diff::resolve(new, field);
        let value_ok = match &self.value {
            None => old.is_some() || new.is_some(),
            Some(FieldFilter::Absent) => old.is_none() || new.is_none(),
            Some(f) => f.check(new) || f.check(old),
        };
        value_ok
            && (!self.field_needs_change || old != new)
            && self.old.as_ref().is_none_or(|f| f.check(old))
            && self.new.as_ref().is_none_or(|f| f.check(new))
    }
}
