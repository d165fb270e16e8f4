//! What kube-apiserver refuses in an object's `apiVersion`, `kind` and `metadata`, before
//! anything is stored:
//!
//! * **decoding** ([`check_types`]): the JSON types Go's decoder needs (strings, maps of
//!   strings, lists of strings, integers, the owner references' fields). kube answers
//!   400 BadRequest with the decoder's message; a patch whose result does not decode is
//!   422 on the field `patch` ([`patch_decode_error`]). A built-in kind's timestamps are
//!   `metav1.Time`: a string that is not an RFC 3339 time gets Go's `time.Parse` error;
//! * **validation** ([`validate_meta`]): `ValidateObjectMeta`: the name by the kind's rule,
//!   generateName, label keys and values, annotation keys and their 256 KiB total,
//!   finalizer names, owner references, a non-negative generation. kube answers 422
//!   Invalid with one cause per error.
//!
//! What is refused here is what no kube client could decode (a `DynamicObject` needs string
//! labels, string finalizers, complete owner references), so nothing stored can poison a
//! client's list.

use serde_json::{Map, Value};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult, Cause, cause};

use super::names::{NameRule, label_value, qualified_name};

/// kube's limit of all annotations' keys and values together (`TotalAnnotationSizeLimitB`).
pub(crate) const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// The JSON type's name as Go's decoder writes it in its errors.
fn json_type(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(n) => format!("number {n}"),
        Value::String(_) => "string".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
    }
}

/// Go's "number" without the literal for types that are not integers.
pub(crate) fn json_kind(v: &Value) -> String {
    match v {
        Value::Number(_) => "number".into(),
        other => json_type(other),
    }
}

/// A decoding failure: where (`Struct.path`) and the Go type expected.
struct TypeError {
    value: String,
    field: String,
    go_type: &'static str,
    /// An error of a type's own decoder (`metav1.Time`), written as it is.
    raw: Option<String>,
}

impl TypeError {
    fn new(v: &Value, field: impl Into<String>, go_type: &'static str, integer: bool) -> Self {
        TypeError {
            value: if integer { json_type(v) } else { json_kind(v) },
            field: field.into(),
            go_type,
            raw: None,
        }
    }

    /// The error of `metav1.Time`'s decoder for a timestamp that is not a JSON string or
    /// null (it decodes the value into a Go string) or a string that is not an RFC 3339
    /// time (Go's `time.Parse` error).
    fn time(v: &Value) -> Option<Self> {
        let raw = match v {
            Value::Null => return None,
            Value::String(s) => super::gotime::rfc3339_error(s)?,
            other => format!(
                "json: cannot unmarshal {} into Go value of type string",
                json_kind(other)
            ),
        };
        Some(TypeError {
            value: String::new(),
            field: String::new(),
            go_type: "v1.Time",
            raw: Some(raw),
        })
    }

    fn message(&self) -> String {
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        format!(
            "json: cannot unmarshal {} into Go struct field {} of type {}",
            self.value, self.field, self.go_type
        )
    }
}

fn is_string_or_null(v: &Value) -> bool {
    v.is_string() || v.is_null()
}

fn is_int_or_null(v: &Value) -> bool {
    v.is_null() || v.as_i64().is_some()
}

/// A `map[string]string` field of ObjectMeta.
fn check_string_map(m: &Map<String, Value>, key: &str) -> Result<(), TypeError> {
    let Some(v) = m.get(key) else { return Ok(()) };
    let field = format!("ObjectMeta.metadata.{key}");
    match v {
        Value::Null => Ok(()),
        Value::Object(map) => match map.values().find(|v| !is_string_or_null(v)) {
            Some(bad) => Err(TypeError::new(bad, field, "string", false)),
            None => Ok(()),
        },
        other => Err(TypeError::new(other, field, "map[string]string", false)),
    }
}

