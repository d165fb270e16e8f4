//! The patch plan of one processing cycle: everything the handlers and the framework want to
//! change on an object, folded into at most one request per endpoint.
//!
//! Merge-patch content for the object and for `/status`, plus JSON-patch operations (the
//! finalizer) which are sent separately and guarded by a `resourceVersion` test. When the
//! resource has no status subresource, status goes with the object's merge patch.

use kopf_diff::{apply_merge_patch, is_noop};
use serde_json::{Map, Value, json};

/// One request the plan turns into.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchRequest {
    /// `PATCH` the object with `application/merge-patch+json`.
    MergeObject(Value),
    /// `PATCH .../status` with `application/merge-patch+json`.
    MergeStatus(Value),
    /// `PATCH` the object with `application/json-patch+json`.
    JsonObject(Vec<Value>),
}

/// Everything to write at the end of a cycle.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PatchPlan {
    merge: Value,
    json_ops: Vec<Value>,
}

impl PatchPlan {
    /// An empty plan.
    pub fn new() -> Self {
        PatchPlan {
            merge: json!({}),
            json_ops: Vec::new(),
        }
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

    /// Adds JSON-patch operations (a leading `test` of the resourceVersion is kept once).
    pub fn json_ops(&mut self, ops: Vec<Value>) {
        for op in ops {
            let is_test = op.get("op") == Some(&json!("test"));
            if is_test && self.json_ops.iter().any(|o| o == &op) {
                continue;
            }
            self.json_ops.push(op);
        }
    }

    /// Sets a handler's result under `status.<id>` (Kopf's result delivery).
    pub fn status_result(&mut self, handler_id: &str, result: Value) {
        self.merge(&json!({"status": {handler_id: result}}));
    }

    /// Whether nothing would be sent.
    pub fn is_empty(&self) -> bool {
        is_noop(&self.merge) && self.json_ops.is_empty()
    }

    /// Whether applying the plan to `body` would change nothing.
    pub fn is_noop_for(&self, body: &Value) -> bool {
        is_noop(&self.effective(body))
            && self
                .json_ops
                .iter()
                .all(|o| o.get("op") == Some(&json!("test")))
    }

    /// The merge patch minus what the body already has (so a cycle that changes nothing sends
    /// nothing).
    pub fn effective(&self, body: &Value) -> Value {
        effective(&self.merge, body)
    }

    /// The requests, at most one per endpoint: the object's changes (a merge patch, or one
    /// JSON patch guarded by the resourceVersion test when the finalizer changes too), and the
    /// status merge patch (only with a status subresource).
    pub fn requests(&self, body: &Value, status_subresource: bool) -> Vec<PatchRequest> {
        let (object, status) = self.split(body, status_subresource);
        let mut out = Vec::new();
        let has_json = self
            .json_ops
            .iter()
            .any(|o| o.get("op") != Some(&json!("test")));
        if has_json {
            let mut ops = self.json_ops.clone();
            if let Some(m) = &object {
                ops.extend(merge_to_json_ops(m, body));
            }
            out.push(PatchRequest::JsonObject(ops));
        } else if let Some(m) = object {
            out.push(PatchRequest::MergeObject(m));
        }
        if let Some(s) = status {
            out.push(PatchRequest::MergeStatus(s));
        }
        out
    }

    /// The fallback when the guarded JSON patch meets a concurrent change (422): the object's
    /// merge-patch part alone, so handler outcomes are not lost; the finalizer change waits
    /// for the next cycle.
    pub fn merge_only_requests(&self, body: &Value, status_subresource: bool) -> Vec<PatchRequest> {
        let (object, _) = self.split(body, status_subresource);
        object.into_iter().map(PatchRequest::MergeObject).collect()
    }

    fn split(&self, body: &Value, status_subresource: bool) -> (Option<Value>, Option<Value>) {
        let mut merge = self.effective(body);
        let status = if status_subresource {
            merge.as_object_mut().and_then(|m| m.remove("status"))
        } else {
            None
        };
        let object = (!is_noop(&merge) && merge.is_object()).then_some(merge);
        let status = status.filter(|s| !is_noop(s)).map(|s| json!({"status": s}));
        (object, status)
    }

    /// The body as it will be after the plan's merge patch.
    pub fn preview(&self, body: &Value) -> Value {
        let mut b = body.clone();
        apply_merge_patch(&mut b, &self.merge);
        b
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
    fn one_request_per_endpoint_and_nothing_when_unchanged() {
        let body = json!({"metadata": {"annotations": {"a": "1"}}, "status": {"create_fn": {"message": "hi"}}});
        let mut plan = PatchPlan::new();
        plan.merge(&json!({"metadata": {"annotations": {"a": "1"}}}));
        plan.status_result("create_fn", json!({"message": "hi"}));
        assert!(plan.requests(&body, true).is_empty(), "nothing changes");
        plan.merge(&json!({"metadata": {"annotations": {"b": "2", "gone": null}}}));
        plan.status_result("other_fn", json!(1));
        let reqs = plan.requests(&body, true);
        assert_eq!(
            reqs,
            vec![
                PatchRequest::MergeObject(json!({"metadata": {"annotations": {"b": "2"}}})),
                PatchRequest::MergeStatus(json!({"status": {"other_fn": 1}})),
            ]
        );
        // Without a status subresource, status goes with the object.
        assert_eq!(plan.requests(&body, false).len(), 1);
        plan.json_ops(crate::finalizers::add_ops(
            &json!({"metadata": {"resourceVersion": "3"}}),
            "f",
        ));
        // With a finalizer change, the object's changes travel in one guarded JSON patch.
        let reqs = plan.requests(&body, true);
        assert_eq!(reqs.len(), 2);
        assert_eq!(
            reqs[0],
            PatchRequest::JsonObject(vec![
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "3"}),
                json!({"op": "add", "path": "/metadata/finalizers", "value": ["f"]}),
                json!({"op": "add", "path": "/metadata/annotations/b", "value": "2"}),
            ])
        );
        assert_eq!(plan.merge_only_requests(&body, true).len(), 1);
        assert_eq!(plan.preview(&body)["status"]["other_fn"], 1);
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
}
