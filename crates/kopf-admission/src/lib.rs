#![warn(missing_docs)]
//! # kopf-admission
//!
//! Admission and conversion webhooks for kopf-rs operators:
//!
//! - [`handlers`]: `on_validate`/`on_mutate` handlers with Kopf's options
//!   ([`WebhookOptions`]), their extractors ([`Operation`], [`DryRun`], [`UserInfo`],
//!   [`SubResource`], [`Warnings`]; the mutation is kopf-core's `Patch`) and denials
//!   ([`AdmissionError`]);
//! - [`review`]: answering `AdmissionReview`s: allowed, denied with the best error's message
//!   and code, warnings, and an RFC 6902 JSON patch computed from the handlers' merge patch;
//! - [`conversion`]: CRD conversion webhooks ([`Converter`], `ConversionReview` v1);
//! - [`tls`] and [`https`]: the HTTPS server, with certificate files reloaded when they
//!   change or a CA and certificate generated at start;
//! - [`managed`]: the Validating/MutatingWebhookConfigurations and CRD conversion stanzas
//!   the operator keeps;
//! - [`server`]: the settings ([`WebhookServer`]) and the life of it all with the operator
//!   ([`Admission`]).
//!
//! The `kopf` facade registers handlers with `Operator::on_validate`, `on_mutate` and
//! `on_convert` and starts the server with the operator.

pub mod conversion;
pub mod handlers;
pub mod https;
pub mod managed;
pub mod review;
pub mod server;
pub mod tls;

pub use conversion::Converter;
pub use handlers::{
    AdmissionError, DryRun, Operation, SubResource, UserInfo, Warnings, WebhookHandler,
    WebhookKind, WebhookOptions,
};
pub use managed::{ClientConfig, Endpoint};
pub use review::{BadReview, Reviewer};
pub use server::{Admission, AdmissionSettings, DEFAULT_PORT, Running, SetupError, WebhookServer};
