//! The applier: a cycle's [`PatchPlan`] sent to the API server, step by step as
//! [`PatchPlan::writes`] gives them (the order that never loses a handler's outcome is
//! kopf-core's: [`kopf_core::plan::writes`]), with every failure classified, logged and
//! counted.
//!
//! * `404`: the object is gone; nothing more is sent.
//! * `409` on a merge patch: a conflict inside the API server; the same patch is sent again.
//! * `422` on a write that carries handlers' results: the server (a CRD's status schema)
//!   rejects them; the handlers to blame are found from the fields the server names, and
//!   their outcome becomes a failure of theirs (see [`Applied::Rejected`]).
//! * `422`/`409` on the JSON patch guarded by a `resourceVersion` test: the object changed
//!   meanwhile. A deletion's release is retried on the object as it is now (the decision
//!   holds: the deletion was handled); other finalizer changes wait for the newer state.
//! * Anything else (5xx after the client's own retries, no answer, other 4xx) fails the
//!   cycle: the worker throttles the object and processes its latest state again.
//!
//! After a write that carries results, what the server stored is compared with what was
//! sent: fields the server dropped (pruned by a CRD's structural schema) are reported.

use std::time::Duration;

use kopf_core::metrics::Metrics;
use kopf_core::plan::{PatchPlan, PatchRequest, Stored, WriteKind, WriteStep};
use kopf_core::text::excerpt;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};

use crate::raw::RawObject;
use serde_json::Value;

use crate::conditions::{Guarded, write_guarded};

/// Sends of one merge patch answered 409 before the cycle gives up.
const CONFLICT_ATTEMPTS: u32 = 3;
/// Re-reads and re-sends of a deletion's release after concurrent changes.
const RELEASE_ATTEMPTS: u32 = 3;
/// The longest part of an API message kept in failures and logs.
const MESSAGE_EXCERPT: usize = 500;

/// How a plan's writes went.
#[derive(Debug)]
pub(crate) enum Applied {
    /// Everything was stored; `rv` is the resourceVersion of the last write (None: nothing
    /// was sent). `pruned` lists the fields of handlers' results that the server dropped.
    Written {
        rv: Option<u64>,
        pruned: Vec<Pruned>,
    },
    /// The object does not exist any more.
    Gone,
    /// The object changed since it was observed (a guarded JSON patch failed its test): the
    /// newer state will come through the watch.
    Conflict(String),
    /// The API server rejected handlers' results (`422` on the write that carried them):
    /// nothing after that write was sent, so nothing claims the cause handled.
    Rejected {
        /// The write's endpoint.
        endpoint: &'static str,
        /// The handlers to blame, with the fields the server named and its message.
        handlers: Vec<Rejection>,
    },
    /// A write failed: nothing after it was sent.
    Failed(WriteFailure),
}

/// A handler whose result the API server rejected.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejection {
    /// The handler's id.
    pub handler: String,
    /// The fields the server named (dotted, e.g. `status.create_fn.message`).
    pub fields: Vec<String>,
    /// The server's message (cut to a sane length).
    pub message: String,
}

/// A field of a handler's result that the API server did not store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Pruned {
    /// The handler's id.
    pub handler: String,
    /// The dotted path, e.g. `status.create_fn.extra`.
    pub path: String,
}

/// A write that failed for good.
#[derive(Debug, Clone)]
pub(crate) struct WriteFailure {
    /// `status` or `object`.
    pub endpoint: &'static str,
    /// The HTTP status code (0: no answer).
    pub code: u16,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.endpoint {
            "status" => "PATCH of the object's status",
            _ => "PATCH of the object",
        };
        if self.code == 0 {
            write!(f, "the {what} failed: {}", self.message)
        } else {
            write!(f, "the {what} failed with {}: {}", self.code, self.message)
        }
    }
}

