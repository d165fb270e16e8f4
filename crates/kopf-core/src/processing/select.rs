//! Which handlers a level runs: the top-level handlers of a cause (Kopf's reason and
//! `initial` rules), a level's handlers in Kopf's matching order, the values each one's cause
//! is made of, and the one a one-per-cycle [`Lifecycle`] picks.

use std::collections::HashSet;

use jiff::Timestamp;
use kopf_diff::{Diff, diff, reduce, resolve};
use serde_json::Value;

use super::Lifecycle;
use crate::causes::{ChangingCause, Reason};
use crate::handler::spec::{HandlerKind, HandlerSpec};
use crate::progress::ProgressRecord;

/// The values a handler's cause is made of: the whole essence's, or a field's.
#[derive(Debug, Clone)]
pub(super) struct Base {
    pub(super) diff: Diff,
    pub(super) old: Option<Value>,
    pub(super) new: Option<Value>,
}

impl Base {
    pub(super) fn of(cause: &ChangingCause) -> Self {
        Base {
            diff: diff(cause.old.as_ref(), Some(&cause.new)),
            old: cause.old.clone(),
            new: Some(cause.new.clone()),
        }
    }

    pub(super) fn for_handler(&self, h: &HandlerSpec) -> Base {
        match &h.field {
            Some(field) => Base {
                diff: reduce(&self.diff, field),
                old: resolve(self.old.as_ref(), field).cloned(),
                new: resolve(self.new.as_ref(), field).cloned(),
            },
            None => self.clone(),
        }
    }
}

/// Whether a top-level handler is for this cause (Kopf's reason and `initial` rules).
pub(super) fn for_reason(h: &HandlerSpec, cause: &ChangingCause) -> bool {
    if !matches!(h.kind, HandlerKind::Changing) {
        return false;
    }
    if h.initial && !cause.initial {
        return false;
    }
    if h.initial && h.reason.is_none() && cause.reason == Reason::Delete && !h.deleted {
        return false;
    }
    h.reason.is_none_or(|r| r == cause.reason)
}

/// The handlers of a level in Kopf's matching order (reason, labels, annotations, field
/// value, field change, `when`), each id once.
pub(super) fn select(
    handlers: impl IntoIterator<Item = HandlerSpec>,
    body: &Value,
    base: &Base,
    reason_ok: impl Fn(&HandlerSpec) -> bool,
) -> Vec<HandlerSpec> {
    let mut seen = HashSet::new();
    handlers
        .into_iter()
        .filter(|h| {
            reason_ok(h) && h.matches(body) && h.matches_field(base.old.as_ref(), base.new.as_ref())
        })
        .filter(|h| seen.insert(h.id.clone()))
        .collect()
}

/// With a one-per-cycle lifecycle, the index of the ready handler that runs now (None: all
/// ready handlers run). `stored`: the level's progress records.
pub(super) fn pick(
    lifecycle: Lifecycle,
    stored: &[Option<ProgressRecord>],
    now: Timestamp,
) -> Option<usize> {
    let ready = stored.iter().enumerate().filter_map(|(i, r)| {
        let r = r.clone().unwrap_or_default();
        (!r.is_finished() && r.is_awake(now)).then_some((i, r.retries.unwrap_or(0)))
    });
    match lifecycle {
        Lifecycle::AllAtOnce => None,
        Lifecycle::OneByOne => ready.map(|(i, _)| i).next(),
        Lifecycle::Asap => ready.min_by_key(|(_, r)| *r).map(|(i, _)| i),
    }
}
