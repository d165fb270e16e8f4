//! Admission handlers: what they are registered with ([`WebhookOptions`]), what they get
//! (the extractors [`Operation`], [`DryRun`], [`UserInfo`], [`SubResource`], [`Warnings`],
//! plus kopf-core's `Body`, `Old`, `New`, `Diff`, `Patch`...), and how they deny a request
//! ([`AdmissionError`]).
//!
//! ```
//! use kopf_admission::{AdmissionError, Operation, WebhookOptions, Warnings};
//! use kopf_core::extract::Spec;
//! use serde_json::Value;
//!
//! async fn check(Spec(spec): Spec<Value>, warnings: Warnings) -> Result<(), AdmissionError> {
//!     if spec.get("field").is_none() {
//!         return Err(AdmissionError::new("spec.field is required"));
//!     }
//!     if spec.get("items").is_none() {
//!         warnings.push("spec.items is empty: nothing will be created");
//!     }
//!     Ok(())
//! }
//!
//! let options = WebhookOptions::new()
//!     .operations([Operation::Create, Operation::Update])
//!     .label("managed", kopf_core::handler::MetaFilter::Present);
//! # let _ = (check, options);
//! ```

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use kopf_core::extract::FromCause;
use kopf_core::handler::{
    Cause, FieldFilter, Handler, HandlerError, HandlerSpec, MetaFilter, Options,
};
use kopf_watch::Selector;
use serde_json::Value;

/// Validating or mutating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookKind {
    /// `on_validate`: allows or denies; changes to the patch are ignored.
    Validating,
    /// `on_mutate`: may change the object through the `Patch`.
    Mutating,
}

impl WebhookKind {
    /// The kind of the webhook configuration object that holds such webhooks.
    pub fn configuration_kind(self) -> &'static str {
        match self {
            WebhookKind::Validating => "ValidatingWebhookConfiguration",
            WebhookKind::Mutating => "MutatingWebhookConfiguration",
        }
    }

    /// The plural of the webhook configuration resource.
    pub fn configuration_plural(self) -> &'static str {
        match self {
            WebhookKind::Validating => "validatingwebhookconfigurations",
            WebhookKind::Mutating => "mutatingwebhookconfigurations",
        }
    }
}

/// The operation under review (also an extractor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `CONNECT`.
    Connect,
}

impl Operation {
    /// The wire name (`CREATE`...).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub use kopf_core::handler::AdmissionError;

/// Which subresource requests a handler reviews.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SubresourceFilter {
    /// Only the main object (Kopf's `subresource=None`).
    #[default]
    Main,
    /// One subresource, e.g. `status`.
    Named(String),
    /// The main object and every subresource (`"*"`).
    All,
}

impl SubresourceFilter {
    /// Whether a request for `sub` (None: the main object) passes.
    pub fn matches(&self, sub: Option<&str>) -> bool {
        let sub = sub.filter(|s| !s.is_empty());
        match self {
            SubresourceFilter::Main => sub.is_none(),
            SubresourceFilter::Named(n) => sub == Some(n.as_str()),
            SubresourceFilter::All => true,
        }
    }
}

/// Registration options of `on_validate`/`on_mutate`, with Kopf's defaults: all operations,
/// the main object only, removed from the managed configurations on exit, no side effects,
/// `failurePolicy: Fail`.
#[derive(Clone, Default)]
pub struct WebhookOptions {
    /// The operations reviewed; empty: all (`*`).
    pub operations: BTreeSet<Operation>,
    /// Which subresource requests are reviewed.
    pub subresource: SubresourceFilter,
    /// Kept in the managed configurations when the operator exits.
    pub persistent: bool,
    /// The handler has side effects (`sideEffects: NoneOnDryRun`; it must honour `DryRun`).
    pub side_effects: bool,
    /// The API server admits the request when the webhook cannot be called
    /// (`failurePolicy: Ignore`).
    pub ignore_failures: bool,
    /// Label, annotation, field/value and `when` filters (Kopf's). Label filters with
    /// values, presence or absence also become the configuration's `objectSelector`.
    pub filters: Options,
}

impl std::fmt::Debug for WebhookOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookOptions")
            .field("operations", &self.operations)
            .field("subresource", &self.subresource)
            .field("persistent", &self.persistent)
            .field("side_effects", &self.side_effects)
            .field("ignore_failures", &self.ignore_failures)
            .field("filters", &self.filters)
            .finish()
    }
}

impl WebhookOptions {
    /// Kopf's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reviews only these operations.
    pub fn operations(mut self, ops: impl IntoIterator<Item = Operation>) -> Self {
        self.operations.extend(ops);
        self
    }

