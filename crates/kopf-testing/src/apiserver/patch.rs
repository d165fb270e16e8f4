//! The four ways to change an object: JSON merge patch (RFC 7386), JSON patch (RFC 6902),
//! Kubernetes strategic merge patch for built-in kinds, and a merge-patch diff.

use serde_json::{Map, Value};

/// Error applying a patch.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchError {
    /// The patch document itself is bad (the server answers 400).
    Malformed(String),
    /// The patch is well-formed but cannot be applied, e.g. a failed `test` (422).
    Apply(String),
}

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatchError::Malformed(m) | PatchError::Apply(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PatchError {}

fn parse(patch: &[u8]) -> Result<Value, PatchError> {
    serde_json::from_slice(patch)
        .map_err(|e| PatchError::Malformed(format!("the patch is not valid JSON: {e}")))
}

/// RFC 7386 JSON merge patch.
pub fn apply_merge_patch(target: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    let p = parse(patch)?;
    let mut out = target.clone();
    kopf_diff::apply_merge_patch(&mut out, &p);
    Ok(out)
}

/// RFC 7386 JSON merge patch applied to an owned target (no copy of it).
pub fn merge_patch_into(mut target: Value, patch: &[u8]) -> Result<Value, PatchError> {
    let p = parse(patch)?;
    kopf_diff::apply_merge_patch(&mut target, &p);
    Ok(target)
}

/// RFC 6902 JSON patch (at most 10000 operations).
pub fn apply_json_patch(target: &Value, patch: &[u8]) -> Result<Value, PatchError> {
    json_patch_into(target.clone(), patch)
}

/// RFC 6902 JSON patch applied to an owned target (no copy of it).
pub fn json_patch_into(target: Value, patch: &[u8]) -> Result<Value, PatchError> {
    let p = parse(patch)?;
    let ops = p
        .as_array()
        .ok_or_else(|| PatchError::Malformed("a JSON patch must be a list of operations".into()))?;
    if ops.len() > 10000 {
        return Err(PatchError::Malformed(format!(
            "the allowed maximum operations in a JSON patch is 10000, got {}",
            ops.len()
        )));
    }
    let parsed: json_patch::Patch = serde_json::from_value(p.clone())
        .map_err(|e| PatchError::Malformed(format!("invalid JSON patch: {e}")))?;
    let mut out = target;
    json_patch::patch(&mut out, &parsed).map_err(|e| PatchError::Apply(e.to_string()))?;
    Ok(out)
}

/// A merge patch that turns `from` into `to` (from `kopf-diff`).
pub use kopf_diff::merge_patch as merge_patch_diff;

/// How a list field of a built-in kind merges (strategic merge patch, and the list types of
/// server-side apply).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ListStrategy<'a> {
    /// Lists of objects merged by a key.
    Key(&'a str),
    /// Lists of scalars merged as a set.
    Primitive,
    /// Replaced whole.
    Atomic,
}

/// The merge strategy of the list `field` under the map at `path` (field names from the
/// root), for a built-in `kind`.
pub fn strategy<'a>(path: &[String], field: &str, kind: &str) -> ListStrategy<'a> {
    let parent = path.last().map(String::as_str).unwrap_or("");
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => ListStrategy::Key("name"),
        "hostAliases" => ListStrategy::Key("ip"),
        "volumeMounts" => ListStrategy::Key("mountPath"),
        "volumeDevices" => ListStrategy::Key("devicePath"),
        "conditions" => ListStrategy::Key("type"),
        "ownerReferences" => ListStrategy::Key("uid"),
        "finalizers" if parent == "metadata" => ListStrategy::Primitive,
        "ports" if kind == "Service" && path.len() == 1 && parent == "spec" => {
            ListStrategy::Key("port")
        }
        "ports" => ListStrategy::Key("containerPort"),
        _ => ListStrategy::Atomic,
    }
}

const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";
const SET_ORDER: &str = "$setElementOrder/";

