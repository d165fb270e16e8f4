//! Structural-schema handling of custom resources, as apiextensions does it:
//! pruning of unknown fields, defaulting, and validation with kube-openapi style messages.
//!
//! Covered: `type`, `properties`, `additionalProperties`, `items`, `required`, `default`,
//! `nullable`, `enum`, `minLength`/`maxLength`, `minimum`/`maximum` (and exclusive forms),
//! `minItems`/`maxItems`, `x-kubernetes-preserve-unknown-fields`,
//! `x-kubernetes-embedded-resource`, `x-kubernetes-int-or-string`.
//! Not covered (treated as passing): `pattern`, `format`, `oneOf`/`anyOf`/`allOf`/`not`;
//! `x-kubernetes-validations` (CEL) are evaluated by `apiserver::cel`.

use serde_json::{Map, Value};

/// One validation failure.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaError {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: String,
    /// Dotted path, e.g. `spec.name`.
    pub field: String,
    /// The message, e.g. `Invalid value: "ab": spec.name in body should be at least 3 chars long`.
    pub message: String,
}

fn preserves(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

/// Prunes unknown fields and applies defaults, in place. The root keeps `apiVersion`, `kind`
/// and `metadata`.
pub fn prune_and_default(obj: &mut Value, schema: &Value) {
    walk(obj, schema, true);
}

fn walk(value: &mut Value, schema: &Value, root: bool) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let embedded = schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true));
            if props.is_some() || additional.is_some() || !preserves(schema) {
                let keep_meta = root || embedded;
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    if keep_meta && (k == "apiVersion" || k == "kind" || k == "metadata") {
                        continue;
                    }
                    let sub = props.and_then(|p| p.get(&k)).or(match additional {
                        Some(Value::Object(_)) => additional,
                        _ => None,
                    });
                    match sub {
                        Some(sub) => {
                            if let Some(v) = map.get_mut(&k) {
                                if v.is_null() && sub.get("nullable") != Some(&Value::Bool(true)) {
                                    map.remove(&k);
                                    continue;
                                }
                                walk(v, sub, false);
                            }
                        }
                        None if additional == Some(&Value::Bool(true)) || preserves(schema) => {}
                        None => {
                            map.remove(&k);
                        }
                    }
                }
            }
            if let Some(props) = props {
                apply_defaults(map, props);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    walk(item, item_schema, false);
                }
            }
        }
        _ => {}
    }
}

/// The dotted paths of the fields pruning would drop (for `fieldValidation`).
pub fn unknown_fields(obj: &Value, schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    find_unknown(obj, schema, true, "", &mut out);
    out
}