    /// Reviews only this operation (may be repeated).
    pub fn operation(mut self, op: Operation) -> Self {
        self.operations.insert(op);
        self
    }

    /// Reviews requests to a subresource (`"status"`), or to everything (`"*"`).
    pub fn subresource(mut self, sub: &str) -> Self {
        self.subresource = if sub == "*" {
            SubresourceFilter::All
        } else {
            SubresourceFilter::Named(sub.to_string())
        };
        self
    }

    /// Keeps the webhook in the managed configurations after the operator exits.
    pub fn persistent(mut self) -> Self {
        self.persistent = true;
        self
    }

    /// Declares side effects (`sideEffects: NoneOnDryRun`): the handler must skip them
    /// when [`DryRun`] is true.
    pub fn side_effects(mut self) -> Self {
        self.side_effects = true;
        self
    }

    /// `failurePolicy: Ignore`: when the webhook is down, requests are admitted.
    pub fn ignore_failures(mut self) -> Self {
        self.ignore_failures = true;
        self
    }

    /// Only objects whose label passes the filter.
    pub fn label(mut self, key: &str, filter: impl Into<MetaFilter>) -> Self {
        self.filters = self.filters.label(key, filter);
        self
    }

    /// Only objects whose annotation passes the filter.
    pub fn annotation(mut self, key: &str, filter: impl Into<MetaFilter>) -> Self {
        self.filters = self.filters.annotation(key, filter);
        self
    }

    /// Only objects whose dotted field is present (or passes [`value`](Self::value)).
    pub fn field(mut self, field: &str) -> Self {
        self.filters = self.filters.field(field);
        self
    }

    /// With [`field`](Self::field): the field's value must pass.
    pub fn value(mut self, filter: impl Into<FieldFilter>) -> Self {
        self.filters = self.filters.value(filter);
        self
    }

    /// Only objects the function accepts.
    pub fn when(mut self, f: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        self.filters = self.filters.when(f);
        self
    }
}

/// A registered admission handler.
#[derive(Clone)]
pub struct WebhookHandler {
    /// The handler id: the last segment of its URL path and its webhook's name.
    pub id: String,
    /// Validating or mutating.
    pub kind: WebhookKind,
    /// The resources it reviews.
    pub selector: Selector,
    /// Its options.
    pub options: WebhookOptions,
    /// The function and its filters (labels, annotations, field/value, when).
    pub spec: HandlerSpec,
}

impl std::fmt::Debug for WebhookHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookHandler")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("selector", &self.selector)
            .field("options", &self.options)
            .finish()
    }
}

impl WebhookHandler {
    /// A handler of a kind for the selected resources.
    pub fn new(
        kind: WebhookKind,
        selector: impl Into<Selector>,
        id: &str,
        handler: Arc<dyn Handler>,
        options: WebhookOptions,
    ) -> Self {
        let mut filters = options.filters.clone();
        // The field filters the reviewed object; the id stays as given (it is a URL path).
        let field = filters.field.take();
        let mut spec = HandlerSpec::from_arc(id, None, handler).with_options(filters);
        spec.field = field.as_deref().map(kopf_core::handler::split_field);
        spec.field_needs_change = false;
        WebhookHandler {
            id: id.to_string(),
            kind,
            selector: selector.into(),
            options,
            spec,
        }
    }

    /// Whether the handler reviews this operation (mutating handlers skip `DELETE` unless
    /// they are for `DELETE` only, as in Kopf).
    pub fn reviews(&self, op: Operation) -> bool {
        let ops = &self.options.operations;
        if ops.is_empty() {
            return !(self.kind == WebhookKind::Mutating && op == Operation::Delete);
        }
        if self.kind == WebhookKind::Mutating && op == Operation::Delete {
            return ops.len() == 1 && ops.contains(&Operation::Delete);
        }
        ops.contains(&op)
    }
}

/// What the API server says about the request under review; in the cause's extensions.
#[derive(Debug, Clone)]
pub struct ReviewInfo {
    /// The request's uid.
    pub uid: String,
    /// The operation.
    pub operation: Operation,
    /// Whether the request is a dry run.
    pub dry_run: bool,
    /// The requesting user (`userInfo`).
    pub user_info: Value,
    /// The subresource (None for the main object).
    pub sub_resource: Option<String>,
    /// The operation's options (`CreateOptions`...), if sent.
    pub options: Option<Value>,
}

