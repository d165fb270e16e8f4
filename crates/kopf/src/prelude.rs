//! What an operator needs, in one import: `use kopf::prelude::*;`.
//!
//! The [`Operator`] builder and [`run()`](fn@crate::run) (and `run!`), the attribute macros
//! ([`on`], `reconcile`), every extractor of the list in [`kopf::handler`](crate::handler),
//! handlers' results and errors, their options and filters, the reconcile model's types,
//! conditions, and the webhooks' extractors and options (feature `admission`).
//!
//! `Patch`, `Status`, `Client` and `Retry` here are kopf's extractors, not kube's types of
//! the same names: an explicit import (`use kube::api::Patch;`) wins over this glob, so an
//! operator that needs both writes one of them with its path.
//!
//! ```no_run
//! use kopf::prelude::*;
//! use serde_json::{Value, json};
//!
//! async fn create_fn(Spec(spec): Spec, Name(name): Name, patch: Patch) -> Result<Value, HandlerError> {
//!     patch.merge(json!({"metadata": {"labels": {"seen": "yes"}}}));
//!     Ok(json!({"message": format!("hello {name}: {}", spec["field"])}))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), kopf::Error> {
//!     Operator::new().on_create("kopfexamples", "create_fn", create_fn).main().await
//! }
//! ```

pub use crate::conditions::{Condition, ConditionStatus, ConditionsSpec};
pub use crate::handler::{
    Annotations, Body, Captures, Cause, Client, Conditions, DaemonOptions, Diff, ErrorsMode,
    EventType, Events, HandlerError, HandlerResult, Index, Indexes, Labels, LogLine, LogSpec,
    Logger, Memo, Meta, MetaFilter, Name, Namespace, New, Old, Options, Owner, Owners, Patch,
    PermanentError, Reason, Retry, Runtime, Spec, Started, Status, StopReason, Stopped,
    SubHandlers, TemporaryError, TimerOptions, Uid,
};
pub use crate::reconcile::{Action, ObjectRef, ReconcileContext, Reconciler};
pub use crate::resources::Selector;
#[cfg(feature = "admission")]
pub use crate::webhooks::{
    AdmissionError, DryRun, Operation, SubResource, UserInfo, Warnings, WebhookOptions,
};
pub use crate::{Operator, about, on, run};
