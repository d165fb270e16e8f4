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
    match r {
        Route::Health => text_response(200, "ok"),
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
        Route::OpenApiV2 | Route::Resource(_) | Route::Control(_) | Route::NotFound => {
            error_response(&ApiError::path_not_found())
        }
        _ if method != Method::GET => error_response(&ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
        r => get(shared, r, headers),
    }
}

/// A GET of `/version`, discovery or OpenAPI v3.
fn get(shared: &Arc<Shared>, r: Route, headers: &HeaderMap) -> Response<Body> {
    let accept = header_str(headers, header::ACCEPT);
    let aggregated =
        aggregated_version(&accept).filter(|_| lock(&shared.settings).aggregated_discovery);
    let found = |doc: Option<Value>| match doc {
        Some(doc) => json_response(200, &doc, &[]),
        None => error_response(&ApiError::path_not_found()),
    };
    match r {
        Route::Version => {
            let v = lock(&shared.settings).version.clone();
            json_response(
                200,
                &json!({"major": v.major, "minor": v.minor, "gitVersion": v.git_version,
                    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
                    "platform": "linux/amd64"}),
                &[],
            )
        }
        Route::Api => match aggregated {
            Some(version) => {
                let state = lock(&shared.state);
                aggregated_response(discovery::aggregated(&state.defs(), true), version, headers)
            }
            None => json_response(200, &discovery::api_versions(&lock(&shared.address)), &[]),
        },
        Route::Apis => {
            let state = lock(&shared.state);
            match aggregated {
                Some(version) => aggregated_response(
                    discovery::aggregated(&state.defs(), false),
                    version,
                    headers,
                ),
                None => json_response(200, &discovery::api_group_list(&state.defs()), &[]),
            }
        }
        Route::Group(g) => found(discovery::api_group(&lock(&shared.state).defs(), &g)),
        Route::GroupVersion(g, v) => found(discovery::api_resource_list(
            &lock(&shared.state).defs(),
            &g,
            &v,
        )),
        Route::OpenApiIndex => {
            let version = lock(&shared.settings).version.git_version.clone();
            let state = lock(&shared.state);
            json_response(200, &openapi::openapi_index(&state.defs(), &version), &[])
        }
        Route::OpenApiDoc(g, v) => {
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
        }
        _ => error_response(&ApiError::path_not_found()),
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
