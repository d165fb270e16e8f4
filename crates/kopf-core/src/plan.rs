//! The patch plan of one processing cycle: everything the handlers and the framework want to
//! change on an object, folded into at most one request per endpoint.
//!
//! Merge-patch content for the object and for `/status`, plus a change of the operator's
//! finalizer, which travels as JSON-patch operations guarded by a `resourceVersion` test (so
//! other controllers' finalizers are never clobbered). When the resource has no status
//! subresource, status goes with the object's merge patch.
//!
//! The order of the requests is part of the guarantee that no handler's outcome is lost:
//! the `/status` PATCH (the handlers' results) goes first, the object's PATCH (progress
//! records, the diff-base that marks the cause as handled, the finalizer) second. If the
//! second write fails, the cause is not marked handled and the handlers run again; the
//! diff-base never claims a cause whose results are not stored.
//!
//! With the diff-base in the status ([`PatchPlan::diff_base`] of a status location), the
//! results and the diff-base travel in the same `/status` PATCH, which is atomic; what the
//! object still gets (handlers' own patches, annotation progress, a finalizer) is sent
//! FIRST then, so that the write that claims the cause is still the last one
//! ([`PatchPlan::status_claims`]). [`PatchPlan::writes`] gives the writes in that order, each
//! rendered against the object as the write before it left it ([`writes`]).
//!
//! ```
//! use kopf_core::plan::{FinalizerEdit, PatchPlan, PatchRequest};
//! use serde_json::json;
//!
//! let body = json!({"metadata": {"name": "x", "resourceVersion": "7"}});
//! let mut plan = PatchPlan::new();
//! plan.status_result("create_fn", json!({"message": "hello"}));
//! plan.merge(&json!({"metadata": {"annotations": {"kopf.zalando.org/last-handled-configuration": "{}"}}}));
//! let requests = plan.requests(&body, true);
//! assert!(matches!(&requests[0], PatchRequest::MergeStatus(_)), "results first");
//! assert!(matches!(&requests[1], PatchRequest::MergeObject(_)), "the diff-base last");
//!
//! let mut finalizer = PatchPlan::new();
//! finalizer.finalizer(FinalizerEdit::Add("kopf.zalando.org/KopfFinalizerMarker".into()));
//! assert!(matches!(&finalizer.requests(&body, true)[0], PatchRequest::JsonObject(_)));
//! ```

use jiff::Timestamp;
use kopf_diff::{apply_merge_patch, is_noop};
use serde_json::{Map, Value, json};

use crate::conditions::{Intent, apply_intents};
use crate::finalizers;

pub mod writes;

pub use writes::{Stored, WriteKind, WriteStep, Writes};

/// One request the plan turns into.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchRequest {
    /// `PATCH` the object with `application/merge-patch+json`.
    MergeObject(Value),
    /// `PATCH .../status` with `application/merge-patch+json`.
    MergeStatus(Value),
    /// `PATCH` the object with `application/json-patch+json`.
    JsonObject(Vec<Value>),
    /// `PATCH .../status` with `application/json-patch+json`: the cycle's status write when
    /// conditions change, guarded by a `test` of the list it was computed from.
    JsonStatus(Vec<Value>),
}

impl PatchRequest {
    /// Which endpoint it goes to: `status` or `object`.
    pub fn endpoint(&self) -> &'static str {
        match self {
            PatchRequest::MergeStatus(_) | PatchRequest::JsonStatus(_) => "status",
            PatchRequest::MergeObject(_) | PatchRequest::JsonObject(_) => "object",
        }
    }
}

/// A change of the operator's finalizer (its name), sent as guarded JSON-patch operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalizerEdit {
    /// Add it (if absent).
    Add(String),
    /// Remove it (if present).
    Remove(String),
}

impl FinalizerEdit {
    /// The JSON-patch operations against `base` (its resourceVersion test first); empty when
    /// `base` is already as wanted.
    pub fn ops(&self, base: &Value) -> Vec<Value> {
        match self {
            FinalizerEdit::Add(name) => finalizers::add_ops(base, name),
            FinalizerEdit::Remove(name) => finalizers::remove_ops(base, name),
        }
    }
}

