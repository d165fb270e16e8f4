//! Detection of the changing cause of an event, in Kopf's order: gone, free, delete, create,
//! resume, noop, update.

use kopf_diff::essence::{self, EssenceSettings};
use kopf_diff::{Diff, diff};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::finalizers;

/// Why the changing handlers run (or do not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The object is gone (a DELETED event): nothing to do.
    Gone,
    /// Deletion requested and our finalizer is not there: nothing to do.
    Free,
    /// Deletion requested: delete handlers run.
    Delete,
    /// No diff-base stored: create handlers run.
    Create,
    /// First seen in the initial listing and unchanged: resume handlers run.
    Resume,
    /// Changed, but not in the essence.
    Noop,
    /// The essence changed: update and field handlers run.
    Update,
}

impl Reason {
    /// The purpose stored in progress records (`create`, `update`, `delete`, `resume`).
    pub fn purpose(self) -> &'static str {
        match self {
            Reason::Gone => "gone",
            Reason::Free => "free",
            Reason::Delete => "delete",
            Reason::Create => "create",
            Reason::Resume => "resume",
            Reason::Noop => "noop",
            Reason::Update => "update",
        }
    }

    /// The reason of a stored purpose (`create`, `update`...); None for unknown ones.
    pub fn from_purpose(purpose: &str) -> Option<Reason> {
        [
            Reason::Gone,
            Reason::Free,
            Reason::Delete,
            Reason::Create,
            Reason::Resume,
            Reason::Noop,
            Reason::Update,
        ]
        .into_iter()
        .find(|r| r.purpose() == purpose)
    }

    /// Title for logs: `Creation`, `Updating`, `Deletion`, `Resuming`.
    pub fn title(self) -> &'static str {
        match self {
            Reason::Create => "Creation",
            Reason::Update => "Updating",
            Reason::Delete => "Deletion",
            Reason::Resume => "Resuming",
            Reason::Noop => "Noop",
            Reason::Free => "Free",
            Reason::Gone => "Gone",
        }
    }
}

/// Kopf's word for the reason, as in its logs and progress records: `create`, `update`,
/// `delete`, `resume`...
///
/// ```
/// assert_eq!(kopf_core::causes::Reason::Create.to_string(), "create");
/// ```
impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.purpose())
    }
}

/// The type of the event that brought the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Seen in a listing (initial or relist).
    Listed,
    /// ADDED from a watch.
    Added,
    /// MODIFIED from a watch.
    Modified,
    /// DELETED from a watch.
    Deleted,
}

/// The detected cause with the diff between the stored essence and the current one.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangingCause {
    /// The reason.
    pub reason: Reason,
    /// The diff from the stored essence to the new one (empty unless update).
    pub diff: Diff,
    /// The stored essence (None when absent or unreadable).
    pub old: Option<Value>,
    /// The current essence.
    pub new: Value,
    /// Whether resume handlers join (first seen in a listing, not yet handled in this process).
    pub initial: bool,
    /// Why the stored essence was ignored, if it could not be read.
    pub corrupt_diffbase: Option<String>,
}