fn review_info(c: &Cause) -> Result<&ReviewInfo, HandlerError> {
    c.extensions.get::<ReviewInfo>().ok_or_else(|| {
        HandlerError::permanent(
            "this argument is only available to admission handlers (on_validate, on_mutate)",
        )
    })
}

impl FromCause for Operation {
    fn reads() -> kopf_core::reads::Reads {
        kopf_core::reads::Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        review_info(c).map(|i| i.operation)
    }
}

/// Whether the reviewed request is a dry run: handlers with side effects must skip them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DryRun(pub bool);

impl FromCause for DryRun {
    fn reads() -> kopf_core::reads::Reads {
        kopf_core::reads::Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        review_info(c).map(|i| DryRun(i.dry_run))
    }
}

/// The requesting user: `username`, `uid`, `groups`, `extra` (the review's `userInfo`).
#[derive(Debug, Clone, PartialEq)]
pub struct UserInfo(pub Value);

impl UserInfo {
    /// The user name ("" when absent).
    pub fn username(&self) -> &str {
        self.0.get("username").and_then(Value::as_str).unwrap_or("")
    }

    /// The groups.
    pub fn groups(&self) -> Vec<&str> {
        self.0
            .get("groups")
            .and_then(Value::as_array)
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
}

impl FromCause for UserInfo {
    fn reads() -> kopf_core::reads::Reads {
        kopf_core::reads::Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        review_info(c).map(|i| UserInfo(i.user_info.clone()))
    }
}

/// The subresource of the request (None for the main object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubResource(pub Option<String>);

impl FromCause for SubResource {
    fn reads() -> kopf_core::reads::Reads {
        kopf_core::reads::Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        review_info(c).map(|i| SubResource(i.sub_resource.clone()))
    }
}

/// Warnings for the API client (kubectl prints them as `Warning: ...`), shared by every
/// handler of one review; they are sent whether the request is allowed or denied.
#[derive(Debug, Clone, Default)]
pub struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    /// Adds a warning.
    pub fn push(&self, warning: impl Into<String>) {
        if let Ok(mut w) = self.0.lock() {
            w.push(warning.into());
        }
    }

    /// The warnings so far.
    pub fn get(&self) -> Vec<String> {
        self.0.lock().map(|w| w.clone()).unwrap_or_default()
    }
}

impl FromCause for Warnings {
    fn reads() -> kopf_core::reads::Reads {
        kopf_core::reads::Reads::nothing()
    }

    fn from_cause(c: &Cause) -> Result<Self, HandlerError> {
        c.extensions.get::<Warnings>().cloned().ok_or_else(|| {
            HandlerError::permanent(
                "Warnings are only available to admission handlers (on_validate, on_mutate)",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(kind: WebhookKind, options: WebhookOptions) -> WebhookHandler {
        let f = |_c: Cause| async { Ok(None) };
        WebhookHandler::new(kind, "kopfexamples", "h", Arc::new(f), options)
    }

    #[test]
    fn mutating_handlers_review_deletion_only_when_asked_for_it_alone() {
        let all = handler(WebhookKind::Mutating, WebhookOptions::new());
        assert!(all.reviews(Operation::Create));
        assert!(!all.reviews(Operation::Delete));
        let delete = handler(
            WebhookKind::Mutating,
            WebhookOptions::new().operation(Operation::Delete),
        );
        assert!(delete.reviews(Operation::Delete));
        let both = handler(
            WebhookKind::Mutating,
            WebhookOptions::new().operations([Operation::Delete, Operation::Update]),
        );
        assert!(!both.reviews(Operation::Delete));
        assert!(both.reviews(Operation::Update));
        let validating = handler(WebhookKind::Validating, WebhookOptions::new());
        assert!(validating.reviews(Operation::Delete));
    }

    #[test]
    fn subresource_filters() {
        assert!(SubresourceFilter::Main.matches(None));
        assert!(SubresourceFilter::Main.matches(Some("")));
        assert!(!SubresourceFilter::Main.matches(Some("status")));
        assert!(SubresourceFilter::Named("status".into()).matches(Some("status")));
        assert!(!SubresourceFilter::Named("status".into()).matches(None));
        assert!(SubresourceFilter::All.matches(Some("scale")));
        assert!(SubresourceFilter::All.matches(None));
    }

    #[test]
    fn the_field_option_keeps_the_id() {
        let h = handler(
            WebhookKind::Validating,
            WebhookOptions::new().field("spec.x"),
        );
        assert_eq!(h.id, "h");
        assert_eq!(h.spec.id, "h");
        assert_eq!(
            h.spec.field,
            Some(vec!["spec".to_string(), "x".to_string()])
        );
    }
}
