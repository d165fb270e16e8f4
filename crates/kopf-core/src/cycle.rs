//! What one processing cycle of one object takes and gives, for the steps around it (the
//! finalizer's, in `processing`) and for the worker that writes its outcome: the
//! [`CycleCall`], the [`CycleOutcome`] with its [`PatchPlan`], each handler's
//! [`HandlerOutcome`], the [`FinalizerChange`]. The cycle itself is
//! [`crate::processing::Processor`]'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::causes::{ChangingCause, Reason};
use crate::conditions::ConditionsHandle;
use crate::events::EventSpec;
use crate::memo::Memos;
use crate::plan::PatchPlan;

/// How one handler ended in this cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum HandlerOutcome {
    /// Returned successfully.
    Succeeded,
    /// Returned, but some of its sub-handlers have not finished yet: called again later.
    Waiting,
    /// Will be retried.
    Retrying {
        /// The error.
        message: String,
    },
    /// Failed for good.
    Failed {
        /// The error.
        message: String,
    },
}

/// What a cycle produced.
#[derive(Debug, Clone)]
pub struct CycleOutcome {
    /// The detected cause.
    pub reason: Reason,
    /// Everything to write.
    pub plan: PatchPlan,
    /// Run another cycle after this long even without new events (retries).
    pub delay: Option<Duration>,
    /// All handlers of the cause finished (or none matched).
    pub done: bool,
    /// Handlers (and sub-handlers) that ran, with their outcomes.
    pub ran: Vec<(String, HandlerOutcome)>,
    /// Why the stored diff-base was ignored, if it was unreadable.
    pub corrupt_diffbase: Option<String>,
    /// The finalizer change this cycle sends, if any.
    pub finalizer: Option<FinalizerChange>,
    /// Events to post about the object: the handlers' own, and warnings about failures.
    pub events: Vec<EventSpec>,
    /// Handlers of the cause that have succeeded and failed so far (this cycle and before).
    pub counts: (usize, usize),
    /// Kopf's note on records of another cause that this one supersedes (they are purged).
    pub superseded: Option<String>,
    /// What each handler put into the object's status this cycle (its result under
    /// `status.<id>`, and the status part of its own patch), as merge-patch fragments
    /// `{"status": ...}`: the writer checks them against what the API server stored, and
    /// blames the right handler when the server rejects them.
    pub delivered: Vec<(String, Value)>,
    /// Progress records that could not be read (each is treated as absent), as messages.
    pub corrupt_records: Vec<String>,
    /// The diff-base this cycle would store, left out of its writes: with the object's
    /// other annotations it would exceed what kube allows
    /// ([`ANNOTATIONS_LIMIT`](kopf_diff::essence::ANNOTATIONS_LIMIT)). The engine keeps it
    /// in memory instead, so that the handlers do not run again for the same state.
    pub unstored_diff_base: Option<UnstoredDiffBase>,
}

/// A diff-base too large for the object's annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct UnstoredDiffBase {
    /// The essence it would store.
    pub essence: Value,
    /// The size the object's annotations would have had with it, in bytes.
    pub annotations_size: usize,
}

impl CycleOutcome {
    /// An outcome that changes nothing (yet).
    pub fn new(reason: Reason) -> Self {
        CycleOutcome {
            reason,
            plan: PatchPlan::new(),
            delay: None,
            done: false,
            ran: Vec::new(),
            corrupt_diffbase: None,
            finalizer: None,
            events: Vec::new(),
            counts: (0, 0),
            superseded: None,
            delivered: Vec::new(),
            corrupt_records: Vec::new(),
            unstored_diff_base: None,
        }
    }
}

/// A change of the operator's finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Added: handlers (or daemons) need it.
    Added,
    /// Removed: the object is released (deletion handled) or no handler needs it.
    Removed,
}

/// One cycle of one object, as the steps around the cycle see it.
#[derive(Debug, Clone)]
pub struct CycleCall {
    /// The object.
    pub body: Value,
    /// Its changing cause.
    pub cause: ChangingCause,
    /// The object's memo.
    pub memo: Memos,
    /// Handlers whose results the API server rejected in an earlier cycle (id → the
    /// server's message): this cycle records that outcome as their failed attempt, by
    /// their errors mode, instead of calling them.
    pub rejected: Arc<HashMap<String, String>>,
    /// The object's conditions for this cycle, shared by its handlers.
    pub conditions: ConditionsHandle,
}
