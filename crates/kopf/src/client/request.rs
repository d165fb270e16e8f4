//! What the client's layers read from a request or an answer, and how they word it.

use std::time::Duration;

use http::{Method, Request, StatusCode};

use crate::error::one_line;

/// The verb of a request, as Kubernetes names it (for the metrics).
pub(super) fn verb<B>(request: &Request<B>) -> &'static str {
    let query = request.uri().query().unwrap_or("");
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    match *request.method() {
        Method::GET if watch => "watch",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether an answer with this status is a transient failure of the API server (or of
/// what stands between it and the operator).
pub(super) fn transient(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 500 | 502 | 503 | 504)
}

/// An error of the client in words, without kube's `ServiceError:` wrapping.
pub(super) fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Service(e) => one_line(e.as_ref()),
        kube::Error::HyperError(e) => one_line(e),
        e => one_line(e),
    }
}

/// `2 s`, `0.25 s`.
pub(super) fn seconds(d: Duration) -> String {
    let text = format!("{:.2}", d.as_secs_f64());
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}
