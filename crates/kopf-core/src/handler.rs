//! Handlers: what they receive (a [`Cause`]), what they return, and how they are registered
//! ([`HandlerSpec`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf_diff::Diff;
use serde_json::Value;

use crate::causes::Reason;

/// A boxed future, as handlers return them.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a handler returns: an optional result for `status.<handler-id>`, or an error.
pub type HandlerResult = Result<Option<Value>, HandlerError>;

/// Handler failures, classified as Kopf classifies them.
///
/// ```
/// use std::time::Duration;
/// use kopf_core::handler::HandlerError;
///
/// fn check(size: u64) -> Result<(), HandlerError> {
///     if size == 0 {
///         // Fails for good: retrying will not make a zero size valid.
///         return Err(HandlerError::permanent("spec.size must be positive"));
///     }
///     if size > 100 {
///         // Retried after a minute (e.g. capacity that may free up).
///         return Err(HandlerError::temporary("no room for it yet", Duration::from_secs(60)));
///     }
///     Ok(())
/// }
///
/// // Anything else that is an error: handled by the handler's errors mode (retried after
/// // its backoff by default); `?` works on kube's errors, JSON errors and boxed errors.
/// fn parse(text: &str) -> Result<serde_json::Value, HandlerError> {
///     Ok(serde_json::from_str(text)?)
/// }
/// assert!(matches!(check(0), Err(HandlerError::Permanent { .. })));
/// assert!(matches!(parse("{"), Err(HandlerError::Other { .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Retry after `delay` (None: at once).
    #[error("{message}")]
    Temporary {
        /// The error text (stored in the progress record).
        message: String,
        /// When to retry.
        delay: Option<Duration>,
    },
    /// Fail for good; never retried.
    #[error("{message}")]
    Permanent {
        /// The error text.
        message: String,
    },
    /// A permanent error with an HTTP status code for admission webhooks (Kopf's
    /// `AdmissionError`): the review is denied with this message and code. Elsewhere it
    /// is a permanent error.
    #[error("{message}")]
    Admission {
        /// The error text (the denial message).
        message: String,
        /// The HTTP status code of the denial (Kopf's default: 500).
        code: u16,
    },
    /// Any other error: handled by the handler's errors mode (retry with backoff by default).
    #[error("{message}")]
    Other {
        /// The error text.
        message: String,
    },
}

impl HandlerError {
    /// A temporary error with a retry delay.
    pub fn temporary(message: impl Into<String>, delay: Duration) -> Self {
        HandlerError::Temporary {
            message: message.into(),
            delay: Some(delay),
        }
    }

    /// A permanent error.
    pub fn permanent(message: impl Into<String>) -> Self {
        HandlerError::Permanent {
            message: message.into(),
        }
    }

    /// Any other error, from anything displayable.
    pub fn other(error: impl std::fmt::Display) -> Self {
        HandlerError::Other {
            message: error.to_string(),
        }
    }

    /// The error of a handler task that panicked or was cancelled.
    pub fn from_join(error: tokio::task::JoinError) -> Self {
        if error.is_panic() {
            HandlerError::other(format!("the handler panicked: {error}"))
        } else {
            HandlerError::other(format!("the handler was cancelled: {error}"))
        }
    }
}

/// A merge patch that handlers fill in; it is folded into the cycle's single PATCH.
#[derive(Debug, Clone, Default)]
pub struct PatchHandle(Arc<Mutex<Value>>);

impl PatchHandle {
    /// Merges a JSON merge patch into the pending patch.
    pub fn merge(&self, patch: Value) {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !guard.is_object() {
            *guard = Value::Object(Default::default());
        }
        crate::plan::merge_keep_nulls(&mut guard, &patch);
    }

    /// The pending patch (an empty object when nothing was set).
    pub fn get(&self) -> Value {
        let v = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if v.is_object() {
            v
        } else {
            Value::Object(Default::default())
        }
    }
}

/// Events a handler wants posted about its object (Kopf's `kopf.info/warn/exception`): posted
/// after the cycle, rate-limited per object.
#[derive(Debug, Clone, Default)]
pub struct EventsHandle(Arc<Mutex<Vec<crate::events::EventSpec>>>);

