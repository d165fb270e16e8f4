//! The [`Operator`]'s declaration of a resource's `status.conditions`.

use kopf_core::conditions::ConditionsSpec;
use kopf_core::handler::Options;
use kopf_watch::Selector;

use super::Operator;

impl Operator {
    /// Declares the `status.conditions` of a resource's objects: defaults set on the first
    /// visit (in the first cycle's status write, at no extra request), and the conditions
    /// the framework maintains from handlers' outcomes (per handler
    /// `<CamelCaseHandlerId>Succeeded`, a summary such as `Ready`, kstatus's `Reconciling`
    /// and `Stalled`). Handlers set their own with the [`Conditions`](crate::conditions::Conditions)
    /// extractor. Every write of conditions is one JSON patch guarded by a `test` of the
    /// list it was computed from: other controllers' conditions are never clobbered.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator, conditions::{ConditionStatus, Conditions, ConditionsSpec}};
    ///
    /// async fn create_fn(conditions: Conditions) -> Result<(), HandlerError> {
    ///     conditions.set("Provisioned", ConditionStatus::True, "Created", "the database exists")?;
    ///     Ok(())
    /// }
    ///
    /// let operator = Operator::new()
    ///     .on_create("kopfexamples", "create_fn", create_fn)
    ///     .conditions(
    ///         "kopfexamples",
    ///         ConditionsSpec::new()
    ///             .declare("Provisioned", ConditionStatus::Unknown, "Pending", "")
    ///             .per_handler(true) // CreateFnSucceeded
    ///             .summary("Ready") // kubectl wait --for=condition=Ready
    ///             .kstatus(true), // Reconciling, Stalled
    ///     );
    /// # let _ = operator;
    /// ```
    pub fn conditions(self, resource: impl Into<Selector>, spec: ConditionsSpec) -> Self {
        self.register(resource, spec.into_spec(), Options::default())
    }
}
