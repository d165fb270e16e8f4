//! What the admission and conversion webhooks need of the server, as a trait the HTTP
//! layer implements: the webhooks are called from above and never reach up into it.

use std::collections::BTreeMap;
use std::sync::MutexGuard;

use crate::apiserver::semantics::State;
use crate::apiserver::webhooks::client::{ServiceRef, WebhookRuntime};

/// The server as the webhooks see it.
pub(crate) trait Host: Sync {
    /// The API state, locked (the lock is never held across a webhook call).
    fn state(&self) -> MutexGuard<'_, State>;
    /// Where webhooks given as `clientConfig.service` are reached now.
    fn services(&self) -> BTreeMap<ServiceRef, String>;
    /// The webhook client: TLS configurations and the call log.
    fn client(&self) -> &WebhookRuntime;
}