/// `typed`: a built-in kind, whose timestamps Go decodes as `metav1.Time`.
fn check_metadata(kind: &str, meta: &Value, typed: bool) -> Result<(), TypeError> {
    let m = match meta {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => {
            return Err(TypeError::new(
                other,
                format!("{kind}.metadata"),
                "v1.ObjectMeta",
                false,
            ));
        }
    };
    for key in [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
    ] {
        if typed
            && key.ends_with("Timestamp")
            && let Some(e) = m.get(key).and_then(TypeError::time)
        {
            return Err(e);
        }
        if let Some(v) = m.get(key).filter(|v| !is_string_or_null(v)) {
            let go_type = if key.ends_with("Timestamp") {
                "v1.Time"
            } else {
                "string"
            };
            return Err(TypeError::new(
                v,
                format!("ObjectMeta.metadata.{key}"),
                go_type,
                false,
            ));
        }
    }
    for key in ["generation", "deletionGracePeriodSeconds"] {
        if let Some(v) = m.get(key).filter(|v| !is_int_or_null(v)) {
            return Err(TypeError::new(
                v,
                format!("ObjectMeta.metadata.{key}"),
                "int64",
                true,
            ));
        }
    }
    check_string_map(m, "labels")?;
    check_string_map(m, "annotations")?;
    check_finalizers(m)?;
    check_owner_references(m)?;
    match m.get("managedFields") {
        None | Some(Value::Null) | Some(Value::Array(_)) => Ok(()),
        Some(other) => Err(TypeError::new(
            other,
            "ObjectMeta.metadata.managedFields",
            "[]v1.ManagedFieldsEntry",
            false,
        )),
    }
}

/// `metadata.finalizers`: a list of strings.
fn check_finalizers(m: &Map<String, Value>) -> Result<(), TypeError> {
    match m.get("finalizers") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) => match items.iter().find(|v| !is_string_or_null(v)) {
            Some(bad) => Err(TypeError::new(
                bad,
                "ObjectMeta.metadata.finalizers",
                "string",
                false,
            )),
            None => Ok(()),
        },
        Some(other) => Err(TypeError::new(
            other,
            "ObjectMeta.metadata.finalizers",
            "[]string",
            false,
        )),
    }
}

/// `metadata.ownerReferences`: a list of references with string and bool fields.
fn check_owner_references(m: &Map<String, Value>) -> Result<(), TypeError> {
    let items = match m.get("ownerReferences") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(TypeError::new(
                other,
                "ObjectMeta.metadata.ownerReferences",
                "[]v1.OwnerReference",
                false,
            ));
        }
    };
    for item in items {
        let Some(r) = item.as_object() else {
            if item.is_null() {
                continue;
            }
            return Err(TypeError::new(
                item,
                "ObjectMeta.metadata.ownerReferences",
                "v1.OwnerReference",
                false,
            ));
        };
        for key in ["apiVersion", "kind", "name", "uid"] {
            if let Some(v) = r.get(key).filter(|v| !is_string_or_null(v)) {
                return Err(TypeError::new(
                    v,
                    format!("OwnerReference.metadata.ownerReferences.{key}"),
                    "string",
                    false,
                ));
            }
        }
        for key in ["controller", "blockOwnerDeletion"] {
            if let Some(v) = r.get(key).filter(|v| !(v.is_boolean() || v.is_null())) {
                return Err(TypeError::new(
                    v,
                    format!("OwnerReference.metadata.ownerReferences.{key}"),
                    "bool",
                    false,
                ));
            }
        }
    }
    Ok(())
}

/// A request body that is not a JSON object: the serializer's 400 as it reads apiVersion
/// and kind.
pub(crate) fn not_an_object(body: &Value) -> ApiError {
    ApiError::bad_request(format!(
        "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
        json_kind(body)
    ))
}

