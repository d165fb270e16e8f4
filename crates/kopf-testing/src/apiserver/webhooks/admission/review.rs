//! Request building and answer reading: the `AdmissionReview` a webhook is sent (kinds,
//! resources, options) and what its answer means (checks, denials).

use serde_json::{Map, Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::ApiError;
use crate::apiserver::semantics::{DeleteOptions, WriteOptions};

pub(super) fn kind_of(def: &ResourceDef) -> Value {
    json!({"group": def.group, "version": def.version, "kind": def.kind})
}

pub(super) fn resource_of(def: &ResourceDef) -> Value {
    json!({"group": def.group, "version": def.version, "resource": def.plural})
}

pub(super) fn gvr(def: &ResourceDef) -> String {
    format!("{}/{}", def.api_version(), def.plural)
}

pub(super) fn write_options_json(kind: &str, opts: &WriteOptions) -> Value {
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if opts.dry_run {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(m) = opts.field_manager.as_deref().filter(|m| !m.is_empty()) {
        o["fieldManager"] = json!(m);
    }
    if let Some(v) = &opts.field_validation {
        o["fieldValidation"] = json!(v);
    }
    o
}

pub(super) fn delete_options_json(opts: &DeleteOptions) -> Value {
    let mut o = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    if opts.dry_run {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(g) = opts.grace_period {
        o["gracePeriodSeconds"] = json!(g);
    }
    if let Some(p) = &opts.propagation {
        o["propagationPolicy"] = json!(p);
    }
    if let Some(b) = opts.orphan_dependents {
        o["orphanDependents"] = json!(b);
    }
    let mut pre = Map::new();
    if let Some(u) = &opts.precondition_uid {
        pre.insert("uid".into(), json!(u));
    }
    if let Some(rv) = &opts.precondition_rv {
        pre.insert("resourceVersion".into(), json!(rv));
    }
    if !pre.is_empty() {
        o["preconditions"] = Value::Object(pre);
    }
    o
}

/// Why a call failed: the text after `failed calling webhook "<name>": `.
pub(super) fn verify_response(
    answer: &Value,
    uid: &str,
    mutating: bool,
) -> Result<(bool, Value), String> {
    let av = answer
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = answer.get("kind").and_then(Value::as_str).unwrap_or("");
    if av != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {av}, Kind={kind}"
        ));
    }
    let response = answer
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("received invalid webhook response: webhook response was absent")?;
    let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(format!(
            "received invalid webhook response: expected response.uid={uid:?}, got {got:?}"
        ));
    }
    let has_patch = response
        .get("patch")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty());
    if has_patch {
        if !mutating {
            return Err(
                "received invalid webhook response: validating webhooks may not return patches"
                    .into(),
            );
        }
        match response.get("patchType").and_then(Value::as_str) {
            None | Some("") => {
                return Err("received invalid webhook response: webhook returned response.patch but not response.patchType".into());
            }
            Some("JSONPatch") => {}
            Some(other) => {
                return Err(format!(
                    "received invalid webhook response: webhook returned invalid response.patchType of {other:?}"
                ));
            }
        }
    }
    let allowed = response
        .get("allowed")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok((allowed, response.clone()))
}

/// kube-apiserver's `ToStatusErr` for a denial.
pub(super) fn denial(name: &str, status: Option<&Value>) -> ApiError {
    let status = status.cloned().unwrap_or(Value::Null);
    let s = |k: &str| {
        status
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    let denied = format!("admission webhook \"{name}\" denied the request");
    let message = if !s("message").is_empty() {
        format!("{denied}: {}", s("message"))
    } else if !s("reason").is_empty() {
        format!("{denied}: {}", s("reason"))
    } else {
        format!("{denied} without explanation")
    };
    let reason = match s("reason") {
        r if r.is_empty() => ApiError::reason_for_code(code).to_string(),
        r => r,
    };
    let mut e = ApiError::new(code, &reason, message);
    if let Some(d) = status.get("details").filter(|d| d.is_object()) {
        e = e.with_details(d.clone());
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials() {
        let e = denial(
            "w.kopf.dev",
            Some(&json!({"code": 403, "message": "no", "reason": "Forbidden"})),
        );
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "admission webhook \"w.kopf.dev\" denied the request: no"
        );
        let e = denial("w.kopf.dev", Some(&json!({"code": 200})));
        assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
        assert_eq!(
            e.message,
            "admission webhook \"w.kopf.dev\" denied the request without explanation"
        );
    }
}
