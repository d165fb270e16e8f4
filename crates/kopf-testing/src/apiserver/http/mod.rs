//! The HTTP front of the fake API server: routing, content negotiation, the verbs,
//! watch streams, the control endpoints, the request log and fault injection.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::control::{
    CONTROL_PREFIX, CounterKey, Counters, FaultRule, Faults, LatencyRule, RequestRecord,
    RequestTarget,
};
use crate::apiserver::discovery;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::selectors::{FieldSelector, LabelSelector, field_value};
use crate::apiserver::semantics::{DeleteOptions, PatchType, State, StateConfig, WriteOptions};
use crate::apiserver::sync::lock;

mod shared;

pub use crate::apiserver::control::OpenWatch;
use crate::apiserver::storage::{Change, ChangeType};
use crate::apiserver::tables;
use crate::apiserver::webhooks::admission::{self, Edit, Rejected};
use crate::apiserver::webhooks::client::ServiceRef;
use crate::apiserver::webhooks::conversion::{self, CrdConversion};
pub(crate) use shared::Shared;
pub use shared::{Settings, VersionInfo};

// ---------------------------------------------------------------------------------------------
// Request parsing

/// Query parameters.
#[derive(Debug, Default, Clone)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    fn parse(raw: Option<&str>) -> Self {
        Query(
            raw.map(|q| {
                form_urlencoded_pairs(q)
                    .into_iter()
                    .collect::<Vec<(String, String)>>()
            })
            .unwrap_or_default(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn bool(&self, key: &str) -> ApiResult<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(Some(true)),
            Some("0" | "f" | "F" | "FALSE" | "false" | "False" | "") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid boolean value for {key}: {other:?}"
            ))),
        }
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// A request to a resource endpoint.
#[derive(Debug, Clone)]
pub(crate) struct ResourceRequest {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
    watch_prefix: bool,
}

enum Route {
    Version,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    OpenApiIndex,
    OpenApiDoc(String, String),
    OpenApiV2,
    Health,
    Resource(ResourceRequest),
    Control(String),
    SelfSubjectAccessReview,
    NotFound,
}

fn route(path: &str) -> Route {
    if let Some(rest) = path.strip_prefix(CONTROL_PREFIX) {
        return Route::Control(rest.trim_start_matches('/').to_string());
    }
    let trimmed = path.trim_end_matches('/');
    let parts: Vec<String> = trimmed
        .split('/')
        .filter(|p| !p.is_empty())
        .map(percent_decode)
        .collect();
    let p: Vec<&str> = parts.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz"] => Route::Health,
        ["api"] => Route::Api,
        ["apis"] => Route::Apis,
        ["openapi", "v3"] => Route::OpenApiIndex,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3", "api", v] => Route::OpenApiDoc(String::new(), v.to_string()),
        ["openapi", "v3", "apis", g, v] => Route::OpenApiDoc(g.to_string(), v.to_string()),
        [
            "apis",
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
        ] => Route::SelfSubjectAccessReview,
        ["apis", g] => Route::Group(g.to_string()),
        ["api", v] => Route::GroupVersion(String::new(), v.to_string()),
        ["apis", g, v] => Route::GroupVersion(g.to_string(), v.to_string()),
        ["api", v, rest @ ..] => resource_route("", v, rest),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let mut rest = rest.to_vec();
    let mut watch_prefix = false;
    if rest.first() == Some(&"watch") {
        watch_prefix = true;
        rest.remove(0);
    }
    let mut namespace = None;
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = Some(rest[1].to_string());
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = rest[2..].to_vec();
        } else {
            // The namespace object itself.
            let sub = rest.get(2).map(|s| s.to_string());
            if rest.len() > 3 {
                return Route::NotFound;
            }
            return Route::Resource(ResourceRequest {
                group: group.into(),
                version: version.into(),
                namespace: None,
                plural: "namespaces".into(),
                name: namespace,
                subresource: sub,
                watch_prefix,
            });
        }
    }
    match rest.as_slice() {
        [plural] => Route::Resource(ResourceRequest {
            group: group.into(),
            version: version.into(),
            namespace,
            plural: plural.to_string(),
            name: None,
            subresource: None,
            watch_prefix,
        }),
        [plural, name] => Route::Resource(ResourceRequest {
            group: group.into(),
            version: version.into(),
            namespace,
            plural: plural.to_string(),
            name: Some(name.to_string()),
            subresource: None,
            watch_prefix,
        }),
        [plural, name, sub] => Route::Resource(ResourceRequest {
            group: group.into(),
            version: version.into(),
            namespace,
            plural: plural.to_string(),
            name: Some(name.to_string()),
            subresource: Some(sub.to_string()),
            watch_prefix,
        }),
        _ => Route::NotFound,
    }
}

