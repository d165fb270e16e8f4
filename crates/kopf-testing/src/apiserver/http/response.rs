//! Responses: JSON bodies (in Go's member order, with a trailing newline: see
//! [`crate::apiserver::gojson`]), `Status` errors with `Retry-After`, `Warning` headers as
//! kube-apiserver writes them, plain text.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use serde_json::Value;

use crate::apiserver::error::ApiError;
use crate::apiserver::gojson;
use crate::apiserver::webhooks::admission::Rejected;

/// The body of a JSON response as kube-apiserver writes it: Go's member order and a
/// trailing newline.
pub(super) fn json_body(body: &Value) -> Vec<u8> {
    let mut out = gojson::to_vec(body);
    out.push(b'\n');
    out
}

pub(super) fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response<Body> {
    body_response(code, json_body(body).into(), warnings)
}

/// A JSON response whose body is already serialised (by [`gojson::to_vec`]): it gets its
/// trailing newline.
pub(super) fn json_bytes_response(
    code: u16,
    body: bytes::Bytes,
    warnings: &[String],
) -> Response<Body> {
    let mut text = Vec::with_capacity(body.len() + 1);
    text.extend_from_slice(&body);
    text.push(b'\n');
    body_response(code, text.into(), warnings)
}

/// A JSON response of a finished body.
fn body_response(code: u16, body: bytes::Bytes, warnings: &[String]) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    for w in warnings {
        if let Ok(v) = HeaderValue::from_bytes(warning_header(w).as_bytes()) {
            h.append(header::WARNING, v);
        }
    }
    resp
}

/// A `Warning` header value as kube-apiserver writes it: `299 - "<text>"`, the text with
/// `\` and `"` escaped and control characters replaced by spaces (UTF-8 passes unchanged).
fn warning_header(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("299 - \"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The error response of a write that admission rejected, with the webhooks' warnings.
pub(super) fn rejected_response(r: &Rejected) -> Response<Body> {
    let mut resp = error_response(&r.error);
    for w in &r.warnings {
        if let Ok(v) = HeaderValue::from_bytes(warning_header(w).as_bytes()) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

pub(super) fn written_response(
    result: Result<crate::apiserver::semantics::Written, Rejected>,
) -> Response<Body> {
    match result {
        Ok(w) => match w.body.stored_json() {
            Some(json) => json_bytes_response(w.code, json.clone(), &w.warnings),
            None => json_response(w.code, w.body.value(), &w.warnings),
        },
        Err(r) => rejected_response(&r),
    }
}

pub(super) fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(e.code, &e.to_status(), &[]);
    if let Some(secs) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

pub(super) fn text_response(code: u16, text: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    resp
}
