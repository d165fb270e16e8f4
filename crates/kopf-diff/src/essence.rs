//! The diff-base ("essence") Kopf keeps of each handled object, and its stored encoding.
//!
//! The essence of a body: everything but `apiVersion`, `kind`, `metadata` and `status`; plus
//! `metadata.labels` and `metadata.annotations` without Kopf-managed annotations (the
//! storage prefix, any `*.<prefix>`, any prefix marked with `<prefix>/kopf-managed`),
//! without `kubectl.kubernetes.io/last-applied-configuration` and without the storage key;
//! plus every field that handlers declared with `field=`; minus progress records in the
//! status (`status.kopf.progress`, as Kopf's progress storages clear them) and a diff-base
//! stored there; minus empty `labels`, `annotations`, `metadata`, `status`; minus the
//! ignored fields.
//!
//! Stored where [`EssenceSettings::location`] says, as Kopf's diff-base storages do:
//!
//! * [`DiffBaseLocation::Annotations`] (the default, Kopf's `AnnotationsDiffBaseStorage`):
//!   compact JSON plus a newline in the annotation
//!   `kopf.zalando.org/last-handled-configuration`, keys in the order Kopf writes them;
//! * [`DiffBaseLocation::Status`] (Kopf's `StatusDiffBaseStorage(name='kopf')`): the same
//!   compact JSON as a *string*, without the newline, in
//!   `status.kopf.last-handled-configuration`. Reading falls back to the annotation when the
//!   status has none (as Kopf's `MultiDiffBaseStorage([status, annotations])` would), so that
//!   objects handled before a switch to the status are not taken for new ones; the
//!   annotation is neither written nor purged then (Kopf never purges a diff-base).

use serde_json::{Map, Value};

/// The annotation kubectl writes for client-side apply.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Where the diff-base is stored on objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DiffBaseLocation {
    /// The annotation `<prefix>/<key>` (Kopf's default `AnnotationsDiffBaseStorage`).
    #[default]
    Annotations,
    /// `status.<name>.last-handled-configuration`, a JSON string (Kopf's
    /// `StatusDiffBaseStorage`, whose default name is `kopf`). With a status subresource,
    /// the diff-base then travels in the same `/status` PATCH as the handlers' results.
    Status {
        /// The name under `status` (Kopf: `kopf`).
        name: String,
    },
}

impl DiffBaseLocation {
    /// `status.kopf.last-handled-configuration`, Kopf's `StatusDiffBaseStorage()`.
    pub fn status() -> Self {
        DiffBaseLocation::Status {
            name: STATUS_NAME.into(),
        }
    }
}

/// The default name under `status` of Kopf's status storages (`status.kopf`).
pub const STATUS_NAME: &str = "kopf";

/// The field under `status.<name>` that holds the diff-base in the status.
pub const STATUS_FIELD: &str = "last-handled-configuration";

/// What to keep and strip.
#[derive(Debug, Clone, PartialEq)]
pub struct EssenceSettings {
    /// The annotations prefix of the operator (`kopf.zalando.org`).
    pub prefix: String,
    /// The diff-base annotation key under the prefix (`last-handled-configuration`).
    pub key: String,
    /// Fields declared by handlers (`field=`), as paths; kept even under metadata/status.
    pub tracked_fields: Vec<Vec<String>>,
    /// Fields never tracked, as paths.
    pub ignored_fields: Vec<Vec<String>>,
    /// Where the diff-base is stored (annotations by default).
    pub location: DiffBaseLocation,
}

impl Default for EssenceSettings {
    fn default() -> Self {
        EssenceSettings {
            prefix: "kopf.zalando.org".into(),
            key: "last-handled-configuration".into(),
            tracked_fields: Vec::new(),
            ignored_fields: Vec::new(),
            location: DiffBaseLocation::Annotations,
        }
    }
}

impl EssenceSettings {
    /// The full annotation name, `kopf.zalando.org/last-handled-configuration`.
    pub fn annotation(&self) -> String {
        format!("{}/{}", self.prefix, self.key)
    }
}

fn is_kopf_managed(key: &str, prefix: &str, marked: &[&str]) -> bool {
    let Some((p, _)) = key.split_once('/') else {
        return false;
    };
    p == prefix || p.ends_with(&format!(".{prefix}")) || marked.contains(&p)
}

fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for k in path {
        cur = cur.as_object()?.get(k)?;
    }
    Some(cur)
}

