//! The entry of every request: it is logged and counted on arrival, faults and latency
//! are applied, then it is dispatched to its route group.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Response, header};
use bytes::Bytes;

use crate::apiserver::control::{CounterKey, RequestRecord};
use crate::apiserver::error::ApiError;
use crate::apiserver::semantics::PatchType;
use crate::apiserver::sync::lock;

use super::control::control;
use super::discovery;
use super::negotiation::header_str;
use super::objects::serve_resource;
use super::query::Query;
use super::response::error_response;
use super::routing::{Route, route, target_of};
use super::shared::Shared;

/// kube-apiserver's limit of a write's body (`MaxRequestBodyBytes`, 3 MiB).
const MAX_REQUEST_BODY: usize = 3 * 1024 * 1024;

/// Serves one request.
pub(crate) async fn handle(shared: Arc<Shared>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or("").to_string();
    let query = Query::parse(parts.uri.query());
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return error_response(&ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("cannot read the request body: {e}"),
            ));
        }
    };
    let r = route(&path);
    if let Route::Control(rest) = r {
        return control(&shared, &parts.method, &rest, &query, &body).await;
    }
    let target = target_of(&r, &parts.method, &query);
    let content_type = header_str(&parts.headers, header::CONTENT_TYPE);
    let patch_type = if parts.method == Method::PATCH {
        PatchType::from_content_type(&content_type)
            .map(|p| p.as_str().to_string())
            .unwrap_or_default()
    } else {
        String::new()
    };
    let micros = shared.started.elapsed().as_micros() as u64;
    let time = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();

    // Log and count the request on arrival, in arrival order.
    let body_text = if body.len() > 4096 || std::str::from_utf8(&body).is_err() {
        let head = &body[..body.len().min(256)];
        format!("<{} bytes> {}", body.len(), String::from_utf8_lossy(head))
    } else {
        String::from_utf8_lossy(&body).into_owned()
    };
    let seq = {
        let mut intro = lock(&shared.intro);
        intro.seq += 1;
        let seq = intro.seq;
        intro.log.push(RequestRecord {
            seq,
            time,
            micros,
            method: parts.method.to_string(),
            path,
            query: raw_query,
            user_agent: header_str(&parts.headers, header::USER_AGENT),
            accept: header_str(&parts.headers, header::ACCEPT),
            content_type: content_type.clone(),
            body: body_text,
            status: 0,
            patch_type: patch_type.clone(),
            target: target.clone(),
        });
        let key = CounterKey {
            verb: target.verb.clone(),
            group: target.group.clone(),
            version: target.version.clone(),
            resource: target.resource.clone(),
            subresource: target.subresource.clone(),
            patch_type,
        };
        *intro.counters.by_key.entry(key).or_insert(0) += 1;
        seq
    };

    // Faults and latency.
    let (fault, delay) = {
        let mut f = lock(&shared.faults);
        {
            let user_agent = header_str(&parts.headers, header::USER_AGENT);
            (
                f.take_response(&target, &user_agent),
                f.latency_for(&target, &user_agent),
            )
        }
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let response = match fault {
        Some(rule) => {
            let mut e = ApiError::new(
                rule.code,
                ApiError::reason_for_code(rule.code),
                rule.message
                    .clone()
                    .unwrap_or_else(|| format!("injected fault: {}", rule.code)),
            );
            e.retry_after = rule.retry_after;
            error_response(&e)
        }
        None if body.len() > MAX_REQUEST_BODY && matches!(r, Route::Resource(_)) => {
            error_response(&ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("Request entity too large: limit is {MAX_REQUEST_BODY}"),
            ))
        }
        None => serve(&shared, r, &parts.method, &parts.headers, &query, &body).await,
    };
    shared.schedule_establish();
    // The record was written on arrival (so that it is in the log before any effect of
    // the request can be observed); now it gets its status.
    let status = response.status().as_u16();
    let mut intro = lock(&shared.intro);
    if let Some(rec) = intro.log.iter_mut().rev().find(|r| r.seq == seq) {
        rec.status = status;
    }
    response
}

/// Dispatches a routed request to its route group.
async fn serve(
    shared: &Arc<Shared>,
    r: Route,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    body: &Bytes,
) -> Response<Body> {
    match r {
        Route::Resource(rr) => match serve_resource(shared, rr, method, headers, query, body).await
        {
            Ok(resp) => resp,
            Err(e) => error_response(&e),
        },
        Route::Control(_) | Route::NotFound => error_response(&ApiError::path_not_found()),
        other => discovery::serve(shared, other, method, headers, body),
    }
}
