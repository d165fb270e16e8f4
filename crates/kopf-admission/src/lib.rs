#![warn(missing_docs)]
//! # kopf-admission
//!
//! Admission and conversion webhooks for kopf-rs operators.

pub mod https;
pub mod tls;
