//! The control endpoints under [`CONTROL_PREFIX`](crate::apiserver::control::CONTROL_PREFIX):
//! the request log, counters, state, faults, webhook calls and services, settings.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::apiserver::control::{Counters, FaultRule, Faults, LatencyRule};
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::semantics::StateConfig;
use crate::apiserver::sync::lock;
use crate::apiserver::webhooks::client::ServiceRef;

use super::query::Query;
use super::response::{error_response, json_response};
use super::shared::Shared;

pub(super) async fn control(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &Query,
    body: &Bytes,
) -> Response<Body> {
    match answer(
        shared,
        method.as_str(),
        path.trim_end_matches('/'),
        query,
        body,
    ) {
        Ok(v) => json_response(200, &v, &[]),
        Err(e) => error_response(&e),
    }
}

/// A control request's answer, by method and path (under the prefix).
fn answer(
    shared: &Arc<Shared>,
    method: &str,
    path: &str,
    query: &Query,
    body: &Bytes,
) -> ApiResult<Value> {
    match (method, path) {
        ("GET", "requests") => {
            let intro = lock(&shared.intro);
            Ok(serde_json::to_value(&intro.log).unwrap_or_default())
        }
        ("DELETE", "requests") => {
            lock(&shared.intro).log.clear();
            Ok(json!({}))
        }
        ("GET", "counters") => {
            let intro = lock(&shared.intro);
            Ok(json!({"total": intro.counters.total(), "counters": intro.counters.to_rows()}))
        }
        ("DELETE", "counters") => {
            lock(&shared.intro).counters = Counters::default();
            Ok(json!({}))
        }
        ("GET", "state") => Ok(state(shared, query.get("objects") == Some("true"))),
        ("POST", fault) if fault.starts_with("faults/") => {
            add_fault(shared, &fault["faults/".len()..], body)
        }
        ("DELETE", "faults") => {
            *lock(&shared.faults) = Faults::default();
            Ok(json!({}))
        }
        ("GET", "webhook-calls") => {
            Ok(serde_json::to_value(&*lock(&shared.webhooks.calls)).unwrap_or_default())
        }
        ("DELETE", "webhook-calls") => {
            lock(&shared.webhooks.calls).clear();
            Ok(json!({}))
        }
        ("POST", "webhook-services") => webhook_service(shared, &parse(body)?),
        ("GET", "settings") => Ok(settings(shared)),
        ("PATCH", "settings") => patch_settings(shared, &parse(body)?),
        _ => Err(ApiError::path_not_found()),
    }
}

/// A control request's JSON body; an empty body is `{}`.
fn parse(b: &Bytes) -> ApiResult<Value> {
    if b.is_empty() {
        Ok(json!({}))
    } else {
        serde_json::from_slice(b)
            .map_err(|e| ApiError::bad_request(format!("bad control request body: {e}")))
    }
}

/// The store's resource versions, object count and open watches (and its objects, asked).
fn state(shared: &Arc<Shared>, with_objects: bool) -> Value {
    let watches = lock(&shared.intro).watches.clone();
    let state = lock(&shared.state);
    let mut objects = Vec::new();
    if with_objects {
        for res in state.store.resources() {
            for (_, o) in state.store.list(&res, None) {
                objects.push((*o).clone());
            }
        }
    }
    json!({"resourceVersion": state.store.rv().to_string(),
        "compactedResourceVersion": state.store.compacted().to_string(),
        "objectCount": state.store.total(), "watches": watches, "objects": objects})
}