impl EventsHandle {
    /// Posts a `Normal` event.
    pub fn info(&self, reason: &str, message: impl Into<String>) {
        self.push(crate::events::EventSpec::info(reason, message));
    }

    /// Posts a `Warning` event.
    pub fn warn(&self, reason: &str, message: impl Into<String>) {
        self.push(crate::events::EventSpec::warning(reason, message));
    }

    /// Posts an `Error` event about an error: the reason is the error's type name, and the
    /// error's text follows the message (Kopf's `kopf.exception`).
    pub fn exception<E: std::error::Error + ?Sized>(&self, message: &str, error: &E) {
        let full = std::any::type_name::<E>();
        let reason = full
            .split('<')
            .next()
            .and_then(|path| path.rsplit("::").next())
            .unwrap_or("Exception");
        let message = if message.is_empty() {
            error.to_string()
        } else {
            format!("{message}: {error}")
        };
        self.push(crate::events::EventSpec {
            type_: "Error".into(),
            reason: reason.into(),
            message,
        });
    }

    /// Posts an event of any type.
    pub fn push(&self, spec: crate::events::EventSpec) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(spec);
    }

    /// Takes the queued events.
    pub fn take(&self) -> Vec<crate::events::EventSpec> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

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
    pub memo: crate::memo::Memos,
    /// The watch event type for raw event handlers: None for the initial listing, else
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub event: Option<String>,
    /// The stop flag of daemons and timers (None for other handlers).
    pub stopped: Option<crate::daemons::Stopped>,
    /// Operator-wide values handlers can ask for (the API client, the indexes...).
    pub extensions: Extensions,
}

/// Operator-wide values by type, shared by every handler call (the API client, the indexes);
/// the framework fills them, extractors read them.
#[derive(Clone, Default)]
pub struct Extensions(
    Arc<std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>>,
);

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.0.len())
            .finish()
    }
}

impl Extensions {
    /// Adds (or replaces) the value of type `T`.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        Arc::make_mut(&mut self.0).insert(std::any::TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if the framework set one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0
            .get(&std::any::TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }
}

impl Cause {
    /// A cause for a body with no diff and no history (for tests and tools).
    pub fn for_body(reason: Reason, body: Value) -> Self {
        Cause {
            reason,
            body,
            diff: Diff::default(),
            old: None,
            new: None,
            retry: 0,
            started: crate::progress::format_time(jiff::Timestamp::now()),
            patch: PatchHandle::default(),
            events: EventsHandle::default(),
            subhandlers: SubHandlers::default(),
            memo: crate::memo::Memos::default(),
            event: None,
            stopped: None,
            extensions: Extensions::default(),
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
#[derive(Debug, Clone, Default)]
pub struct SubHandlers(Arc<Mutex<Vec<HandlerSpec>>>);

impl SubHandlers {
    /// Registers a sub-handler with default options.
    pub fn register<Args>(&self, id: &str, handler: impl crate::extract::IntoHandler<Args>) {
        self.register_with(id, handler, Options::default());
    }

    /// Registers a sub-handler with options (filters, retries, timeout, backoff, errors).
    pub fn register_with<Args>(
        &self,
        id: &str,
        handler: impl crate::extract::IntoHandler<Args>,
        options: Options,
    ) {
        let spec = HandlerSpec::from_arc(id, None, handler.into_handler()).with_options(options);
        self.push(spec);
    }

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

/// What to do with errors other than temporary/permanent ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorsMode {
    /// Retry after the backoff (the default).
    Temporary,
    /// Fail for good.
    Permanent,
    /// Treat as success without a result.
    Ignored,
}

/// A predicate on a label's or annotation's value (None when absent).
pub type ValuePredicate = Arc<dyn Fn(Option<&str>) -> bool + Send + Sync>;

/// A filter on one label or annotation.
#[derive(Clone)]
pub enum MetaFilter {
    /// Exactly this value.
    Value(String),
    /// Present with any value.
    Present,
    /// Absent.
    Absent,
    /// A predicate on the value (None when absent).
    Predicate(ValuePredicate),
}

impl MetaFilter {
    fn check(&self, value: Option<&str>) -> bool {
        match self {
            MetaFilter::Value(v) => value == Some(v.as_str()),
            MetaFilter::Present => value.is_some(),
            MetaFilter::Absent => value.is_none(),
            MetaFilter::Predicate(f) => f(value),
        }
    }
}

impl std::fmt::Debug for MetaFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaFilter::Value(v) => write!(f, "Value({v:?})"),
            MetaFilter::Present => f.write_str("Present"),
            MetaFilter::Absent => f.write_str("Absent"),
            MetaFilter::Predicate(_) => f.write_str("Predicate(..)"),
        }
    }
}

