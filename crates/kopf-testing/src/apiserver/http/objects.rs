//! The object endpoints: get, create, update, patch, delete and deletecollection of a
//! resource, through admission and conversion; lists, watches and `/scale` are handed on.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Response, header};
use bytes::Bytes;
use serde_json::Value;

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::semantics::PatchType;
use crate::apiserver::semantics::Written;
use crate::apiserver::sync::lock;
use crate::apiserver::webhooks::admission::{self, Edit, Rejected};
use crate::apiserver::webhooks::conversion::{self, CrdConversion};

use super::list::list;
use super::logs::serve_log;
use super::negotiation::{decode_body, header_str};
use super::options::{delete_options, write_options};
use super::partial::Transform;
use super::query::{Query, Selectors};
use super::response::{
    error_response, json_bytes_response, json_response, rejected_response, written_response,
};
use super::routing::{ResourceRequest, resolve_verb};
use super::shared::Shared;
use super::special;
use super::subresources::serve_scale;
use super::watch::watch;

pub(super) async fn serve_resource(
    shared: &Arc<Shared>,
    rr: ResourceRequest,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    body: &Bytes,
) -> ApiResult<Response<Body>> {
    let def = lock(&shared.state)
        .find(&rr.group, &rr.version, &rr.plural)
        .ok_or_else(ApiError::path_not_found)?;
    if def.namespaced && rr.namespace.is_none() && rr.name.is_some() {
        return Err(ApiError::path_not_found());
    }
    if !def.namespaced && rr.namespace.is_some() {
        return Err(ApiError::path_not_found());
    }
    match rr.subresource.as_deref() {
        None => {}
        Some("status") if def.status => {}
        Some("scale") if def.scale.is_some() => {}
        Some(s) if def.subresource(s).is_some() => {}
        Some(_) => return Err(ApiError::path_not_found()),
    }
    let verb = resolve_verb(method, &rr, query);
    if let Some(resp) = special::serve(shared, &def, &rr, &verb, headers, query, body).await? {
        return Ok(resp);
    }
    let ns = rr.namespace.as_deref();
    let content_type = header_str(headers, header::CONTENT_TYPE);
    let sub = rr.subresource.as_deref();
    let name = rr.name.clone().unwrap_or_default();
    if sub == Some("scale") {
        return serve_scale(shared, &def, ns, &name, &verb, &content_type, body);
    }
    if sub == Some("log") {
        return serve_log(shared, ns, &name, &verb, query);
    }
    let sub = if sub == Some("finalize") { None } else { sub };
    let transform = Transform::new(&header_str(headers, header::ACCEPT), query);
    if matches!(verb.as_str(), "get" | "list" | "watch") {
        transform.options(query)?;
    }
    // The response of a write, transformed as asked (after the write, as kube-apiserver
    // does it: a bad `includeObject` is refused once the write is done).
    let written = |result| respond_written(&def, &transform, query, result);
    match verb.as_str() {
        "get" => {
            // An object its view presents as it is stored: its stored text is the body.
            if transform.is_identity()
                && let Some(json) = lock(&shared.state).stored_json_as_presented(&def, ns, &name)
            {
                return Ok(json_bytes_response(200, json, &[]));
            }
            let (raw, conv) = {
                let state = lock(&shared.state);
                let raw = state.get_stored(&def, ns, &name)?;
                let conv = if def.is_custom()
                    && raw.get("apiVersion").and_then(Value::as_str)
                        != Some(def.api_version().as_str())
                {
                    CrdConversion::lookup_webhook(&state, &def)
                } else {
                    None
                };
                (raw, conv)
            };
            let obj = conversion::present_all(&**shared, conv.as_ref(), &def, vec![raw])
                .await?
                .into_iter()
                .next()
                .unwrap_or(Value::Null);
            Ok(json_response(200, &transform.object(&def, obj)?, &[]))
        }
        "list" => list(shared, &def, ns, query, transform).await,
        "watch" => watch(shared, &def, ns, rr.name.as_deref(), query, transform),
        "create" => {
            if rr.name.is_some() {
                return Err(ApiError::method_not_allowed("create", &def.plural));
            }
            let obj = decode_body(&content_type, body, false)?;
            let opts = write_options(query, headers, "CreateOptions")?;
            Ok(written(
                admission::create(&**shared, &def, ns, obj, &opts).await,
            ))
        }
        "update" => {
            if rr.name.is_none() {
                return Err(ApiError::method_not_allowed("update", &def.plural));
            }
            let obj = decode_body(&content_type, body, false)?;
            let opts = write_options(query, headers, "UpdateOptions")?;
            Ok(written(
                admission::update(&**shared, &def, ns, &name, sub, Edit::Put(obj), &opts).await,
            ))
        }
        "patch" => {
            let Some(pt) = PatchType::from_content_type(&content_type) else {
                return Err(ApiError::unsupported_media_type(&[
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/apply-patch+yaml",
                    "application/strategic-merge-patch+json",
                ]));
            };
            if rr.name.is_none() {
                return Err(ApiError::method_not_allowed("patch", &def.plural));
            }
            let opts = write_options(query, headers, "PatchOptions")?;
            Ok(written(
                admission::update(
                    &**shared,
                    &def,
                    ns,
                    &name,
                    sub,
                    Edit::Patch(pt, body),
                    &opts,
                )
                .await,
            ))
        }
        "delete" => {
            let opts = delete_options(query, body)?;
            Ok(written(
                admission::delete(&**shared, &def, ns, &name, &opts).await,
            ))
        }
        "deletecollection" => {
            let sel = Selectors::parse(&def, query)?;
            let opts = delete_options(query, body)?;
            let matching = |o: &Value| sel.matches(o);
            match admission::delete_collection(&**shared, &def, ns, &matching, &opts).await {
                Ok((list, warnings)) => Ok(
                    match transform
                        .options(query)
                        .and_then(|()| transform.body(&def, list))
                    {
                        Ok(body) => json_response(200, &body, &warnings),
                        Err(e) => error_response(&e),
                    },
                ),
                Err(r) => Ok(rejected_response(&r)),
            }
        }
        other => Err(ApiError::method_not_allowed(other, &def.plural)),
    }
}

/// The response of a write as the client asked for it: the stored text when it wants the
/// object itself, else the transformed body (a Status stays a Status).
fn respond_written(
    def: &ResourceDef,
    transform: &Transform,
    query: &Query,
    result: Result<Written, Rejected>,
) -> Response<Body> {
    if transform.is_identity() {
        return written_response(result);
    }
    match result {
        Ok(w) => match transform
            .options(query)
            .and_then(|()| transform.body(def, w.body.into_value()))
        {
            Ok(body) => json_response(w.code, &body, &w.warnings),
            Err(e) => error_response(&e),
        },
        Err(r) => rejected_response(&r),
    }
}
