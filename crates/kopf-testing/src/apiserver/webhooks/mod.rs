//! Webhooks the server calls: admission webhooks on writes, CRD conversion webhooks, and
//! the HTTPS client both use. They reach the server (its state, the service map, the
//! client) through the `host::Host` trait the HTTP layer implements, never by naming it.

pub(crate) mod admission;
pub mod client;
pub(crate) mod conversion;
pub(crate) mod host;
pub(crate) mod trust;

pub use client::{ServiceRef, WebhookCall, WebhookOutcome};