/// Sends plans for the objects of one resource.
pub(crate) struct Writer<'a> {
    /// The object's API (its namespace).
    pub api: Api<RawObject>,
    /// Whether the resource has a `/status` subresource.
    pub status_subresource: bool,
    /// Where failures are counted.
    pub metrics: Option<&'a Metrics>,
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some("kopf-rs".into()),
        ..Default::default()
    }
}

fn written_rv(obj: &RawObject) -> Option<u64> {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|s| s.parse().ok())
}

/// The resourceVersion to wait for after a write that released a deleted object: none ever
/// comes when it was the last finalizer (the object is gone; only its DELETED event follows),
/// so the worker must take no state it still has for newer than its own write (Kopf's
/// `"<rv>~which~never~arrives"`). A stale state processed then would run the delete handlers
/// again on an object that is already gone.
const NEVER_ARRIVES: u64 = u64::MAX;

fn released_rv(obj: &RawObject, releasing: bool) -> Option<u64> {
    let last = obj
        .body
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if releasing && last {
        Some(NEVER_ARRIVES)
    } else {
        written_rv(obj)
    }
}

/// The HTTP code and message of a client error (code 0: no answer).
fn code_and_message(error: &kube::Error) -> (u16, String) {
    match error {
        kube::Error::Api(s) => (s.code, excerpt(&s.message, MESSAGE_EXCERPT).into_owned()),
        other => (0, excerpt(&other.to_string(), MESSAGE_EXCERPT).into_owned()),
    }
}

