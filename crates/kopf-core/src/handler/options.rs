//! How a handler is registered: its filters on labels, annotations, the whole object and
//! one field ([`MetaFilter`], [`FieldFilter`]), and the [`Options`] of a registration.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::error::ErrorsMode;
use super::owners::{OwnerFilter, OwnerRef};

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
    /// Whether a value (None: absent) passes.
    pub(crate) fn check(&self, value: Option<&str>) -> bool {
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
    /// Owner filters: each needs some owner reference that matches it.
    pub owners: Vec<OwnerFilter>,
    /// A dotted field: the handler sees the diff, old and new values relative to it, and an
    /// update handler runs only when it changes. Also tracked in the diff-base. The handler's
    /// id becomes `<id>/<field>` (see [`Options::field`](Options::field())).
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
    /// What of the object the handler reads (dotted paths), declared: replaces what its
    /// arguments say ([`crate::reads`]); see [`Options::reads`](Options::reads()).
    pub reads: Vec<String>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("labels", &self.labels)
            .field("annotations", &self.annotations)
            .field("owners", &self.owners)
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

    /// Only objects owned by an object of `kind` (any of their owner references):
    /// `"KopfExample"`, or with its group `"kopf.dev/KopfExample"` (`"/Pod"` for the core
    /// group).
    ///
    /// ```
    /// use kopf_core::handler::Options;
    /// let children_of_examples = Options::new().owner("kopf.dev/KopfExample");
    /// # let _ = children_of_examples;
    /// ```
    pub fn owner(mut self, kind: &str) -> Self {
        self.owners.push(OwnerFilter::kind(kind, false));
        self
    }

    /// Only objects whose controller (the owner reference marked `controller: true`) is of
    /// `kind` (forms as in [`owner`](Self::owner)).
    pub fn controller_owner(mut self, kind: &str) -> Self {
        self.owners.push(OwnerFilter::kind(kind, true));
        self
    }

    /// Only objects with an owner reference that passes `f` (its kind, name, uid,
    /// controller flag...).
    ///
    /// ```
    /// use kopf_core::handler::{OwnerRef, Options};
    /// let options = Options::new().owner_when(|o: &OwnerRef| o.kind == "Job" && o.controller);
    /// # let _ = options;
    /// ```
    pub fn owner_when(mut self, f: impl Fn(&OwnerRef) -> bool + Send + Sync + 'static) -> Self {
        self.owners.push(OwnerFilter {
            kind: None,
            controller_only: false,
            predicate: Some(Arc::new(f)),
        });
        self
    }

    /// Restricts the handler to a dotted field (see [`Options::field`](#structfield.field)).
    ///
    /// **The handler's id gets the field as a suffix**, as in Kopf: `<id>/<field>`, the
    /// field as written here. `update_fn` with `.field("spec.field")` has the id
    /// `update_fn/spec.field`: its result lands in `status["update_fn/spec.field"]`, its
    /// progress in the annotation `kopf.zalando.org/update_fn.spec.field` (`/` becomes `.` in
    /// annotation keys), and its per-handler auto condition is `UpdateFnSpecFieldSucceeded`.
    /// The same holds for the macros' `field = "spec.field"` (the function's name, or `id`,
    /// then `/spec.field`) and for field handlers (`on_field("kopfexamples", "field_fn",
    /// "spec.field", ...)`: `field_fn/spec.field`). A handler that has a field already (a field
    /// handler) keeps it and its id: this option is then ignored.
    ///
    /// ```
    /// use kopf_core::handler::{HandlerSpec, Options};
    /// use kopf_core::causes::Reason;
    ///
    /// let noop = |_: kopf_core::handler::Cause| async { Ok(None) };
    /// let spec = HandlerSpec::new("update_fn", Some(Reason::Update), noop)
    ///     .with_options(Options::new().field("spec.field"));
    /// assert_eq!(spec.id, "update_fn/spec.field");
    /// // Where its state goes:
    /// let keys = kopf_core::keys::StorageKeys::default();
    /// assert_eq!(keys.v2_key(&spec.id), "kopf.zalando.org/update_fn.spec.field");
    /// let condition = kopf_core::conditions::handler_condition_type(&spec.id);
    /// assert_eq!(condition, "UpdateFnSpecFieldSucceeded");
    /// ```
    pub fn field(mut self, field: &str) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Declares a dotted path the handler reads (`spec.replicas`, `data`), beside the
    /// metadata and status, which are always kept; repeat it for several. Declared paths add
    /// to what the handler's typed arguments read (`Spec<T>`: `T`'s fields) and stand for
    /// the "whole object" of a [`Body`](crate::extract::Body) or `Cause` argument: a handler
    /// that takes the whole body but reads one field says so here, and the engine keeps
    /// only that field of each object for it ([`crate::reads`]). It covers the handler's
    /// `when` filter too.
    ///
    /// ```
    /// use kopf_core::handler::Options;
    ///
    /// let options = Options::new().reads("spec.schedule").reads("spec.suspend");
    /// assert_eq!(options.reads, ["spec.schedule", "spec.suspend"]);
    /// ```
    pub fn reads(mut self, path: &str) -> Self {
        self.reads.push(path.into());
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
