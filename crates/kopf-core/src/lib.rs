#![warn(missing_docs)]
//! # kopf-core
//!
//! The domain of kopf-rs, with Kopf 1.x's wire format: the annotation [`keys`] of
//! per-handler state, [`progress`] records, the operator's [`finalizers`], the [`causes`] of
//! changes (create, update, delete, resume...) from the diff-base essence, and the
//! [`plan`] that folds a cycle's changes into at most one PATCH per endpoint, and the
//! objects' [`conditions`] (`status.conditions`, written guarded within that plan).
//!
//! ```
//! use kopf_core::causes::{detect, EventKind, Reason};
//! use kopf_core::finalizers::DEFAULT_FINALIZER;
//! use kopf_diff::essence::EssenceSettings;
//! use serde_json::json;
//!
//! let body = json!({"metadata": {"name": "x"}, "spec": {"field": "value"}});
//! let cause = detect(EventKind::Added, &body, &EssenceSettings::default(), DEFAULT_FINALIZER, false);
//! assert_eq!(cause.reason, Reason::Create);
//! ```

pub mod activities;
pub mod backoff;
pub mod causes;
pub mod clock;
pub mod conditions;
mod cycle;
pub mod daemons;
pub mod events;
pub mod extract;
pub mod finalizers;
pub mod gate;
pub mod handler;
pub mod hierarchy;
pub mod index;
pub mod keys;
pub mod layers;
pub mod memo;
pub mod metrics;
pub mod plan;
pub mod processing;
pub mod progress;
pub mod reads;
pub mod reconcile;
pub mod shards;
pub mod text;
pub mod throttle;
