//! Writes of `status.conditions`: one JSON patch guarded by a `test` of the list it was
//! computed from (or of the resourceVersion when the object has no list). When the test
//! fails (422: another writer changed the list meanwhile), the object is read again and the
//! plan's intents are applied to the fresh list, keeping the other writer's types; at most
//! [`ATTEMPTS`] sends. A 422 while the guarded list is unchanged is not a concurrent change
//! but the server refusing the content (a CRD's schema): the caller decides what that means.
//!
//! [`ApiConditionsSync`] is the [`ConditionsSync`] of a cycle: a handler's
//! `Conditions::sync()` writes through it at once.

use std::sync::{Arc, Mutex};

use kopf_core::conditions::{ConditionsSync, Intent, SyncFuture};
use kopf_core::plan::{PatchPlan, PatchRequest};
use kopf_core::text::excerpt;
use kube::api::{Api, Patch, PatchParams};

use crate::raw::RawObject;
use serde_json::Value;

/// Sends of a guarded conditions write (the first and the retries on fresh objects).
pub(crate) const ATTEMPTS: u32 = 3;

/// How a guarded conditions write ended.
#[derive(Debug)]
pub(crate) enum Guarded {
    /// Stored: the object as the server returned it.
    Stored(RawObject),
    /// Nothing left to write on the fresh object (another writer set the same): the fresh
    /// object.
    Unneeded(RawObject),
    /// The server refused the content (422 while the guarded list was unchanged).
    Refused(kube::core::Status),
    /// The list kept changing under us: given up.
    Conflict(String),
    /// The object is gone.
    Gone,
    /// Another failure.
    Failed(kube::Error),
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some("kopf-rs".into()),
        ..Default::default()
    }
}

/// Whether the guard computed on `base` still holds on `fresh`.
fn guard_holds(base: &Value, fresh: &Value) -> bool {
    let list = |v: &Value| v.pointer("/status/conditions").cloned();
    let rv = |v: &Value| v.pointer("/metadata/resourceVersion").cloned();
    match list(base) {
        Some(l) => list(fresh) == Some(l),
        None => list(fresh).is_none() && rv(fresh) == rv(base),
    }
}

async fn send(
    api: &Api<RawObject>,
    name: &str,
    ops: Vec<Value>,
    status: bool,
) -> Result<RawObject, kube::Error> {
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)?;
    let patch = Patch::Json::<()>(patch);
    if status {
        api.patch_status(name, &params(), &patch).await
    } else {
        api.patch(name, &params(), &patch).await
    }
}

/// Writes `ops` (the plan's guarded JSON patch for `body`, on `/status` when `status`,
/// else on the object), re-reading the object and re-applying the plan on conflicts.
pub(crate) async fn write_guarded(
    api: &Api<RawObject>,
    name: &str,
    plan: &PatchPlan,
    body: &Value,
    status: bool,
    mut ops: Vec<Value>,
) -> Guarded {
    let mut base = body.clone();
    let mut attempt = 1;
    loop {
        let error = match send(api, name, ops.clone(), status).await {
            Ok(obj) => return Guarded::Stored(obj),
            Err(e) => e,
        };
        let s = match error {
            kube::Error::Api(s) if s.code == 404 => return Guarded::Gone,
            kube::Error::Api(s) if s.code == 422 || s.code == 409 => s,
            other => return Guarded::Failed(other),
        };
        if attempt >= ATTEMPTS {
            return Guarded::Conflict(excerpt(&s.message, 500).into_owned());
        }
        attempt += 1;
        let fresh_obj = match api.get_opt(name).await {
            Ok(Some(obj)) => obj,
            Ok(None) => return Guarded::Gone,
            Err(e) => return Guarded::Failed(e),
        };
        let fresh = serde_json::Value::clone(&fresh_obj.body);
        // On the object, the patch may carry a finalizer's resourceVersion test too: only
        // an unchanged object makes the 422 the server's refusal of the content.
        let unchanged = status
            || base.pointer("/metadata/resourceVersion")
                == fresh.pointer("/metadata/resourceVersion");
        if guard_holds(&base, &fresh) && unchanged {
            if s.code == 422 {
                return Guarded::Refused(*s);
            }
            // A 409 inside the API server: the same patch again.
            continue;
        }
        tracing::debug!(
            "The object's conditions changed while they were written ({}); writing them again on the fresh object.",
            excerpt(&s.message, 200)
        );
        let next = if status {
            plan.status_request(&fresh, true)
        } else {
            plan.object_request(&fresh, false)
        };
        match next {
            Some(PatchRequest::JsonStatus(next)) | Some(PatchRequest::JsonObject(next)) => {
                ops = next;
                base = fresh;
            }
            Some(PatchRequest::MergeStatus(p)) => {
                // The conditions are as wanted now; the rest is a plain merge patch.
                return match api.patch_status(name, &params(), &Patch::Merge(&p)).await {
                    Ok(obj) => Guarded::Stored(obj),
                    Err(kube::Error::Api(s)) if s.code == 422 => Guarded::Refused(*s),
                    Err(e) => Guarded::Failed(e),
                };
            }
            Some(PatchRequest::MergeObject(p)) => {
                return match api.patch(name, &params(), &Patch::Merge(&p)).await {
                    Ok(obj) => Guarded::Stored(obj),
                    Err(kube::Error::Api(s)) if s.code == 422 => Guarded::Refused(*s),
                    Err(e) => Guarded::Failed(e),
                };
            }
            None => return Guarded::Unneeded(fresh_obj),
        }
    }
}

