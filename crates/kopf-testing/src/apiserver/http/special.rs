//! The built-in endpoints that are not plain object storage: `componentstatuses`
//! (computed), `tokenreviews` and `serviceaccounts/{name}/token` (tokens the server signs
//! and recognises), `pods/{name}/eviction` (deletes the Pod), and the checks of a
//! CertificateSigningRequest on create. The other subresources with their own paths
//! (`pods/ephemeralcontainers`, `certificatesigningrequests/approval`) are object writes.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Response, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult, cause};
use crate::apiserver::semantics::State;
use crate::apiserver::sync::lock;
use crate::apiserver::webhooks::admission;

use super::negotiation::{decode_body, header_str};
use super::options::delete_options;
use super::query::Query;
use super::response::{json_response, written_response};
use super::routing::ResourceRequest;
use super::shared::Shared;

const AUTHN: &str = "authentication.k8s.io";
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const COMPONENTS: &[(&str, &str)] = &[
    ("controller-manager", "ok"),
    ("etcd-0", "{\"health\":\"true\",\"reason\":\"\"}"),
    ("scheduler", "ok"),
];
const COMPONENT_STATUS_WARNING: &str = "v1 ComponentStatus is deprecated in v1.19+";

/// Serves a request of these endpoints; None for the requests the object endpoints serve.
pub(super) async fn serve(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    rr: &ResourceRequest,
    verb: &str,
    headers: &HeaderMap,
    query: &Query,
    body: &Bytes,
) -> ApiResult<Option<Response<Body>>> {
    let sub = rr.subresource.as_deref();
    if sub.is_none() && !def.served_verbs().contains(&verb) {
        return Err(ApiError::method_not_allowed(verb, &def.plural));
    }
    let ns = rr.namespace.as_deref();
    let name = rr.name.as_deref().unwrap_or("");
    let content_type = header_str(headers, header::CONTENT_TYPE);
    if let Some(s) = sub.and_then(|s| def.subresource(s))
        && !s.verbs.contains(&verb)
    {
        return Err(ApiError::method_not_allowed(
            verb,
            &format!("{}/{}", def.plural, s.name),
        ));
    }
    let response = match (def.group.as_str(), def.plural.as_str(), sub) {
        ("", "componentstatuses", None) => component_statuses(rr.name.as_deref())?,
        (AUTHN, "tokenreviews", None) => {
            let review = typed_body(decode_body(&content_type, body, false)?, "TokenReview")?;
            let answer = token_review(&lock(&shared.state), review)?;
            json_response(201, &answer, &[])
        }
        ("", "serviceaccounts", Some("token")) => {
            let request = typed_body(decode_body(&content_type, body, false)?, "TokenRequest")?;
            let answer = token_request(&lock(&shared.state), def, ns, name, request)?;
            json_response(201, &answer, &[])
        }
        ("", "pods", Some("eviction")) => {
            let eviction = typed_body(decode_body(&content_type, body, false)?, "Eviction")?;
            return evict(shared, def, ns, name, query, eviction)
                .await
                .map(Some);
        }
        ("certificates.k8s.io", "certificatesigningrequests", None) if verb == "create" => {
            let csr = decode_body(&content_type, body, false)?;
            validate_csr(&csr)?;
            return Ok(None);
        }
        _ => return Ok(None),
    };
    Ok(Some(response))
}

fn component_statuses(name: Option<&str>) -> ApiResult<Response<Body>> {
    let item = |(name, message): &(&str, &str)| {
        json!({"metadata": {"name": name, "creationTimestamp": null},
            "conditions": [{"type": "Healthy", "status": "True", "message": message}]})
    };
    let warnings = [COMPONENT_STATUS_WARNING.to_string()];
    match name {
        None => {
            let items: Vec<Value> = COMPONENTS.iter().map(item).collect();
            let list = json!({"kind": "ComponentStatusList", "apiVersion": "v1",
                "metadata": {}, "items": items});
            Ok(json_response(200, &list, &warnings))
        }
        Some(name) => {
            let Some(c) = COMPONENTS.iter().find(|c| c.0 == name) else {
                return Err(ApiError::not_found("", "componentstatuses", name));
            };
            let mut obj = item(c);
            obj["kind"] = json!("ComponentStatus");
            obj["apiVersion"] = json!("v1");
            Ok(json_response(200, &obj, &warnings))
        }
    }
}

