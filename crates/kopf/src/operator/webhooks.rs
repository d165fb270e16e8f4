//! The [`Operator`]'s admission handlers (validating, mutating), conversion webhooks and the
//! settings of the webhook server (feature `admission`).

use kopf_admission::{Converter, WebhookOptions, WebhookServer};
use kopf_core::extract::IntoHandler;
use kopf_watch::Selector;

use super::Operator;

impl Operator {
    /// A validating admission handler (Kopf's `@kopf.on.validate`): it reviews creations,
    /// updates and deletions of the resource before the API server stores them; returning
    /// an error ([`AdmissionError`](crate::AdmissionError) for a chosen code) denies the request with its message.
    /// Extractors: `Body`, `Spec`, `Old`, `New`, `Diff`, [`Operation`](crate::webhooks::Operation), [`DryRun`](crate::webhooks::DryRun),
    /// [`UserInfo`](crate::webhooks::UserInfo), [`SubResource`](crate::webhooks::SubResource), [`Warnings`](crate::webhooks::Warnings)...
    ///
    /// The webhook server starts with the operator (see [`webhook_server`](Self::webhook_server)),
    /// and with [`webhooks_managed`](Self::webhooks_managed) the operator registers it in
    /// the cluster itself.
    #[cfg(feature = "admission")]
    pub fn on_validate<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_validate_with(resource, id, handler, WebhookOptions::default())
    }

    /// [`on_validate`](Self::on_validate) with options: operations, subresource, filters,
    /// `persistent`, `side_effects`, `ignore_failures`.
    #[cfg(feature = "admission")]
    pub fn on_validate_with<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: WebhookOptions,
    ) -> Self {
        self.webhook(
            kopf_admission::WebhookKind::Validating,
            resource,
            id,
            handler,
            options,
        )
    }

    /// A mutating admission handler (Kopf's `@kopf.on.mutate`): what it merges into the
    /// [`Patch`](crate::handler::Patch) is applied to the object before it is stored (sent to the API server as an
    /// RFC 6902 JSON patch). Mutating handlers skip deletions unless they are for
    /// `DELETE` only.
    #[cfg(feature = "admission")]
    pub fn on_mutate<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_mutate_with(resource, id, handler, WebhookOptions::default())
    }

    /// [`on_mutate`](Self::on_mutate) with options.
    #[cfg(feature = "admission")]
    pub fn on_mutate_with<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: WebhookOptions,
    ) -> Self {
        self.webhook(
            kopf_admission::WebhookKind::Mutating,
            resource,
            id,
            handler,
            options,
        )
    }

    #[cfg(feature = "admission")]
    fn webhook<Args>(
        mut self,
        kind: kopf_admission::WebhookKind,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: WebhookOptions,
    ) -> Self {
        self.admission
            .handlers
            .push(kopf_admission::WebhookHandler::new(
                kind,
                resource,
                id,
                handler.into_handler(),
                options,
            ));
        self
    }

    /// A conversion webhook for the CRD `crd` (`<plural>.<group>`): `convert(object,
    /// version)` returns the object in `version` (e.g. `"v2"`); the framework sets its
    /// `apiVersion`. With [`webhooks_managed`](Self::webhooks_managed), the operator sets the
    /// CRD's `spec.conversion` to call it. See [`Converter`].
    #[cfg(feature = "admission")]
    pub fn on_convert<E: std::fmt::Display>(
        mut self,
        crd: &str,
        convert: impl Fn(serde_json::Value, &str) -> Result<serde_json::Value, E>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.admission.converters.push(Converter::new(crd, convert));
        self
    }

    /// Where and how the webhook server listens (default: all interfaces, port 9443, a
    /// generated certificate for `localhost`); the `run` options `--webhook-*` override it.
    #[cfg(feature = "admission")]
    pub fn webhook_server(mut self, server: WebhookServer) -> Self {
        self.admission.settings.server = server;
        self
    }

    /// Creates and keeps patched a ValidatingWebhookConfiguration and a
    /// MutatingWebhookConfiguration of this name (one entry per handler, as Kopf's
    /// `settings.admission.managed`), and points the converters' CRDs at the server. On
    /// exit, only the persistent entries stay.
    #[cfg(feature = "admission")]
    pub fn webhooks_managed(mut self, name: impl Into<String>) -> Self {
        self.admission.settings.managed = Some(name.into());
        self
    }
}
