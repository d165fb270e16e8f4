//! The options and results of the verbs: patch types, write and delete options, the
//! state's configuration, what a write answers.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

/// The patch body types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml`
    Apply,
}

impl PatchType {
    /// Parses a Content-Type.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }

    /// Short name for counters.
    pub fn as_str(self) -> &'static str {
        match self {
            PatchType::Merge => "merge",
            PatchType::Json => "json",
            PatchType::Strategic => "strategic",
            PatchType::Apply => "apply",
        }
    }
}

/// Options of write requests, from the query string and DeleteOptions.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `force` (apply only).
    pub force: Option<bool>,
    /// The User-Agent, for the default field manager.
    pub user_agent: String,
    /// The write is a server-side apply (set by the apply path).
    pub apply: bool,
    /// `fieldValidation`: `Ignore`, `Warn` (the default) or `Strict`.
    pub field_validation: Option<String>,
}

/// Options of DELETE requests.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation: Option<String>,
    /// `orphanDependents` (deprecated).
    pub orphan_dependents: Option<bool>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_rv: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `gracePeriodSeconds`.
    pub grace_period: Option<i64>,
}

/// Server configuration that the state consults.
#[derive(Debug, Clone)]
pub struct StateConfig {
    /// Establish CRDs at once (true) or leave it to a delayed task (false).
    pub establish_immediately: bool,
    /// The longest a terminating scheduled Pod waits for the simulated kubelet.
    pub pod_termination_cap: std::time::Duration,
}

/// The result of a write: HTTP code and body.
#[derive(Debug, Clone)]
pub struct Written {
    /// 200 or 201 (202 for some deletes).
    pub code: u16,
    /// The response body.
    pub body: WrittenBody,
    /// `Warning` headers.
    pub warnings: Vec<String>,
}

impl Written {
    pub(super) fn ok(body: Value) -> Self {
        Written {
            code: 200,
            body: body.into(),
            warnings: Vec::new(),
        }
    }
}

/// The body of a write's response: a value, or the stored object itself when the view of
/// the request presents it as it is stored, with its stored JSON text (sent without being
/// copied or serialised again).
#[derive(Debug, Clone)]
pub enum WrittenBody {
    /// A value to serialise.
    Value(Value),
    /// A stored object and its JSON text.
    Stored(Arc<Value>, Bytes),
}

impl WrittenBody {
    /// The body as a value.
    pub fn value(&self) -> &Value {
        match self {
            WrittenBody::Value(v) => v,
            WrittenBody::Stored(v, _) => v,
        }
    }

    /// The body as an owned value (a stored object is copied unless this is its last user).
    pub fn into_value(self) -> Value {
        match self {
            WrittenBody::Value(v) => v,
            WrittenBody::Stored(v, _) => Arc::unwrap_or_clone(v),
        }
    }

    /// The stored JSON text, when the body is a stored object.
    pub fn stored_json(&self) -> Option<&Bytes> {
        match self {
            WrittenBody::Value(_) => None,
            WrittenBody::Stored(_, json) => Some(json),
        }
    }
}

impl From<Value> for WrittenBody {
    fn from(v: Value) -> Self {
        WrittenBody::Value(v)
    }
}

/// What a PATCH amounts to.
#[derive(Debug, Clone)]
pub(crate) enum PatchTarget {
    /// An apply patch of a missing object: create it from the applied configuration.
    Create(Value, WriteOptions),
    /// The patched object, to be written over the stored one.
    Update(Value, WriteOptions),
}
