//! The fake Kubernetes API server, as modules with one job each.
//!
//! A request enters at [`http`] (routing, content negotiation, Status answers), goes down
//! through [`webhooks`] (admission and conversion webhooks) and [`semantics`] (the rules of
//! the verbs) to [`storage`] (objects, resourceVersions, history, watch fan-out), never
//! back up. The other modules are the building blocks those layers use.

pub mod catalog;
pub mod control;
pub mod discovery;
pub mod error;
pub mod http;
pub mod managed_fields;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod schema;
pub mod selectors;
pub mod semantics;
pub mod storage;
pub(crate) mod sync;
pub mod tables;
pub mod webhooks;
