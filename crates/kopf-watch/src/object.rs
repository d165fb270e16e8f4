//! The object at hand, as every step of a worker sees it: one observed state (its body shared,
//! never cloned), its resourceVersion, its API, and its log spans.

use std::sync::Arc;

use kopf_core::causes::EventKind;
use kopf_core::processing::Detected;
use kube::api::Api;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde_json::Value;

use crate::resource::ResourceRef;

/// One observed state of an object, for its worker (the body is shared, never cloned).
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub(crate) body: Arc<Value>,
    pub(crate) event: EventKind,
    /// The cause the engine detected on this state to decide that it needs a cycle (for an
    /// object with no worker), so that the cycle does not detect it again.
    pub(crate) detected: Option<Arc<Detected>>,
    /// When the operator received this state, or an earlier one that it replaced before a
    /// worker took it (the start of its convergence, see `Cycle::run`).
    pub(crate) seen: tokio::time::Instant,
    /// It came from a listing, or replaced a listed state before a worker took it (its
    /// resume handlers are due all the same).
    pub(crate) listed: bool,
    /// Its worker has taken it from the channel (a newer state replacing it then starts a
    /// change of its own).
    pub(crate) taken: bool,
}

impl Observed {
    /// A state as observed, its cause not detected yet.
    pub(crate) fn new(body: Arc<Value>, event: EventKind) -> Self {
        Observed {
            body,
            event,
            detected: None,
            seen: tokio::time::Instant::now(),
            listed: event == EventKind::Listed,
            taken: false,
        }
    }
}

/// The resourceVersion of a body, as a number.
pub(crate) fn rv(body: &Value) -> Option<u64> {
    body.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

/// The API of a resource in a namespace (None, or a cluster-scoped resource: all).
pub(crate) fn api_for<K>(
    client: &kube::Client,
    resource: &ResourceRef,
    namespace: Option<&str>,
) -> Api<K>
where
    K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>,
{
    match namespace {
        Some(ns) if resource.namespaced => {
            Api::namespaced_with(client.clone(), ns, &resource.api_resource)
        }
        _ => Api::all_with(client.clone(), &resource.api_resource),
    }
}

/// The log span of an object: every line inside carries its namespace and name.
pub(crate) fn object_span(body: &Value) -> tracing::Span {
    let field = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or("");
    tracing::info_span!(
        "object",
        namespace = %field("/metadata/namespace"),
        name = %field("/metadata/name"),
        kind = %field("/kind"),
        uid = %field("/metadata/uid"),
    )
}

/// The span of one processing cycle of an object: its log span (named `object`, like
/// [`object_span`]'s, so its lines carry the object) with what tracing exports of the cycle
/// (OpenTelemetry, with `kopf`'s `otel` feature): the resource, and, recorded at its end by
/// `cycle::record_cycle`, the cause's `reason` and the cycle's `outcome`. The handler calls of
/// the cycle are its children (the `handler` spans of `kopf_core::layers`).
pub(crate) fn cycle_span(body: &Value, resource: &str) -> tracing::Span {
    let field = |p: &str| body.pointer(p).and_then(Value::as_str).unwrap_or("");
    tracing::info_span!(
        "object",
        namespace = %field("/metadata/namespace"),
        name = %field("/metadata/name"),
        kind = %field("/kind"),
        uid = %field("/metadata/uid"),
        resource = %resource,
        otel.name = "cycle",
        reason = tracing::field::Empty,
        outcome = tracing::field::Empty,
        delay = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    )
}