/// A predicate on a field's value (None when absent).
pub type FieldPredicate = Arc<dyn Fn(Option<&Value>) -> bool + Send + Sync>;

/// A filter on a field's value (`value=`, `old=`, `new=`): None when the field is absent.
#[derive(Clone)]
pub enum FieldFilter {
    /// Exactly this value.
    Value(Value),
    /// Present with any value.
    Present,
    /// Absent.
    Absent,
    /// A predicate on the value (None when absent).
    Predicate(FieldPredicate),
}

impl FieldFilter {
    /// Whether a value (None: absent) passes.
    pub fn check(&self, value: Option<&Value>) -> bool {
        match self {
            FieldFilter::Value(v) => value == Some(v),
            FieldFilter::Present => value.is_some(),
            FieldFilter::Absent => value.is_none(),
            FieldFilter::Predicate(f) => f(value),
        }
    }
}

impl std::fmt::Debug for FieldFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldFilter::Value(v) => write!(f, "Value({v})"),
            FieldFilter::Present => f.write_str("Present"),
            FieldFilter::Absent => f.write_str("Absent"),
            FieldFilter::Predicate(_) => f.write_str("Predicate(..)"),
        }
    }
}

impl From<Value> for FieldFilter {
    fn from(v: Value) -> Self {
        FieldFilter::Value(v)
    }
}

impl From<&str> for FieldFilter {
    fn from(v: &str) -> Self {
        FieldFilter::Value(Value::String(v.into()))
    }
}

impl From<&str> for MetaFilter {
    fn from(v: &str) -> Self {
        MetaFilter::Value(v.into())
    }
}

impl From<String> for MetaFilter {
    fn from(v: String) -> Self {
        MetaFilter::Value(v)
    }
}

/// A `when=` filter on the whole object.
pub type WhenFilter = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// Options of one handler registration, with Kopf's meanings. Build them with the methods:
///
/// ```
/// use kopf_core::handler::{MetaFilter, Options};
/// use std::time::Duration;
///
/// let options = Options::new()
///     .label("tier", "gold")
///     .annotation("skip", MetaFilter::Absent)
///     .retries(3)
///     .timeout(Duration::from_secs(60));
/// # let _ = options;
/// ```
#[derive(Clone, Default)]
pub struct Options {
    /// Label filters: the handler runs only for objects whose labels pass all of them.
    pub labels: Vec<(String, MetaFilter)>,
    /// Annotation filters.
    pub annotations: Vec<(String, MetaFilter)>,
    /// A filter on the whole object, evaluated last.
    pub when: Option<WhenFilter>,
    /// A dotted field: the handler sees the diff, old and new values relative to it, and an
    /// update handler runs only when it changes. Also tracked in the diff-base.
    pub field: Option<String>,
    /// With `field`: the field's value (old or new) must pass (default: present).
    pub value: Option<FieldFilter>,
    /// With `field`, update and field handlers: the old value must pass.
    pub old: Option<FieldFilter>,
    /// With `field`, update and field handlers: the new value must pass.
    pub new: Option<FieldFilter>,
    /// Maximum attempts.
    pub retries: Option<u32>,
    /// Maximum time since the first attempt.
    pub timeout: Option<Duration>,
    /// Delay before retrying after arbitrary errors (default 60 s).
    pub backoff: Option<Duration>,
    /// What to do with arbitrary errors.
    pub errors: Option<ErrorsMode>,
    /// Delete handlers: do not require the finalizer.
    pub optional: bool,
    /// Resume handlers: also resume objects being deleted.
    pub deleted: bool,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .field("field", &self.field)
            .field("retries", &self.retries)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// No filters, Kopf's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// A label filter: a value (`"gold"`), [`MetaFilter::Present`], [`MetaFilter::Absent`] or
    /// a predicate.
    pub fn label(mut self, key: &str, filter: impl Into<MetaFilter>) -> Self {
        self.labels.push((key.into(), filter.into()));
        self
    }