impl Writer<'_> {
    fn failure(&self, endpoint: &'static str, error: &kube::Error) -> WriteFailure {
        let (code, message) = code_and_message(error);
        if let Some(m) = self.metrics {
            m.write_failure(endpoint, code);
        }
        WriteFailure {
            endpoint,
            code,
            message,
        }
    }

    /// Sends `plan` for the object `body` (as observed): the steps of
    /// [`PatchPlan::writes`], in its order. `delivered` is what handlers put into its status
    /// this cycle (see [`kopf_core::processing::CycleOutcome::delivered`]).
    pub async fn apply(
        &self,
        body: &Value,
        plan: &PatchPlan,
        delivered: &[(String, Value)],
    ) -> Applied {
        let name = body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut writes = plan.writes(body, self.status_subresource);
        let mut pruned = Vec::new();
        while let Some(step) = writes.next() {
            let results = step.results;
            let stored = match self.send(name, step, plan, writes.base(), delivered).await {
                Ok(stored) => stored,
                Err(applied) => return applied,
            };
            if results && let Stored::Object(object) = &stored {
                pruned = pruned_fields(delivered, object);
            }
            writes.stored(stored);
        }
        Applied::Written {
            rv: writes.rv(),
            pruned,
        }
    }

    /// One step of a plan, rendered against `base`; its refusals handled as its kind says.
    async fn send(
        &self,
        name: &str,
        step: WriteStep,
        plan: &PatchPlan,
        base: &Value,
        delivered: &[(String, Value)],
    ) -> Result<Stored, Applied> {
        let endpoint = step.request.endpoint();
        let status = endpoint == "status";
        // A 422 blames the handlers only on the write that carries their results.
        let results = if step.results { delivered } else { &[] };
        match (step.request, step.kind) {
            (PatchRequest::MergeStatus(patch) | PatchRequest::MergeObject(patch), _) => {
                match self.merge(name, &patch, status).await {
                    Ok(obj) => Ok(Stored::Object(as_body(obj))),
                    Err(e) => Err(self.merge_failed(endpoint, name, &e, results)),
                }
            }
            (
                PatchRequest::JsonStatus(ops) | PatchRequest::JsonObject(ops),
                WriteKind::Finalizer { releasing },
            ) => self
                .guarded(name, ops, plan, releasing)
                .await
                .map(Stored::Version),
            (PatchRequest::JsonStatus(ops) | PatchRequest::JsonObject(ops), _) => self
                .conditions(name, plan, base, status, ops, results)
                .await
                .map(|obj| Stored::Object(as_body(obj))),
        }
    }

    /// One merge patch; 409 answers are conflicts inside the API server: sent again.
    async fn merge(
        &self,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<RawObject, kube::Error> {
        let params = patch_params();
        let mut attempt = 1;
        loop {
            let result = if status {
                self.api
                    .patch_status(name, &params, &Patch::Merge(patch))
                    .await
            } else {
                self.api.patch(name, &params, &Patch::Merge(patch)).await
            };
            match result {
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_ATTEMPTS => {
                    tracing::debug!(
                        "The PATCH of the object{} met a conflict ({}); sending it again.",
                        if status { "'s status" } else { "" },
                        s.message
                    );
                    attempt += 1;
                    let delay = jitter(Duration::from_millis(100 * u64::from(attempt)));
                    kopf_core::clock::sleep(delay, "a conflicting write's retry").await;
                }
                other => return other,
            }
        }
    }

    /// A write of changed conditions (with the cycle's other changes of that endpoint):
    /// retried on the fresh object when another writer changed the list; a 422 with the
    /// list unchanged is the server refusing the handlers' results.
    async fn conditions(
        &self,
        name: &str,
        plan: &PatchPlan,
        body: &Value,
        status: bool,
        ops: Vec<Value>,
        delivered: &[(String, Value)],
    ) -> Result<RawObject, Applied> {
        let endpoint = if status { "status" } else { "object" };
        match write_guarded(&self.api, name, plan, body, status, ops).await {
            Guarded::Stored(obj) | Guarded::Unneeded(obj) => Ok(obj),
            Guarded::Gone => Err(Applied::Gone),
            Guarded::Refused(s) => {
                Err(self.merge_failed(endpoint, name, &kube::Error::Api(Box::new(s)), delivered))
            }
            Guarded::Conflict(message) => {
                if let Some(m) = self.metrics {
                    m.write_failure(endpoint, 409);
                }
                Err(Applied::Conflict(message))
            }
            Guarded::Failed(e) => Err(Applied::Failed(self.failure(endpoint, &e))),
        }
    }

    /// What a failed merge patch means for the cycle.
    fn merge_failed(
        &self,
        endpoint: &'static str,
        name: &str,
        error: &kube::Error,
        delivered: &[(String, Value)],
    ) -> Applied {
        match error {
            kube::Error::Api(s) if s.code == 404 => {
                tracing::debug!("The object {name} does not exist anymore.");
                Applied::Gone
            }
            kube::Error::Api(s) if s.code == 422 && !delivered.is_empty() => {
                if let Some(m) = self.metrics {
                    m.write_failure(endpoint, 422);
                }
                Applied::Rejected {
                    endpoint,
                    handlers: blame(delivered, s),
                }
            }
            other => Applied::Failed(self.failure(endpoint, other)),
        }
    }

    /// The guarded JSON patch (a finalizer change with the object's other changes). A failed
    /// `resourceVersion` test means the object changed since it was read.
    async fn guarded(
        &self,
        name: &str,
        mut ops: Vec<Value>,
        plan: &PatchPlan,
        releasing: bool,
    ) -> Result<Option<u64>, Applied> {
        let mut attempt = 1;
        loop {
            let patch = match serde_json::from_value::<json_patch::Patch>(Value::Array(ops)) {
                Ok(p) => p,
                Err(e) => {
                    return Err(Applied::Failed(WriteFailure {
                        endpoint: "object",
                        code: 0,
                        message: format!("an internal JSON patch is malformed: {e}"),
                    }));
                }
            };
            let error = match self
                .api
                .patch(name, &patch_params(), &Patch::Json::<()>(patch))
                .await
            {
                Ok(obj) => return Ok(released_rv(&obj, releasing)),
                Err(e) => e,
            };
            let conflict = match &error {
                kube::Error::Api(s) if s.code == 404 => return Err(Applied::Gone),
                kube::Error::Api(s) if failed_test(s) => s.message.clone(),
                // Any other 422 is the server refusing the content (a field too long, ...):
                // a failure with the server's words, not a change of the object.
                other => return Err(Applied::Failed(self.failure("object", other))),
            };
            if !releasing || attempt >= RELEASE_ATTEMPTS {
                if releasing && let Some(m) = self.metrics {
                    m.write_failure("object", 409);
                }
                return Err(Applied::Conflict(
                    excerpt(&conflict, MESSAGE_EXCERPT).into_owned(),
                ));
            }
            // The deletion was handled: release the object as it is now.
            tracing::debug!(
                "The object changed while its deletion was handled ({conflict}); releasing it as it is now."
            );
            attempt += 1;
            let fresh = match self.api.get_opt(name).await {
                Ok(Some(obj)) => as_body(obj),
                Ok(None) => return Err(Applied::Gone),
                Err(e) => return Err(Applied::Failed(self.failure("object", &e))),
            };
            match plan.object_request(&fresh, self.status_subresource) {
                Some(PatchRequest::JsonObject(next)) => ops = next,
                Some(PatchRequest::MergeObject(patch)) => {
                    // Someone else removed our finalizer: only the rest is left to write.
                    return match self.merge(name, &patch, false).await {
                        Ok(obj) => Ok(released_rv(&obj, releasing)),
                        Err(e) => Err(self.merge_failed("object", name, &e, &[])),
                    };
                }
                _ => return Ok(None),
            }
        }
    }
}