fn resolve_verb(method: &Method, rr: &ResourceRequest, query: &Query) -> String {
    let watch = rr.watch_prefix || matches!(query.bool("watch"), Ok(Some(true)));
    match (method, rr.name.is_some()) {
        (&Method::GET, true) if watch => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) if watch => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "unknown",
    }
    .to_string()
}

// ---------------------------------------------------------------------------------------------
// Responses

fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
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
fn rejected_response(r: &Rejected) -> Response<Body> {
    let mut resp = error_response(&r.error);
    for w in &r.warnings {
        if let Ok(v) = HeaderValue::from_bytes(warning_header(w).as_bytes()) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

fn written_response(
    result: Result<crate::apiserver::semantics::Written, Rejected>,
) -> Response<Body> {
    match result {
        Ok(w) => json_response(w.code, &w.body, &w.warnings),
        Err(r) => rejected_response(&r),
    }
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(e.code, &e.to_status(), &[]);
    if let Some(secs) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn text_response(code: u16, text: &'static str) -> Response<Body> {
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

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

const AGGREGATED_ACCEPT: &str = "as=APIGroupDiscoveryList";

// ---------------------------------------------------------------------------------------------
// The handler

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
        (f.take_response(&target), f.latency_for(&target))
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

fn target_of(r: &Route, method: &Method, query: &Query) -> RequestTarget {
    let simple = |verb: &str| RequestTarget {
        verb: verb.into(),
        ..Default::default()
    };
    match r {
        Route::Version => simple("version"),
        Route::Health => simple("health"),
        Route::Api | Route::Apis | Route::Group(_) | Route::GroupVersion(..) => simple("discovery"),
        Route::OpenApiIndex | Route::OpenApiDoc(..) | Route::OpenApiV2 => simple("openapi"),
        Route::SelfSubjectAccessReview => RequestTarget {
            verb: "create".into(),
            group: "authorization.k8s.io".into(),
            version: "v1".into(),
            resource: "selfsubjectaccessreviews".into(),
            ..Default::default()
        },
        Route::Resource(rr) => RequestTarget {
            verb: resolve_verb(method, rr, query),
            group: rr.group.clone(),
            version: rr.version.clone(),
            resource: rr.plural.clone(),
            subresource: rr.subresource.clone().unwrap_or_default(),
            namespace: rr.namespace.clone().unwrap_or_default(),
            name: rr.name.clone().unwrap_or_default(),
        },
        Route::Control(_) | Route::NotFound => simple("other"),
    }
}

async fn serve(
    shared: &Arc<Shared>,
    r: Route,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    body: &Bytes,
) -> Response<Body> {
    let accept = header_str(headers, header::ACCEPT);
    let aggregated =
        accept.contains(AGGREGATED_ACCEPT) && lock(&shared.settings).aggregated_discovery;
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
            if aggregated {
                let state = lock(&shared.state);
                aggregated_response(discovery::aggregated(&state.defs(), true), headers)
            } else {
                json_response(200, &discovery::api_versions(&lock(&shared.address)), &[])
            }
        }),
        Route::Apis => only_get(&|| {
            let state = lock(&shared.state);
            if aggregated {
                aggregated_response(discovery::aggregated(&state.defs(), false), headers)
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
            json_response(200, &discovery::openapi_index(&state.defs(), &version), &[])
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
                &discovery::openapi_document(&defs, &g, &v, &version),
                &[],
            )
        }),
        Route::OpenApiV2 => error_response(&ApiError::path_not_found()),
        Route::SelfSubjectAccessReview => {
            let ct = header_str(headers, header::CONTENT_TYPE);
            let mut review = match decode_body(&ct, body, false) {
                Ok(v) => v,
                Err(e) => return error_response(&e),
            };
            review["status"] =
                json!({"allowed": true, "reason": "the fake API server allows everything"});
            json_response(201, &review, &[])
        }
        Route::Resource(rr) => match serve_resource(shared, rr, method, headers, query, body).await
        {
            Ok(resp) => resp,
            Err(e) => error_response(&e),
        },
        Route::Control(_) | Route::NotFound => error_response(&ApiError::path_not_found()),
    }
}

fn aggregated_response(doc: Value, headers: &HeaderMap) -> Response<Body> {
    let etag = format!("\"{}\"", discovery::hash(&doc));
    let mut resp = if header_str(headers, header::IF_NONE_MATCH) == etag {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        json_response(200, &doc, &[])
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    resp
}

/// Decodes a request body by its Content-Type.
fn decode_body(content_type: &str, body: &Bytes, allow_patch: bool) -> ApiResult<Value> {
    let base = content_type.split(';').next().unwrap_or("").trim();
    match base {
        "" | "application/json" | "*/*" => {}
        crate::apiserver::protobuf::MEDIA_TYPE => return crate::apiserver::protobuf::decode(body),
        "application/yaml" => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("the YAML body is not UTF-8 text"))?;
            return serde_saphyr::from_str::<Value>(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
        }
        _ if allow_patch && PatchType::from_content_type(base).is_some() => {}
        _ => {
            return Err(ApiError::unsupported_media_type(&[
                "application/json",
                "application/yaml",
                "application/vnd.kubernetes.protobuf",
            ]));
        }
    }
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request could not be decoded as JSON: {e}"
        ))
    })
}

