//! Handlers: what they receive (a [`Cause`]), what they return, and how they are registered
//! ([`HandlerSpec`]).
//!
//! * [`error`](HandlerError): how a handler fails, and what becomes of other errors;
//! * the [`context`](PatchHandle) a call carries: its patch, its events, the operator-wide
//!   [`Extensions`];
//! * the registration [`Options`] and filters;
//! * the [`spec`](HandlerSpec): the [`Handler`] function, the [`Cause`] it gets, the
//!   [`SubHandlers`] it registers, and when it runs.

pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod options;
pub(crate) mod spec;

pub use context::{EventsHandle, Extensions, PatchHandle};
pub use error::{ErrorsMode, HandlerError, HandlerResult, PermanentError, TemporaryError};
pub use options::{
    FieldFilter, FieldPredicate, MetaFilter, Options, ValuePredicate, WhenFilter, split_field,
};
pub use spec::{BoxFuture, Cause, Handler, HandlerKind, HandlerSpec, SubHandlers};
