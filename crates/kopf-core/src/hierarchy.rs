//! Parent–child relationships between objects, following Kopf's `hierarchies` module: owner
//! references, labels, names and namespaces that make a new object a child of another.
//!
//! All the helpers work on a single child, which can be a raw `serde_json::Value` body or any
//! typed resource (k8s-openapi structs, kube custom resources...): the child is converted to
//! JSON, modified there and converted back, and it is only replaced when every step succeeds,
//! so a failed call leaves it as it was. The owner is anything that serializes into a body
//! with `apiVersion`, `kind` and `metadata` (typed k8s-openapi resources do).
//!
//! Fields that are absent, `null` or empty strings are treated alike as "not set", so typed
//! structs whose `Option` fields serialize as `null` behave like raw bodies.
//!
//! ```
//! use kopf_core::hierarchy::{adopt, HierarchyError};
//! use serde_json::json;
//!
//! let owner = json!({
//!     "apiVersion": "kopf.dev/v1",
//!     "kind": "KopfExample",
//!     "metadata": {
//!         "name": "kopf-example-1",
//!         "namespace": "default",
//!         "uid": "0b6e4bd4-8c8c-4a5b-9c4e-2f0a6f3c5d71",
//!         "labels": {"somelabel": "somevalue"},
//!     },
//!     "spec": {"field": "value"},
//! });
//! let mut child = json!({
//!     "apiVersion": "v1",
//!     "kind": "ConfigMap",
//!     "data": {"greeting": "hello"},
//! });
//!
//! adopt(&mut child, &owner)?;
//!
//! assert_eq!(child["metadata"]["generateName"], "kopf-example-1-");
//! assert_eq!(child["metadata"]["namespace"], "default");
//! assert_eq!(child["metadata"]["labels"]["somelabel"], "somevalue");
//! assert_eq!(
//!     child["metadata"]["ownerReferences"],
//!     json!([{
//!         "apiVersion": "kopf.dev/v1",
//!         "kind": "KopfExample",
//!         "name": "kopf-example-1",
//!         "uid": "0b6e4bd4-8c8c-4a5b-9c4e-2f0a6f3c5d71",
//!         "controller": true,
//!         "blockOwnerDeletion": true,
//!     }]),
//! );
//! # Ok::<(), HierarchyError>(())
//! ```

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Why an object could not be made (or unmade) a child of another.
#[derive(Debug, thiserror::Error)]
pub enum HierarchyError {
    /// The owner lacks a field that an owner reference needs.
    #[error("the owner has no {field}: {}", owner_field_hint(field))]
    MissingOwnerField {
        /// The dotted path of the missing field, e.g. `metadata.uid`.
        field: &'static str,
    },
    /// The child (or the owner) could not be converted into JSON.
    #[error("could not convert the {role} of type {type_name} into JSON ({source})")]
    Serialize {
        /// `"child"` or `"owner"`.
        role: &'static str,
        /// The Rust type that failed to serialize.
        type_name: &'static str,
        /// The cause.
        source: serde_json::Error,
    },
    /// The modified child could not be converted back into its type.
    #[error("could not convert the modified child back into {type_name} ({source})")]
    Deserialize {
        /// The Rust type that failed to deserialize.
        type_name: &'static str,
        /// The cause.
        source: serde_json::Error,
    },
    /// A part of the child that must be modified has an unexpected JSON type.
    #[error("the child's {path} is {found}, not {expected}")]
    Malformed {
        /// The dotted path inside the child (`body` for the child itself).
        path: String,
        /// The JSON type found there.
        found: &'static str,
        /// The JSON type needed there.
        expected: &'static str,
    },
    /// The child already has another controller: an object has at most one (the API server
    /// refuses a second), and taking over another controller's child is a mistake unless
    /// meant.
    #[error(
        "the child is already controlled by {kind} {name:?} (uid {uid}): an object has one controller, and the API server would refuse a second; leave the child to it, or remove that owner reference first (remove_owner_reference) if taking it over is meant"
    )]
    ControlledByAnother {
        /// The other controller's kind.
        kind: String,
        /// Its name.
        name: String,
        /// Its uid.
        uid: String,
    },
}

