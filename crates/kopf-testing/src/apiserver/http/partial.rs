//! Response transformations asked for in `Accept`, as kube-apiserver's handlers do them
//! (`transformResponseObject`, for every verb, and per event for watches):
//! `as=PartialObjectMetadata` (an object's metadata only), `as=PartialObjectMetadataList`
//! (a list's), and `as=Table` — each with `g=meta.k8s.io` and `v=v1` or `v=v1beta1`.
//!
//! The first media type of the Accept list the server can serve is taken (by `q`, then
//! specificity, then order); one it cannot (another `as`, group or version, a protobuf
//! type, which the fake does not write) is skipped, and when none is left the response is
//! the plain object. A transformation that does not fit the response answers 406
//! `NotAcceptable` (metadata of a list asked as an object, or the reverse); `Status`
//! bodies are never transformed. In a watch a misfit is not an error: the event carries
//! the object untransformed, as kube-apiserver sends it.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::tables::{self, IncludeObject};

use super::query::Query;

/// What a response is to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Output {
    /// The object or list itself.
    Object,
    /// `PartialObjectMetadata` of this apiVersion.
    Partial(&'static str),
    /// `PartialObjectMetadataList` of this apiVersion.
    PartialList(&'static str),
    /// A `Table` of this apiVersion.
    Table(&'static str),
}

/// One media range of an Accept header.
struct Clause<'a> {
    kind: &'a str,
    sub: &'a str,
    q: f64,
    params: Vec<(&'a str, &'a str)>,
}

fn clauses(accept: &str) -> Vec<Clause<'_>> {
    let mut out: Vec<Clause<'_>> = accept
        .split(',')
        .filter_map(|part| {
            let mut pieces = part.split(';');
            let media = pieces.next()?.trim();
            let (kind, sub) = match media.split_once('/') {
                Some((k, s)) => (k.trim(), s.trim()),
                None if media == "*" => ("*", "*"),
                None => return None,
            };
            let mut q = 1.0;
            let mut params = Vec::new();
            for p in pieces {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                let (k, v) = (k.trim(), v.trim());
                if k == "q" {
                    q = v.parse().unwrap_or(0.0);
                } else {
                    params.push((k, v));
                }
            }
            Some(Clause {
                kind,
                sub,
                q,
                params,
            })
        })
        .collect();
    // By preference; equal ones keep their order.
    out.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then((a.kind == "*").cmp(&(b.kind == "*")))
            .then((a.sub == "*").cmp(&(b.sub == "*")))
    });
    out
}

/// The output the first servable media type of an Accept header asks for.
pub(super) fn negotiate(accept: &str) -> Output {
    if accept.trim().is_empty() {
        return Output::Object;
    }
    for clause in clauses(accept) {
        // The media types the fake writes: JSON (and YAML requests, answered in JSON).
        for sub in ["json", "yaml"] {
            let matches = (clause.kind == "application"
                && (clause.sub == sub || clause.sub == "*"))
                || (clause.kind == "*" && clause.sub == "*");
            if !matches {
                continue;
            }
            if let Some(output) = accepted(&clause, sub) {
                return output;
            }
        }
    }
    Output::Object
}

/// The output a media type's parameters ask for, when the server allows it.
fn accepted(clause: &Clause<'_>, sub: &str) -> Option<Output> {
    let (mut kind, mut group, mut version) = (None, "", "");
    for (k, v) in &clause.params {
        match *k {
            "as" => kind = Some(*v),
            "g" => group = v,
            "v" => version = v,
            // Only JSON streams watches.
            "stream" if !v.is_empty() && (sub != "json" || *v != "watch") => return None,
            _ => {}
        }
    }
    if kind.is_none() && (!group.is_empty() || !version.is_empty()) {
        return None;
    }
    let Some(kind) = kind else {
        return Some(Output::Object);
    };
    let gv = match (group, version) {
        ("meta.k8s.io", "v1") => "meta.k8s.io/v1",
        ("meta.k8s.io", "v1beta1") => "meta.k8s.io/v1beta1",
        _ => return None,
    };
    match kind {
        "PartialObjectMetadata" => Some(Output::Partial(gv)),
        "PartialObjectMetadataList" => Some(Output::PartialList(gv)),
        "Table" => Some(Output::Table(gv)),
        _ => None,
    }
}

/// A negotiated transformation with its Table options.
#[derive(Debug, Clone, Copy)]
pub(super) struct Transform {
    /// What the response is to be.
    pub output: Output,
    include: Result<IncludeObject, ()>,
}

impl Transform {
    /// The transformation an Accept header and the query (`includeObject`) ask for.
    pub fn new(accept: &str, query: &Query) -> Self {
        Transform {
            output: negotiate(accept),
            include: IncludeObject::parse(query.get("includeObject")).ok_or(()),
        }
    }

    /// Whether the response is the object itself.
    pub fn is_identity(&self) -> bool {
        self.output == Output::Object
    }

    /// The Table options, or kube's 400 when `includeObject` is not one it knows.
    pub fn options(&self, query: &Query) -> ApiResult<()> {
        match (self.output, self.include) {
            (Output::Table(_), Err(())) => Err(ApiError::bad_request(format!(
                "Unable to convert to Table as requested: includeObject: Invalid value: {:?}: must be 'Metadata', 'Object', 'None', or empty",
                query.get("includeObject").unwrap_or("")
            ))),
            _ => Ok(()),
        }
    }

    fn include(&self) -> IncludeObject {
        self.include.unwrap_or(IncludeObject::Metadata)
    }