/// Decoding as kube's serializer does it: `apiVersion` and `kind` first (any failure there
/// is "couldn't get version/kind"), then the metadata's Go types. 400 BadRequest.
pub(crate) fn check_types(def: &ResourceDef, body: &Value) -> ApiResult<()> {
    let Some(top) = body.as_object() else {
        return Err(not_an_object(body));
    };
    for key in ["apiVersion", "kind"] {
        if let Some(v) = top.get(key).filter(|v| !is_string_or_null(v)) {
            return Err(ApiError::bad_request(format!(
                "couldn't get version/kind; json parse error: {}",
                TypeError::new(v, format!(".{key}"), "string", false).message()
            )));
        }
    }
    if let Some(meta) = top.get("metadata")
        && let Err(e) = check_metadata(&def.kind, meta, !def.is_custom())
    {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {}",
            def.kind,
            def.version,
            def.kind,
            e.message()
        )));
    }
    Ok(())
}

/// A patch whose result does not decode: kube's 422 on the field `patch`, with the patched
/// object as the value.
pub(crate) fn patch_decode_error(patched: &Value, decode: &ApiError) -> ApiError {
    // The decoder's own error, after "<Kind> in version ... cannot be handled as a <Kind>: ".
    let detail = decode
        .message
        .split_once(" cannot be handled as a ")
        .and_then(|(_, rest)| rest.split_once(": "))
        .map(|(_, detail)| detail.to_string())
        .or_else(|| {
            decode
                .message
                .split_once(": json: ")
                .map(|(_, rest)| format!("json: {rest}"))
        })
        .unwrap_or_else(|| decode.message.clone());
    let value = patched.to_string();
    ApiError::invalid(
        "",
        "",
        "",
        vec![cause(
            "FieldValueInvalid",
            "patch",
            format!("Invalid value: {}: {detail}", Value::String(value)),
        )],
    )
}

/// Nulls inside `labels`, `annotations` and `finalizers` become what Go's decoder makes of
/// them (empty strings; a null list or map is dropped), so the stored object is typed.
pub(crate) fn normalise_nulls(meta: &mut Map<String, Value>) {
    for key in ["labels", "annotations"] {
        match meta.get_mut(key) {
            Some(Value::Null) => {
                meta.remove(key);
            }
            Some(Value::Object(m)) => {
                for v in m.values_mut().filter(|v| v.is_null()) {
                    *v = Value::String(String::new());
                }
            }
            _ => {}
        }
    }
    for key in [
        "finalizers",
        "ownerReferences",
        "managedFields",
        "generation",
        "deletionGracePeriodSeconds",
    ] {
        if meta.get(key).is_some_and(Value::is_null) {
            meta.remove(key);
        }
    }
    if let Some(Value::Array(items)) = meta.get_mut("finalizers") {
        for v in items.iter_mut().filter(|v| v.is_null()) {
            *v = Value::String(String::new());
        }
    }
    if let Some(Value::Array(items)) = meta.get_mut("ownerReferences") {
        items.retain(|v| !v.is_null());
    }
}

/// etcd's request limit (`--max-request-bytes`, 1.5 MiB), which bounds a stored object.
pub(crate) const STORED_OBJECT_LIMIT: usize = 1536 * 1024;

/// Counts the bytes of a serialization without keeping them.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An object over etcd's limit: kube-apiserver passes etcd's refusal on as it comes, a 500
/// with no reason and etcd's message (kubernetes/kubernetes#112152: not mapped to a 4xx).
pub(crate) fn check_stored_size(obj: &Value) -> ApiResult<()> {
    let mut counter = ByteCounter(0);
    // Writing a Value into a counter cannot fail.
    let _ = serde_json::to_writer(&mut counter, obj);
    if counter.0 > STORED_OBJECT_LIMIT {
        return Err(ApiError::new(500, "", "etcdserver: request is too large"));
    }
    Ok(())
}

/// The limit of a ConfigMap's or Secret's data (`MaxSecretSize`, 1 MiB).
pub(crate) const DATA_LIMIT: usize = 1024 * 1024;

/// The length of base64 text once decoded.
fn decoded_len(text: &str) -> usize {
    let padding = text.bytes().rev().take_while(|b| *b == b'=').count();
    (text.len() / 4 * 3).saturating_sub(padding)
}