fn owner_field_hint(field: &str) -> &'static str {
    match field {
        "metadata.uid" | "metadata.name" => "only stored objects can own others",
        _ => "owner references need the owner's apiVersion and kind",
    }
}

/// How [`adopt_with`] treats fields that the child already has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Adopt {
    /// Overwrite the child's name, namespace and labels even when it already has them.
    pub forced: bool,
    /// Name the child exactly like the owner instead of using `generateName`.
    pub strict: bool,
    /// Dotted paths inside the child (e.g. `spec.template`) whose `metadata.labels` also get
    /// the owner's labels; paths that do not exist in the child are skipped.
    pub nested: Vec<String>,
}

/// Builds an owner reference pointing to `owner`, for a child's `metadata.ownerReferences`.
///
/// The owner must have `apiVersion`, `kind`, `metadata.name` and `metadata.uid`.
pub fn build_owner_reference(
    owner: &impl Serialize,
    controller: bool,
    block_owner_deletion: bool,
) -> Result<Value, HierarchyError> {
    let owner = to_json(owner, "owner")?;
    owner_reference(&owner, controller, block_owner_deletion)
}

/// Builds an object reference (as used in events) with the `apiVersion`, `kind`, `name`, `uid`
/// and `namespace` of `body`, keeping only the fields that are set.
pub fn build_object_reference(body: &impl Serialize) -> Result<Value, HierarchyError> {
    let body = to_json(body, "object")?;
    let fields = [
        ("apiVersion", top_str(&body, "apiVersion")),
        ("kind", top_str(&body, "kind")),
        ("name", meta_str(&body, "name")),
        ("uid", meta_str(&body, "uid")),
        ("namespace", meta_str(&body, "namespace")),
    ];
    let reference: Map<String, Value> = fields
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_owned(), Value::from(value?))))
        .collect();
    Ok(Value::Object(reference))
}

/// Appends an owner reference to `owner` into the child's `metadata.ownerReferences`, unless
/// a reference with the owner's uid is already there.
pub fn append_owner_reference<T>(
    child: &mut T,
    owner: &impl Serialize,
    controller: bool,
    block_owner_deletion: bool,
) -> Result<(), HierarchyError>
where
    T: Serialize + DeserializeOwned,
{
    let reference = build_owner_reference(owner, controller, block_owner_deletion)?;
    modify(child, |body| append_reference(body, reference))
}

/// Removes the references to `owner` (by uid) from the child's `metadata.ownerReferences`,
/// dropping the list when it becomes empty. Only the owner's `metadata.uid` is needed.
pub fn remove_owner_reference<T>(
    child: &mut T,
    owner: &impl Serialize,
) -> Result<(), HierarchyError>
where
    T: Serialize + DeserializeOwned,
{
    let owner = to_json(owner, "owner")?;
    let uid = meta_str(&owner, "uid").ok_or(HierarchyError::MissingOwnerField {
        field: "metadata.uid",
    })?;
    modify(child, |body| remove_reference(body, uid))
}

/// Puts `labels` into the child's `metadata.labels`, keeping the child's own values of the
/// same keys unless `forced`.
///
/// Each of `nested` is a dotted path inside the child (e.g. `spec.template` of a Deployment)
/// whose `metadata.labels` get the same treatment; paths that do not exist are skipped.
pub fn label<T>(
    child: &mut T,
    labels: &BTreeMap<String, String>,
    forced: bool,
    nested: &[&str],
) -> Result<(), HierarchyError>
where
    T: Serialize + DeserializeOwned,
{
    modify(child, |body| apply_labels(body, labels, forced, nested))
}

/// Names the child after `name` when it has neither `metadata.name` nor
/// `metadata.generateName` (or always if `forced`): `strict` sets `metadata.name` to `name`,
/// otherwise `metadata.generateName` becomes `"{name}-"`. The other field is removed, since
/// Kubernetes rejects objects with both (when not `forced`, it is not set anyway).
pub fn harmonize_naming<T>(
    child: &mut T,
    name: &str,
    forced: bool,
    strict: bool,
) -> Result<(), HierarchyError>
where
    T: Serialize + DeserializeOwned,
{
    modify(child, |body| harmonize(body, name, forced, strict))
}