    /// An annotation filter, like [`label`](Self::label).
    pub fn annotation(mut self, key: &str, filter: impl Into<MetaFilter>) -> Self {
        self.annotations.push((key.into(), filter.into()));
        self
    }

    /// A filter on the whole object, evaluated after all others.
    pub fn when(mut self, f: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        self.when = Some(Arc::new(f));
        self
    }

    /// Restricts the handler to a dotted field (see [`Options::field`](#structfield.field)).
    pub fn field(mut self, field: &str) -> Self {
        self.field = Some(field.into());
        self
    }

    /// With a field: its value must pass this filter.
    pub fn value(mut self, filter: impl Into<FieldFilter>) -> Self {
        self.value = Some(filter.into());
        self
    }

    /// With a field: the old value must pass this filter.
    pub fn old(mut self, filter: impl Into<FieldFilter>) -> Self {
        self.old = Some(filter.into());
        self
    }

    /// With a field: the new value must pass this filter.
    pub fn new_value(mut self, filter: impl Into<FieldFilter>) -> Self {
        self.new = Some(filter.into());
        self
    }

    /// Maximum attempts; then the handler fails for good.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = Some(retries);
        self
    }

    /// Maximum time since the first attempt; async handlers are cancelled at the deadline.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Delay before retrying after arbitrary errors.
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// What to do with arbitrary errors.
    pub fn errors(mut self, errors: ErrorsMode) -> Self {
        self.errors = Some(errors);
        self
    }

    /// Delete handlers: run only if the object is still there, without a finalizer.
    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// Resume handlers: also for objects being deleted.
    pub fn deleted(mut self) -> Self {
        self.deleted = true;
        self
    }
}

/// A dotted path split into its keys.
pub fn split_field(field: &str) -> Vec<String> {
    field
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
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
    Index(crate::index::IndexTypes),
    /// A timer per object.
    Timer(crate::daemons::TimerOptions),
    /// A daemon per object.
    Daemon(crate::daemons::DaemonOptions),
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
    pub fn index(id: &str, types: crate::index::IndexTypes, handler: Arc<dyn Handler>) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler);
        spec.kind = HandlerKind::Index(types);
        spec.errors = ErrorsMode::Ignored;
        spec
    }

    /// A timer per object; it requires the finalizer, so that it stops before the object
    /// goes.
    pub fn timer(
        id: &str,
        options: crate::daemons::TimerOptions,
        handler: Arc<dyn Handler>,
    ) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler);
        spec.kind = HandlerKind::Timer(options);
        spec.requires_finalizer = true;
        spec
    }

    /// A daemon per object; it requires the finalizer, so that it stops before the object
    /// goes.
    pub fn daemon(
        id: &str,
        options: crate::daemons::DaemonOptions,
        handler: Arc<dyn Handler>,
    ) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler);
        spec.kind = HandlerKind::Daemon(options);
        spec.requires_finalizer = true;
        spec
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

    /// Whether the object passes the handler's filters on the body (labels, annotations,
    /// `when`): the "prematch" that also decides whether the finalizer is needed.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_events_are_named_after_the_error() {
        let events = EventsHandle::default();
        let err = "x".parse::<u32>().expect_err("not a number");
        events.exception("Cannot read spec.count", &err);
        let posted = events.take();
        assert_eq!(posted[0].type_, "Error");
        assert_eq!(posted[0].reason, "ParseIntError");
        assert_eq!(
            posted[0].message,
            "Cannot read spec.count: invalid digit found in string"
        );
    }
}