/// Everything to write at the end of a cycle.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PatchPlan {
    merge: Value,
    finalizer: Option<FinalizerEdit>,
    /// Condition intents, applied to `status.conditions` of the body written to.
    conditions: Vec<Intent>,
    /// The `metadata.generation` the intents default their `observedGeneration` to.
    generation: Option<i64>,
    /// The `lastTransitionTime` of conditions that change status.
    now: Option<Timestamp>,
    /// The diff-base is in the status part of the merge patch.
    status_claims: bool,
}

impl PatchPlan {
    /// An empty plan.
    pub fn new() -> Self {
        PatchPlan {
            merge: json!({}),
            ..Default::default()
        }
    }

    /// Adds condition intents (after those already there: later ones win per type).
    pub fn conditions(&mut self, intents: Vec<Intent>) {
        self.conditions.extend(intents);
    }

    /// The condition intents of the plan.
    pub fn condition_intents(&self) -> &[Intent] {
        &self.conditions
    }

    /// The generation (default `observedGeneration`) and the time (`lastTransitionTime` of
    /// transitions) the intents are applied with; without a time, the time of rendering.
    pub fn condition_clock(&mut self, generation: Option<i64>, now: Timestamp) {
        self.generation = generation;
        self.now = Some(now);
    }

    /// The generation the intents are applied with.
    pub fn condition_generation(&self) -> Option<i64> {
        self.generation
    }

    /// The new `status.conditions` for `body` (as the merge patch leaves it), or None when
    /// the intents change nothing.
    pub fn conditions_for(&self, body: &Value) -> Option<Vec<Value>> {
        if self.conditions.is_empty() {
            return None;
        }
        let patched = self.merge.pointer("/status/conditions");
        let current = match patched {
            Some(Value::Null) => None,
            Some(v) => Some(v),
            None => body.pointer("/status/conditions"),
        };
        apply_intents(
            current,
            &self.conditions,
            self.generation,
            self.now.unwrap_or_else(crate::clock::now),
        )
    }

    /// Folds a merge patch (from a handler, a progress record, the diff-base...) into the plan.
    pub fn merge(&mut self, patch: &Value) {
        if !patch.is_object() {
            // Only mappings make sense as patches of an object; anything else is ignored.
            return;
        }
        if !self.merge.is_object() {
            self.merge = json!({});
        }
        merge_keep_nulls(&mut self.merge, patch);
    }

    /// The pending merge patch.
    pub fn merge_patch(&self) -> &Value {
        &self.merge
    }

    /// Mutable access to the pending merge patch (for storages that edit it in place).
    pub fn merge_patch_mut(&mut self) -> &mut Value {
        &mut self.merge
    }

    /// Adds or removes the operator's finalizer with this plan's object request.
    pub fn finalizer(&mut self, edit: FinalizerEdit) {
        self.finalizer = Some(edit);
    }

    /// The finalizer change of this plan, if any.
    pub fn finalizer_edit(&self) -> Option<&FinalizerEdit> {
        self.finalizer.as_ref()
    }

    /// Folds the new diff-base (its storage's merge patch) into the plan. When it is in the
    /// status, the status write claims the cause: see [`status_claims`](Self::status_claims).
    pub fn diff_base(&mut self, patch: &Value) {
        self.merge(patch);
        if patch.get("status").is_some() {
            self.status_claims = true;
        }
    }

    /// Whether the status part of the plan carries the diff-base that marks the cause
    /// handled: then, with a status subresource, the `/status` PATCH is sent after the
    /// object's (see [`requests`](Self::requests)).
    pub fn status_claims(&self) -> bool {
        self.status_claims
    }

    /// Sets a handler's result under `status.<id>` (Kopf's result delivery).
    pub fn status_result(&mut self, handler_id: &str, result: Value) {
        self.merge(&json!({"status": {handler_id: result}}));
    }

    /// Whether nothing would be sent.
    pub fn is_empty(&self) -> bool {
        is_noop(&self.merge) && self.finalizer.is_none() && self.conditions.is_empty()
    }

    /// Whether applying the plan to `body` would change nothing.
    pub fn is_noop_for(&self, body: &Value) -> bool {
        is_noop(&self.effective(body))
            && self
                .finalizer
                .as_ref()
                .is_none_or(|edit| edit.ops(body).is_empty())
    }

    /// The merge patch minus what the body already has (so a cycle that changes nothing sends
    /// nothing), with the new `status.conditions` when the intents change them.
    pub fn effective(&self, body: &Value) -> Value {
        let mut out = effective(&self.merge, body);
        if let Some(list) = self.conditions_for(body) {
            merge_keep_nulls(&mut out, &json!({"status": {"conditions": list}}));
        }
        out
    }

