//! Webhooks the server calls: admission webhooks on writes, CRD conversion webhooks, and
//! the HTTPS client both use.

pub(crate) mod admission;
pub mod client;
pub(crate) mod conversion;
pub(crate) mod host;

pub use client::{ServiceRef, WebhookCall, WebhookOutcome};
