//! Handlers: what they receive (a [`Cause`]), what they return, and how they are registered
//! ([`HandlerSpec`]).
//!
//! The vocabulary that extractors, layers, daemons and the processing cycle share, in leaf
//! modules that import nothing above them (this module only re-exports them):
//!
//! * `error`: how a handler fails ([`HandlerError`], [`ErrorsMode`]) and how other errors
//!   become a handler error;
//! * `context`: the handles a call carries ([`PatchHandle`], [`EventsHandle`],
//!   [`Extensions`]);
//! * `options`: the registration [`Options`] and the filters;
//! * `owners`: the owner filters ([`OwnerFilter`]) and owner references ([`OwnerRef`]);
//! * `spec`: the [`Handler`] function, the [`Cause`] it is called with, the [`SubHandlers`]
//!   it registers, and the [`HandlerSpec`] that says when it runs.

pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod options;
pub(crate) mod owners;
pub(crate) mod spec;

pub use context::{EventsHandle, Extensions, PatchHandle};
pub use error::{
    AdmissionError, ErrorSource, ErrorsMode, HandlerError, HandlerResult, PermanentError,
    TemporaryError,
};
pub use options::{
    FieldFilter, FieldPredicate, MetaFilter, Options, ValuePredicate, WhenFilter, split_field,
};
pub use owners::{OwnerFilter, OwnerPredicate, OwnerRef};
pub use spec::{BoxFuture, Cause, Declaration, Handler, HandlerKind, HandlerSpec, SubHandlers};