    /// The requests, at most one per endpoint, in the order of [`writes`](Self::writes),
    /// all rendered against `body` (as if nothing changed it in between): the status merge
    /// patch first (only with a status subresource), then the object's changes (a merge
    /// patch, or one JSON patch guarded by the resourceVersion test when the finalizer changes
    /// too); the other way round when the status carries the diff-base
    /// ([`status_claims`](Self::status_claims)), so that the write that claims the cause is
    /// the last.
    pub fn requests(&self, body: &Value, status_subresource: bool) -> Vec<PatchRequest> {
        let status = self.status_request(body, status_subresource);
        let object = self.object_request(body, status_subresource);
        if self.object_first(status_subresource) {
            object.into_iter().chain(status).collect()
        } else {
            status.into_iter().chain(object).collect()
        }
    }

    /// The `/status` merge patch (None without a status subresource or when status does
    /// not change).
    pub fn status_request(&self, body: &Value, status_subresource: bool) -> Option<PatchRequest> {
        if !status_subresource {
            return None;
        }
        let effective = match self.merge.get("status") {
            Some(status) => effective(status, body.get("status").unwrap_or(&Value::Null)),
            None => json!({}),
        };
        let changes = !is_noop(&effective) && effective.is_object();
        if let Some(list) = self.conditions_for(body) {
            let mut ops = conditions_guard(body);
            if changes {
                ops.extend(merge_to_json_ops(&json!({"status": effective}), body));
            }
            ops.push(conditions_op(body, changes, list));
            return Some(PatchRequest::JsonStatus(ops));
        }
        changes.then(|| PatchRequest::MergeStatus(json!({"status": effective})))
    }

    /// The object's request against `base`: the body the plan was made for, or the object as
    /// the status write returned it (then the resourceVersion test is that write's, which
    /// is our own). None when the object does not change.
    pub fn object_request(&self, base: &Value, status_subresource: bool) -> Option<PatchRequest> {
        let mut merge = effective(&self.merge, base);
        if status_subresource && let Some(m) = merge.as_object_mut() {
            m.remove("status");
        }
        let merge = (!is_noop(&merge) && merge.is_object()).then_some(merge);
        let finalizer_ops = self
            .finalizer
            .as_ref()
            .map(|edit| edit.ops(base))
            .unwrap_or_default();
        // Without a status subresource, changed conditions go with the object, guarded.
        let conditions = (!status_subresource)
            .then(|| self.conditions_for(base))
            .flatten();
        if finalizer_ops.is_empty() && conditions.is_none() {
            return merge.map(PatchRequest::MergeObject);
        }
        let mut ops = Vec::new();
        if conditions.is_some() && base.pointer("/status/conditions").is_some() {
            ops.extend(conditions_guard(base));
        }
        if finalizer_ops.is_empty() && ops.is_empty() {
            ops.extend(conditions_guard(base));
        }
        ops.extend(finalizer_ops);
        if let Some(m) = &merge {
            ops.extend(merge_to_json_ops(m, base));
        }
        if let Some(list) = conditions {
            let status_patched = merge
                .as_ref()
                .and_then(|m| m.get("status"))
                .is_some_and(Value::is_object);
            ops.push(conditions_op(base, status_patched, list));
        }
        Some(PatchRequest::JsonObject(ops))
    }

    /// The body as it will be after the plan's merge patch (and its conditions).
    pub fn preview(&self, body: &Value) -> Value {
        let mut b = body.clone();
        apply_merge_patch(&mut b, &self.merge);
        if let Some(list) = self.conditions_for(body) {
            apply_merge_patch(&mut b, &json!({"status": {"conditions": list}}));
        }
        b
    }
}

/// The guard of a conditions write: the list it was computed from is still there (`test`
/// compares whole values), or, without a list, the object is unchanged (its
/// resourceVersion).
fn conditions_guard(body: &Value) -> Vec<Value> {
    match body.pointer("/status/conditions") {
        Some(list) => vec![json!({"op": "test", "path": "/status/conditions", "value": list})],
        None => vec![json!({
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": body.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null),
        })],
    }
}

/// The operation that writes the new list: into `status`, or with a new `status` when the
/// body has none (and the other operations add none).
fn conditions_op(body: &Value, status_added: bool, list: Vec<Value>) -> Value {
    if status_added || body.get("status").is_some_and(Value::is_object) {
        json!({"op": "add", "path": "/status/conditions", "value": list})
    } else {
        json!({"op": "add", "path": "/status", "value": {"conditions": list}})
    }
}