/// Sets the child's `metadata.namespace` when it has none (or always if `forced`). A `None`
/// namespace (e.g. of a cluster-scoped owner) leaves the child untouched.
pub fn adjust_namespace<T>(
    child: &mut T,
    namespace: Option<&str>,
    forced: bool,
) -> Result<(), HierarchyError>
where
    T: Serialize + DeserializeOwned,
{
    modify(child, |body| set_namespace(body, namespace, forced))
}

/// Makes the child a controlled child of `owner` with the default [`Adopt`] options; see
/// [`adopt_with`].
///
/// ```
/// use kopf_core::hierarchy::adopt;
/// use serde_json::json;
///
/// let owner = json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
///     "metadata": {"name": "parent", "namespace": "team-a", "uid": "u-1", "labels": {"app": "x"}}});
/// let mut child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "data": {}});
/// adopt(&mut child, &owner)?;
/// assert_eq!(child["metadata"]["namespace"], "team-a");
/// assert_eq!(child["metadata"]["labels"]["app"], "x");
/// assert_eq!(child["metadata"]["ownerReferences"][0]["uid"], "u-1");
/// assert!(child["metadata"]["generateName"].as_str().is_some_and(|n| n.starts_with("parent-")));
/// # Ok::<(), kopf_core::hierarchy::HierarchyError>(())
/// ```
pub fn adopt<T>(child: &mut T, owner: &impl Serialize) -> Result<(), HierarchyError>
where
    T: Serialize + DeserializeOwned,
{
    adopt_with(child, owner, &Adopt::default())
}

/// Makes the child a controlled child of `owner`: adds an owner reference (`controller` and
/// `blockOwnerDeletion` both true), names the child after the owner
/// ([`harmonize_naming`]), puts it into the owner's namespace ([`adjust_namespace`]) and
/// copies the owner's labels ([`label`], also into `options.nested`).
///
/// The owner is checked before anything is changed; on any error, the child is unchanged.
pub fn adopt_with<T>(
    child: &mut T,
    owner: &impl Serialize,
    options: &Adopt,
) -> Result<(), HierarchyError>
where
    T: Serialize + DeserializeOwned,
{
    let owner = to_json(owner, "owner")?;
    let reference = owner_reference(&owner, true, true)?;
    let name = meta_str(&owner, "name").ok_or(HierarchyError::MissingOwnerField {
        field: "metadata.name",
    })?;
    let namespace = meta_str(&owner, "namespace");
    let labels = owner_labels(&owner);
    let nested: Vec<&str> = options.nested.iter().map(String::as_str).collect();
    modify(child, |body| {
        append_reference(body, reference)?;
        harmonize(body, name, options.forced, options.strict)?;
        set_namespace(body, namespace, options.forced)?;
        apply_labels(body, &labels, options.forced, &nested)
    })
}

/// Converts the child to JSON, applies `change`, and converts it back; the child is replaced
/// only if all of that succeeds.
fn modify<T, F>(child: &mut T, change: F) -> Result<(), HierarchyError>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce(&mut Value) -> Result<(), HierarchyError>,
{
    let mut body = to_json(&*child, "child")?;
    change(&mut body)?;
    *child = serde_json::from_value(body).map_err(|source| HierarchyError::Deserialize {
        type_name: std::any::type_name::<T>(),
        source,
    })?;
    Ok(())
}

fn to_json<S: Serialize + ?Sized>(value: &S, role: &'static str) -> Result<Value, HierarchyError> {
    serde_json::to_value(value).map_err(|source| HierarchyError::Serialize {
        role,
        type_name: std::any::type_name::<S>(),
        source,
    })
}

fn non_empty(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn top_str<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    non_empty(body.get(key))
}

fn meta_str<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    non_empty(body.get("metadata").and_then(|meta| meta.get(key)))
}

