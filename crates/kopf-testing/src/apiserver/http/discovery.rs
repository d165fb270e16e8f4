//! The endpoints that are not resources: `/version`, the health checks, discovery (legacy
//! and aggregated, with ETags), OpenAPI v3 and the access reviews (in `access`).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::apiserver::discovery;
use crate::apiserver::error::ApiError;
use crate::apiserver::openapi;
use crate::apiserver::sync::lock;

use super::access;
use super::negotiation::{aggregated_version, decode_body, header_str};
use super::response::{error_response, json_response, text_response};
use super::routing::Route;
use super::shared::Shared;

/// Serves the endpoints that are not resources: `/version`, the health checks, discovery,
/// OpenAPI and the access reviews.
pub(super) fn serve(
    shared: &Arc<Shared>,
    r: Route,
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response<Body> {
    let accept = header_str(headers, header::ACCEPT);
    let aggregated =
        aggregated_version(&accept).filter(|_| lock(&shared.settings).aggregated_discovery);
    let is_get = method == Method::GET;
    let only_get = |f: &dyn Fn() -> Response<Body>| -> Response<Body> {
        if is_get {
            f()
        } else {
            error_response(&ApiError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ))
        }
    };
    match r {
        Route::Version => only_get(&|| {
            let v = lock(&shared.settings).version.clone();
            json_response(
                200,
                &json!({"major": v.major, "minor": v.minor, "gitVersion": v.git_version,
                    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
                    "platform": "linux/amd64"}),
                &[],
            )
        }),
        Route::Health => text_response(200, "ok"),
        Route::Api => only_get(&|| {
            if let Some(version) = aggregated {
                let state = lock(&shared.state);
                aggregated_response(discovery::aggregated(&state.defs(), true), version, headers)
            } else {
                json_response(200, &discovery::api_versions(&lock(&shared.address)), &[])
            }
        }),
        Route::Apis => only_get(&|| {
            let state = lock(&shared.state);
            if let Some(version) = aggregated {
                aggregated_response(
                    discovery::aggregated(&state.defs(), false),
                    version,
                    headers,
                )
            } else {
                json_response(200, &discovery::api_group_list(&state.defs()), &[])
            }
        }),
        Route::Group(g) => only_get(&|| {
            let state = lock(&shared.state);
            match discovery::api_group(&state.defs(), &g) {
                Some(doc) => json_response(200, &doc, &[]),
                None => error_response(&ApiError::path_not_found()),
            }
        }),
        Route::GroupVersion(g, v) => only_get(&|| {
            let state = lock(&shared.state);
            match discovery::api_resource_list(&state.defs(), &g, &v) {
                Some(doc) => json_response(200, &doc, &[]),
                None => error_response(&ApiError::path_not_found()),
            }
        }),
        Route::OpenApiIndex => only_get(&|| {
            let version = lock(&shared.settings).version.git_version.clone();
            let state = lock(&shared.state);
            json_response(200, &openapi::openapi_index(&state.defs(), &version), &[])
        }),
        Route::OpenApiDoc(g, v) => only_get(&|| {
            let version = lock(&shared.settings).version.git_version.clone();
            let state = lock(&shared.state);
            let defs = state.defs();
            if !defs.iter().any(|d| d.group == g && d.version == v) {
                return error_response(&ApiError::path_not_found());
            }
            json_response(
                200,
                &openapi::openapi_document(&defs, &g, &v, &version),
                &[],
            )
        }),
        Route::OpenApiV2 => error_response(&ApiError::path_not_found()),
        Route::AccessReview(kind, namespace) => {
            if method != Method::POST {
                return error_response(&ApiError::method_not_allowed(
                    method.as_str(),
                    kind.plural(),
                ));
            }
            let ct = header_str(headers, header::CONTENT_TYPE);
            match decode_body(&ct, body, false).and_then(|review| {
                access::review(shared, kind, namespace.as_deref(), headers, review)
            }) {
                Ok(answer) => json_response(201, &answer, &[]),
                Err(e) => error_response(&e),
            }
        }
        Route::Resource(_) | Route::Control(_) | Route::NotFound => {
            error_response(&ApiError::path_not_found())
        }
    }
}

/// An aggregated discovery document in `version` (`v2` or `v2beta1`: the same fields),
/// answered 304 when the client has it (ETag).
fn aggregated_response(mut doc: Value, version: &str, headers: &HeaderMap) -> Response<Body> {
    doc["apiVersion"] = format!("apidiscovery.k8s.io/{version}").into();
    let etag = format!("\"{}\"", discovery::hash(&doc));
    let mut resp = if header_str(headers, header::IF_NONE_MATCH) == etag {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        json_response(200, &doc, &[])
    };
    let h = resp.headers_mut();
    let content_type =
        format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList");
    if let Ok(v) = HeaderValue::from_str(&content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    resp
}
