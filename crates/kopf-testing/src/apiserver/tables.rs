//! Server-side Tables (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), as
//! `kubectl get` asks for them: a Name column, the CRD's `additionalPrinterColumns` for custom
//! resources (or Age when there are none), Age for built-ins.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::jsonpath::JsonPath;

mod cells;

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
    /// None for the Name column.
    path: Option<JsonPath>,
}

fn columns(def: &ResourceDef, crd_columns: Option<&Value>) -> Vec<Column> {
    let mut cols = vec![Column {
        name: "Name".into(),
        kind: "string".into(),
        format: "name".into(),
        description: "Name must be unique within a namespace.".into(),
        priority: 0,
        path: None,
    }];
    let printer: Vec<&Value> = crd_columns
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if def.is_custom() && !printer.is_empty() {
        for c in printer {
            let json_path = c["jsonPath"].as_str().unwrap_or("");
            // kube keeps the columns before one whose path does not parse, and no others.
            let Ok(path) = JsonPath::column(json_path) else {
                tracing::debug!(
                    resource = %def.plural,
                    json_path,
                    "printer column path does not parse; later columns left out"
                );
                break;
            };
            let description = match c["description"].as_str() {
                Some(d) if !d.is_empty() => d.to_string(),
                _ => format!("Custom resource definition column (in JSONPath format): {json_path}"),
            };
            cols.push(Column {
                name: c["name"].as_str().unwrap_or("").to_string(),
                kind: c["type"].as_str().unwrap_or("string").to_string(),
                format: c["format"].as_str().unwrap_or("").to_string(),
                description,
                priority: c["priority"].as_i64().unwrap_or(0),
                path: Some(path),
            });
        }
    } else if let Ok(path) = JsonPath::column(".metadata.creationTimestamp") {
        cols.push(Column {
            name: "Age".into(),
            kind: "date".into(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
            priority: 0,
            path: Some(path),
        });
    }
    cols
}

/// A cell as kube-apiserver's CRD table convertor makes it from the column's first result:
/// a `string` column prints any value (JSON text for lists and maps, `<no value>` for null);
/// the other types take a value of their type and are null otherwise.
fn cell(path: &JsonPath, kind: &str, obj: &Value) -> Value {
    let Some(found) = path.first(obj) else {
        return Value::Null;
    };
    if kind == "string" {
        return Value::String(cells::text(&found));
    }
    cells::typed(kind, &found)
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

fn row(
    obj: &Value,
    cols: &[Column],
    include: IncludeObject,
    def: &ResourceDef,
    api_version: &str,
) -> Value {
    let cells: Vec<Value> = cols
        .iter()
        .map(|c| match &c.path {
            None => obj
                .pointer("/metadata/name")
                .cloned()
                .unwrap_or_else(|| json!("")),
            Some(p) => cell(p, &c.kind, obj),
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
    fn include_object_parses() {
        assert_eq!(IncludeObject::parse(None), Some(IncludeObject::Metadata));
        assert_eq!(
            IncludeObject::parse(Some("Object")),
            Some(IncludeObject::Object)
        );
        assert_eq!(IncludeObject::parse(Some("bogus")), None);
    }

    fn crd_table(columns: Value, objects: &[Value]) -> Value {
        let def = ResourceDef {
            group: "kopf.dev".into(),
            version: "v1".into(),
            plural: "kopfexamples".into(),
            singular: "kopfexample".into(),
            kind: "KopfExample".into(),
            namespaced: true,
            short_names: Vec::new(),
            categories: Vec::new(),
            status: false,
            scale: None,
            generation: true,
            crd: Some("kopfexamples.kopf.dev".into()),
            schema: None,
            storage_version: true,
            return_deleted_object: false,
            printer_columns: None,
        };
        table(
            &def,
            "meta.k8s.io/v1",
            Some(&columns),
            objects,
            json!({}),
            IncludeObject::None,
        )
    }

    #[test]
    fn printer_columns_take_the_first_result_of_kubes_jsonpath() {
        let columns = json!([
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Hosts", "type": "string", "jsonPath": ".spec.servers[*].hosts"},
            {"name": "First", "type": "string", "jsonPath": ".spec.servers[0].hosts[0]"},
            {"name": "Count", "type": "integer", "jsonPath": ".spec.count"},
            {"name": "Wrong", "type": "integer", "jsonPath": ".spec.name"},
            {"name": "Missing", "type": "string", "jsonPath": ".spec.nope"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]);
        let obj = json!({"metadata": {"name": "a", "creationTimestamp": "bogus"},
            "spec": {"name": "x", "count": 3, "servers": [{"hosts": ["foo"]}, {"hosts": ["bar", "baz"]}]},
            "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        let t = crd_table(columns, &[obj]);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["a", "True", "[\"foo\"]", "foo", 3, null, null, "<invalid>"])
        );
        assert_eq!(
            t["columnDefinitions"][1]["description"],
            "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type==\"Ready\")].status"
        );
    }

    #[test]
    fn columns_stop_at_a_path_that_does_not_parse() {
        let columns = json!([
            {"name": "A", "type": "string", "jsonPath": ".spec.a"},
            {"name": "Bad", "type": "string", "jsonPath": ".spec[?(@.a"},
            {"name": "C", "type": "string", "jsonPath": ".spec.c"},
        ]);
        let t = crd_table(
            columns,
            &[json!({"metadata": {"name": "n"}, "spec": {"a": "1", "c": "3"}})],
        );
        assert_eq!(t["rows"][0]["cells"], json!(["n", "1"]));
        assert_eq!(t["columnDefinitions"].as_array().map(Vec::len), Some(2));
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