fn write_options(query: &Query, headers: &HeaderMap) -> ApiResult<WriteOptions> {
    let dry_run = match query.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported dryRun value {other:?}: supported values: \"All\""
            )));
        }
    };
    Ok(WriteOptions {
        dry_run,
        field_manager: query.get("fieldManager").map(str::to_string),
        force: query.bool("force")?,
        user_agent: header_str(headers, header::USER_AGENT),
        apply: false,
        field_validation: match query.get("fieldValidation") {
            None | Some("") => None,
            Some(v @ ("Ignore" | "Warn" | "Strict")) => Some(v.to_string()),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", got {other:?}"
                )));
            }
        },
    })
}

fn delete_options(query: &Query, body: &Bytes) -> ApiResult<DeleteOptions> {
    let parsed: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the DeleteOptions body could not be decoded: {e}"))
        })?
    };
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let dry_run = parsed
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"))
        || query.get("dryRun") == Some("All");
    Ok(DeleteOptions {
        propagation: s(parsed.get("propagationPolicy"))
            .or_else(|| query.get("propagationPolicy").map(str::to_string)),
        orphan_dependents: parsed
            .get("orphanDependents")
            .and_then(Value::as_bool)
            .or(query.bool("orphanDependents")?),
        precondition_uid: s(parsed.pointer("/preconditions/uid")),
        precondition_rv: s(parsed.pointer("/preconditions/resourceVersion")),
        dry_run,
        grace_period: parsed
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| query.get("gracePeriodSeconds").and_then(|g| g.parse().ok())),
    })
}

/// Selectors of a list, watch or deletecollection request, validated for the resource.
struct Selectors {
    label: LabelSelector,
    field: FieldSelector,
}

fn supported_field(def: &ResourceDef, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("" | "events.k8s.io", "events") => {
            field.starts_with("involvedObject.")
                || matches!(field, "reason" | "reportingComponent" | "source" | "type")
        }
        ("", "pods") => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        ("", "secrets") => field == "type",
        ("", "namespaces") => field == "status.phase",
        ("", "nodes") => field == "spec.unschedulable",
        ("apps", "replicasets") => field == "status.replicas",
        ("batch", "jobs") => field == "status.successful",
        _ => false,
    }
}

fn object_field(obj: &Value, field: &str) -> Option<String> {
    match field {
        "source" => field_value(obj, "source.component"),
        "spec.hostNetwork" => Some(field_value(obj, field).unwrap_or_else(|| "false".into())),
        _ => field_value(obj, field),
    }
}

impl Selectors {
    fn parse(def: &ResourceDef, query: &Query) -> ApiResult<Self> {
        let label = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let field = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        for r in field.requirements() {
            if !supported_field(def, &r.field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    r.field
                )));
            }
        }
        Ok(Selectors { label, field })
    }

    fn matches(&self, obj: &Value) -> bool {
        self.label.matches_object(obj) && self.field.matches(|f| object_field(obj, f))
    }

    fn is_empty(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    ns: String,
    name: String,
}

fn encode_continue(t: &ContinueToken) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(t).unwrap_or_default())
}

fn decode_continue(s: &str) -> ApiResult<ContinueToken> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| ApiError::bad_request("continue key is not valid: illegal base64 data"))?;
    serde_json::from_slice(&bytes).map_err(|_| {
        ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion")
    })
}