fn set_path(v: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for k in parents {
        if !cur.get(k).is_some_and(Value::is_object) {
            if let Some(m) = cur.as_object_mut() {
                m.insert(k.clone(), Value::Object(Map::new()));
            } else {
                return;
            }
        }
        match cur.get_mut(k) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.insert(last.clone(), value);
    }
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for k in parents {
        match cur.get_mut(k) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

fn drop_if_empty(essence: &mut Value, path: &[&str]) {
    let owned: Vec<String> = path.iter().map(|s| s.to_string()).collect();
    if get_path(essence, &owned).is_some_and(|v| v.as_object().is_some_and(Map::is_empty)) {
        remove_path(essence, &owned);
    }
}

/// The essence of a body.
pub fn essence(body: &Value, settings: &EssenceSettings) -> Value {
    let mut out = Map::new();
    if let Some(m) = body.as_object() {
        for (k, v) in m {
            if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status") {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    let mut essence = Value::Object(out);
    let meta = body.get("metadata");
    if let Some(labels) = meta
        .and_then(|m| m.get("labels"))
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
    {
        set_path(
            &mut essence,
            &["metadata".into(), "labels".into()],
            labels.clone(),
        );
    }
    if let Some(annotations) = meta
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        let marked: Vec<&str> = annotations
            .keys()
            .filter_map(|k| k.strip_suffix("/kopf-managed"))
            .collect();
        let own = settings.annotation();
        let kept: Map<String, Value> = annotations
            .iter()
            .filter(|(k, _)| {
                !is_kopf_managed(k, &settings.prefix, &marked)
                    && k.as_str() != LAST_APPLIED
                    && **k != own
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !annotations.is_empty() {
            set_path(
                &mut essence,
                &["metadata".into(), "annotations".into()],
                Value::Object(kept),
            );
        }
    }
    for field in &settings.tracked_fields {
        if let Some(v) = get_path(body, field) {
            set_path(&mut essence, field, v.clone());
        }
    }
    drop_if_empty(&mut essence, &["metadata", "annotations"]);
    drop_if_empty(&mut essence, &["metadata", "labels"]);
    drop_if_empty(&mut essence, &["metadata"]);
    drop_if_empty(&mut essence, &["status"]);
    // Progress records in the status are never part of the essence (Kopf's progress
    // storages clear `status.kopf.progress`, its default one too), nor is the stored
    // diff-base (a handler tracking `status` would see it change with each write).
    let mut names = vec![STATUS_NAME];
    if let DiffBaseLocation::Status { name } = &settings.location {
        remove_path(&mut essence, &status_field(name));
        names.push(name.as_str());
    }
    for name in names {
        remove_path(
            &mut essence,
            &["status".into(), name.into(), "progress".into()],
        );
        drop_if_empty(&mut essence, &["status", name]);
    }
    drop_if_empty(&mut essence, &["status"]);
    for field in &settings.ignored_fields {
        remove_path(&mut essence, field);
    }
    essence
}

fn status_field(name: &str) -> Vec<String> {
    vec!["status".into(), name.into(), STATUS_FIELD.into()]
}

/// Encodes an essence as Kopf stores it: compact JSON, top-level keys in Kopf's order (the
/// object's own fields, then `metadata` with `labels` before `annotations`, then `status`),
/// and a trailing newline.
pub fn encode(essence: &Value) -> String {
    let Some(m) = essence.as_object() else {
        return format!("{essence}\n");
    };
    let rank = |k: &str| match k {
        "metadata" => 1,
        "status" => 2,
        _ => 0,
    };
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    let parts: Vec<String> = keys
        .into_iter()
        .map(|k| {
            let v = &m[k];
            let rendered = if k == "metadata" {
                encode_metadata(v)
            } else {
                v.to_string()
            };
            format!("{}:{rendered}", Value::String(k.clone()))
        })
        .collect();
    format!("{{{}}}\n", parts.join(","))
}

fn encode_metadata(meta: &Value) -> String {
    let Some(m) = meta.as_object() else {
        return meta.to_string();
    };
    let rank = |k: &str| match k {
        "labels" => 0,
        "annotations" => 1,
        _ => 2,
    };
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    let parts: Vec<String> = keys
        .into_iter()
        .map(|k| format!("{}:{}", Value::String(k.clone()), m[k]))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// Errors reading a stored essence.
#[derive(Debug, thiserror::Error)]
pub enum EssenceError {
    /// The annotation is not JSON.
    #[error("the diff-base annotation is not valid JSON ({source})")]
    NotJson {
        /// The cause.
        #[from]
        source: serde_json::Error,
    },
    /// The annotation is JSON, but not of the shape of an essence.
    #[error("the diff-base annotation is not an essence of the object: {what}")]
    WrongShape {
        /// What is wrong with it.
        what: String,
    },
}

/// Decodes a stored essence (trailing newline tolerated).
pub fn decode(stored: &str) -> Result<Value, EssenceError> {
    Ok(serde_json::from_str(stored.trim_end())?)
}

/// Reads the stored essence of a body, if any: from its location; in the status, with the
/// annotation as a fallback (an object handled before the switch to the status).
pub fn stored(body: &Value, settings: &EssenceSettings) -> Option<Result<Value, EssenceError>> {
    let from_annotation = || {
        body.pointer("/metadata/annotations")?
            .get(settings.annotation())?
            .as_str()
            .map(decode)
    };
    match &settings.location {
        DiffBaseLocation::Annotations => from_annotation(),
        DiffBaseLocation::Status { name } => {
            let in_status = body
                .get("status")
                .and_then(|s| s.get(name.as_str()))
                .and_then(|s| s.get(STATUS_FIELD));
            match in_status {
                None | Some(Value::Null) => from_annotation(),
                Some(Value::String(text)) => Some(decode(text)),
                // Kopf stores a string; an object here was not written by Kopf nor by us.
                Some(other) => Some(Err(EssenceError::WrongShape {
                    what: format!(
                        "status.{name}.{STATUS_FIELD} is {} instead of a JSON string",
                        json_type(other)
                    ),
                })),
            }
        }
    }
}

/// The merge patch that stores an essence where the settings say: the annotation (compact
/// JSON and a newline, as Kopf's `AnnotationsDiffBaseStorage`) or
/// `status.<name>.last-handled-configuration` (the same JSON as a string without the
/// newline, as Kopf's `StatusDiffBaseStorage`).
///
/// ```
/// use kopf_diff::essence::{DiffBaseLocation, EssenceSettings, store_patch};
/// use serde_json::json;
///
/// let settings = EssenceSettings { location: DiffBaseLocation::status(), ..Default::default() };
/// assert_eq!(
///     store_patch(&json!({"spec": {"field": "x"}}), &settings),
///     json!({"status": {"kopf": {"last-handled-configuration": r#"{"spec":{"field":"x"}}"#}}}),
/// );
/// ```
pub fn store_patch(essence: &Value, settings: &EssenceSettings) -> Value {
    let encoded = encode(essence);
    match &settings.location {
        DiffBaseLocation::Annotations => {
            serde_json::json!({"metadata": {"annotations": {settings.annotation(): encoded}}})
        }
        DiffBaseLocation::Status { name } => {
            let text = encoded.strip_suffix('\n').unwrap_or(&encoded);
            serde_json::json!({"status": {name.as_str(): {STATUS_FIELD: text}}})
        }
    }
}

/// The most kube allows for all annotations of an object, keys and values together
/// (`TotalAnnotationSizeLimitB`, 256 KiB): beyond, a write is refused with 422.
pub const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// The size of `body`'s annotations (keys and values, as kube counts them) once the merge
/// patch `patch` is applied to them: annotations it sets count with their new value, those
/// it removes (`null`) do not count.
///
/// ```
/// use kopf_diff::essence::annotations_size_after;
/// use serde_json::json;
///
/// let body = json!({"metadata": {"annotations": {"a": "xx", "b": "yyy"}}});
/// let patch = json!({"metadata": {"annotations": {"a": null, "c": "z"}}});
/// assert_eq!(annotations_size_after(&body, &patch), ("b".len() + 3) + ("c".len() + 1));
/// ```
pub fn annotations_size_after(body: &Value, patch: &Value) -> usize {
    let path = "/metadata/annotations";
    let now = body.pointer(path).and_then(Value::as_object);
    let patched = patch.pointer(path).and_then(Value::as_object);
    let size = |k: &str, v: &Value| k.len() + v.as_str().map_or(0, str::len);
    let kept: usize = now
        .into_iter()
        .flatten()
        .filter(|(k, _)| !patched.is_some_and(|p| p.contains_key(k.as_str())))
        .map(|(k, v)| size(k, v))
        .sum();
    let set: usize = patched
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| size(k, v))
        .sum();
    kept + set
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Checks that a decoded stored essence has the shape of an essence of the current object
/// (`current` = its essence now): a JSON object; `metadata`, if present, an object whose
/// `labels` and `annotations` are objects of strings; and every top-level field that is an
/// object now stored as an object too. Anything else was not written by Kopf or kopf-rs
/// (`42`, `null`, `[1,2]`, `"s"`, `{"spec":"x"}`, `{"metadata":5}`) and must not be taken for
/// the object's last handled state.
///
/// ```
/// use kopf_diff::essence::check_shape;
/// use serde_json::json;
///
/// let now = json!({"spec": {"field": "value"}});
/// assert!(check_shape(&json!({"spec": {"field": "old"}}), &now).is_ok());
/// assert!(check_shape(&json!({"spec": "x"}), &now).is_err());
/// assert!(check_shape(&json!(42), &now).is_err());
/// ```
pub fn check_shape(stored: &Value, current: &Value) -> Result<(), EssenceError> {
    let wrong = |what: String| Err(EssenceError::WrongShape { what });
    let Some(fields) = stored.as_object() else {
        return wrong(format!("{} instead of an object", json_type(stored)));
    };
    if let Some(meta) = fields.get("metadata") {
        let Some(meta) = meta.as_object() else {
            return wrong(format!("metadata is {}", json_type(meta)));
        };
        for key in ["labels", "annotations"] {
            match meta.get(key) {
                None => {}
                Some(Value::Object(m)) => {
                    if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                        return wrong(format!("metadata.{key}.{k} is {}", json_type(v)));
                    }
                }
                Some(other) => {
                    return wrong(format!("metadata.{key} is {}", json_type(other)));
                }
            }
        }
    }
    if let Some(now) = current.as_object() {
        for (key, value) in fields {
            if key != "metadata" && now.get(key).is_some_and(Value::is_object) && !value.is_object()
            {
                return wrong(format!(
                    "{key} is {} but is an object in the object",
                    json_type(value)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body() -> Value {
        json!({
            "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "x", "uid": "u", "resourceVersion": "5",
                "labels": {"somelabel": "somevalue"},
                "annotations": {
                    "kopf.zalando.org/last-handled-configuration": "{}",
                    "kopf.zalando.org/create_fn": "{}",
                    "my-op.kopf.zalando.org/x": "1",
                    "team.example.com/kopf-managed": "yes",
                    "team.example.com/progress": "1",
                    "other.example.com/keep": "k",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                }},
            "spec": {"field": "value", "items": ["a", "b"]},
            "status": {"create_fn": {"message": "hello"}},
        })
    }

    /// The expected bytes were produced by Kopf 1.45.2's `AnnotationsDiffBaseStorage` for
    /// the same body (`build` then `store`).
    #[test]
    fn essence_matches_kopf_bytes() {
        let e = essence(&body(), &EssenceSettings::default());
        assert_eq!(
            encode(&e),
            r#"{"spec":{"field":"value","items":["a","b"]},"metadata":{"labels":{"somelabel":"somevalue"},"annotations":{"other.example.com/keep":"k"}}}"#.to_string() + "\n"
        );
        assert_eq!(decode(&encode(&e)).ok(), Some(e));
        let tracked = EssenceSettings {
            tracked_fields: vec![vec!["status".into(), "create_fn".into()]],
            ..Default::default()
        };
        assert_eq!(
            encode(&essence(&body(), &tracked)),
            r#"{"spec":{"field":"value","items":["a","b"]},"metadata":{"labels":{"somelabel":"somevalue"},"annotations":{"other.example.com/keep":"k"}},"status":{"create_fn":{"message":"hello"}}}"#.to_string() + "\n"
        );
    }

    #[test]
    fn tracked_and_ignored_fields() {
        let settings = EssenceSettings {
            tracked_fields: vec![vec!["status".into(), "create_fn".into()]],
            ignored_fields: vec![vec!["spec".into(), "items".into()]],
            ..Default::default()
        };
        let e = essence(&body(), &settings);
        assert_eq!(e["status"]["create_fn"]["message"], "hello");
        assert!(e["spec"].get("items").is_none());
        let plain = json!({"spec": {"a": 1}, "metadata": {"labels": {}, "annotations": {"kopf.zalando.org/x": "1"}}});
        assert_eq!(
            essence(&plain, &EssenceSettings::default()),
            json!({"spec": {"a": 1}})
        );
    }

    fn in_status() -> EssenceSettings {
        EssenceSettings {
            location: DiffBaseLocation::status(),
            ..Default::default()
        }
    }

    /// The wire format of Kopf's `StatusDiffBaseStorage` (kopf/_cogs/configs/diffbase.py; the
    /// expected bytes were produced by its `build` then `store` at nolar/kopf 60d02aef):
    /// `json.dumps(essence, separators=(',', ':'))` without a newline, as a string in
    /// `status.kopf.last-handled-configuration`; the field itself is not in the essence.
    #[test]
    fn status_location_stores_a_json_string_in_status_kopf() {
        let mut b = body();
        b["status"]["kopf"] = json!({"last-handled-configuration": "{\"spec\":{}}"});
        let e = essence(&b, &in_status());
        assert_eq!(e, essence(&body(), &EssenceSettings::default()));
        let patch = store_patch(&e, &in_status());
        assert_eq!(
            patch,
            json!({"status": {"kopf": {"last-handled-configuration":
                r#"{"spec":{"field":"value","items":["a","b"]},"metadata":{"labels":{"somelabel":"somevalue"},"annotations":{"other.example.com/keep":"k"}}}"#}}})
        );
        // Tracking the whole status does not track the stored diff-base.
        let tracked = EssenceSettings {
            tracked_fields: vec![vec!["status".into()]],
            ..in_status()
        };
        let mut with_base = b.clone();
        apply(&mut with_base, &patch);
        assert!(
            essence(&with_base, &tracked)["status"]
                .get("kopf")
                .is_none()
        );
        // Nor the progress records (Kopf's progress storages clear them from the essence).
        with_base["status"]["kopf"]["progress"] = json!({"create_fn": {"retries": 1}});
        with_base["status"]["kopf"]["dummy"] = json!("x");
        assert_eq!(
            essence(&with_base, &tracked)["status"]["kopf"],
            json!({"dummy": "x"})
        );
        let tracked_in_annotations = EssenceSettings {
            tracked_fields: vec![vec!["status".into()]],
            ..Default::default()
        };
        assert!(
            essence(&with_base, &tracked_in_annotations)["status"]["kopf"]
                .get("progress")
                .is_none()
        );
        assert_eq!(
            store_patch(&e, &EssenceSettings::default())["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"],
            encode(&e)
        );
    }

    fn apply(target: &mut Value, patch: &Value) {
        crate::apply_merge_patch(target, patch);
    }

    #[test]
    fn status_location_reads_the_status_then_the_annotation() {
        let annotated = json!({"metadata": {"annotations": {
            "kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"a\":1}}\n"}}});
        // Before a switch: the annotation is the fallback.
        let old = stored(&annotated, &in_status()).and_then(Result::ok);
        assert_eq!(old, Some(json!({"spec": {"a": 1}})));
        // The status wins once written.
        let mut both = annotated.clone();
        both["status"] = json!({"kopf": {"last-handled-configuration": "{\"spec\":{\"a\":2}}"}});
        let now = stored(&both, &in_status()).and_then(Result::ok);
        assert_eq!(now, Some(json!({"spec": {"a": 2}})));
        // The annotations storage never reads the status.
        let plain = json!({"status": both["status"].clone()});
        assert!(stored(&plain, &EssenceSettings::default()).is_none());
        assert!(stored(&json!({"spec": {}}), &in_status()).is_none());
        // Not a string (not written by Kopf): an error, i.e. a creation with a warning.
        let object = json!({"status": {"kopf": {"last-handled-configuration": {"spec": {}}}}});
        assert!(matches!(
            stored(&object, &in_status()),
            Some(Err(EssenceError::WrongShape { .. }))
        ));
        // Another name.
        let named = EssenceSettings {
            location: DiffBaseLocation::Status {
                name: "my-op".into(),
            },
            ..Default::default()
        };
        let patch = store_patch(&json!({"spec": {}}), &named);
        assert_eq!(
            patch,
            json!({"status": {"my-op": {"last-handled-configuration": "{\"spec\":{}}"}}})
        );
        assert_eq!(
            stored(&patch, &named).and_then(Result::ok),
            Some(json!({"spec": {}}))
        );
    }
}
