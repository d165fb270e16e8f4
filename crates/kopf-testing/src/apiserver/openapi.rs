//! OpenAPI v3 documents of the served resources (per group-version, and the
//! `/openapi/v3` index with their hashes), as kubectl's and clients' schema lookups read
//! them.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::discovery::hash;

/// The OpenAPI v3 path of a group-version: `api/v1` or `apis/<g>/<v>`.
pub fn openapi_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn reversed_group(group: &str) -> String {
    if group.is_empty() {
        "io.k8s.api.core".into()
    } else {
        let mut parts: Vec<&str> = group.split('.').collect();
        parts.reverse();
        parts.join(".")
    }
}

/// The schema name of a kind: `dev.kopf.v1.KopfExample`.
pub fn schema_name(d: &ResourceDef) -> String {
    format!("{}.{}.{}", reversed_group(&d.group), d.version, d.kind)
}

fn param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params() -> Vec<Value> {
    vec![
        param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ),
        param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields.",
        ),
        json!({"name": "force", "in": "query", "description": "Force is going to \"force\" Apply requests.", "schema": {"type": "boolean", "uniqueItems": true}}),
    ]
}

fn op(d: &ResourceDef, action: &str, id: &str, schema_ref: &str, params: Vec<Value>) -> Value {
    json!({
        "operationId": id,
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": d.group, "version": d.version, "kind": d.kind},
    })
}

/// The schema name of ObjectMeta.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// The reference to the Status schema.
const STATUS_REF: &str = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Status";

/// The OpenAPI v3 document of one group-version.
pub fn openapi_document(
    defs: &[&ResourceDef],
    group: &str,
    version: &str,
    k8s_version: &str,
) -> Value {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    schemas.insert(OBJECT_META.into(), object_meta_schema());
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status".into(),
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    );
    for d in defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
    {
        resource_schemas(d, &mut schemas);
        resource_paths(d, &mut paths);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": k8s_version},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// ObjectMeta's schema (the fields clients read).
fn object_meta_schema() -> Value {
    json!({"type": "object", "description": "ObjectMeta is metadata that all persisted resources must have.",
    "properties": {
        "name": {"type": "string"}, "namespace": {"type": "string"}, "generateName": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-patch-strategy": "merge"},
        "resourceVersion": {"type": "string"}, "uid": {"type": "string"}, "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"}, "deletionTimestamp": {"type": "string", "format": "date-time"},
        "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge"},
        "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
    }})
}

/// A resource's schema (its CRD's, or any object) and its list's.
fn resource_schemas(d: &ResourceDef, schemas: &mut serde_json::Map<String, Value>) {
    let name = schema_name(d);
    let schema_ref = format!("#/components/schemas/{name}");
    let gvk = json!([{"group": d.group, "version": d.version, "kind": d.kind}]);
    let mut schema = match &d.schema {
        Some(s) => s.clone(),
        None => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    if let Some(props) = schema
        .as_object_mut()
        .map(|o| o.entry("properties").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        props.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
        props.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
        props.insert(
            "metadata".into(),
            json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}]}),
        );
    }
    schema["x-kubernetes-group-version-kind"] = gvk;
    schema["type"] = json!("object");
    schemas.insert(name.clone(), schema);
    schemas.insert(
        format!("{name}List"),
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "items": {"type": "array", "items": {"$ref": schema_ref}},
            "metadata": {"type": "object"}},
          "required": ["items"],
          "x-kubernetes-group-version-kind": [{"group": d.group, "version": d.version, "kind": format!("{}List", d.kind)}]}),
    );
}

/// A resource's paths: the collection, the item, all namespaces' list, the status.
fn resource_paths(d: &ResourceDef, paths: &mut serde_json::Map<String, Value>) {
    let schema_ref = format!("#/components/schemas/{}", schema_name(d));
    let base = if d.group.is_empty() {
        format!("/api/{}", d.version)
    } else {
        format!("/apis/{}/{}", d.group, d.version)
    };
    let collection = if d.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", d.plural)
    } else {
        format!("{base}/{}", d.plural)
    };
    let item = format!("{collection}/{{name}}");
    let k = &d.kind;
    paths.insert(
        collection.clone(),
        json!({
            "get": op(d, "list", &format!("list{k}"), &format!("{schema_ref}List"), vec![]),
            "post": op(d, "post", &format!("create{k}"), &schema_ref, write_params()),
            "delete": op(d, "deletecollection", &format!("deletecollection{k}"), STATUS_REF, vec![]),
        }),
    );
    let item_ops = json!({
        "get": op(d, "get", &format!("read{k}"), &schema_ref, vec![]),
        "put": op(d, "put", &format!("replace{k}"), &schema_ref, write_params()),
        "patch": op(d, "patch", &format!("patch{k}"), &schema_ref, write_params()),
        "delete": op(d, "delete", &format!("delete{k}"), STATUS_REF, vec![]),
    });
    paths.insert(item.clone(), item_ops);
    if d.namespaced {
        paths.insert(
            format!("{base}/{}", d.plural),
            json!({"get": op(d, "list", &format!("list{k}ForAllNamespaces"), &format!("{schema_ref}List"), vec![])}),
        );
    }
    if d.status {
        paths.insert(
            format!("{item}/status"),
            json!({
                "get": op(d, "get", &format!("read{k}Status"), &schema_ref, vec![]),
                "put": op(d, "put", &format!("replace{k}Status"), &schema_ref, write_params()),
                "patch": op(d, "patch", &format!("patch{k}Status"), &schema_ref, write_params()),
            }),
        );
    }
}

/// The `/openapi/v3` index with a hash per group-version document.
pub fn openapi_index(defs: &[&ResourceDef], k8s_version: &str) -> Value {
    let mut gvs: Vec<(String, String)> = defs
        .iter()
        .map(|d| (d.group.clone(), d.version.clone()))
        .collect();
    gvs.sort();
    gvs.dedup();
    let mut paths = serde_json::Map::new();
    for (g, v) in gvs {
        let path = openapi_path(&g, &v);
        let h = hash(&openapi_document(defs, &g, &v, k8s_version));
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={h}")}),
        );
    }
    json!({"paths": paths})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::catalog::builtins;

    #[test]
    fn openapi_patch_ops_declare_field_validation() {
        let b = builtins();
        let defs: Vec<&ResourceDef> = b.iter().collect();
        let doc = openapi_document(&defs, "", "v1", "v1.31.0");
        let op = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "ConfigMap");
        assert!(
            op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "fieldValidation")
        );
    }
}