async fn serve_resource(
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
        Some("finalize") if def.group.is_empty() && def.plural == "namespaces" => {}
        Some(_) => return Err(ApiError::path_not_found()),
    }
    let verb = resolve_verb(method, &rr, query);
    let ns = rr.namespace.as_deref();
    let content_type = header_str(headers, header::CONTENT_TYPE);
    let sub = rr.subresource.as_deref();
    let name = rr.name.clone().unwrap_or_default();
    if sub == Some("scale") {
        return serve_scale(shared, &def, ns, &name, &verb, &content_type, body);
    }
    let sub = if sub == Some("finalize") { None } else { sub };
    match verb.as_str() {
        "get" => {
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
            if let Some(include) = table_request(headers, query) {
                let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
                let t = tables::table(&def, def.printer_columns.as_ref(), &[obj], meta, include);
                return Ok(json_response(200, &t, &[]));
            }
            Ok(json_response(200, &obj, &[]))
        }
        "list" => list(shared, &def, ns, query, table_request(headers, query)).await,
        "watch" => watch(
            shared,
            &def,
            ns,
            rr.name.as_deref(),
            query,
            table_request(headers, query),
        ),
        "create" => {
            if rr.name.is_some() {
                return Err(ApiError::method_not_allowed("create", &def.plural));
            }
            let obj = decode_body(&content_type, body, false)?;
            let opts = write_options(query, headers)?;
            Ok(written_response(
                admission::create(&**shared, &def, ns, obj, &opts).await,
            ))
        }
        "update" => {
            if rr.name.is_none() {
                return Err(ApiError::method_not_allowed("update", &def.plural));
            }
            let obj = decode_body(&content_type, body, false)?;
            let opts = write_options(query, headers)?;
            Ok(written_response(
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
            let opts = write_options(query, headers)?;
            Ok(written_response(
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
            Ok(written_response(
                admission::delete(&**shared, &def, ns, &name, &opts).await,
            ))
        }
        "deletecollection" => {
            let sel = Selectors::parse(&def, query)?;
            let opts = delete_options(query, body)?;
            let matching = |o: &Value| sel.matches(o);
            match admission::delete_collection(&**shared, &def, ns, &matching, &opts).await {
                Ok((list, warnings)) => Ok(json_response(200, &list, &warnings)),
                Err(r) => Ok(rejected_response(&r)),
            }
        }
        other => Err(ApiError::method_not_allowed(other, &def.plural)),
    }
}

fn read_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let pointer = path.trim_start_matches('.').replace('.', "/");
    obj.pointer(&format!("/{pointer}"))
}

fn serve_scale(
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
    Ok(json_response(200, &to_scale(&w.body), &[]))
}

/// The Table options when the client asked for a Table.
fn table_request(headers: &HeaderMap, query: &Query) -> Option<tables::IncludeObject> {
    tables::wants_table(&header_str(headers, header::ACCEPT))
        .then(|| tables::IncludeObject::parse(query.get("includeObject")))
}

async fn list(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    query: &Query,
    as_table: Option<tables::IncludeObject>,
) -> ApiResult<Response<Body>> {
    let sel = Selectors::parse(def, query)?;
    let limit: Option<usize> = match query.get("limit") {
        None | Some("") | Some("0") => None,
        Some(l) => Some(
            l.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?,
        ),
    };
    let rv_param = query.get("resourceVersion").unwrap_or("");
    let rv_match = query.get("resourceVersionMatch").unwrap_or("");
    let cont = query.get("continue").filter(|c| !c.is_empty());
    if !rv_match.is_empty() && (rv_param.is_empty() || cont.is_some()) {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![crate::apiserver::error::cause(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            )],
        ));
    }
    let res = State::res_key(def);
    let scope = if def.namespaced { ns } else { None };
    let (at_rv, start) = if let Some(token) = cont {
        let t = decode_continue(token)?;
        (Some(t.rv), Some((t.ns, t.name)))
    } else if rv_match == "Exact" {
        let n: u64 = rv_param
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv_param}")))?;
        (Some(n), None)
    } else {
        (None, None)
    };
    let (list_rv, items, conv) = {
        let state = lock(&shared.state);
        let (list_rv, items) = match at_rv {
            Some(rv) => match state.store.list_at(&res, scope, rv) {
                Some(items) => (rv, items),
                None if cont.is_some() => {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response.",
                    ));
                }
                None => {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        state.store.compacted()
                    )));
                }
            },
            None => (state.store.rv(), state.store.list(&res, scope)),
        };
        let conv = if def.is_custom() {
            CrdConversion::lookup_webhook(&state, def)
        } else {
            None
        };
        (list_rv, items, conv)
    };
    let mut out = Vec::new();
    let mut next = None;
    let mut remaining = 0usize;
    for (key, obj) in items {
        if let Some(start) = &start
            && &key <= start
        {
            continue;
        }
        if !sel.matches(&obj) {
            continue;
        }
        if let Some(limit) = limit
            && out.len() >= limit
        {
            if next.is_none() {
                next = out_last_key(&out);
            }
            remaining += 1;
            continue;
        }
        out.push((key, obj));
    }
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let Some((ns, name)) = next {
        metadata["continue"] = json!(encode_continue(&ContinueToken {
            rv: list_rv,
            ns,
            name
        }));
        if sel.is_empty() {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    let raws: Vec<Arc<Value>> = out.into_iter().map(|(_, o)| o).collect();
    let items: Vec<Value> = conversion::present_all(&**shared, conv.as_ref(), def, raws)
        .await?
        .into_iter()
        .map(|o| list_item(def, o))
        .collect();
    if let Some(include) = as_table {
        let t = tables::table(def, def.printer_columns.as_ref(), &items, metadata, include);
        return Ok(json_response(200, &t, &[]));
    }
    Ok(json_response(
        200,
        &json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(), "metadata": metadata, "items": items}),
        &[],
    ))
}

