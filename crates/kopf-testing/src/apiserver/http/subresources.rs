//! The `/scale` subresource, read and written through the paths the resource declares
//! (`/status` and `/finalize` are object writes with a subresource).

use std::sync::Arc;

use axum::body::Body;
use axum::http::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::semantics::{PatchType, WriteOptions};
use crate::apiserver::sync::lock;

use super::negotiation::decode_body;
use super::response::json_response;
use super::shared::Shared;

fn read_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let pointer = path.trim_start_matches('.').replace('.', "/");
    obj.pointer(&format!("/{pointer}"))
}

pub(super) fn serve_scale(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    verb: &str,
    content_type: &str,
    body: &Bytes,
) -> ApiResult<Response<Body>> {
    let Some(scale) = def.scale.clone() else {
        return Err(ApiError::path_not_found());
    };
    let mut state = lock(&shared.state);
    let obj = state.get(def, ns, name)?;
    let to_scale = |obj: &Value| -> Value {
        let m = &obj["metadata"];
        let mut status = json!({"replicas": read_path(obj, &scale.status_replicas_path).cloned().unwrap_or(json!(0))});
        if let Some(p) = &scale.label_selector_path
            && let Some(sel) = read_path(obj, p)
        {
            status["selector"] = sel.clone();
        }
        json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
                "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"]},
            "spec": {"replicas": read_path(obj, &scale.spec_replicas_path).cloned().unwrap_or(json!(0))},
            "status": status})
    };
    let current = to_scale(&obj);
    let new_scale = match verb {
        "get" => return Ok(json_response(200, &current, &[])),
        "update" => decode_body(content_type, body, false)?,
        "patch" => {
            let pt = PatchType::from_content_type(content_type).ok_or_else(|| {
                ApiError::unsupported_media_type(&["application/merge-patch+json"])
            })?;
            let r = match pt {
                PatchType::Json => crate::apiserver::patch::apply_json_patch(&current, body),
                _ => crate::apiserver::patch::apply_merge_patch(&current, body),
            };
            r.map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?
        }
        other => {
            return Err(ApiError::method_not_allowed(
                other,
                &format!("{}/scale", def.plural),
            ));
        }
    };
    let replicas = new_scale
        .pointer("/spec/replicas")
        .cloned()
        .unwrap_or(json!(0));
    let pointer = format!(
        "/{}",
        scale
            .spec_replicas_path
            .trim_start_matches('.')
            .replace('.', "/")
    );
    let mut ops = vec![json!({"op": "add", "path": pointer, "value": replicas})];
    if let Some(rv) = new_scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        && !rv.is_empty()
    {
        ops.insert(
            0,
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
        );
    }
    let patch = Value::Array(ops).to_string();
    let w = state
        .patch(
            def,
            ns,
            name,
            None,
            PatchType::Json,
            patch.as_bytes(),
            &WriteOptions::default(),
        )
        .map_err(|e| {
            if e.code == 422 {
                ApiError::stale(&def.group, &def.plural, name)
            } else {
                e
            }
        })?;
    Ok(json_response(200, &to_scale(w.body.value()), &[]))
}
