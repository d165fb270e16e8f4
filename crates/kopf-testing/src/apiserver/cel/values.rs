//! Objects as CEL values, typed by their schema as kube-apiserver exposes them to rules.

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::cel::Value as CelValue;
use kube_cel::cel::objects::{Key, Map};
use serde_json::Value;

/// CEL's reserved words: a property with such a name is reached as `__name__`.
const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The CEL name of a property, or `None` when kube cannot expose it (the field is left out).
pub(super) fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let allowed = |c: char, first: bool| {
        c.is_ascii_alphabetic()
            || matches!(c, '_' | '.' | '-' | '/')
            || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if allowed(c, true) => {}
        _ => return None,
    }
    if !chars.all(|c| allowed(c, false)) {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("__") {
            out.push_str("__underscores__");
            rest = after;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            other => out.push(other),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

fn is_true(schema: &Value, key: &str) -> bool {
    schema.get(key) == Some(&Value::Bool(true))
}

/// Whether values of this schema are resources (the root, `x-kubernetes-embedded-resource`).
pub(super) fn is_embedded(schema: &Value) -> bool {
    is_true(schema, "x-kubernetes-embedded-resource")
}

fn string(s: &str) -> CelValue {
    CelValue::String(Arc::new(s.to_string()))
}

fn map(entries: HashMap<Key, CelValue>) -> CelValue {
    CelValue::Map(Map {
        map: Arc::new(entries),
    })
}

/// Converts `value` to CEL following `schema` (`Value::Null` when there is none): objects
/// with `properties` are structs with escaped field names, objects with
/// `additionalProperties` or preserved unknown fields are maps keyed by the raw keys, numbers
/// of a `number` schema are doubles. A resource (`resource` true) exposes `apiVersion`,
/// `kind` and only `name`/`generateName` of its `metadata`.
pub(super) fn to_cel(value: &Value, schema: &Value, resource: bool) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => {
            let double = schema.get("type").and_then(Value::as_str) == Some("number");
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) if !double => CelValue::Int(i),
                (None, Some(u)) if !double => CelValue::UInt(u),
                _ => CelValue::Float(n.as_f64().unwrap_or(0.0)),
            }
        }
        Value::String(s) => string(s),
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&Value::Null);
            let embedded = is_embedded(item_schema);
            CelValue::List(Arc::new(
                items
                    .iter()
                    .map(|i| to_cel(i, item_schema, embedded))
                    .collect(),
            ))
        }
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema
                .get("additionalProperties")
                .filter(|a| a.is_object() || **a == Value::Bool(true));
            let mut out = HashMap::with_capacity(obj.len());
            for (k, v) in obj {
                if resource && (k == "apiVersion" || k == "kind") {
                    out.insert(Key::from(k.as_str()), to_cel(v, &Value::Null, false));
                    continue;
                }
                if resource && k == "metadata" {
                    let mut meta = HashMap::new();
                    for field in ["name", "generateName"] {
                        if let Some(Value::String(s)) = v.get(field) {
                            meta.insert(Key::from(field), string(s));
                        }
                    }
                    out.insert(Key::from("metadata"), map(meta));
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(k)) {
                    if let Some(name) = escape(k) {
                        out.insert(Key::from(name), to_cel(v, sub, is_embedded(sub)));
                    }
                } else if let Some(sub) = additional {
                    let sub = if sub.is_object() { sub } else { &Value::Null };
                    out.insert(Key::from(k.as_str()), to_cel(v, sub, is_embedded(sub)));
                } else if props.is_none() {
                    out.insert(Key::from(k.as_str()), to_cel(v, &Value::Null, false));
                }
            }
            map(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_as_kube_does() {
        assert_eq!(escape("minReplicas").as_deref(), Some("minReplicas"));
        assert_eq!(
            escape("a-b.c/d").as_deref(),
            Some("a__dash__b__dot__c__slash__d")
        );
        assert_eq!(escape("x__y").as_deref(), Some("x__underscores__y"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("1abc"), None);
        assert_eq!(escape("a b"), None);
    }
}