fn out_last_key(out: &[((String, String), Arc<Value>)]) -> Option<(String, String)> {
    out.last().map(|(k, _)| k.clone())
}

/// Items of built-in lists carry no apiVersion/kind; custom resources keep them.
fn list_item(def: &ResourceDef, mut o: Value) -> Value {
    if !def.is_custom()
        && let Some(m) = o.as_object_mut()
    {
        m.remove("apiVersion");
        m.remove("kind");
    }
    o
}

// ---------------------------------------------------------------------------------------------
// Watch

struct WatchSpec {
    def: ResourceDef,
    namespace: Option<String>,
    selectors: Selectors,
    bookmarks: bool,
    as_table: Option<tables::IncludeObject>,
    /// The CRD's conversion when it is by webhook.
    conversion: Option<CrdConversion>,
}

/// An event waiting to be rendered: a stored object (converted and presented when sent),
/// or a finished event (ERROR, BOOKMARK).
enum PendingEvent {
    Object(&'static str, Arc<Value>),
    Ready(Value),
}

impl WatchSpec {
    fn concerns(&self, c: &Change) -> bool {
        c.res == State::res_key(&self.def)
            && self.namespace.as_deref().is_none_or(|ns| c.key.0 == ns)
    }

    /// The event a change produces for this watch, if any: its type and the stored object.
    fn event(&self, c: &Change) -> Option<(&'static str, Arc<Value>)> {
        if !self.concerns(c) {
            return None;
        }
        let now = c.kind != ChangeType::Deleted && self.selectors.matches(&c.object);
        let before = c.prev.as_ref().is_some_and(|p| self.selectors.matches(p));
        let kind = match c.kind {
            ChangeType::Added if now => "ADDED",
            ChangeType::Modified if now && before => "MODIFIED",
            ChangeType::Modified if now => "ADDED",
            ChangeType::Modified if before => "DELETED",
            ChangeType::Deleted if self.selectors.matches(&c.object) => "DELETED",
            _ => return None,
        };
        Some((kind, c.object.clone()))
    }

    /// Converts (by webhook, when the CRD says so) and renders stored objects as events,
    /// with one conversion request for all of them.
    async fn render_events(
        &self,
        shared: &Arc<Shared>,
        pending: Vec<PendingEvent>,
    ) -> ApiResult<Vec<Value>> {
        let raws: Vec<Arc<Value>> = pending
            .iter()
            .filter_map(|p| match p {
                PendingEvent::Object(_, o) => Some(o.clone()),
                PendingEvent::Ready(_) => None,
            })
            .collect();
        let mut presented =
            conversion::present_all(&**shared, self.conversion.as_ref(), &self.def, raws)
                .await?
                .into_iter();
        let mut out = Vec::with_capacity(pending.len());
        for p in pending {
            match p {
                PendingEvent::Ready(v) => out.push(v),
                PendingEvent::Object(kind, _) => {
                    let o = presented.next().unwrap_or(Value::Null);
                    out.push(json!({"type": kind, "object": self.render_presented(o)}));
                }
            }
        }
        Ok(out)
    }