fn owner_reference(
    owner: &Value,
    controller: bool,
    block_owner_deletion: bool,
) -> Result<Value, HierarchyError> {
    let missing = |field| HierarchyError::MissingOwnerField { field };
    let uid = meta_str(owner, "uid").ok_or_else(|| missing("metadata.uid"))?;
    let name = meta_str(owner, "name").ok_or_else(|| missing("metadata.name"))?;
    let api_version = top_str(owner, "apiVersion").ok_or_else(|| missing("apiVersion"))?;
    let kind = top_str(owner, "kind").ok_or_else(|| missing("kind"))?;
    Ok(serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": block_owner_deletion,
    }))
}

/// The owner's string labels; anything else there is ignored.
fn owner_labels(owner: &Value) -> BTreeMap<String, String> {
    owner
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn malformed(path: &str, found: &Value, expected: &'static str) -> HierarchyError {
    HierarchyError::Malformed {
        path: path.to_owned(),
        found: json_type(found),
        expected,
    }
}

/// The object at `slot`, turning a `null` into an empty object.
fn as_object<'a>(
    slot: &'a mut Value,
    path: &str,
) -> Result<&'a mut Map<String, Value>, HierarchyError> {
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(map) => Ok(map),
        other => Err(malformed(path, other, "an object")),
    }
}

/// The `metadata` object of `node` (created if absent); `prefix` names `node` in errors.
fn metadata_of<'a>(
    node: &'a mut Value,
    prefix: &str,
) -> Result<&'a mut Map<String, Value>, HierarchyError> {
    let (node_path, meta_path) = if prefix.is_empty() {
        ("body".to_owned(), "metadata".to_owned())
    } else {
        (prefix.to_owned(), format!("{prefix}.metadata"))
    };
    let node = match node {
        Value::Object(map) => map,
        other => return Err(malformed(&node_path, other, "an object")),
    };
    as_object(node.entry("metadata").or_insert(Value::Null), &meta_path)
}

fn append_reference(body: &mut Value, reference: Value) -> Result<(), HierarchyError> {
    let uid = reference.get("uid").cloned();
    let meta = metadata_of(body, "")?;
    let slot = meta.entry("ownerReferences").or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Array(Vec::new());
    }
    let refs = match slot {
        Value::Array(refs) => refs,
        other => return Err(malformed("metadata.ownerReferences", other, "a list")),
    };
    let controls = |r: &Value| r.get("controller").and_then(Value::as_bool) == Some(true);
    if controls(&reference)
        && let Some(other) = refs
            .iter()
            .find(|r| controls(r) && r.get("uid") != uid.as_ref())
    {
        let text = |key: &str| {
            other
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        return Err(HierarchyError::ControlledByAnother {
            kind: text("kind"),
            name: text("name"),
            uid: text("uid"),
        });
    }
    if !refs
        .iter()
        .any(|existing| existing.get("uid") == uid.as_ref())
    {
        refs.push(reference);
    }
    Ok(())
}

fn remove_reference(body: &mut Value, uid: &str) -> Result<(), HierarchyError> {
    let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let refs = match meta.get_mut("ownerReferences") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(refs)) => refs,
        Some(other) => return Err(malformed("metadata.ownerReferences", other, "a list")),
    };
    let before = refs.len();
    refs.retain(|existing| existing.get("uid").and_then(Value::as_str) != Some(uid));
    if refs.len() < before && refs.is_empty() {
        meta.remove("ownerReferences");
    }
    Ok(())
}

fn merge_labels(
    node: &mut Value,
    prefix: &str,
    labels: &BTreeMap<String, String>,
    forced: bool,
) -> Result<(), HierarchyError> {
    let labels_path = if prefix.is_empty() {
        "metadata.labels".to_owned()
    } else {
        format!("{prefix}.metadata.labels")
    };
    let meta = metadata_of(node, prefix)?;
    let target = as_object(meta.entry("labels").or_insert(Value::Null), &labels_path)?;
    for (key, value) in labels {
        let slot = target.entry(key.clone()).or_insert(Value::Null);
        if forced || slot.is_null() {
            *slot = Value::String(value.clone());
        }
    }
    Ok(())
}