/// Kubernetes strategic merge patch for built-in kinds (`kind` picks merge keys).
pub fn apply_strategic_merge_patch(
    target: &Value,
    patch: &[u8],
    kind: &str,
) -> Result<Value, PatchError> {
    let p = parse(patch)?;
    if !p.is_object() {
        return Err(PatchError::Malformed(
            "a strategic merge patch must be a JSON object".into(),
        ));
    }
    let mut path = Vec::new();
    Ok(merge_map(target, &p, kind, &mut path)?.unwrap_or(Value::Object(Map::new())))
}

/// Merges a patch map into an original value. Returns None when the map is deleted.
fn merge_map(
    original: &Value,
    patch: &Value,
    kind: &str,
    path: &mut Vec<String>,
) -> Result<Option<Value>, PatchError> {
    let Some(pm) = patch.as_object() else {
        return Ok(Some(patch.clone()));
    };
    match pm.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(None),
        Some("replace") => {
            let mut replaced = pm.clone();
            replaced.remove("$patch");
            return Ok(Some(strip_directives(&Value::Object(replaced))));
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(PatchError::Malformed(format!(
                "unknown patch type {other:?} in a strategic merge patch"
            )));
        }
    }
    let mut out = original.as_object().cloned().unwrap_or_default();
    for (k, v) in pm {
        if k == "$patch" || k == "$retainKeys" || k.starts_with(SET_ORDER) {
            continue;
        }
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVE) {
            let remove: Vec<&Value> = v.as_array().map(|a| a.iter().collect()).unwrap_or_default();
            if let Some(Value::Array(list)) = out.get_mut(field) {
                list.retain(|x| !remove.contains(&x));
            }
            continue;
        }
        if v.is_null() {
            out.remove(k);
            continue;
        }
        let current = out.get(k).cloned().unwrap_or(Value::Null);
        let merged = match v {
            Value::Object(_) => {
                path.push(k.clone());
                let r = merge_map(&current, v, kind, path)?;
                path.pop();
                r
            }
            Value::Array(items) => Some(merge_list(
                &current,
                items,
                strategy(path, k, kind),
                kind,
                path,
                k,
            )?),
            _ => Some(v.clone()),
        };
        match merged {
            Some(m) => out.insert(k.clone(), m),
            None => out.remove(k),
        };
    }
    if let Some(keep) = pm.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, order) in pm {
        if let Some(field) = k.strip_prefix(SET_ORDER)
            && let (Some(Value::Array(list)), Some(order)) = (out.get_mut(field), order.as_array())
        {
            let key = match strategy(path, field, kind) {
                ListStrategy::Key(key) => Some(key),
                _ => None,
            };
            reorder(list, order, key);
        }
    }
    Ok(Some(Value::Object(out)))
}

fn reorder(list: &mut Vec<Value>, order: &[Value], key: Option<&str>) {
    let ident = |v: &Value| -> Value {
        match key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let wanted: Vec<Value> = order.iter().map(ident).collect();
    let mut ordered: Vec<Value> = Vec::with_capacity(list.len());
    for w in &wanted {
        if let Some(pos) = list.iter().position(|x| &ident(x) == w) {
            ordered.push(list.remove(pos));
        }
    }
    ordered.append(list);
    *list = ordered;
}

fn merge_list(
    original: &Value,
    patch_items: &[Value],
    strategy: ListStrategy<'_>,
    kind: &str,
    path: &mut Vec<String>,
    field: &str,
) -> Result<Value, PatchError> {
    let orig: Vec<Value> = original.as_array().cloned().unwrap_or_default();
    // `{"$patch": "replace"}` as an item replaces the whole list.
    if patch_items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let rest: Vec<Value> = patch_items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect();
        return Ok(Value::Array(rest));
    }
    match strategy {
        ListStrategy::Atomic => Ok(Value::Array(
            patch_items.iter().map(strip_directives).collect(),
        )),
        ListStrategy::Primitive => {
            let mut out = orig;
            for item in patch_items {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(Value::Array(out))
        }
        ListStrategy::Key(key) => {
            let mut out = orig;
            for item in patch_items {
                let Some(id) = item.get(key) else {
                    return Err(PatchError::Malformed(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    )));
                };
                let pos = out.iter().position(|x| x.get(key) == Some(id));
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    if let Some(p) = pos {
                        out.remove(p);
                    }
                    continue;
                }
                path.push(field.to_string());
                let merged = match pos {
                    Some(p) => merge_map(&out[p], item, kind, path)?,
                    None => merge_map(&Value::Object(Map::new()), item, kind, path)?,
                };
                path.pop();
                match (pos, merged) {
                    (Some(p), Some(m)) => out[p] = m,
                    (Some(p), None) => {
                        out.remove(p);
                    }
                    (None, Some(m)) => out.push(m),
                    (None, None) => {}
                }
            }
            Ok(Value::Array(out))
        }
    }
}

