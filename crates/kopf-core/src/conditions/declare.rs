//! What an operator declares about a resource's conditions: defaults set on the first visit
//! ([`ConditionsSpec::declare`]) and the conditions the framework maintains from handlers'
//! outcomes ([`AutoConditions`]).

use super::model::{ConditionStatus, Intent};
use crate::handler::spec::HandlerSpec;

/// The conditions the framework maintains from the handlers' outcomes (all off by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoConditions {
    /// `<CamelCaseHandlerId>Succeeded` per handler: `True`/`Succeeded`,
    /// `Unknown`/`Retrying` (the error as the message), `False`/`Failed`.
    pub per_handler: bool,
    /// A summary condition (e.g. `Ready`): `True` when the cause is handled and all its
    /// handlers succeeded, `False` on a permanent failure, else `Unknown`.
    pub summary: Option<String>,
    /// kstatus's `Reconciling` (True while the cause is not handled) and `Stalled` (True on
    /// a permanent failure); both `False` when handled and fine.
    pub kstatus: bool,
}

impl AutoConditions {
    /// Whether any auto condition is on.
    pub fn any(&self) -> bool {
        self.per_handler || self.summary.is_some() || self.kstatus
    }
}

/// A resource's conditions: declared defaults and auto conditions. Registered with
/// `Operator::conditions` as a [`HandlerKind::Declaration`](crate::handler::HandlerKind)
/// ([`ConditionsSpec::into_spec`]); it rides with the resource's handlers (a declaration,
/// not a handler: no finalizer, nothing runs).
///
/// ```
/// use kopf_core::conditions::{ConditionStatus, ConditionsSpec};
///
/// let spec = ConditionsSpec::new()
///     .declare("Ready", ConditionStatus::Unknown, "Pending", "")
///     .per_handler(true)
///     .summary("Ready")
///     .kstatus(true);
/// assert_eq!(spec.declared.len(), 1);
/// assert!(spec.auto.per_handler && spec.auto.kstatus);
/// assert_eq!(spec.auto.summary.as_deref(), Some("Ready"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConditionsSpec {
    /// Defaults set when their type is absent ([`Intent::Ensure`]), in every cycle but a
    /// deletion's: they land in the first cycle's status write.
    pub declared: Vec<Intent>,
    /// The conditions maintained from handlers' outcomes.
    pub auto: AutoConditions,
}

impl ConditionsSpec {
    /// No declared conditions, no auto conditions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a condition type with its default (set when the type is absent, e.g.
    /// `Unknown`/`Pending` on the first visit, as the API conventions ask). An invalid type
    /// or reason stops the operator at start, with an error naming it.
    pub fn declare(
        mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> Self {
        self.declared
            .push(Intent::ensure(type_, status, reason, message));
        self
    }

    /// Maintains `<CamelCaseHandlerId>Succeeded` per handler.
    pub fn per_handler(mut self, on: bool) -> Self {
        self.auto.per_handler = on;
        self
    }

    /// Maintains a summary condition of this type (e.g. `Ready`).
    pub fn summary(mut self, type_: &str) -> Self {
        self.auto.summary = Some(type_.into());
        self
    }

    /// Maintains kstatus's `Reconciling` and `Stalled`.
    pub fn kstatus(mut self, on: bool) -> Self {
        self.auto.kstatus = on;
        self
    }

    /// The registration: a declaration with the id `conditions`, read back with
    /// `spec.declared::<ConditionsSpec>()`.
    pub fn into_spec(self) -> HandlerSpec {
        HandlerSpec::declaration("conditions", self)
    }
}

/// Warns about handlers whose field is `status.conditions` (or inside it): that field joins
/// the diff-base essence, so every write of conditions (ours included) becomes a change of
/// the essence, a cause, and maybe a write again. Returns the ids of such handlers.
pub fn warn_conditions_fields(handlers: &[HandlerSpec]) -> Vec<String> {
    let ids: Vec<String> = handlers
        .iter()
        .filter(|h| {
            h.field
                .as_deref()
                .is_some_and(|f| f.len() >= 2 && f[0] == "status" && f[1] == "conditions")
        })
        .map(|h| h.id.clone())
        .collect();
    for id in &ids {
        tracing::warn!(
            "Handler '{id}' is about status.conditions: the conditions join the diff-base essence, so each write of them is a change that runs handlers again (and may write again). Read conditions with the Conditions extractor instead."
        );
    }
    ids
}