fn apply_labels(
    body: &mut Value,
    labels: &BTreeMap<String, String>,
    forced: bool,
    nested: &[&str],
) -> Result<(), HierarchyError> {
    if labels.is_empty() {
        return Ok(());
    }
    merge_labels(body, "", labels, forced)?;
    for path in nested {
        let found = path
            .split('.')
            .try_fold(&mut *body, |node, key| node.get_mut(key));
        match found {
            None | Some(Value::Null) => {}
            Some(node) => merge_labels(node, path, labels, forced)?,
        }
    }
    Ok(())
}

fn harmonize(
    body: &mut Value,
    name: &str,
    forced: bool,
    strict: bool,
) -> Result<(), HierarchyError> {
    if !forced && (meta_str(body, "name").is_some() || meta_str(body, "generateName").is_some()) {
        return Ok(());
    }
    let meta = metadata_of(body, "")?;
    if strict {
        meta.remove("generateName");
        meta.insert("name".to_owned(), Value::from(name));
    } else {
        if forced {
            meta.remove("name");
        }
        meta.insert("generateName".to_owned(), Value::from(format!("{name}-")));
    }
    Ok(())
}

fn set_namespace(
    body: &mut Value,
    namespace: Option<&str>,
    forced: bool,
) -> Result<(), HierarchyError> {
    let Some(namespace) = namespace else {
        return Ok(());
    };
    if !forced && meta_str(body, "namespace").is_some() {
        return Ok(());
    }
    metadata_of(body, "")?.insert("namespace".to_owned(), Value::from(namespace));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    fn owner() -> Value {
        json!({
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "metadata": {
                "name": "owner",
                "namespace": "ns1",
                "uid": "uid-1",
                "labels": {"app": "demo", "tier": "backend"},
            },
        })
    }

    fn owner_with_uid(uid: &str) -> Value {
        let mut owner = owner();
        owner["metadata"]["uid"] = json!(uid);
        owner
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn owner_reference_has_all_fields() {
        let reference = build_owner_reference(&owner(), false, true).unwrap();
        assert_eq!(
            reference,
            json!({
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfExample",
                "name": "owner",
                "uid": "uid-1",
                "controller": false,
                "blockOwnerDeletion": true,
            })
        );
    }

    #[test]
    fn owner_reference_requires_each_field() {
        for (pointer, field) in [
            ("/metadata/uid", "metadata.uid"),
            ("/metadata/name", "metadata.name"),
            ("/apiVersion", "apiVersion"),
            ("/kind", "kind"),
        ] {
            let mut owner = owner();
            *owner.pointer_mut(pointer).unwrap() = Value::Null;
            let err = build_owner_reference(&owner, true, true).unwrap_err();
            assert!(
                matches!(err, HierarchyError::MissingOwnerField { field: f } if f == field),
                "{err}"
            );
        }
        let mut owner = owner();
        owner["metadata"].as_object_mut().unwrap().remove("uid");
        let err = build_owner_reference(&owner, true, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the owner has no metadata.uid: only stored objects can own others"
        );
    }

    #[test]
    fn object_reference_keeps_present_fields() {
        assert_eq!(
            build_object_reference(&owner()).unwrap(),
            json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "name": "owner",
                "uid": "uid-1", "namespace": "ns1"})
        );
        let cluster = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}});
        assert_eq!(
            build_object_reference(&cluster).unwrap(),
            json!({"apiVersion": "v1", "kind": "Node", "name": "n"})
        );
        assert_eq!(build_object_reference(&json!({})).unwrap(), json!({}));
    }

    #[test]
    fn append_creates_metadata_and_list() {
        let mut child = json!({"kind": "ConfigMap"});
        append_owner_reference(&mut child, &owner(), true, false).unwrap();
        assert_eq!(
            child["metadata"]["ownerReferences"],
            json!([build_owner_reference(&owner(), true, false).unwrap()])
        );
    }

    #[test]
    fn append_is_idempotent_per_uid_and_keeps_others() {
        let mut child = json!({"metadata": {"ownerReferences": [{"uid": "other"}]}});
        append_owner_reference(&mut child, &owner(), true, true).unwrap();
        append_owner_reference(&mut child, &owner(), false, false).unwrap();
        let refs = child["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0], json!({"uid": "other"}));
        assert_eq!(refs[1]["uid"], "uid-1");
        assert_eq!(refs[1]["controller"], true);
    }

    #[test]
    fn remove_drops_matching_and_empty_list() {
        let mut child = json!({"metadata": {"name": "c"}});
        append_owner_reference(&mut child, &owner(), true, true).unwrap();
        append_owner_reference(&mut child, &owner_with_uid("uid-2"), false, false).unwrap();

        remove_owner_reference(&mut child, &owner()).unwrap();
        let refs = child["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0]["uid"], "uid-2");

        remove_owner_reference(&mut child, &owner_with_uid("uid-2")).unwrap();
        assert_eq!(child, json!({"metadata": {"name": "c"}}));

        // Nothing to remove: no change, no error.
        remove_owner_reference(&mut child, &owner()).unwrap();
        assert_eq!(child, json!({"metadata": {"name": "c"}}));
    }

    #[test]
    fn remove_needs_only_the_uid() {
        let mut child = json!({"metadata": {"ownerReferences": [{"uid": "uid-1"}, {"uid": "x"}]}});
        remove_owner_reference(&mut child, &json!({"metadata": {"uid": "uid-1"}})).unwrap();
        assert_eq!(
            child,
            json!({"metadata": {"ownerReferences": [{"uid": "x"}]}})
        );
        let err = remove_owner_reference(&mut child, &json!({"metadata": {}})).unwrap_err();
        assert!(matches!(
            err,
            HierarchyError::MissingOwnerField {
                field: "metadata.uid"
            }
        ));
    }

    #[test]
    fn label_keeps_existing_unless_forced() {
        let mut child = json!({"metadata": {"labels": {"app": "mine"}}});
        let new = labels(&[("app", "demo"), ("tier", "backend")]);
        label(&mut child, &new, false, &[]).unwrap();
        assert_eq!(
            child["metadata"]["labels"],
            json!({"app": "mine", "tier": "backend"})
        );
        label(&mut child, &new, true, &[]).unwrap();
        assert_eq!(
            child["metadata"]["labels"],
            json!({"app": "demo", "tier": "backend"})
        );
    }

    #[test]
    fn label_creates_metadata_but_not_for_nothing() {
        let mut child = json!({"kind": "Pod"});
        label(&mut child, &BTreeMap::new(), false, &["spec.template"]).unwrap();
        assert_eq!(child, json!({"kind": "Pod"}));
        label(&mut child, &labels(&[("a", "b")]), false, &[]).unwrap();
        assert_eq!(
            child,
            json!({"kind": "Pod", "metadata": {"labels": {"a": "b"}}})
        );
    }

    #[test]
    fn label_nested_paths() {
        let mut child = json!({
            "kind": "Deployment",
            "spec": {"template": {"spec": {"containers": []}},
                     "selector": {"metadata": {"labels": {"app": "mine"}}}},
        });
        let new = labels(&[("app", "demo")]);
        label(
            &mut child,
            &new,
            false,
            &[
                "spec.template",
                "spec.selector",
                "spec.missing.path",
                "status",
            ],
        )
        .unwrap();
        assert_eq!(child["metadata"]["labels"], json!({"app": "demo"}));
        assert_eq!(
            child["spec"]["template"]["metadata"]["labels"],
            json!({"app": "demo"})
        );
        assert_eq!(child["spec"]["template"]["spec"], json!({"containers": []}));
        assert_eq!(
            child["spec"]["selector"]["metadata"]["labels"],
            json!({"app": "mine"})
        );
        assert!(child["spec"].get("missing").is_none());
        assert!(child.get("status").is_none());
    }

    #[test]
    fn label_nested_non_object_is_an_error_and_changes_nothing() {
        let original = json!({"spec": {"template": "oops"}});
        let mut child = original.clone();
        let err = label(
            &mut child,
            &labels(&[("a", "b")]),
            false,
            &["spec.template"],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the child's spec.template is a string, not an object"
        );
        assert_eq!(child, original);
    }

    #[test]
    fn harmonize_variants() {
        let mut child = json!({});
        harmonize_naming(&mut child, "owner", false, false).unwrap();
        assert_eq!(child, json!({"metadata": {"generateName": "owner-"}}));

        let mut child = json!({});
        harmonize_naming(&mut child, "owner", false, true).unwrap();
        assert_eq!(child, json!({"metadata": {"name": "owner"}}));

        // Already named: left alone unless forced.
        let mut child = json!({"metadata": {"name": "mine"}});
        harmonize_naming(&mut child, "owner", false, false).unwrap();
        assert_eq!(child, json!({"metadata": {"name": "mine"}}));
        let mut child = json!({"metadata": {"generateName": "mine-"}});
        harmonize_naming(&mut child, "owner", false, true).unwrap();
        assert_eq!(child, json!({"metadata": {"generateName": "mine-"}}));

        // Forced: replaces, and never leaves both fields.
        let mut child = json!({"metadata": {"name": "mine"}});
        harmonize_naming(&mut child, "owner", true, false).unwrap();
        assert_eq!(child, json!({"metadata": {"generateName": "owner-"}}));
        let mut child = json!({"metadata": {"generateName": "mine-"}});
        harmonize_naming(&mut child, "owner", true, true).unwrap();
        assert_eq!(child, json!({"metadata": {"name": "owner"}}));
    }

    #[test]
    fn namespace_variants() {
        let mut child = json!({});
        adjust_namespace(&mut child, Some("ns1"), false).unwrap();
        assert_eq!(child, json!({"metadata": {"namespace": "ns1"}}));
        adjust_namespace(&mut child, Some("ns2"), false).unwrap();
        assert_eq!(child, json!({"metadata": {"namespace": "ns1"}}));
        adjust_namespace(&mut child, Some("ns2"), true).unwrap();
        assert_eq!(child, json!({"metadata": {"namespace": "ns2"}}));
        adjust_namespace(&mut child, None, true).unwrap();
        assert_eq!(child, json!({"metadata": {"namespace": "ns2"}}));
        let mut bare = json!({});
        adjust_namespace(&mut bare, None, false).unwrap();
        assert_eq!(bare, json!({}));
    }

    #[test]
    fn adopt_value() {
        let mut child = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"labels": {"app": "mine"}},
            "spec": {"template": {"spec": {}}},
        });
        let options = Adopt {
            nested: vec!["spec.template".to_owned()],
            ..Adopt::default()
        };
        adopt_with(&mut child, &owner(), &options).unwrap();
        let once = child.clone();
        adopt_with(&mut child, &owner(), &options).unwrap();
        assert_eq!(child, once, "adopting twice changes nothing");
        assert_eq!(
            child["metadata"],
            json!({
                "generateName": "owner-",
                "namespace": "ns1",
                "labels": {"app": "mine", "tier": "backend"},
                "ownerReferences": [build_owner_reference(&owner(), true, true).unwrap()],
            })
        );
        assert_eq!(
            child["spec"]["template"]["metadata"]["labels"],
            json!({"app": "demo", "tier": "backend"})
        );

        let mut strict = json!({"metadata": {"name": "x", "namespace": "other"}});
        adopt_with(
            &mut strict,
            &owner(),
            &Adopt {
                forced: true,
                strict: true,
                nested: vec![],
            },
        )
        .unwrap();
        assert_eq!(strict["metadata"]["name"], "owner");
        assert_eq!(strict["metadata"]["namespace"], "ns1");
    }

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        generate_name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        labels: Option<BTreeMap<String, String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        owner_references: Option<Vec<Value>>,
    }

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Widget {
        api_version: String,
        kind: String,
        metadata: Meta,
        spec: Value,
    }

    #[test]
    fn adopt_typed_child_under_typed_owner() {
        let owner = Widget {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            metadata: Meta {
                name: Some("parent".into()),
                namespace: Some("ns1".into()),
                uid: Some("uid-p".into()),
                labels: Some(labels(&[("app", "demo")])),
                ..Meta::default()
            },
            spec: json!({}),
        };
        let mut child = Widget {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            spec: json!({"size": 1}),
            ..Widget::default()
        };
        adopt(&mut child, &owner).unwrap();
        assert_eq!(child.metadata.generate_name.as_deref(), Some("parent-"));
        assert_eq!(child.metadata.name, None);
        assert_eq!(child.metadata.namespace.as_deref(), Some("ns1"));
        assert_eq!(child.metadata.labels, Some(labels(&[("app", "demo")])));
        assert_eq!(
            child.metadata.owner_references,
            Some(vec![
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "name": "parent",
                "uid": "uid-p", "controller": true, "blockOwnerDeletion": true})
            ])
        );
        assert_eq!(child.spec, json!({"size": 1}));

        remove_owner_reference(&mut child, &owner).unwrap();
        assert_eq!(child.metadata.owner_references, None);
    }

    #[test]
    fn owner_without_uid_leaves_child_unchanged() {
        let mut unstored = owner();
        unstored["metadata"].as_object_mut().unwrap().remove("uid");

        let original = json!({"metadata": {"labels": {"x": "y"}}});
        let mut child = original.clone();
        let err = adopt(&mut child, &unstored).unwrap_err();
        assert!(matches!(
            err,
            HierarchyError::MissingOwnerField {
                field: "metadata.uid"
            }
        ));
        assert_eq!(child, original);

        let mut typed = Widget::default();
        assert!(adopt(&mut typed, &unstored).is_err());
        assert_eq!(typed, Widget::default());
        assert!(append_owner_reference(&mut typed, &unstored, true, true).is_err());
        assert_eq!(typed, Widget::default());
    }

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Strict {
        metadata: StrictMeta,
    }

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct StrictMeta {
        name: String,
    }

    #[test]
    fn unconvertible_child_is_reported_and_unchanged() {
        let mut child = Strict {
            metadata: StrictMeta { name: "c".into() },
        };
        let err = label(&mut child, &labels(&[("a", "b")]), false, &[]).unwrap_err();
        assert!(matches!(err, HierarchyError::Deserialize { .. }), "{err}");
        assert!(err.to_string().contains("Strict"), "{err}");
        assert_eq!(child.metadata.name, "c");
    }

    #[test]
    fn malformed_child_is_reported() {
        let mut child = json!("not an object");
        let err = adjust_namespace(&mut child, Some("ns"), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the child's body is a string, not an object"
        );

        let mut child = json!({"metadata": {"ownerReferences": {}}});
        let err = append_owner_reference(&mut child, &owner(), true, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the child's metadata.ownerReferences is an object, not a list"
        );
    }

    #[test]
    fn a_child_controlled_by_another_owner_is_not_adopted() {
        let owner = json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "parent", "namespace": "ns", "uid": "u-parent"}});
        let mut child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "c", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "u-rs", "controller": true}]}});
        let before = child.clone();
        let error = adopt(&mut child, &owner).expect_err("controlled by the ReplicaSet");
        assert!(
            matches!(&error, HierarchyError::ControlledByAnother { kind, name, uid }
                if kind == "ReplicaSet" && name == "rs" && uid == "u-rs"),
            "{error}"
        );
        assert!(
            error.to_string().contains("remove_owner_reference"),
            "{error}"
        );
        assert_eq!(child, before, "unchanged");
        let error = append_owner_reference(&mut child, &owner, true, true).expect_err("same");
        assert!(matches!(error, HierarchyError::ControlledByAnother { .. }));

        // Co-owning (not as the controller) is fine, and adopting one's own child again too.
        append_owner_reference(&mut child, &owner, false, false).expect("a co-owner");
        let mut own = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
        adopt(&mut own, &owner).expect("adopted");
        adopt(&mut own, &owner).expect("again: the same controller");
    }
}