/// Detects the changing cause of an event. `initial` is true for objects first seen in a
/// listing that this process has not fully handled yet.
pub fn detect(
    event: EventKind,
    body: &Value,
    settings: &EssenceSettings,
    finalizer: &str,
    initial: bool,
) -> ChangingCause {
    let new = essence::essence(body, settings);
    let (old, corrupt) = match essence::stored(body, settings)
        .map(|r| r.and_then(|v| essence::check_shape(&v, &new).map(|()| v)))
    {
        None => (None, None),
        Some(Ok(v)) => (Some(v), None),
        Some(Err(e)) => (None, Some(e.to_string())),
    };
    let reason = if event == EventKind::Deleted {
        Reason::Gone
    } else if finalizers::is_deleting(body) && !finalizers::has(body, finalizer) {
        Reason::Free
    } else if finalizers::is_deleting(body) {
        Reason::Delete
    } else if old.is_none() {
        Reason::Create
    } else {
        let d = diff(old.as_ref(), Some(&new));
        if d.is_empty() && initial {
            Reason::Resume
        } else if d.is_empty() {
            Reason::Noop
        } else {
            Reason::Update
        }
    };
    let diff = if reason == Reason::Update {
        diff(old.as_ref(), Some(&new))
    } else {
        Diff::default()
    };
    ChangingCause {
        reason,
        diff,
        old,
        new,
        // Creation never mixes with resuming.
        initial: initial && reason != Reason::Create,
        corrupt_diffbase: corrupt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finalizers::DEFAULT_FINALIZER;
    use serde_json::json;

    fn detect_for(body: Value, event: EventKind, initial: bool) -> ChangingCause {
        detect(
            event,
            &body,
            &EssenceSettings::default(),
            DEFAULT_FINALIZER,
            initial,
        )
    }

    fn with_base(spec: Value, base: &str) -> Value {
        json!({"metadata": {"annotations": {"kopf.zalando.org/last-handled-configuration": base}}, "spec": spec})
    }

    #[test]
    fn kopf_order_of_reasons() {
        let base = "{\"spec\":{\"a\":1}}\n";
        assert_eq!(
            detect_for(with_base(json!({"a": 1}), base), EventKind::Deleted, false).reason,
            Reason::Gone
        );
        let mut deleting = with_base(json!({"a": 1}), base);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            detect_for(deleting.clone(), EventKind::Modified, false).reason,
            Reason::Free
        );
        deleting["metadata"]["finalizers"] = json!([DEFAULT_FINALIZER]);
        assert_eq!(
            detect_for(deleting, EventKind::Modified, false).reason,
            Reason::Delete
        );
        let created = detect_for(json!({"spec": {"a": 1}}), EventKind::Listed, true);
        assert_eq!(created.reason, Reason::Create);
        assert!(!created.initial, "create never mixes with resume");
        assert_eq!(
            detect_for(with_base(json!({"a": 1}), base), EventKind::Listed, true).reason,
            Reason::Resume
        );
        assert_eq!(
            detect_for(with_base(json!({"a": 1}), base), EventKind::Modified, false).reason,
            Reason::Noop
        );
        let updated = detect_for(with_base(json!({"a": 2}), base), EventKind::Modified, false);
        assert_eq!(updated.reason, Reason::Update);
        assert_eq!(
            updated.diff.to_kopf_json(),
            json!([["change", ["spec", "a"], 1, 2]])
        );
    }

    #[test]
    fn corrupt_diffbase_is_a_creation() {
        let c = detect_for(
            with_base(json!({"a": 1}), "{not json"),
            EventKind::Modified,
            false,
        );
        assert_eq!(c.reason, Reason::Create);
        assert!(
            c.corrupt_diffbase
                .is_some_and(|m| m.contains("not valid JSON"))
        );
    }

    #[test]
    fn a_diffbase_of_the_wrong_shape_is_a_creation() {
        for bad in [
            "42",
            "null",
            "[1,2]",
            "\"s\"",
            "{\"spec\":\"x\"}",
            "{\"metadata\":5}",
            "{\"metadata\":{\"labels\":[1]}}",
            "{\"metadata\":{\"annotations\":{\"a\":1}}}",
        ] {
            let c = detect_for(with_base(json!({"a": 1}), bad), EventKind::Modified, false);
            assert_eq!(c.reason, Reason::Create, "{bad}");
            assert!(c.old.is_none(), "{bad}");
            assert!(
                c.corrupt_diffbase
                    .as_deref()
                    .is_some_and(|m| m.contains("not an essence")),
                "{bad}: {:?}",
                c.corrupt_diffbase
            );
        }
        // What Kopf writes is fine, whatever the fields.
        for good in [
            "{}",
            "{\"spec\":{\"a\":0}}",
            "{\"spec\":{\"a\":1},\"metadata\":{\"labels\":{\"l\":\"v\"}}}",
            "{\"data\":{\"k\":\"v\"}}",
        ] {
            let c = detect_for(with_base(json!({"a": 1}), good), EventKind::Modified, false);
            assert!(c.corrupt_diffbase.is_none(), "{good}");
            assert_ne!(c.reason, Reason::Create, "{good}");
        }
    }
}