/// A ConfigMap's or Secret's data over 1 MiB: kube's `TooLong` cause (the ConfigMap's on
/// the root path `[]`, the Secret's on `data`).
fn data_size_cause(def: &ResourceDef, obj: &Value) -> Option<Cause> {
    let sum = |key: &str, decode: bool| -> usize {
        obj.get(key)
            .and_then(Value::as_object)
            .map(|m| {
                m.values()
                    .filter_map(Value::as_str)
                    .map(|v| if decode { decoded_len(v) } else { v.len() })
                    .sum()
            })
            .unwrap_or(0)
    };
    let (total, field) = match (def.group.as_str(), def.plural.as_str()) {
        ("", "configmaps") => (sum("data", false) + sum("binaryData", true), "[]"),
        ("", "secrets") => (sum("data", true), "data"),
        _ => return None,
    };
    (total > DATA_LIMIT).then(|| {
        cause(
            "FieldValueTooLong",
            field,
            format!("Too long: may not be more than {DATA_LIMIT} bytes"),
        )
    })
}

fn invalid(field: &str, value: &str, msg: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {}: {msg}", Value::String(value.to_string())),
    )
}

/// `ValidateObjectMeta`: kube's causes for the object's metadata (empty when valid), plus
/// the warnings kube adds (finalizer names that are not domain-qualified).
pub(crate) fn validate_meta(
    def: &ResourceDef,
    obj: &Value,
    creating: bool,
    warnings: &mut Vec<String>,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(m) = obj.get("metadata").and_then(Value::as_object) else {
        return causes;
    };
    let rule = NameRule::of(&def.group, &def.plural);
    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
    if creating && !s("generateName").is_empty() {
        for msg in rule.check(s("generateName"), true) {
            causes.push(invalid("metadata.generateName", s("generateName"), &msg));
        }
    }
    // CRDs' names are checked with the rest of the CRD (`plural.group`).
    if !s("name").is_empty() && def.plural != "customresourcedefinitions" {
        for msg in rule.check(s("name"), false) {
            causes.push(invalid("metadata.name", s("name"), &msg));
        }
    }
    if let Some(g) = m.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        causes.push(cause(
            "FieldValueInvalid",
            "metadata.generation",
            format!("Invalid value: {g}: must be greater than or equal to 0"),
        ));
    }
    if let Some(labels) = m.get("labels").and_then(Value::as_object) {
        for (k, v) in labels {
            for msg in qualified_name(k) {
                causes.push(invalid("metadata.labels", k, &msg));
            }
            for msg in label_value(v.as_str().unwrap_or("")) {
                causes.push(invalid("metadata.labels", v.as_str().unwrap_or(""), &msg));
            }
        }
    }
    if let Some(annotations) = m.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (k, v) in annotations {
            for msg in qualified_name(&k.to_lowercase()) {
                causes.push(invalid("metadata.annotations", k, &msg));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > ANNOTATIONS_LIMIT {
            causes.push(cause(
                "FieldValueTooLong",
                "metadata.annotations",
                format!("Too long: may not be more than {ANNOTATIONS_LIMIT} bytes"),
            ));
        }
    }
    if let Some(refs) = m.get("ownerReferences").and_then(Value::as_array) {
        causes.extend(owner_reference_causes(refs));
    }
    causes.extend(data_size_cause(def, obj));
    if let Some(finalizers) = m.get("finalizers").and_then(Value::as_array) {
        for f in finalizers.iter().filter_map(Value::as_str) {
            for msg in qualified_name(f) {
                causes.push(invalid("metadata.finalizers", f, &msg));
            }
            let standard = matches!(f, "kubernetes" | "orphan" | "foregroundDeletion")
                || f.starts_with("kubernetes.io/")
                || f.contains(".kubernetes.io/");
            if !f.contains('/') && !standard {
                warnings.push(format!(
                    "metadata.finalizers: {f:?}: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"
                ));
            }
        }
        let has = |n: &str| finalizers.iter().any(|f| f == n);
        if has("orphan") && has("foregroundDeletion") {
            causes.push(cause(
                "FieldValueInvalid",
                "metadata.finalizers",
                format!(
                    "Invalid value: {}: finalizer orphan and foregroundDeletion cannot be both set",
                    Value::Array(finalizers.clone())
                ),
            ));
        }
    }
    causes
}