/// Removes directive keys (`$patch`, `$retainKeys`, ...) from a value.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn smp(t: Value, p: Value, kind: &str) -> Value {
        apply_strategic_merge_patch(&t, p.to_string().as_bytes(), kind).expect("applies")
    }

    #[test]
    fn merge_and_json_patch() {
        let t = json!({"a": 1, "b": {"c": 2}, "l": [1, 2]});
        let r = apply_merge_patch(&t, br#"{"a": null, "b": {"d": 3}, "l": [3]}"#).expect("merge");
        assert_eq!(r, json!({"b": {"c": 2, "d": 3}, "l": [3]}));
        let r = apply_json_patch(&t, br#"[{"op": "add", "path": "/l/-", "value": 9}, {"op": "test", "path": "/a", "value": 1}]"#).expect("json");
        assert_eq!(r["l"], json!([1, 2, 9]));
        assert!(matches!(
            apply_json_patch(&t, br#"[{"op": "test", "path": "/a", "value": 2}]"#),
            Err(PatchError::Apply(_))
        ));
        assert!(matches!(
            apply_json_patch(&t, br#"{"op": "add"}"#),
            Err(PatchError::Malformed(_))
        ));
        assert!(matches!(
            apply_json_patch(&t, br#"[{"op": "nope"}]"#),
            Err(PatchError::Malformed(_))
        ));
        assert!(matches!(
            apply_merge_patch(&t, b"{"),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn json_patch_tests_compare_whole_lists_and_elements() {
        let t = json!({"status": {"conditions": [
            {"type": "A", "status": "True", "reason": "R"},
            {"type": "B", "status": "False", "reason": "S"},
        ]}});
        let same = br#"[{"op": "test", "path": "/status/conditions", "value": [
            {"reason": "R", "status": "True", "type": "A"},
            {"type": "B", "status": "False", "reason": "S"}]},
            {"op": "add", "path": "/status/conditions/-", "value": {"type": "C"}}]"#;
        let r = apply_json_patch(&t, same).expect("the same list (key order aside) passes");
        assert_eq!(r["status"]["conditions"].as_array().map(Vec::len), Some(3));
        // A prefix, a reordered list, a changed field of an element: all fail (422).
        for bad in [
            r#"[{"op": "test", "path": "/status/conditions", "value": [{"type": "A", "status": "True", "reason": "R"}]}]"#,
            r#"[{"op": "test", "path": "/status/conditions", "value": [{"type": "B", "status": "False", "reason": "S"}, {"type": "A", "status": "True", "reason": "R"}]}]"#,
            r#"[{"op": "test", "path": "/status/conditions/1", "value": {"type": "B", "status": "True", "reason": "S"}}]"#,
            r#"[{"op": "test", "path": "/status/conditions/1", "value": {"type": "B", "status": "False"}}]"#,
            r#"[{"op": "test", "path": "/status/conditions", "value": []}]"#,
        ] {
            assert!(
                matches!(
                    apply_json_patch(&t, bad.as_bytes()),
                    Err(PatchError::Apply(_))
                ),
                "{bad}"
            );
        }
        let element = br#"[{"op": "test", "path": "/status/conditions/0", "value": {"type": "A", "status": "True", "reason": "R"}}]"#;
        assert!(apply_json_patch(&t, element).is_ok());
    }

    #[test]
    fn service_ports_merge_by_port() {
        let svc = json!({"spec": {"ports": [{"name": "a", "port": 80}]}});
        let r = smp(
            svc,
            json!({"spec": {"ports": [{"name": "b", "port": 81}]}}),
            "Service",
        );
        assert_eq!(r["spec"]["ports"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn containers_env_merge_by_name_and_delete() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}], "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "y"}]}});
        let r = smp(
            pod.clone(),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "F", "value": "2"}]}]}}),
            "Pod",
        );
        assert_eq!(
            r["spec"]["containers"][0]["env"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(r["spec"]["containers"][0]["image"], "x");
        let r = smp(
            pod.clone(),
            json!({"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}),
            "Pod",
        );
        assert_eq!(r["spec"]["containers"].as_array().map(Vec::len), Some(1));
        let r = smp(
            pod,
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}),
            "Pod",
        );
        assert_eq!(r["spec"]["containers"][0]["name"], "b");
    }

    #[test]
    fn finalizers_union_and_primitive_delete() {
        let o = json!({"metadata": {"finalizers": ["a", "b"]}});
        let r = smp(
            o.clone(),
            json!({"metadata": {"finalizers": ["c", "a"]}}),
            "ConfigMap",
        );
        assert_eq!(r["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let r = smp(
            o,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
            "ConfigMap",
        );
        assert_eq!(r["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn map_directives() {
        let o = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}, "x": 1}});
        let r = smp(
            o.clone(),
            json!({"spec": {"strategy": {"type": "Recreate", "$retainKeys": ["type"]}}}),
            "Deployment",
        );
        assert_eq!(r["spec"]["strategy"], json!({"type": "Recreate"}));
        let r = smp(
            o.clone(),
            json!({"spec": {"strategy": {"$patch": "replace", "type": "Recreate"}}}),
            "Deployment",
        );
        assert_eq!(r["spec"]["strategy"], json!({"type": "Recreate"}));
        let r = smp(
            o.clone(),
            json!({"spec": {"strategy": {"$patch": "delete"}}}),
            "Deployment",
        );
        assert!(r["spec"].get("strategy").is_none());
        let r = smp(o, json!({"spec": {"x": null}}), "Deployment");
        assert!(r["spec"].get("x").is_none());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::from),
            (-5i64..5).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_object() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map("[a-d]", arb_json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    fn has_lists(v: &Value) -> bool {
        match v {
            Value::Array(_) => true,
            Value::Object(m) => m.values().any(has_lists),
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn merge_patch_diff_round_trips(a in arb_object(), b in arb_object()) {
            let p = merge_patch_diff(&a, &b);
            prop_assert_eq!(apply_merge_patch(&a, p.to_string().as_bytes()).expect("applies"), b);
        }

        #[test]
        fn json_patch_diff_round_trips(a in arb_object(), b in arb_object()) {
            let p = json_patch::diff(&a, &b);
            let body = serde_json::to_vec(&p).expect("serialises");
            prop_assert_eq!(apply_json_patch(&a, &body).expect("applies"), b);
        }

        #[test]
        fn merge_patch_is_idempotent(a in arb_object(), p in arb_object()) {
            let body = p.to_string();
            let once = apply_merge_patch(&a, body.as_bytes()).expect("applies");
            let twice = apply_merge_patch(&once, body.as_bytes()).expect("applies");
            prop_assert_eq!(once, twice);
        }

        #[test]
        fn smp_without_lists_equals_merge_patch(a in arb_object(), p in arb_object()) {
            prop_assume!(!has_lists(&p));
            let body = p.to_string();
            prop_assert_eq!(
                apply_strategic_merge_patch(&a, body.as_bytes(), "ConfigMap").expect("smp"),
                apply_merge_patch(&a, body.as_bytes()).expect("merge")
            );
        }
    }
}