/// The key tokens are signed with: the uid of this server's `kube-system` namespace
/// (random, and the same for the server's whole life).
fn signing_key(state: &State) -> String {
    let Some(def) = state.find("", "v1", "namespaces") else {
        return String::new();
    };
    state
        .get(&def, None, "kube-system")
        .ok()
        .and_then(|ns| {
            ns.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

fn signature(key: &str, signed: &str) -> String {
    let digest = Sha256::digest(format!("{key}.{signed}").as_bytes());
    URL_SAFE_NO_PAD.encode(digest)
}

/// A body kube decodes into a typed request object: an object whose `spec`, when given, is an
/// object too (anything else is the decoder's 400, never a write into a non-object).
fn typed_body(body: Value, kind: &str) -> ApiResult<Value> {
    use crate::apiserver::semantics::objectmeta::{json_kind as type_name, not_an_object};
    if !body.is_object() {
        return Err(not_an_object(&body));
    }
    match body.get("spec") {
        Some(spec) if !(spec.is_object() || spec.is_null()) => Err(ApiError::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {} into Go struct field {kind}.spec of type v1.{kind}Spec",
            type_name(spec)
        ))),
        _ => Ok(body),
    }
}

fn token_request(
    state: &State,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    mut request: Value,
) -> ApiResult<Value> {
    let sa = state.get(def, ns, name)?;
    let seconds = match request.pointer("/spec/expirationSeconds") {
        None | Some(Value::Null) => 3600,
        Some(v) => v.as_i64().unwrap_or(0),
    };
    let invalid = |message: &str| {
        ApiError::invalid(
            AUTHN,
            "TokenRequest",
            name,
            vec![cause(
                "FieldValueInvalid",
                "spec.expirationSeconds",
                format!("Invalid value: {seconds}: {message}"),
            )],
        )
    };
    if seconds < 600 {
        return Err(invalid("may not specify a duration less than 10 minutes"));
    }
    if seconds > 1 << 32 {
        return Err(invalid(
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    let audiences = match request.pointer("/spec/audiences").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!([ISSUER]),
    };
    let now = jiff::Timestamp::now();
    let expires = now
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(now);
    let namespace = ns.unwrap_or("");
    let uid = sa.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let claims = json!({
        "aud": audiences, "exp": expires.as_second(), "iat": now.as_second(),
        "nbf": now.as_second(), "iss": ISSUER,
        "jti": uuid::Uuid::new_v4().to_string(),
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
    });
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","kid":"kopf-fake"}"#);
    let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()));
    let token = format!("{signed}.{}", signature(&signing_key(state), &signed));
    request["kind"] = json!("TokenRequest");
    request["apiVersion"] = json!(format!("{AUTHN}/v1"));
    request["metadata"] = json!({"name": name, "namespace": namespace, "creationTimestamp": null});
    request["spec"]["audiences"] = audiences;
    request["spec"]["expirationSeconds"] = json!(seconds);
    if request["spec"].get("boundObjectRef").is_none() {
        request["spec"]["boundObjectRef"] = Value::Null;
    }
    request["status"] = json!({"token": token,
        "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()});
    Ok(request)
}

/// The ServiceAccount a token this server issued (and that has not expired, and whose
/// ServiceAccount still exists) stands for: (namespace, name, uid).
fn token_subject(state: &State, token: &str) -> Option<(String, String, String)> {
    let (signed, sig) = token.rsplit_once('.')?;
    if signature(&signing_key(state), signed) != sig {
        return None;
    }
    let payload = signed.split_once('.')?.1;
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    if claims.get("exp")?.as_i64()? < jiff::Timestamp::now().as_second() {
        return None;
    }
    let ns = claims.pointer("/kubernetes.io/namespace")?.as_str()?;
    let name = claims
        .pointer("/kubernetes.io/serviceaccount/name")?
        .as_str()?;
    let uid = claims
        .pointer("/kubernetes.io/serviceaccount/uid")?
        .as_str()?;
    let def = state.find("", "v1", "serviceaccounts")?;
    let sa = state.get(&def, Some(ns), name).ok()?;
    (sa.pointer("/metadata/uid")?.as_str()? == uid)
        .then(|| (ns.to_string(), name.to_string(), uid.to_string()))
}

fn token_review(state: &State, mut review: Value) -> ApiResult<Value> {
    let token = review
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or("");
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let status = match token_subject(state, token) {
        Some((ns, name, uid)) => json!({
            "authenticated": true,
            "user": {"username": format!("system:serviceaccount:{ns}:{name}"), "uid": uid,
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"),
                    "system:authenticated"]},
            "audiences": review.pointer("/spec/audiences").cloned()
                .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
                .unwrap_or_else(|| json!([ISSUER])),
        }),
        None => json!({"user": {}, "error": "[invalid bearer token, token lookup failed]"}),
    };
    review["kind"] = json!("TokenReview");
    review["apiVersion"] = json!(format!("{AUTHN}/v1"));
    review["metadata"] = json!({"creationTimestamp": null});
    review["status"] = status;
    Ok(review)
}

async fn evict(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    query: &Query,
    eviction: Value,
) -> ApiResult<Response<Body>> {
    let named = eviction
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if named != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    lock(&shared.state).get(def, ns, name)?;
    let options = eviction
        .get("deleteOptions")
        .filter(|o| !o.is_null())
        .map(|o| Bytes::from(o.to_string()))
        .unwrap_or_default();
    let opts = delete_options(query, &options)?;
    let deleted = admission::delete(&**shared, def, ns, name, &opts).await;
    if deleted.is_err() {
        return Ok(written_response(deleted));
    }
    Ok(json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        &[],
    ))
}

/// kube's validation of a new CertificateSigningRequest (the key rules).
fn validate_csr(csr: &Value) -> ApiResult<()> {
    let name = csr
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let spec = csr.get("spec").cloned().unwrap_or(Value::Null);
    let mut causes = Vec::new();
    let request = spec.get("request").and_then(Value::as_str).unwrap_or("");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(request)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.request",
            "Invalid value: []byte{...}: PEM block type must be CERTIFICATE REQUEST",
        ));
    }
    if spec
        .get("signerName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        causes.push(cause(
            "FieldValueRequired",
            "spec.signerName",
            "Required value",
        ));
    }
    if spec
        .get("usages")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        causes.push(cause(
            "FieldValueRequired",
            "spec.usages",
            "Required value: usages must be provided",
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "certificates.k8s.io",
            "CertificateSigningRequest",
            name,
            causes,
        ))
    }
}