    /// A presented object as the watch delivers it: itself, or a one-row Table.
    fn render_presented(&self, o: Value) -> Value {
        match self.as_table {
            None => o,
            Some(include) => {
                let meta = json!({"resourceVersion": o.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
                tables::table(
                    &self.def,
                    self.def.printer_columns.as_ref(),
                    &[o],
                    meta,
                    include,
                )
            }
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": metadata}})
    }
}

fn line(v: &Value) -> Result<Bytes, Infallible> {
    let mut s = v.to_string();
    s.push('\n');
    Ok(Bytes::from(s))
}

fn watch(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    name: Option<&str>,
    query: &Query,
    as_table: Option<tables::IncludeObject>,
) -> ApiResult<Response<Body>> {
    let mut selectors = Selectors::parse(def, query)?;
    if let Some(name) = name {
        // GET .../<name>?watch=true watches one object.
        let combined = match query.get("fieldSelector") {
            Some(f) if !f.is_empty() => format!("{f},metadata.name={name}"),
            _ => format!("metadata.name={name}"),
        };
        selectors.field =
            FieldSelector::parse(&combined).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let send_initial = query.bool("sendInitialEvents")?;
    let rv_match = query.get("resourceVersionMatch").unwrap_or("");
    if send_initial == Some(true) && rv_match != "NotOlderThan" {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![crate::apiserver::error::cause(
                "FieldValueForbidden",
                "sendInitialEvents",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        ));
    }
    if send_initial.is_none() && !rv_match.is_empty() {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![crate::apiserver::error::cause(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )],
        ));
    }
    let bookmarks = query.bool("allowWatchBookmarks")?.unwrap_or(false);
    let settings = lock(&shared.settings).clone();
    let timeout = match query.get("timeoutSeconds") {
        Some(t) if !t.is_empty() => Duration::from_secs(
            t.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t:?}")))?,
        ),
        _ => settings.default_watch_timeout.unwrap_or_else(|| {
            use rand::Rng;
            Duration::from_secs(rand::rng().random_range(1800..3600))
        }),
    };
    let spec = WatchSpec {
        def: def.clone(),
        namespace: if def.namespaced {
            ns.map(str::to_string)
        } else {
            None
        },
        selectors,
        bookmarks,
        as_table,
        conversion: if def.is_custom() {
            CrdConversion::lookup_webhook(&lock(&shared.state), def)
        } else {
            None
        },
    };
    let rv_param = query.get("resourceVersion").unwrap_or("").to_string();
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);