    /// A response body: a Status as it is, a list (it has `items`) or an object.
    pub fn body(&self, def: &ResourceDef, body: Value) -> ApiResult<Value> {
        if self.is_identity() || body.get("kind").and_then(Value::as_str) == Some("Status") {
            return Ok(body);
        }
        if body.get("items").is_some_and(Value::is_array) {
            self.list(def, body)
        } else {
            self.object(def, body)
        }
    }

    /// One object.
    pub fn object(&self, def: &ResourceDef, obj: Value) -> ApiResult<Value> {
        match self.output {
            Output::Object => Ok(obj),
            Output::Partial(gv) => Ok(partial(&obj, gv)),
            Output::PartialList(_) => Err(not_acceptable(format!(
                "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
                go_type(def, false)
            ))),
            Output::Table(gv) => {
                let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
                Ok(tables::table(
                    def,
                    gv,
                    def.printer_columns.as_ref(),
                    &[obj],
                    meta,
                    self.include(),
                ))
            }
        }
    }

    /// A list (`kind`, `apiVersion`, `metadata`, `items`).
    pub fn list(&self, def: &ResourceDef, list: Value) -> ApiResult<Value> {
        let meta = |list: &Value| list.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let items = |list: &Value| {
            list.get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        match self.output {
            Output::Object => Ok(list),
            Output::Partial(_) => Err(not_acceptable(format!(
                "you requested PartialObjectMetadata, but the requested object is a list ({})",
                go_type(def, true)
            ))),
            Output::PartialList(gv) => {
                let source = meta(&list);
                let mut metadata = serde_json::Map::new();
                for key in ["resourceVersion", "continue", "remainingItemCount"] {
                    if let Some(v) = source.get(key) {
                        metadata.insert(key.into(), v.clone());
                    }
                }
                let items: Vec<Value> = list
                    .get("items")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().map(|o| partial(o, gv)).collect())
                    .unwrap_or_default();
                Ok(
                    json!({"kind": "PartialObjectMetadataList", "apiVersion": gv,
                    "metadata": metadata, "items": items}),
                )
            }
            Output::Table(gv) => Ok(tables::table(
                def,
                gv,
                def.printer_columns.as_ref(),
                &items(&list),
                meta(&list),
                self.include(),
            )),
        }
    }

    /// The object of a watch event (a Status as it is; an object the transformation does
    /// not fit, untransformed). Tables after the first carry no column definitions.
    pub fn event_object(&self, def: &ResourceDef, obj: Value, first_table: bool) -> Value {
        if self.is_identity() || obj.get("kind").and_then(Value::as_str) == Some("Status") {
            return obj;
        }
        if let Output::PartialList(_) = self.output {
            return obj;
        }
        match self.object(def, obj) {
            Ok(mut v) => {
                if matches!(self.output, Output::Table(_)) && !first_table {
                    v["columnDefinitions"] = Value::Null;
                }
                v
            }
            Err(_) => Value::Null,
        }
    }
}

/// An object as `PartialObjectMetadata`.
fn partial(object: &Value, api_version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn not_acceptable(message: String) -> ApiError {
    ApiError::new(406, "NotAcceptable", message)
}

/// The Go type kube-apiserver names in its 406 messages: the internal type of a built-in
/// kind (`*core.ConfigMap`), or unstructured content for custom resources.
fn go_type(def: &ResourceDef, list: bool) -> String {
    let suffix = if list { "List" } else { "" };
    if def.is_custom() {
        return format!("*unstructured.Unstructured{suffix}");
    }
    let package = match def.group.as_str() {
        "" | "events.k8s.io" => "core",
        g => g.split('.').next().unwrap_or(g),
    };
    format!("*{package}.{}{suffix}", def.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_servable_media_type_is_taken() {
        let v1 = "meta.k8s.io/v1";
        assert_eq!(negotiate(""), Output::Object);
        assert_eq!(negotiate("application/json"), Output::Object);
        assert_eq!(
            negotiate("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
            Output::Partial(v1)
        );
        assert_eq!(
            negotiate("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1"),
            Output::PartialList("meta.k8s.io/v1beta1")
        );
        // client-go's metadata client: protobuf first (the fake writes JSON), then JSON.
        assert_eq!(
            negotiate(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
            ),
            Output::Partial(v1)
        );
        // kubectl get: a Table of v1, else of v1beta1, else the object.
        assert_eq!(
            negotiate(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            ),
            Output::Table(v1)
        );
        // What the server cannot serve is skipped.
        assert_eq!(
            negotiate("application/json;as=Table;v=v2;g=meta.k8s.io,application/json"),
            Output::Object
        );
        assert_eq!(
            negotiate("application/json;as=Foo;g=meta.k8s.io;v=v1,*/*;as=Table;g=meta.k8s.io;v=v1"),
            Output::Table(v1)
        );
        assert_eq!(negotiate("application/json;as=Table"), Output::Object);
        // By preference (q), then order.
        assert_eq!(
            negotiate(
                "application/json;q=0.5,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
            ),
            Output::Partial(v1)
        );
        assert_eq!(negotiate("text/html"), Output::Object);
    }

    #[test]
    fn go_types_name_the_internal_structs() {
        let defs = crate::apiserver::catalog::builtins();
        let find = |plural: &str| {
            defs.iter()
                .find(|d| d.plural == plural)
                .cloned()
                .expect("built in")
        };
        assert_eq!(go_type(&find("configmaps"), false), "*core.ConfigMap");
        assert_eq!(go_type(&find("deployments"), true), "*apps.DeploymentList");
        assert_eq!(go_type(&find("roles"), false), "*rbac.Role");
    }
}