/// Merges `patch` into `target`, keeping `null`s (they are deletions to send).
pub(crate) fn merge_keep_nulls(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                match (t.get_mut(k), v) {
                    (Some(existing @ Value::Object(_)), Value::Object(_)) => {
                        merge_keep_nulls(existing, v)
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// JSON-patch operations equivalent to a merge patch applied to `body`.
pub fn merge_to_json_ops(patch: &Value, body: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    walk_ops(patch, Some(body), "", &mut ops);
    ops
}

fn walk_ops(patch: &Value, current: Option<&Value>, path: &str, ops: &mut Vec<Value>) {
    let Some(p) = patch.as_object() else {
        ops.push(json!({"op": "add", "path": path, "value": patch}));
        return;
    };
    for (k, v) in p {
        let child_path = format!("{path}/{}", escape(k));
        let child = current.and_then(|c| c.get(k));
        match v {
            Value::Null => {
                if child.is_some() {
                    ops.push(json!({"op": "remove", "path": child_path}));
                }
            }
            Value::Object(_) if child.is_some_and(Value::is_object) => {
                walk_ops(v, child, &child_path, ops)
            }
            _ => ops.push(json!({"op": "add", "path": child_path, "value": strip_nulls(v)})),
        }
    }
}

/// The part of a merge patch that would change the body.
fn effective(patch: &Value, body: &Value) -> Value {
    let Some(p) = patch.as_object() else {
        return if patch == body {
            json!({})
        } else {
            patch.clone()
        };
    };
    let mut out = Map::new();
    for (k, v) in p {
        let current = body.get(k);
        match v {
            Value::Null if current.is_none_or(Value::is_null) => {}
            Value::Object(_) if current.is_some_and(Value::is_object) => {
                let sub = effective(v, current.unwrap_or(&Value::Null));
                if !is_noop(&sub) {
                    out.insert(k.clone(), sub);
                }
            }
            _ if current == Some(v) => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_per_endpoint_status_first_and_nothing_when_unchanged() {
        let body = json!({"metadata": {"resourceVersion": "3", "annotations": {"a": "1"}}, "status": {"create_fn": {"message": "hi"}}});
        let mut plan = PatchPlan::new();
        plan.merge(&json!({"metadata": {"annotations": {"a": "1"}}}));
        plan.status_result("create_fn", json!({"message": "hi"}));
        assert!(plan.requests(&body, true).is_empty(), "nothing changes");
        assert!(plan.is_noop_for(&body));
        plan.merge(&json!({"metadata": {"annotations": {"b": "2", "gone": null}}}));
        plan.status_result("other_fn", json!(1));
        let reqs = plan.requests(&body, true);
        assert_eq!(
            reqs,
            vec![
                PatchRequest::MergeStatus(json!({"status": {"other_fn": 1}})),
                PatchRequest::MergeObject(json!({"metadata": {"annotations": {"b": "2"}}})),
            ]
        );
        // Without a status subresource, status goes with the object.
        assert_eq!(plan.requests(&body, false).len(), 1);
        plan.finalizer(FinalizerEdit::Add("f".into()));
        // With a finalizer change, the object's changes travel in one guarded JSON patch.
        let reqs = plan.requests(&body, true);
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].endpoint(), "status");
        assert_eq!(
            reqs[1],
            PatchRequest::JsonObject(vec![
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "3"}),
                json!({"op": "add", "path": "/metadata/finalizers", "value": ["f"]}),
                json!({"op": "add", "path": "/metadata/annotations/b", "value": "2"}),
            ])
        );
        // Against the object as the status write returned it: that write's resourceVersion.
        let mut after_status = body.clone();
        after_status["metadata"]["resourceVersion"] = json!("4");
        let Some(PatchRequest::JsonObject(ops)) = plan.object_request(&after_status, true) else {
            panic!("a JSON patch");
        };
        assert_eq!(ops[0]["value"], "4");
        assert_eq!(plan.preview(&body)["status"]["other_fn"], 1);
    }

    #[test]
    fn a_finalizer_already_as_wanted_sends_nothing() {
        let body = json!({"metadata": {"resourceVersion": "3", "finalizers": ["f"]}});
        let mut plan = PatchPlan::new();
        plan.finalizer(FinalizerEdit::Add("f".into()));
        assert!(plan.is_noop_for(&body));
        assert!(plan.requests(&body, true).is_empty());
        plan.finalizer(FinalizerEdit::Remove("f".into()));
        assert!(!plan.is_noop_for(&body));
        assert_eq!(
            plan.requests(&body, true),
            vec![PatchRequest::JsonObject(vec![
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "3"}),
                json!({"op": "remove", "path": "/metadata/finalizers"}),
            ])]
        );
    }

    #[test]
    fn merge_patches_become_equivalent_json_ops() {
        let body = json!({"metadata": {"annotations": {"a/b": "1", "gone": "x"}}});
        let patch = json!({"metadata": {"annotations": {"a/b": "2", "gone": null, "never": null}, "labels": {"l": "v", "n": null}}});
        assert_eq!(
            merge_to_json_ops(&patch, &body),
            vec![
                json!({"op": "add", "path": "/metadata/annotations/a~1b", "value": "2"}),
                json!({"op": "remove", "path": "/metadata/annotations/gone"}),
                json!({"op": "add", "path": "/metadata/labels", "value": {"l": "v"}}),
            ]
        );
    }

    fn ready(status: crate::conditions::ConditionStatus) -> Intent {
        Intent::Set {
            type_: "Ready".into(),
            status,
            reason: "Done".into(),
            message: String::new(),
            observed_generation: None,
        }
    }

    #[test]
    fn changed_conditions_make_the_status_write_one_guarded_json_patch() {
        use crate::conditions::ConditionStatus;
        let now: Timestamp = "2024-01-01T00:00:00Z".parse().expect("time");
        let other = json!({"type": "Other", "status": "True", "reason": "X", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"});
        let body = json!({"metadata": {"resourceVersion": "3", "generation": 2},
            "status": {"old": 1, "conditions": [other]}});
        let mut plan = PatchPlan::new();
        plan.status_result("create_fn", json!({"message": "hi"}));
        plan.merge(&json!({"status": {"old": null}}));
        let merge_only = plan.requests(&body, true);
        assert_eq!(
            merge_only[0],
            PatchRequest::MergeStatus(
                json!({"status": {"create_fn": {"message": "hi"}, "old": null}})
            ),
            "without intents: the merge patch as before"
        );
        plan.conditions(vec![ready(ConditionStatus::True)]);
        plan.condition_clock(Some(2), now);
        assert_eq!(plan.condition_intents().len(), 1);
        let new = json!({"type": "Ready", "status": "True", "reason": "Done", "message": "",
            "lastTransitionTime": "2024-01-01T00:00:00Z", "observedGeneration": 2});
        assert_eq!(
            plan.requests(&body, true),
            vec![PatchRequest::JsonStatus(vec![
                json!({"op": "test", "path": "/status/conditions", "value": [other]}),
                json!({"op": "add", "path": "/status/create_fn", "value": {"message": "hi"}}),
                json!({"op": "remove", "path": "/status/old"}),
                json!({"op": "add", "path": "/status/conditions", "value": [other, new]}),
            ])]
        );
        assert!(!plan.is_noop_for(&body));
        assert_eq!(plan.preview(&body)["status"]["conditions"][1], new);
        // Once stored, nothing is sent again (no hot loop).
        let stored = plan.preview(&body);
        assert!(plan.is_noop_for(&stored));
        assert!(plan.requests(&stored, true).is_empty());

        // No status at all: guarded by the resourceVersion, status added whole.
        let bare = json!({"metadata": {"resourceVersion": "9"}});
        let mut only = PatchPlan::new();
        only.conditions(vec![ready(ConditionStatus::True)]);
        only.condition_clock(None, now);
        let mut new_bare = new.clone();
        new_bare
            .as_object_mut()
            .map(|m| m.remove("observedGeneration"));
        assert_eq!(
            only.requests(&bare, true),
            vec![PatchRequest::JsonStatus(vec![
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "9"}),
                json!({"op": "add", "path": "/status", "value": {"conditions": [new_bare.clone()]}}),
            ])]
        );
        // Without a status subresource: the object's request, guarded the same way.
        assert_eq!(
            only.requests(&bare, false),
            vec![PatchRequest::JsonObject(vec![
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "9"}),
                json!({"op": "add", "path": "/status", "value": {"conditions": [new_bare]}}),
            ])]
        );
    }
}