/// What a sync's guarded write is computed from: the object's identity and version, and
/// its status reduced to the conditions (an empty status if it has one, so that the write
/// adds the list into it rather than replacing it). Every cycle makes a sync, most never
/// use it: this keeps it from copying the whole object.
fn sync_base(body: &Value) -> Value {
    let mut metadata = serde_json::Map::new();
    for key in ["name", "namespace", "uid", "resourceVersion", "generation"] {
        if let Some(v) = body.pointer(&format!("/metadata/{key}")) {
            metadata.insert(key.to_string(), v.clone());
        }
    }
    let mut base = serde_json::Map::new();
    base.insert("metadata".into(), Value::Object(metadata));
    if let Some(status) = body.get("status").filter(|s| s.is_object()) {
        let mut reduced = serde_json::Map::new();
        if let Some(list) = status.get("conditions") {
            reduced.insert("conditions".into(), list.clone());
        }
        base.insert("status".into(), Value::Object(reduced));
    }
    Value::Object(base)
}

/// The [`ConditionsSync`] of one object's cycle: writes the intents it is given at once, as
/// a guarded JSON patch (retried on a fresh object as the cycle's own write is).
pub(crate) struct ApiConditionsSync {
    api: Api<RawObject>,
    status_subresource: bool,
    /// The cycle's body (the base of the first sync, reduced then).
    origin: Arc<Value>,
    /// The object as our last sync returned it (None: nothing synced yet).
    body: Arc<Mutex<Option<Value>>>,
}

impl ApiConditionsSync {
    /// A writer for the object `body` through `api` (nothing is copied until a handler
    /// syncs: most cycles never do).
    pub(crate) fn new(api: Api<RawObject>, body: &Arc<Value>, status_subresource: bool) -> Self {
        ApiConditionsSync {
            api,
            status_subresource,
            origin: body.clone(),
            body: Arc::default(),
        }
    }

    /// The object as the last sync wrote it (None when nothing was synced): the cycle's
    /// own write goes against it, so that its guard expects the synced list.
    pub(crate) fn synced_body(&self) -> Option<Value> {
        self.body.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl ConditionsSync for ApiConditionsSync {
    fn sync(&self, intents: Vec<Intent>) -> SyncFuture<Result<(), String>> {
        let api = self.api.clone();
        let origin = self.origin.clone();
        let status = self.status_subresource;
        let shared = self.body.clone();
        Box::pin(async move {
            let name = origin
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let synced = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let body = synced.unwrap_or_else(|| sync_base(&origin));
            let mut plan = PatchPlan::new();
            plan.conditions(intents);
            plan.condition_clock(
                body.pointer("/metadata/generation").and_then(Value::as_i64),
                kopf_core::clock::now(),
            );
            let request = if status {
                plan.status_request(&body, true)
            } else {
                plan.object_request(&body, false)
            };
            let ops = match request {
                Some(PatchRequest::JsonStatus(ops)) | Some(PatchRequest::JsonObject(ops)) => ops,
                _ => return Ok(()),
            };
            let stored = match write_guarded(&api, name, &plan, &body, status, ops).await {
                Guarded::Stored(obj) | Guarded::Unneeded(obj) => obj,
                Guarded::Refused(s) => {
                    return Err(format!(
                        "the API server refused the conditions ({}): {}",
                        s.code,
                        excerpt(&s.message, 500)
                    ));
                }
                Guarded::Conflict(m) => {
                    return Err(format!(
                        "the conditions kept changing while they were written: {m}"
                    ));
                }
                Guarded::Gone => return Err("the object does not exist anymore".into()),
                Guarded::Failed(e) => return Err(e.to_string()),
            };
            *shared.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Arc::unwrap_or_clone(stored.body));
            tracing::debug!("The conditions are written (synced by a handler).");
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_syncs_base_keeps_what_its_guarded_write_needs_and_no_more() {
        let body = json!({
            "metadata": {"name": "x", "resourceVersion": "7", "generation": 2, "labels": {"a": "b"}},
            "spec": {"big": "yes"},
            "status": {"create_fn": {"message": "hi"}, "conditions": [{"type": "Other"}]},
        });
        assert_eq!(
            sync_base(&body),
            json!({
                "metadata": {"name": "x", "resourceVersion": "7", "generation": 2},
                "status": {"conditions": [{"type": "Other"}]},
            })
        );
        // A status without conditions stays a (reduced) status: the list is added into it.
        let no_list = json!({"metadata": {"name": "x"}, "status": {"create_fn": 1}});
        assert_eq!(sync_base(&no_list)["status"], json!({}));
        let mut plan = PatchPlan::new();
        plan.conditions(vec![Intent::set(
            "Ready",
            kopf_core::conditions::ConditionStatus::True,
            "Done",
            "",
        )]);
        let Some(PatchRequest::JsonStatus(ops)) = plan.status_request(&sync_base(&no_list), true)
        else {
            panic!("a guarded JSON patch");
        };
        assert!(
            ops.iter().all(|op| op["path"] != "/status"),
            "the status is never replaced whole: {ops:?}"
        );
    }

    #[test]
    fn the_guard_holds_while_the_list_or_the_version_is_unchanged() {
        let a = json!({"metadata": {"resourceVersion": "1"}, "status": {"conditions": [{"type": "A"}]}});
        let mut b = a.clone();
        b["metadata"]["resourceVersion"] = json!("2");
        assert!(
            guard_holds(&a, &b),
            "only the list counts when there is one"
        );
        b["status"]["conditions"] = json!([{"type": "A"}, {"type": "Other"}]);
        assert!(!guard_holds(&a, &b));
        let bare = json!({"metadata": {"resourceVersion": "1"}});
        assert!(guard_holds(&bare, &bare));
        let newer = json!({"metadata": {"resourceVersion": "2"}});
        assert!(!guard_holds(&bare, &newer));
    }
}
