//! The rules of admission webhook configurations (`MutatingWebhookConfiguration`,
//! `ValidatingWebhookConfiguration`) as stored objects: kube-apiserver's defaults and its
//! validation, including the `clientConfig` CRD conversion webhooks share.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Value, json};

use crate::apiserver::error::{ApiError, Cause, cause};
use crate::apiserver::selectors::LabelSelector;

/// The API group of webhook configurations.
pub(crate) const GROUP: &str = "admissionregistration.k8s.io";

/// The strings of a JSON array (nothing when it is missing or not an array).
pub(crate) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Applies kube-apiserver's defaults to a webhook configuration.
pub(crate) fn default_configuration(obj: &mut Value, mutating: bool) {
    let Some(list) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for w in list.iter_mut().filter_map(Value::as_object_mut) {
        w.entry("failurePolicy").or_insert_with(|| json!("Fail"));
        w.entry("matchPolicy")
            .or_insert_with(|| json!("Equivalent"));
        w.entry("namespaceSelector").or_insert_with(|| json!({}));
        w.entry("objectSelector").or_insert_with(|| json!({}));
        w.entry("timeoutSeconds").or_insert_with(|| json!(10));
        if mutating {
            w.entry("reinvocationPolicy")
                .or_insert_with(|| json!("Never"));
        }
        if let Some(rules) = w.get_mut("rules").and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter_map(Value::as_object_mut) {
                r.entry("scope").or_insert_with(|| json!("*"));
            }
        }
        if let Some(svc) = w
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
        {
            svc.entry("port").or_insert_with(|| json!(443));
        }
    }
}