    // Decide the start under the lock, subscribing before reading, so nothing is missed.
    let expire = lock(&shared.faults).take_expire(&def.plural);
    let mut initial: Vec<PendingEvent> = Vec::new();
    let live;
    let start_rv;
    {
        let state = lock(&shared.state);
        live = state.store.subscribe();
        let current = state.store.rv();
        let synthetic = rv_param.is_empty() || rv_param == "0" || send_initial == Some(true);
        if expire {
            let status =
                ApiError::expired(format!("too old resource version: {rv_param} ({current})"));
            initial.push(PendingEvent::Ready(
                json!({"type": "ERROR", "object": status.to_status()}),
            ));
            start_rv = None;
        } else if synthetic {
            let scope = spec.namespace.as_deref();
            for (_, obj) in state.store.list(&State::res_key(def), scope) {
                if spec.selectors.matches(&obj) {
                    initial.push(PendingEvent::Object("ADDED", obj));
                }
            }
            if send_initial == Some(true) {
                initial.push(PendingEvent::Ready(spec.bookmark(current, true)));
            }
            start_rv = Some(current);
        } else {
            let n: u64 = rv_param.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?;
            match state.store.changes_since(n) {
                Some(changes) => {
                    initial.extend(
                        changes
                            .iter()
                            .filter_map(|c| spec.event(c))
                            .map(|(k, o)| PendingEvent::Object(k, o)),
                    );
                    start_rv = Some(current.max(n));
                }
                None => {
                    let status = ApiError::expired(format!(
                        "too old resource version: {n} ({})",
                        state.store.compacted()
                    ));
                    initial.push(PendingEvent::Ready(
                        json!({"type": "ERROR", "object": status.to_status()}),
                    ));
                    start_rv = None;
                }
            }
        }
    }
    let watch_id = {
        let mut intro = lock(&shared.intro);
        intro.watch_seq += 1;
        let id = intro.watch_seq;
        intro.watches.push(OpenWatch {
            id,
            resource: format!("{}/{}", def.api_version(), def.plural),
            namespace: spec.namespace.clone().unwrap_or_default(),
            label_selector: query.get("labelSelector").unwrap_or("").into(),
            field_selector: query.get("fieldSelector").unwrap_or("").into(),
            resource_version: rv_param.clone(),
        });
        id
    };
    let shared2 = shared.clone();
    let close_rx = shared.close_tx.subscribe();
    tokio::spawn(async move {
        run_watch(
            &shared2,
            spec,
            initial,
            start_rv,
            live,
            close_rx,
            tx,
            timeout,
            settings.bookmark_interval,
        )
        .await;
        lock(&shared2.intro).watches.retain(|w| w.id != watch_id);
    });
    let mut resp = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

#[allow(clippy::too_many_arguments)]
async fn run_watch(
    shared: &Arc<Shared>,
    spec: WatchSpec,
    initial: Vec<PendingEvent>,
    start_rv: Option<u64>,
    mut live: broadcast::Receiver<Arc<Change>>,
    mut close_rx: broadcast::Receiver<Option<String>>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    timeout: Duration,
    bookmark_interval: Duration,
) {
    let initial = match spec.render_events(shared, initial).await {
        Ok(events) => events,
        Err(e) => {
            let _ = tx
                .send(line(&json!({"type": "ERROR", "object": e.to_status()})))
                .await;
            return;
        }
    };
    for ev in &initial {
        if !send_event(shared, &tx, ev).await {
            return;
        }
    }
    let Some(mut last_rv) = start_rv else {
        return; // An ERROR event was sent: close.
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(bookmark_interval.max(Duration::from_millis(10)));
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = &mut deadline => {
                if spec.bookmarks {
                    let _ = tx.send(line(&spec.bookmark(last_rv, false))).await;
                }
                return;
            }
            _ = tx.closed() => return,
            closed = close_rx.recv() => match closed {
                Ok(Some(res)) if res != spec.def.plural => continue,
                _ => return,
            },
            _ = ticker.tick(), if spec.bookmarks => {
                // Everything up to the store's RV has been broadcast; drain it, then mark it.
                let rv = lock(&shared.state).store.rv();
                loop {
                    match live.try_recv() {
                        Ok(c) if c.rv <= rv => {
                            if c.rv > last_rv {
                                last_rv = c.rv;
                                if !send_change(shared, &spec, &tx, &c).await {
                                    return;
                                }
                            }
                        }
                        Ok(c) => {
                            // A newer change: deliver it and stop draining.
                            last_rv = c.rv;
                            if !send_change(shared, &spec, &tx, &c).await {
                                return;
                            }
                            break;
                        }
                        Err(broadcast::error::TryRecvError::Empty) => {
                            last_rv = last_rv.max(rv);
                            break;
                        }
                        Err(_) => return,
                    }
                }
                if tx.send(line(&spec.bookmark(last_rv, false))).await.is_err() {
                    return;
                }
            }
            change = live.recv() => match change {
                Ok(c) => {
                    if c.rv <= last_rv {
                        continue;
                    }
                    last_rv = c.rv;
                    if !send_change(shared, &spec, &tx, &c).await {
                        return;
                    }
                }
                // Lagged or closed: end the stream; the client resumes from its last RV.
                Err(_) => return,
            },
        }
    }
}

/// Sends the event of a change (if the watch sees it); false when the stream must end.
async fn send_change(
    shared: &Arc<Shared>,
    spec: &WatchSpec,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    c: &Change,
) -> bool {
    let Some((kind, obj)) = spec.event(c) else {
        return true;
    };
    match spec
        .render_events(shared, vec![PendingEvent::Object(kind, obj)])
        .await
    {
        Ok(events) => {
            for ev in &events {
                if !send_event(shared, tx, ev).await {
                    return false;
                }
            }
            true
        }
        Err(e) => {
            let _ = tx
                .send(line(&json!({"type": "ERROR", "object": e.to_status()})))
                .await;
            false
        }
    }
}

async fn send_event(
    shared: &Arc<Shared>,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    ev: &Value,
) -> bool {
    let delay = lock(&shared.faults).watch_event_delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    tx.send(line(ev)).await.is_ok()
}

// ---------------------------------------------------------------------------------------------
// Control endpoints

async fn control(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &Query,
    body: &Bytes,
) -> Response<Body> {
    let parse = |b: &Bytes| -> ApiResult<Value> {
        if b.is_empty() {
            Ok(json!({}))
        } else {
            serde_json::from_slice(b)
                .map_err(|e| ApiError::bad_request(format!("bad control request body: {e}")))
        }
    };
    let result: ApiResult<Value> = (|| match (method.as_str(), path.trim_end_matches('/')) {
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
        ("GET", "state") => {
            let watches = lock(&shared.intro).watches.clone();
            let state = lock(&shared.state);
            let mut objects = Vec::new();
            if query.get("objects") == Some("true") {
                for res in state.store.resources() {
                    for (_, o) in state.store.list(&res, None) {
                        objects.push((*o).clone());
                    }
                }
            }
            Ok(json!({"resourceVersion": state.store.rv().to_string(),
                    "compactedResourceVersion": state.store.compacted().to_string(),
                    "objectCount": state.store.total(), "watches": watches, "objects": objects}))
        }
        ("POST", "faults/respond") => {
            let rule: FaultRule = serde_json::from_value(parse(body)?)
                .map_err(|e| ApiError::bad_request(format!("bad fault rule: {e}")))?;
            lock(&shared.faults).responses.push(rule);
            Ok(json!({}))
        }
        ("POST", "faults/latency") => {
            let rule: LatencyRule = serde_json::from_value(parse(body)?)
                .map_err(|e| ApiError::bad_request(format!("bad latency rule: {e}")))?;
            lock(&shared.faults).latency.push(rule);
            Ok(json!({}))
        }
        ("POST", "faults/watch-delay") => {
            let millis = parse(body)?
                .get("millis")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            lock(&shared.faults).watch_event_delay = Duration::from_millis(millis);
            Ok(json!({}))
        }
        ("POST", "faults/expire-next-watch") => {
            let res = parse(body)?
                .get("resource")
                .and_then(Value::as_str)
                .map(str::to_string);
            lock(&shared.faults).expire_next_watch.push(res);
            Ok(json!({}))
        }
        ("POST", "faults/compact") => {
            let upto = parse(body)?.get("resourceVersion").and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            });
            let mut state = lock(&shared.state);
            state.store.compact(upto);
            Ok(json!({"compactedResourceVersion": state.store.compacted().to_string()}))
        }
        ("POST", "faults/close-watches") => {
            let res = parse(body)?
                .get("resource")
                .and_then(Value::as_str)
                .map(str::to_string);
            let _ = shared.close_tx.send(res);
            Ok(json!({}))
        }
        ("GET", "webhook-calls") => {
            Ok(serde_json::to_value(&*lock(&shared.webhooks.calls)).unwrap_or_default())
        }
        ("DELETE", "webhook-calls") => {
            lock(&shared.webhooks.calls).clear();
            Ok(json!({}))
        }
        ("POST", "webhook-services") => {
            let p = parse(body)?;
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
        ("DELETE", "faults") => {
            *lock(&shared.faults) = Faults::default();
            Ok(json!({}))
        }
        ("GET", "settings") => {
            let s = lock(&shared.settings);
            Ok(
                json!({"version": s.version, "historyLimit": s.history_limit,
                    "bookmarkIntervalMillis": s.bookmark_interval.as_millis() as u64,
                    "crdEstablishDelayMillis": s.crd_establish_delay.as_millis() as u64,
                    "podTerminationCapMillis": s.pod_termination_cap.as_millis() as u64,
                    "aggregatedDiscovery": s.aggregated_discovery}),
            )
        }
        ("PATCH", "settings") => {
            let p = parse(body)?;
            let mut s = lock(&shared.settings);
            if let Some(v) = p.get("version") {
                s.version = serde_json::from_value(v.clone())
                    .map_err(|e| ApiError::bad_request(format!("bad version: {e}")))?;
            }
            if let Some(n) = p.get("historyLimit").and_then(Value::as_u64) {
                s.history_limit = n as usize;
                lock(&shared.state).store.set_history_limit(n as usize);
            }
            if let Some(n) = p.get("bookmarkIntervalMillis").and_then(Value::as_u64) {
                s.bookmark_interval = Duration::from_millis(n);
            }
            if let Some(n) = p.get("crdEstablishDelayMillis").and_then(Value::as_u64) {
                s.crd_establish_delay = Duration::from_millis(n);
            }
            if let Some(n) = p.get("podTerminationCapMillis").and_then(Value::as_u64) {
                s.pod_termination_cap = Duration::from_millis(n);
            }
            lock(&shared.state).set_config(StateConfig {
                establish_immediately: s.crd_establish_delay.is_zero(),
                pod_termination_cap: s.pod_termination_cap,
            });
            if let Some(b) = p.get("aggregatedDiscovery").and_then(Value::as_bool) {
                s.aggregated_discovery = b;
            }
            Ok(json!({}))
        }
        _ => Err(ApiError::path_not_found()),
    })();
    match result {
        Ok(v) => json_response(200, &v, &[]),
        Err(e) => error_response(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert!(matches!(route("/version/"), Route::Version));
        assert!(matches!(route("/api/"), Route::Api));
        match route("/api/v1/namespaces/default/configmaps/c1") {
            Route::Resource(r) => {
                assert_eq!(r.plural, "configmaps");
                assert_eq!(r.namespace.as_deref(), Some("default"));
                assert_eq!(r.name.as_deref(), Some("c1"));
            }
            _ => panic!("not a resource route"),
        }
        match route("/api/v1/namespaces/foo/status") {
            Route::Resource(r) => {
                assert_eq!(r.plural, "namespaces");
                assert_eq!(r.name.as_deref(), Some("foo"));
                assert_eq!(r.subresource.as_deref(), Some("status"));
            }
            _ => panic!("not a namespace route"),
        }
        match route("/apis/kopf.dev/v1/watch/namespaces/ns/kopfexamples") {
            Route::Resource(r) => assert!(r.watch_prefix),
            _ => panic!("not a watch route"),
        }
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some("fieldSelector=metadata.name%3Dx%2Cb&watch=1&x"));
        assert_eq!(q.get("fieldSelector"), Some("metadata.name=x,b"));
        assert_eq!(q.bool("watch").ok().flatten(), Some(true));
        assert!(Query::parse(Some("watch=maybe")).bool("watch").is_err());
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
