//! Writing handlers: their arguments (extractors), results and errors, options and filters,
//! and the kinds beyond the changing handlers (timers, daemons, indexes, pod logs).
//!
//! A handler is an `async fn` (or a plain `fn`, run on a blocking thread) of extractors,
//! returning `Result<T: Serialize, E: Into<HandlerError>>`; what it returns lands in
//! `status.<handler-id>`. [`TemporaryError`] and [`PermanentError`] work as in Kopf, other
//! errors follow the handler's [`ErrorsMode`]. See docs/handlers.md and docs/errors.md.
//!
//! The names here that are also kube's (`Patch`, `Status`, `Client`, `Retry`) are kopf's
//! extractors; write `kopf::handler::Patch` next to `kube::api::Patch`, or import one of them
//! by name (an explicit `use` wins over `use kopf::prelude::*`).
//!
#![doc = include_str!("extractors.md")]

pub use crate::client::Client;
pub use kopf_core::activities::{Probes, StartupFailed};
pub use kopf_core::causes::Reason;
pub use kopf_core::conditions::Conditions;
pub use kopf_core::daemons::{DaemonOptions, StopReason, Stopped, TimerOptions};
pub use kopf_core::extract::{
    Annotations, Body, Diff, EventType, FromCause, IntoHandler, IntoHandlerResult, IntoIndexer,
    Labels, Logger, Meta, Name, Namespace, New, Old, Owner, Owners, Retry, Runtime, Spec, Started,
    Status, Uid,
};
pub use kopf_core::handler::{
    Cause, ErrorsMode, FieldFilter, Handler, HandlerError, HandlerResult, HandlerSpec, MetaFilter,
    Options, OwnerFilter, OwnerRef, PermanentError, SubHandlers, TemporaryError, WhenFilter,
};
pub use kopf_core::handler::{EventsHandle as Events, PatchHandle as Patch};
pub use kopf_core::index::{Index, IndexOutput, Indexes};
pub use kopf_core::memo::Memo;
pub use kopf_core::reads::Reads;
pub use kopf_watch::{Captures, LogLine, LogSpec};