/// `POST faults/<what>`: a fault rule, latency, a watch delay, an expiry, a compaction or
/// closed watches.
fn add_fault(shared: &Arc<Shared>, what: &str, body: &Bytes) -> ApiResult<Value> {
    const KINDS: [&str; 6] = [
        "respond",
        "latency",
        "watch-delay",
        "expire-next-watch",
        "compact",
        "close-watches",
    ];
    if !KINDS.contains(&what) {
        return Err(ApiError::path_not_found());
    }
    let p = parse(body)?;
    let resource = |p: &Value| {
        p.get("resource")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match what {
        "respond" => {
            let rule: FaultRule = serde_json::from_value(p)
                .map_err(|e| ApiError::bad_request(format!("bad fault rule: {e}")))?;
            rule.check()
                .map_err(|e| ApiError::bad_request(format!("bad fault rule: {e}")))?;
            lock(&shared.faults).responses.push(rule);
        }
        "latency" => {
            let rule: LatencyRule = serde_json::from_value(p)
                .map_err(|e| ApiError::bad_request(format!("bad latency rule: {e}")))?;
            lock(&shared.faults).latency.push(rule);
        }
        "watch-delay" => {
            let millis = match p.get("millis") {
                None => 0,
                Some(v) => v.as_u64().ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "bad watch delay: millis must be a non-negative integer, got {v}"
                    ))
                })?,
            };
            lock(&shared.faults).watch_event_delay = Duration::from_millis(millis);
        }
        "expire-next-watch" => lock(&shared.faults).expire_next_watch.push(resource(&p)),
        "compact" => {
            let upto = p.get("resourceVersion").and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            });
            let mut state = lock(&shared.state);
            state.store.compact(upto);
            return Ok(json!({"compactedResourceVersion": state.store.compacted().to_string()}));
        }
        "close-watches" => {
            let _ = shared.close_tx.send(resource(&p));
        }
        _ => return Err(ApiError::path_not_found()),
    }
    Ok(json!({}))
}

/// `POST webhook-services`: where a webhook Service's calls go (an empty address removes it).
fn webhook_service(shared: &Arc<Shared>, p: &Value) -> ApiResult<Value> {
    let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let port = p
        .get("port")
        .and_then(Value::as_u64)
        .and_then(|n| u16::try_from(n).ok())
        .unwrap_or(443);
    let key = ServiceRef::new(s("namespace"), s("name"), port);
    let mut settings = lock(&shared.settings);
    match p.get("address").and_then(Value::as_str) {
        Some(a) if !a.is_empty() => {
            settings.webhook_services.insert(key, a.to_string());
        }
        _ => {
            settings.webhook_services.remove(&key);
        }
    }
    Ok(json!({}))
}

/// `GET settings`.
fn settings(shared: &Arc<Shared>) -> Value {
    let s = lock(&shared.settings);
    json!({"version": s.version, "historyLimit": s.history_limit,
        "bookmarkIntervalMillis": s.bookmark_interval.as_millis() as u64,
        "crdEstablishDelayMillis": s.crd_establish_delay.as_millis() as u64,
        "podTerminationCapMillis": s.pod_termination_cap.as_millis() as u64,
        "aggregatedDiscovery": s.aggregated_discovery,
        "shardedListAndWatch": s.sharded_list_and_watch})
}

/// `PATCH settings`: the fields given change, the others stay.
fn patch_settings(shared: &Arc<Shared>, p: &Value) -> ApiResult<Value> {
    let mut s = lock(&shared.settings);
    if let Some(v) = p.get("version") {
        s.version = serde_json::from_value(v.clone())
            .map_err(|e| ApiError::bad_request(format!("bad version: {e}")))?;
    }
    if let Some(n) = p.get("historyLimit").and_then(Value::as_u64) {
        s.history_limit = n as usize;
        lock(&shared.state).store.set_history_limit(n as usize);
    }
    let millis = |key: &str| {
        p.get(key)
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
    };
    if let Some(d) = millis("bookmarkIntervalMillis") {
        s.bookmark_interval = d;
    }
    if let Some(d) = millis("crdEstablishDelayMillis") {
        s.crd_establish_delay = d;
    }
    if let Some(d) = millis("podTerminationCapMillis") {
        s.pod_termination_cap = d;
    }
    lock(&shared.state).set_config(StateConfig {
        establish_immediately: s.crd_establish_delay.is_zero(),
        pod_termination_cap: s.pod_termination_cap,
    });
    if let Some(b) = p.get("aggregatedDiscovery").and_then(Value::as_bool) {
        s.aggregated_discovery = b;
    }
    if let Some(b) = p.get("shardedListAndWatch").and_then(Value::as_bool) {
        s.sharded_list_and_watch = b;
    }
    Ok(json!({}))
}
