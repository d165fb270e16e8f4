//! What the daemons and timers of an object share with the framework: the object's latest
//! state ([`Live`]), the context they run in ([`SpawnContext`]), and where their results go
//! ([`Delivery`], [`Deliver`]).

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use crate::events::EventSpec;
use crate::handler::context::Extensions;
use crate::handler::spec::BoxFuture;
use crate::layers::Stack;
use crate::memo::Memos;
use crate::plan::PatchPlan;

/// The latest state of an object, as its daemons and timers see it.
#[derive(Debug, Clone)]
pub struct Live {
    /// The object as last seen (as its daemons and timers keep it: shared with the
    /// engine's own copy where they read all of it, trimmed otherwise).
    pub body: std::sync::Arc<Value>,
    /// When its essence last changed (or when it was first seen).
    pub changed: Instant,
}

/// What a daemon's or timer's call produced, to apply to the object.
#[derive(Debug)]
pub struct Delivery {
    /// The object as last seen (the target of the patch).
    pub body: Value,
    /// The result (under `status.<handler-id>`) and the handler's patch.
    pub plan: PatchPlan,
    /// Events to post.
    pub events: Vec<EventSpec>,
    /// What the handler put into the status, as `(handler id, {"status": ...})` fragments
    /// (see [`CycleOutcome::delivered`](crate::processing::CycleOutcome::delivered)).
    pub delivered: Vec<(String, Value)>,
}

/// What became of a [`Delivery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Stored, or nothing to store, or a failure the writer has reported (the next call
    /// delivers anew).
    Done,
    /// The API server refused to store the handler's result (the server's message): the
    /// attempt counts as a failure of the handler, by its errors mode.
    Rejected(String),
}

/// Applies deliveries (the engine sends them as PATCH requests).
pub type Deliver = Arc<dyn Fn(Delivery) -> BoxFuture<Delivered> + Send + Sync>;

/// What the daemons and timers of an object share.
#[derive(Clone)]
pub struct SpawnContext {
    /// The object's memo.
    pub memo: Memos,
    /// Operator-wide values.
    pub extensions: Extensions,
    /// The per-handler stack (retries, timeouts, user layers).
    pub stack: Stack,
    /// Where results and patches go.
    pub deliver: Deliver,
    /// The object's log span.
    pub span: tracing::Span,
}

impl std::fmt::Debug for SpawnContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnContext").finish_non_exhaustive()
    }
}
