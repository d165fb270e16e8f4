//! Server-side Tables (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), as
//! `kubectl get` asks for them: a Name column, the CRD's `additionalPrinterColumns` for custom
//! resources (or Age when there are none), Age for built-ins.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;

/// What rows carry as `object`: `None`, `Metadata` (default) or `Object`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// A PartialObjectMetadata.
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter (absent or empty: `Metadata`); None for
    /// a value kube-apiserver does not know.
    pub fn parse(v: Option<&str>) -> Option<Self> {
        match v {
            None | Some("" | "Metadata") => Some(IncludeObject::Metadata),
            Some("None") => Some(IncludeObject::None),
            Some("Object") => Some(IncludeObject::Object),
            Some(_) => None,
        }
    }
}

struct Column {
    name: String,
    kind: String,
    format: String,
    description: String,
    priority: i64,
    json_path: Option<String>,
}

fn columns(def: &ResourceDef, crd_columns: Option<&Value>) -> Vec<Column> {
    let mut cols = vec![Column {
        name: "Name".into(),
        kind: "string".into(),
        format: "name".into(),
        description: "Name must be unique within a namespace.".into(),
        priority: 0,
        json_path: None,
    }];
    let printer: Vec<&Value> = crd_columns
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if def.is_custom() && !printer.is_empty() {
        for c in printer {
            cols.push(Column {
                name: c["name"].as_str().unwrap_or("").to_string(),
                kind: c["type"].as_str().unwrap_or("string").to_string(),
                format: c["format"].as_str().unwrap_or("").to_string(),
                description: c["description"].as_str().unwrap_or("").to_string(),
                priority: c["priority"].as_i64().unwrap_or(0),
                json_path: c["jsonPath"].as_str().map(str::to_string),
            });
        }
    } else {
        cols.push(Column {
            name: "Age".into(),
            kind: "date".into(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
            priority: 0,
            json_path: Some(".metadata.creationTimestamp".into()),
        });
    }
    cols
}

/// Evaluates a simple JSONPath such as `.spec.replicas` or `.status.conditions[0].type`.
fn eval(obj: &Value, path: &str) -> Value {
    let mut cur = obj;
    for part in path.trim_start_matches('.').split('.') {
        if part.is_empty() {
            continue;
        }
        let (name, index) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !name.is_empty() {
            match cur.get(name) {
                Some(v) => cur = v,
                None => return Value::Null,
            }
        }
        if let Some(i) = index {
            match cur.get(i) {
                Some(v) => cur = v,
                None => return Value::Null,
            }
        }
    }
    match cur {
        Value::Object(_) | Value::Array(_) => Value::String(cur.to_string()),
        other => other.clone(),
    }
}

/// Renders an age as kubectl and the API server do (`45s`, `5m3s`, `3h`, `2d4h`, `3y`).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        let d = hours / 24;
        return if h == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    let years = hours / 24 / 365;
    let days = (hours / 24) % 365;
    if hours < 24 * 365 * 8 && days != 0 {
        return format!("{years}y{days}d");
    }
    format!("{years}y")
}

fn age(v: &Value) -> Value {
    let Some(ts) = v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) else {
        return Value::Null;
    };
    let secs = jiff::Timestamp::now().as_second() - ts.as_second();
    Value::String(human_duration(secs))
}

fn row(
    obj: &Value,
    cols: &[Column],
    include: IncludeObject,
    def: &ResourceDef,
    api_version: &str,
) -> Value {
    let cells: Vec<Value> = cols
        .iter()
        .map(|c| match &c.json_path {
            None => obj
                .pointer("/metadata/name")
                .cloned()
                .unwrap_or_else(|| json!("")),
            Some(p) if c.kind == "date" => age(&eval(obj, p)),
            Some(p) => eval(obj, p),
        })
        .collect();
    let mut r = json!({"cells": cells});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": api_version,
                "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))});
        }
        IncludeObject::Object => {
            let mut o = obj.clone();
            o["apiVersion"] = json!(def.api_version());
            o["kind"] = json!(def.kind);
            r["object"] = o;
        }
    }
    r
}

/// A Table (of `api_version`, `meta.k8s.io/v1` or `v1beta1`) of objects, with list
/// metadata (resourceVersion, continue...).
pub fn table(
    def: &ResourceDef,
    api_version: &str,
    crd_columns: Option<&Value>,
    objects: &[Value],
    list_meta: Value,
    include: IncludeObject,
) -> Value {
    let cols = columns(def, crd_columns);
    let definitions: Vec<Value> = cols
        .iter()
        .map(|c| json!({"name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority}))
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| row(o, &cols, include, def, api_version))
        .collect();
    json!({"kind": "Table", "apiVersion": api_version, "metadata": list_meta,
        "columnDefinitions": definitions, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_and_jsonpath() {
        assert_eq!(IncludeObject::parse(None), Some(IncludeObject::Metadata));
        assert_eq!(
            IncludeObject::parse(Some("Object")),
            Some(IncludeObject::Object)
        );
        assert_eq!(IncludeObject::parse(Some("bogus")), None);
        let o = json!({"spec": {"a": [{"b": 1}]}, "status": {"m": {"x": 1}}});
        assert_eq!(eval(&o, ".spec.a[0].b"), json!(1));
        assert_eq!(eval(&o, ".status.m"), json!("{\"x\":1}"));
        assert_eq!(eval(&o, ".nope"), Value::Null);
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(400 * 86400), "400d");
        assert_eq!(human_duration(-5), "<invalid>");
    }
}
