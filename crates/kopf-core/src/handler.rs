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

/// Events a handler wants posted about its object (posted after the cycle, rate-limited).
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
}

impl Cause {
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

/// A handler function.
pub trait Handler: Send + Sync + 'static {
    /// Runs the handler.
    fn call(&self, cause: Cause) -> BoxFuture<HandlerResult>;
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

/// A `when=` filter on the whole object.
pub type WhenFilter = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// A registered changing handler.
#[derive(Clone)]
pub struct HandlerSpec {
    /// The handler id (progress key, status key).
    pub id: String,
    /// The reason it runs for; None for field handlers (any reason where the field changed).
    pub reason: Option<Reason>,
    /// Also run in the first cycle of objects found by the initial listing (resume).
    pub initial: bool,
    /// Resume also objects being deleted.
    pub deleted: bool,
    /// The field it watches (field handlers; also tracked in the essence).
    pub field: Option<Vec<String>>,
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
            reason,
            initial: false,
            deleted: false,
            field: None,
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

    /// Whether the object passes the handler's filters (labels, annotations, `when`).
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
}
