//! The [`Conditions`] extractor: a handler's view of the cycle's [`ConditionsHandle`].

use super::handle::{ConditionsHandle, SyncError};
use super::model::{Condition, ConditionError, ConditionStatus};
use crate::extract::FromCause;
use crate::handler::error::HandlerError;
use crate::handler::spec::Cause;

/// The object's `status.conditions`, as a handler argument. All handlers of a cycle share
/// it: what one sets, the next one sees. What they set is written with the cycle's own
/// `/status` PATCH (no extra request), applied to the freshest list with
/// `meta.SetStatusCondition`'s rules (other controllers' types are kept); `sync` writes at
/// once, for long handlers.
///
/// ```
/// use kopf_core::conditions::{Conditions, ConditionStatus};
/// use kopf_core::handler::HandlerError;
///
/// async fn create_fn(conditions: Conditions) -> Result<(), HandlerError> {
///     conditions.set("Provisioned", ConditionStatus::False, "Creating", "the database is being created")?;
///     // conditions.sync().await?;    // publish now, before the long part
///     // ... the long part ...
///     conditions.set("Provisioned", ConditionStatus::True, "Created", "")?;
///     if conditions.is_true("Provisioned") {
///         conditions.remove("Degraded");
///     }
///     Ok(())
/// }
/// # let _ = kopf_core::extract::IntoHandler::into_handler(create_fn);
/// ```
#[derive(Debug, Clone)]
pub struct Conditions(pub ConditionsHandle);

impl FromCause for Conditions {
    fn reads() -> crate::reads::Reads {
        crate::reads::Reads::nothing()
    }

    fn from_cause(cause: &Cause) -> Result<Self, HandlerError> {
        Ok(Conditions(cause.conditions.clone()))
    }
}

impl Conditions {
    /// The condition of a type as it will be written (the object's, with what the cycle's
    /// handlers set so far); None when absent (which means `Unknown`).
    pub fn get(&self, type_: &str) -> Option<Condition> {
        self.0.get(type_)
    }

    /// Whether the condition of a type is (or will be) `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.0.is_true(type_)
    }

    /// Sets a condition (`meta.SetStatusCondition`: its `lastTransitionTime` changes only
    /// when its status does; `observedGeneration` is the object's generation as the handler
    /// saw it). True if it changes the condition. An invalid type or reason is an error
    /// (nothing is recorded): the API server would reject it.
    pub fn set(
        &self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> Result<bool, ConditionError> {
        self.0.set(type_, status, reason, message)
    }

    /// Sets a condition only if its type is absent. True if it adds it.
    pub fn ensure(
        &self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> Result<bool, ConditionError> {
        self.0.ensure(type_, status, reason, message)
    }

    /// Removes a condition type. True if it was there.
    pub fn remove(&self, type_: &str) -> bool {
        self.0.remove(type_)
    }

    /// Writes what was set so far at once (one guarded PATCH of `/status`), e.g. before the
    /// long part of a handler. An error when no writer is attached (in unit tests of
    /// handlers) or when the write fails; then what was set stays for the cycle's write.
    pub async fn sync(&self) -> Result<(), SyncError> {
        self.0.sync().await
    }
}