fn go_strings(v: &[String]) -> String {
    format!(
        "[]string{{{}}}",
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Validates a `clientConfig` (of a webhook or a CRD conversion).
pub(crate) fn validate_client_config(cc: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let url = cc.get("url").filter(|u| !u.is_null());
    let service = cc.get("service").filter(|s| !s.is_null());
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => causes.push(cause(
            "FieldValueRequired",
            field,
            "Required value: exactly one of url or service is required",
        )),
        (Some(u), None) => {
            let text = u.as_str().unwrap_or("");
            match text.parse::<hyper::Uri>() {
                Ok(uri) if uri.scheme_str() != Some("https") => causes.push(cause(
                    "FieldValueInvalid",
                    &format!("{field}.url"),
                    format!("Invalid value: \"{text}\": 'https' is the only allowed URL scheme"),
                )),
                Ok(uri) if uri.host().is_none_or(str::is_empty) => causes.push(cause(
                    "FieldValueInvalid",
                    &format!("{field}.url"),
                    format!("Invalid value: \"{text}\": host must be specified"),
                )),
                Ok(_) => {}
                Err(e) => causes.push(cause(
                    "FieldValueInvalid",
                    &format!("{field}.url"),
                    format!("Invalid value: \"{text}\": url must be a valid URL: {e}"),
                )),
            }
        }
        (None, Some(s)) => {
            for key in ["namespace", "name"] {
                if s.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
                    causes.push(cause(
                        "FieldValueRequired",
                        &format!("{field}.service.{key}"),
                        format!("Required value: service {key} is required"),
                    ));
                }
            }
            if let Some(port) = s.get("port")
                && !port.as_u64().is_some_and(|p| (1..=65535).contains(&p))
            {
                causes.push(cause(
                    "FieldValueInvalid",
                    &format!("{field}.service.port"),
                    format!(
                        "Invalid value: {port}: port is not valid: must be between 1 and 65535, inclusive"
                    ),
                ));
            }
            if let Some(path) = s.get("path").and_then(Value::as_str)
                && !path.is_empty()
                && !path.starts_with('/')
            {
                causes.push(cause(
                    "FieldValueInvalid",
                    &format!("{field}.service.path"),
                    format!("Invalid value: \"{path}\": must start with a '/'"),
                ));
            }
        }
    }
    if let Some(bundle) = cc.get("caBundle").and_then(Value::as_str) {
        let compact: String = bundle.chars().filter(|c| !c.is_whitespace()).collect();
        if base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .is_err()
        {
            causes.push(cause(
                "FieldValueInvalid",
                &format!("{field}.caBundle"),
                "Invalid value: \"...\": must be base64-encoded PEM certificates",
            ));
        }
    }
    causes
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
    cause(
        "FieldValueNotSupported",
        field,
        format!(
            "Unsupported value: \"{value}\": supported values: {}",
            supported
                .iter()
                .map(|s| format!("\"{s}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
}

/// Validates a webhook configuration as kube-apiserver (v1) does.
pub(crate) fn validate_configuration(
    obj: &Value,
    kind: &str,
    mutating: bool,
) -> Result<(), ApiError> {
    let config_name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut causes = Vec::new();
    let list = obj
        .get("webhooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, w) in list.iter().enumerate() {
        let f = |k: &str| format!("webhooks[{i}].{k}");
        webhook_name(w, i, &mut seen, &mut causes);
        match w.get("clientConfig").filter(|c| !c.is_null()) {
            Some(cc) => causes.extend(validate_client_config(cc, &f("clientConfig"))),
            None => causes.push(cause(
                "FieldValueRequired",
                &f("clientConfig"),
                "Required value: exactly one of url or service is required",
            )),
        }
        let rules = w
            .get("rules")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (j, r) in rules.iter().enumerate() {
            webhook_rule(r, &format!("webhooks[{i}].rules[{j}]"), &mut causes);
        }
        webhook_policies(w, &f, mutating, &mut causes);
        webhook_review_and_selectors(w, &f, &mut causes);
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(GROUP, kind, config_name, causes))
    }
}

/// A webhook's name: required, a domain of three segments or more, unique in the
/// configuration.
fn webhook_name(w: &Value, i: usize, seen: &mut BTreeMap<String, usize>, causes: &mut Vec<Cause>) {
    let field = format!("webhooks[{i}].name");
    match w.get("name").and_then(Value::as_str) {
        None | Some("") => causes.push(cause("FieldValueRequired", &field, "Required value")),
        Some(n) => {
            if n.split('.').filter(|p| !p.is_empty()).count() < 3 || n.split('.').any(str::is_empty)
            {
                causes.push(cause(
                    "FieldValueInvalid",
                    &field,
                    format!("Invalid value: \"{n}\": should be a domain with at least three segments separated by dots"),
                ));
            }
            if seen.insert(n.to_string(), i).is_some() {
                causes.push(cause(
                    "FieldValueDuplicate",
                    &field,
                    format!("Duplicate value: \"{n}\""),
                ));
            }
        }
    }
}

/// One rule of a webhook (at `at`, e.g. `webhooks[0].rules[1]`): its lists required, its
/// operations and scope among kube's.
fn webhook_rule(r: &Value, at: &str, causes: &mut Vec<Cause>) {
    let rf = |k: &str| format!("{at}.{k}");
    for key in ["operations", "apiGroups", "apiVersions", "resources"] {
        if strings(r.get(key)).is_empty() {
            causes.push(cause("FieldValueRequired", &rf(key), "Required value"));
        }
    }
    for (k, op) in strings(r.get("operations")).iter().enumerate() {
        if !matches!(
            op.as_str(),
            "*" | "CREATE" | "UPDATE" | "DELETE" | "CONNECT"
        ) {
            causes.push(not_supported(
                &format!("{at}.operations[{k}]"),
                op,
                &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
            ));
        }
    }
    if let Some(scope) = r.get("scope").and_then(Value::as_str)
        && !matches!(scope, "*" | "Cluster" | "Namespaced")
    {
        causes.push(not_supported(
            &rf("scope"),
            scope,
            &["*", "Cluster", "Namespaced"],
        ));
    }
}

/// A webhook's failure, match and reinvocation policies, side effects and timeout.
fn webhook_policies(
    w: &Value,
    f: &dyn Fn(&str) -> String,
    mutating: bool,
    causes: &mut Vec<Cause>,
) {
    let s = |k: &str| w.get(k).and_then(Value::as_str);
    if let Some(v) = s("failurePolicy")
        && !matches!(v, "Fail" | "Ignore")
    {
        causes.push(not_supported(&f("failurePolicy"), v, &["Fail", "Ignore"]));
    }
    if let Some(v) = s("matchPolicy")
        && !matches!(v, "Exact" | "Equivalent")
    {
        causes.push(not_supported(
            &f("matchPolicy"),
            v,
            &["Equivalent", "Exact"],
        ));
    }
    if mutating
        && let Some(v) = s("reinvocationPolicy")
        && !matches!(v, "Never" | "IfNeeded")
    {
        causes.push(not_supported(
            &f("reinvocationPolicy"),
            v,
            &["IfNeeded", "Never"],
        ));
    }
    match s("sideEffects") {
        None | Some("") => causes.push(cause(
            "FieldValueRequired",
            &f("sideEffects"),
            "Required value: must specify one of None, NoneOnDryRun",
        )),
        Some("None" | "NoneOnDryRun") => {}
        Some(v) => causes.push(not_supported(
            &f("sideEffects"),
            v,
            &["None", "NoneOnDryRun"],
        )),
    }
    if let Some(t) = w.get("timeoutSeconds")
        && !t.as_i64().is_some_and(|t| (1..=30).contains(&t))
    {
        causes.push(cause(
            "FieldValueInvalid",
            &f("timeoutSeconds"),
            format!("Invalid value: {t}: the timeout value must be between 1 and 30 seconds"),
        ));
    }
}

/// A webhook's AdmissionReview versions and its namespace and object selectors.
fn webhook_review_and_selectors(w: &Value, f: &dyn Fn(&str) -> String, causes: &mut Vec<Cause>) {
    let versions = strings(w.get("admissionReviewVersions"));
    if versions.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            &f("admissionReviewVersions"),
            "Required value: must specify one of v1, v1beta1",
        ));
    } else if !versions.iter().any(|v| v == "v1" || v == "v1beta1") {
        causes.push(cause(
            "FieldValueInvalid",
            &f("admissionReviewVersions"),
            format!(
                "Invalid value: {}: must include at least one of v1, v1beta1",
                go_strings(&versions)
            ),
        ));
    }
    for key in ["namespaceSelector", "objectSelector"] {
        if let Some(sel) = w.get(key)
            && let Err(e) = LabelSelector::from_spec(sel)
        {
            causes.push(cause(
                "FieldValueInvalid",
                &f(key),
                format!("Invalid value: {sel}: {e}"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_defaults_and_validation() {
        let mut cfg = json!({"metadata": {"name": "c"}, "webhooks": [{
            "name": "a.kopf.dev", "clientConfig": {"service": {"namespace": "n", "name": "s"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None", "admissionReviewVersions": ["v1"]}]});
        default_configuration(&mut cfg, true);
        let w = &cfg["webhooks"][0];
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["matchPolicy"], "Equivalent");
        assert_eq!(w["timeoutSeconds"], 10);
        assert_eq!(w["reinvocationPolicy"], "Never");
        assert_eq!(w["rules"][0]["scope"], "*");
        assert_eq!(w["clientConfig"]["service"]["port"], 443);
        assert!(validate_configuration(&cfg, "MutatingWebhookConfiguration", true).is_ok());
        let mut bad = cfg.clone();
        bad["webhooks"][0]["sideEffects"] = json!("Some");
        bad["webhooks"][0]["timeoutSeconds"] = json!(31);
        bad["webhooks"][0]["name"] = json!("short.name");
        bad["webhooks"][0]["clientConfig"] = json!({"url": "http://127.0.0.1/"});
        let e = validate_configuration(&bad, "MutatingWebhookConfiguration", true)
            .expect_err("invalid");
        assert_eq!(e.code, 422);
        for needle in [
            "webhooks[0].sideEffects: Unsupported value: \"Some\"",
            "webhooks[0].timeoutSeconds: Invalid value: 31",
            "webhooks[0].name: Invalid value: \"short.name\"",
            "webhooks[0].clientConfig.url: Invalid value: \"http://127.0.0.1/\": 'https' is the only allowed URL scheme",
        ] {
            assert!(e.message.contains(needle), "{needle} not in {}", e.message);
        }
    }
}