/// An object returned by the API server as a body (for the next request's base).
fn as_body(obj: RawObject) -> Value {
    std::sync::Arc::unwrap_or_clone(obj.body)
}

/// `d` times a random factor in [0.5, 1].
fn jitter(d: Duration) -> Duration {
    kopf_core::backoff::Jitter::Shorten(0.5).apply(d)
}

/// The dotted paths of the leaves (non-null scalars, lists, empty objects) of a fragment.
fn leaves(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(v, &p, out);
            }
        }
        Value::Null => {}
        _ => out.push(path.to_string()),
    }
}

/// Whether a dotted path exists in `data` (the object without its metadata).
fn has_path(data: &Value, path: &str) -> bool {
    let mut at = data;
    for key in path.split('.') {
        match at.get(key) {
            Some(v) => at = v,
            None => return false,
        }
    }
    true
}

/// The fields of the delivered fragments that the stored object lacks.
pub(crate) fn pruned_fields(delivered: &[(String, Value)], stored: &Value) -> Vec<Pruned> {
    let mut out = Vec::new();
    for (handler, fragment) in delivered {
        let mut paths = Vec::new();
        leaves(fragment, "", &mut paths);
        for path in paths {
            if !has_path(stored, &path) {
                let p = Pruned {
                    handler: handler.clone(),
                    path,
                };
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// The dotted segments of a field as the API server names it (`status.a[0].b`).
fn segments(field: &str) -> Vec<&str> {
    field
        .split(['.', '[', ']'])
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether one path is a prefix of the other (segment-wise).
fn related(a: &[&str], b: &[&str]) -> bool {
    a.iter().zip(b).all(|(x, y)| x == y)
}

/// Whether a refusal of the guarded JSON patch means that its `resourceVersion` test failed
/// (the object changed since it was read): a 409, or the 422 with which kube-apiserver
/// answers a JSON patch that does not apply (`NewGenericServerResponse`: its generic message
/// and no word of the patch's own error). Another 422 refuses the content.
fn failed_test(s: &kube::core::Status) -> bool {
    s.code == 409
        || (s.code == 422
            && s.message == "the server rejected our request due to an error in our request")
}

/// The fields a 422 names: its causes', else `status.…` words of its message.
fn rejected_fields(status: &kube::core::Status) -> Vec<String> {
    let mut fields: Vec<String> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.field.clone())
        .filter(|f| !f.is_empty())
        .collect();
    if fields.is_empty() {
        fields = status
            .message
            .split(|c: char| c.is_whitespace() || c == ',' || c == ':' || c == '[')
            .filter(|w| w.starts_with("status."))
            .map(|w| w.trim_end_matches(['.', ']']).to_string())
            .collect();
    }
    fields.sort();
    fields.dedup();
    fields
}

/// The handlers whose delivered fragments the rejected fields point at; all of them when
/// the fields point at none (the server's message then says what is wrong).
pub(crate) fn blame(delivered: &[(String, Value)], status: &kube::core::Status) -> Vec<Rejection> {
    let fields = rejected_fields(status);
    let message = excerpt(&status.message, MESSAGE_EXCERPT).into_owned();
    let mut out: Vec<Rejection> = Vec::new();
    for (handler, fragment) in delivered {
        let mut paths = Vec::new();
        leaves(fragment, "", &mut paths);
        let hit: Vec<String> = fields
            .iter()
            .filter(|f| {
                let fs = segments(f);
                paths.iter().any(|p| related(&segments(p), &fs))
            })
            .cloned()
            .collect();
        if hit.is_empty() {
            continue;
        }
        match out.iter_mut().find(|r| &r.handler == handler) {
            Some(r) => {
                r.fields.extend(hit);
                r.fields.sort();
                r.fields.dedup();
            }
            None => out.push(Rejection {
                handler: handler.clone(),
                fields: hit,
                message: message.clone(),
            }),
        }
    }
    if out.is_empty() {
        let mut seen = std::collections::HashSet::new();
        out = delivered
            .iter()
            .filter(|(h, _)| seen.insert(h.clone()))
            .map(|(handler, _)| Rejection {
                handler: handler.clone(),
                fields: fields.clone(),
                message: message.clone(),
            })
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status_422(message: &str, fields: &[&str]) -> kube::core::Status {
        serde_json::from_value(json!({
            "code": 422, "reason": "Invalid", "message": message,
            "details": {"causes": fields.iter().map(|f| json!({"reason": "FieldValueInvalid", "field": f})).collect::<Vec<_>>()},
        }))
        .expect("a Status")
    }

    fn delivered() -> Vec<(String, Value)> {
        vec![
            (
                "create_fn".into(),
                json!({"status": {"create_fn": {"message": 1, "n": null}}}),
            ),
            ("other_fn".into(), json!({"status": {"other_fn": "ok"}})),
            (
                "patcher".into(),
                json!({"status": {"shared": {"list": [1, 2]}}}),
            ),
        ]
    }

    #[test]
    fn the_fields_a_server_names_blame_their_handlers() {
        let s = status_422("invalid", &["status.create_fn.message"]);
        let r = blame(&delivered(), &s);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].handler, "create_fn");
        assert_eq!(r[0].fields, vec!["status.create_fn.message"]);
        // A whole result refused (its parent field named), and a list item.
        let s = status_422("invalid", &["status.other_fn", "status.shared.list[1]"]);
        let names: Vec<String> = blame(&delivered(), &s)
            .into_iter()
            .map(|r| r.handler)
            .collect();
        assert_eq!(names, vec!["other_fn", "patcher"]);
        // No causes: the message's fields.
        let s = status_422(
            r#"KopfExample.kopf.dev "k" is invalid: status.other_fn: Invalid value: "string": status.other_fn in body must be of type object"#,
            &[],
        );
        let r = blame(&delivered(), &s);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].handler, "other_fn");
        // Nothing points at a handler: all are blamed, with the server's message.
        let s = status_422("status is broken", &["status.unrelated"]);
        assert_eq!(blame(&delivered(), &s).len(), 3);
    }

    #[test]
    fn dropped_fields_are_found_per_handler() {
        let stored =
            json!({"status": {"create_fn": {}, "other_fn": "ok", "shared": {"list": [1, 2]}}});
        assert_eq!(
            pruned_fields(&delivered(), &stored),
            vec![Pruned {
                handler: "create_fn".into(),
                path: "status.create_fn.message".into()
            }],
            "nulls are deletions, not results"
        );
        assert!(pruned_fields(&delivered(), &json!({"status": {"create_fn": {"message": 1}, "other_fn": "x", "shared": {"list": []}}})).is_empty());
    }
}