/// `ValidateOwnerReferences`: the required fields, and one controller at most.
fn owner_reference_causes(refs: &[Value]) -> Vec<Cause> {
    let mut causes = Vec::new();
    let field = "metadata.ownerReferences";
    let mut controllers = Vec::new();
    for r in refs {
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
        let version = s("apiVersion").rsplit('/').next().unwrap_or("");
        if version.is_empty() {
            causes.push(invalid(
                &format!("{field}.apiVersion"),
                s("apiVersion"),
                "version must not be empty",
            ));
        }
        if s("kind").is_empty() {
            causes.push(invalid(
                &format!("{field}.kind"),
                s("kind"),
                "kind must not be empty",
            ));
        }
        if s("name").is_empty() {
            causes.push(invalid(
                &format!("{field}.name"),
                s("name"),
                "name must not be empty",
            ));
        }
        if s("uid").is_empty() {
            causes.push(invalid(
                &format!("{field}.uid"),
                s("uid"),
                "uid must not be empty",
            ));
        }
        if s("apiVersion") == "v1" && s("kind") == "Event" {
            causes.push(invalid(
                field,
                "v1/Event",
                "v1/Event is disallowed from being an owner",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            controllers.push(format!("{}/{}", s("kind"), s("name")));
        }
    }
    if controllers.len() > 1 {
        causes.push(cause(
            "FieldValueInvalid",
            field,
            format!(
                "Invalid value: {}: Only one reference can have Controller set to true. Found \"true\" in references for {}",
                Value::Array(refs.to_vec()),
                controllers.join(" and ")
            ),
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::catalog::builtins;
    use serde_json::json;

    fn configmaps() -> ResourceDef {
        builtins()
            .into_iter()
            .find(|d| d.group.is_empty() && d.plural == "configmaps")
            .expect("configmaps are served")
    }

    #[test]
    fn decoding_errors_read_as_go_writes_them() {
        let def = configmaps();
        let e = check_types(&def, &json!({"metadata": {"labels": {"a": 1}}})).unwrap_err();
        assert_eq!(
            e.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"
        );
        let e = check_types(&def, &json!({"apiVersion": 5})).unwrap_err();
        assert!(e.message.starts_with("couldn't get version/kind"), "{e}");
        let e = check_types(&def, &json!({"metadata": []})).unwrap_err();
        assert!(e.message.ends_with("cannot unmarshal array into Go struct field ConfigMap.metadata of type v1.ObjectMeta"), "{e}");
        let e = check_types(&def, &json!({"metadata": {"generation": 1.5}})).unwrap_err();
        assert!(
            e.message.contains(
                "number 1.5 into Go struct field ObjectMeta.metadata.generation of type int64"
            ),
            "{e}"
        );
        assert!(check_types(&def, &json!({"metadata": {"labels": {"a": null}}})).is_ok());
    }

    #[test]
    fn metadata_validation_causes() {
        let def = configmaps();
        let mut w = Vec::new();
        let obj = json!({"metadata": {
            "name": "Bad Name",
            "labels": {"ok": "fine", "bad key!": "v", "k": "bad value"},
            "annotations": {"x": "y".repeat(ANNOTATIONS_LIMIT)},
            "finalizers": ["plain", "a/b"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "", "uid": "u"}],
        }});
        let causes = validate_meta(&def, &obj, true, &mut w);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "metadata.labels",
                "metadata.labels",
                "metadata.annotations",
                "metadata.ownerReferences.name"
            ]
        );
        assert_eq!(causes[3].reason, "FieldValueTooLong");
        assert_eq!(w.len(), 1, "{w:?}");
    }
}