fn find_unknown(value: &Value, schema: &Value, root: bool, path: &str, out: &mut Vec<String>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let embedded = schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true));
            if props.is_none() && additional.is_none() && preserves(schema) {
                return;
            }
            for (k, v) in map {
                if (root || embedded) && (k == "apiVersion" || k == "kind" || k == "metadata") {
                    continue;
                }
                let sub = props.and_then(|p| p.get(k)).or(match additional {
                    Some(Value::Object(_)) => additional,
                    _ => None,
                });
                match sub {
                    Some(sub) => find_unknown(v, sub, false, &join(k), out),
                    None if additional == Some(&Value::Bool(true)) || preserves(schema) => {}
                    None => out.push(join(k)),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    find_unknown(item, item_schema, false, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn apply_defaults(map: &mut Map<String, Value>, props: &Map<String, Value>) {
    for (k, sub) in props {
        if map.contains_key(k) {
            continue;
        }
        if let Some(default) = sub.get("default") {
            let mut d = default.clone();
            walk(&mut d, sub, false);
            map.insert(k.clone(), d);
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn render(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Validates an object against the CRD schema (metadata excluded).
pub fn validate(obj: &Value, schema: &Value) -> Vec<SchemaError> {
    let mut errors = Vec::new();
    if let (Some(map), Some(props)) = (
        obj.as_object(),
        schema.get("properties").and_then(Value::as_object),
    ) {
        for (k, v) in map {
            if k == "metadata" || k == "apiVersion" || k == "kind" {
                continue;
            }
            if let Some(sub) = props.get(k) {
                check(v, sub, k, &mut errors);
            }
        }
        required(map, schema, "", &mut errors);
    }
    errors
}

fn required(map: &Map<String, Value>, schema: &Value, path: &str, errors: &mut Vec<SchemaError>) {
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                let field = if path.is_empty() {
                    r.to_string()
                } else {
                    format!("{path}.{r}")
                };
                errors.push(SchemaError {
                    reason: "FieldValueRequired".into(),
                    field,
                    message: "Required value".into(),
                });
            }
        }
    }
}

fn invalid(errors: &mut Vec<SchemaError>, path: &str, v: &Value, what: String) {
    errors.push(SchemaError {
        reason: "FieldValueInvalid".into(),
        field: path.to_string(),
        message: format!("Invalid value: {}: {path} in body {what}", render(v)),
    });
}

fn check(v: &Value, schema: &Value, path: &str, errors: &mut Vec<SchemaError>) {
    if v.is_null() {
        if schema.get("nullable") != Some(&Value::Bool(true)) && schema.get("type").is_some() {
            let t = schema.get("type").and_then(Value::as_str).unwrap_or("");
            invalid(errors, path, v, format!("must be of type {t}: \"null\""));
        }
        return;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if int_or_string {
        if !matches!(type_name(v), "integer" | "string") {
            invalid(
                errors,
                path,
                v,
                format!("must be of type integer or string: \"{}\"", type_name(v)),
            );
        }
        return;
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(v);
        let ok = actual == t || (t == "number" && actual == "integer");
        if !ok {
            invalid(
                errors,
                path,
                v,
                format!("must be of type {t}: \"{actual}\""),
            );
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        let list: Vec<String> = options.iter().map(render).collect();
        errors.push(SchemaError {
            reason: "FieldValueNotSupported".into(),
            field: path.to_string(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                render(v),
                list.join(", ")
            ),
        });
    }
    match v {
        Value::String(s) => check_string(s, v, schema, path, errors),
        Value::Number(n) => check_number(n.as_f64().unwrap_or(0.0), v, schema, path, errors),
        Value::Array(items) => {
            check_items(items, v, schema, path, errors);
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item, item_schema, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, sub_v) in map {
                let sub = props.and_then(|p| p.get(k)).or(additional);
                if let Some(sub) = sub {
                    check(sub_v, sub, &format!("{path}.{k}"), errors);
                }
            }
            required(map, schema, path, errors);
        }
        _ => {}
    }
}

/// A string's length against `minLength` and `maxLength`.
fn check_string(s: &str, v: &Value, schema: &Value, path: &str, errors: &mut Vec<SchemaError>) {
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        invalid(
            errors,
            path,
            v,
            format!("should be at least {min} chars long"),
        );
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        errors.push(SchemaError {
            reason: "FieldValueTooLong".into(),
            field: path.to_string(),
            message: format!("Too long: may not be more than {max} bytes"),
        });
    }
}

/// A number against `minimum` and `maximum` (exclusive or not).
fn check_number(x: f64, v: &Value, schema: &Value, path: &str, errors: &mut Vec<SchemaError>) {
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let excl = schema.get("exclusiveMinimum") == Some(&Value::Bool(true));
        if x < min || (excl && x == min) {
            let rel = if excl {
                "greater than"
            } else {
                "greater than or equal to"
            };
            invalid(errors, path, v, format!("should be {rel} {min}"));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let excl = schema.get("exclusiveMaximum") == Some(&Value::Bool(true));
        if x > max || (excl && x == max) {
            let rel = if excl {
                "less than"
            } else {
                "less than or equal to"
            };
            invalid(errors, path, v, format!("should be {rel} {max}"));
        }
    }
}

/// An array's length against `minItems` and `maxItems`.
fn check_items(
    items: &[Value],
    v: &Value,
    schema: &Value,
    path: &str,
    errors: &mut Vec<SchemaError>,
) {
    let n = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && n < min
    {
        invalid(errors, path, v, format!("should have at least {min} items"));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && n > max
    {
        errors.push(SchemaError {
            reason: "FieldValueTooMany".into(),
            field: path.to_string(),
            message: format!("Too many: {n}: must have at most {max} items"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 3},
                "replicas": {"type": "integer", "default": 1, "maximum": 10},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "items": {"type": "array", "items": {"type": "string"}},
            }},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }})
    }

    #[test]
    fn prunes_unknown_and_defaults() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"},
            "spec": {"name": "abc", "junk": 1, "free": {"any": {"thing": 1}}}, "extra": true});
        prune_and_default(&mut o, &schema());
        assert_eq!(
            o,
            json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"},
            "spec": {"name": "abc", "replicas": 1, "free": {"any": {"thing": 1}}}})
        );
    }

    #[test]
    fn unknown_fields_are_listed() {
        let o = json!({"apiVersion": "x/v1", "metadata": {"name": "n"}, "spec": {"name": "abc", "junk": 1, "free": {"x": 1}}, "extra": 1});
        assert_eq!(
            unknown_fields(&o, &schema()),
            vec!["extra".to_string(), "spec.junk".to_string()]
        );
    }

    #[test]
    fn validation_messages_match_kube_openapi() {
        let o = json!({"spec": {"name": "ab", "replicas": "x", "mode": "c", "items": [1]}});
        let errs = validate(&o, &schema());
        let msgs: Vec<String> = errs
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert!(msgs.contains(&"spec.name: Invalid value: \"ab\": spec.name in body should be at least 3 chars long".to_string()), "{msgs:?}");
        assert!(msgs.contains(&"spec.replicas: Invalid value: \"x\": spec.replicas in body must be of type integer: \"string\"".to_string()), "{msgs:?}");
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("spec.mode: Unsupported value: \"c\"")),
            "{msgs:?}"
        );
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("spec.items[0]: Invalid value: 1")),
            "{msgs:?}"
        );
        let missing = validate(&json!({"spec": {}}), &schema());
        assert_eq!(missing[0].field, "spec.name");
        assert_eq!(missing[0].reason, "FieldValueRequired");
    }
}
