//! The HTTP front of the fake API server: a request enters at `handler::handle`, is routed,
//! logged and counted, and served by its route group — objects, lists, watches,
//! subresources, discovery, control — which go down to the webhooks, the semantics and the
//! storage; responses and content negotiation are shared helpers.

mod access;
mod control;
mod discovery;
mod handler;
mod list;
mod logs;
mod negotiation;
mod objects;
mod options;
mod params;
mod partial;
mod query;
mod response;
mod routing;
mod shared;
mod special;
mod subresources;
mod watch;

pub use crate::apiserver::control::OpenWatch;
pub(crate) use handler::handle;
pub use routing::target_of_request;
pub(crate) use shared::Shared;
pub use shared::{Settings, VersionInfo};
