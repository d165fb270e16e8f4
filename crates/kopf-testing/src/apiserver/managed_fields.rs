//! Field ownership (`metadata.managedFields`) and server-side apply.
//!
//! Every write records which manager set which fields (`FieldsV1`). An apply patch merges
//! the applied configuration into the live object, removes fields its manager applied before
//! and no longer applies (unless others own them), and fails with a conflict when another
//! manager owns a field that the configuration sets to a different value (unless forced).
//!
//! Lists are atomic unless they are known associative lists: for built-ins the lists with
//! strategic merge keys (containers by name, ports, conditions by type...), for custom
//! resources those marked `x-kubernetes-list-type: map` (keys from
//! `x-kubernetes-list-map-keys`) or `set`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::patch::ListStrategy;

/// One path element in FieldsV1 notation: `f:name`, `k:{"name":"x"}`, `v:"a"`.
pub type Path = Vec<String>;

/// How a list merges and how its items are identified.
#[derive(Debug, Clone, PartialEq)]
enum ListKind {
    Atomic,
    Map(Vec<String>),
    Set,
}

/// Built-in list types come from the strategic-merge-patch keys (one table for both).
fn builtin_list_kind(path: &[String], field: &str, def: &ResourceDef) -> ListKind {
    let names: Vec<String> = path
        .iter()
        .filter_map(|el| el.strip_prefix("f:").map(str::to_string))
        .collect();
    match crate::apiserver::patch::strategy(&names, field, &def.kind) {
        ListStrategy::Key(k) => ListKind::Map(vec![k.to_string()]),
        ListStrategy::Primitive => ListKind::Set,
        ListStrategy::Atomic => ListKind::Atomic,
    }
}

/// The schema node at a path of field names (custom resources).
fn schema_at<'a>(schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = schema;
    for el in path {
        if let Some(f) = el.strip_prefix("f:") {
            cur = cur
                .pointer(&format!(
                    "/properties/{}",
                    f.replace('~', "~0").replace('/', "~1")
                ))
                .or_else(|| cur.get("additionalProperties").filter(|a| a.is_object()))?;
        } else {
            cur = cur.get("items")?;
        }
    }
    Some(cur)
}

fn list_kind(def: &ResourceDef, path: &[String], field: &str) -> ListKind {
    if let Some(schema) = &def.schema {
        let mut full = path.to_vec();
        full.push(format!("f:{field}"));
        let node = schema_at(schema, &full);
        return match node
            .and_then(|n| n.get("x-kubernetes-list-type"))
            .and_then(Value::as_str)
        {
            Some("map") => ListKind::Map(
                node.and_then(|n| n.get("x-kubernetes-list-map-keys"))
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            Some("set") => ListKind::Set,
            _ => ListKind::Atomic,
        };
    }
    builtin_list_kind(path, field, def)
}

fn key_element(item: &Value, keys: &[String]) -> Option<String> {
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), item.get(k)?.clone());
    }
    Some(format!("k:{}", Value::Object(m)))
}

/// Leaf paths of a value.
fn collect(v: &Value, def: &ResourceDef, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                path.push(format!("f:{k}"));
                match child {
                    Value::Array(items) => match list_kind(def, &path[..path.len() - 1], k) {
                        ListKind::Atomic => {
                            out.insert(path.clone());
                        }
                        ListKind::Set => {
                            for item in items {
                                path.push(format!("v:{item}"));
                                out.insert(path.clone());
                                path.pop();
                            }
                        }
                        ListKind::Map(keys) => {
                            for item in items {
                                match key_element(item, &keys) {
                                    Some(el) => {
                                        path.push(el);
                                        // The item itself is owned, and its fields.
                                        out.insert(path.clone());
                                        collect(item, def, path, out);
                                        path.pop();
                                    }
                                    None => {
                                        out.insert(path.clone());
                                    }
                                }
                            }
                        }
                    },
                    _ => collect(child, def, path, out),
                }
                path.pop();
            }
        }
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

/// The fields of an object that managedFields track: labels, annotations, finalizers and
/// ownerReferences of metadata, and everything outside metadata except apiVersion/kind;
/// `status_only` selects the `.status` fields (for `/status` writes), else status is left
/// out when the resource has a status subresource.
pub fn fields(obj: &Value, def: &ResourceDef, status_only: bool) -> BTreeSet<Path> {
    let mut trimmed = Map::new();
    if let Some(m) = obj.as_object() {
        for (k, v) in m {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    if status_only {
                        continue;
                    }
                    let mut meta = Map::new();
                    for f in ["labels", "annotations", "finalizers", "ownerReferences"] {
                        if let Some(x) = v.get(f) {
                            meta.insert(f.into(), x.clone());
                        }
                    }
                    if !meta.is_empty() {
                        trimmed.insert(k.clone(), Value::Object(meta));
                    }
                }
                "status" if status_only || def.status => {
                    if status_only {
                        trimmed.insert(k.clone(), v.clone());
                    }
                }
                _ if status_only => {}
                _ => {
                    trimmed.insert(k.clone(), v.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    collect(&Value::Object(trimmed), def, &mut Vec::new(), &mut out);
    out
}

/// Reads the value at a path.
fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for el in path {
        cur = if let Some(f) = el.strip_prefix("f:") {
            cur.get(f)?
        } else if let Some(k) = el.strip_prefix("k:") {
            let want: Map<String, Value> = serde_json::from_str(k).ok()?;
            cur.as_array()?
                .iter()
                .find(|item| want.iter().all(|(wk, wv)| item.get(wk) == Some(wv)))?
        } else if let Some(x) = el.strip_prefix("v:") {
            let want: Value = serde_json::from_str(x).ok()?;
            cur.as_array()?.iter().find(|item| **item == want)?
        } else {
            return None;
        };
    }
    Some(cur)
}

/// Removes the value at a path; returns whether something was removed.
fn remove(v: &mut Value, path: &[String]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let mut cur = v;
    for el in parent_path {
        let next = if let Some(f) = el.strip_prefix("f:") {
            cur.get_mut(f)
        } else if let Some(k) = el.strip_prefix("k:") {
            let Ok(want) = serde_json::from_str::<Map<String, Value>>(k) else {
                return false;
            };
            cur.as_array_mut().and_then(|a| {
                a.iter_mut()
                    .find(|item| want.iter().all(|(wk, wv)| item.get(wk) == Some(wv)))
            })
        } else {
            None
        };
        match next {
            Some(n) => cur = n,
            None => return false,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        return cur.as_object_mut().is_some_and(|m| m.remove(f).is_some());
    }
    if let Some(k) = last.strip_prefix("k:") {
        let Ok(want) = serde_json::from_str::<Map<String, Value>>(k) else {
            return false;
        };
        if let Some(a) = cur.as_array_mut() {
            let before = a.len();
            a.retain(|item| !want.iter().all(|(wk, wv)| item.get(wk) == Some(wv)));
            return a.len() != before;
        }
    }
    if let Some(x) = last.strip_prefix("v:")
        && let (Ok(want), Some(a)) = (serde_json::from_str::<Value>(x), cur.as_array_mut())
    {
        let before = a.len();
        a.retain(|item| *item != want);
        return a.len() != before;
    }
    false
}

/// One managedFields entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion the manager used.
    pub api_version: String,
    /// When it last wrote.
    pub time: String,
    /// The subresource it wrote through, if any.
    pub subresource: Option<String>,
    /// The fields it owns.
    pub fields: BTreeSet<Path>,
}

impl Entry {
    fn same_manager(&self, manager: &str, operation: &str, sub: Option<&str>) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.as_deref() == sub
    }
}

fn to_tree(fields: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut cur = &mut root;
        for (i, el) in path.iter().enumerate() {
            let node = cur.entry(el.clone()).or_insert_with(|| json!({}));
            let Some(m) = node.as_object_mut() else {
                break;
            };
            if i == path.len() - 1 && !m.is_empty() {
                m.insert(".".into(), json!({}));
            }
            cur = m;
        }
    }
    // Nodes that are owned themselves and have children get a "." marker.
    fn mark(node: &mut Map<String, Value>, owned: &BTreeSet<Path>, path: &mut Path) {
        for (k, v) in node.iter_mut() {
            if k == "." {
                continue;
            }
            path.push(k.clone());
            if let Some(m) = v.as_object_mut() {
                if !m.is_empty() && owned.contains(path) {
                    m.insert(".".into(), json!({}));
                }
                mark(m, owned, path);
            }
            path.pop();
        }
    }
    mark(&mut root, fields, &mut Vec::new());
    Value::Object(root)
}

fn from_tree(tree: &Value) -> BTreeSet<Path> {
    fn walk(node: &Map<String, Value>, path: &mut Path, out: &mut BTreeSet<Path>) {
        for (k, v) in node {
            if k == "." {
                out.insert(path.clone());
                continue;
            }
            path.push(k.clone());
            match v.as_object() {
                Some(m) if !m.is_empty() => walk(m, path, out),
                _ => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    if let Some(m) = tree.as_object() {
        walk(m, &mut Vec::new(), &mut out);
    }
    out
}

/// Reads `metadata.managedFields`.
pub fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: e["manager"].as_str().unwrap_or("").to_string(),
                    operation: e["operation"].as_str().unwrap_or("Update").to_string(),
                    api_version: e["apiVersion"].as_str().unwrap_or("").to_string(),
                    time: e["time"].as_str().unwrap_or("").to_string(),
                    subresource: e["subresource"].as_str().map(str::to_string),
                    fields: from_tree(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn store_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({"manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": to_tree(&e.fields)});
            if let Some(s) = &e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// The manager of a non-apply write: `fieldManager`, else the User-Agent before `/`.
pub fn manager_name(field_manager: Option<&str>, user_agent: &str) -> String {
    match field_manager {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => {
            let ua = user_agent.split('/').next().unwrap_or("").trim();
            if ua.is_empty() {
                "unknown".into()
            } else {
                ua.to_string()
            }
        }
    }
}

/// Records a non-apply write (create, update, patch) in `new`'s managedFields.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    def: &ResourceDef,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let status_only = subresource == Some("status");
    let new_fields = fields(new, def, status_only);
    let mut list = old.map(entries).unwrap_or_default();
    let changed: BTreeSet<Path> = new_fields
        .iter()
        .filter(|p| old.and_then(|o| get(o, p)) != get(new, p))
        .cloned()
        .collect();
    let present = |p: &Path| get(new, p).is_some();
    for e in &mut list {
        // Fields that are gone are owned by nobody; changed fields move to this manager.
        e.fields.retain(|p| present(p) && !changed.contains(p));
    }
    if !changed.is_empty() {
        match list
            .iter_mut()
            .find(|e| e.same_manager(manager, "Update", subresource))
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now.to_string();
                e.api_version = def.api_version();
            }
            None => list.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: def.api_version(),
                time: now.to_string(),
                subresource: subresource.map(str::to_string),
                fields: changed,
            }),
        }
    }
    store_entries(new, &list);
}

/// A field owned by another manager that an apply would change.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The other manager.
    pub manager: String,
    /// Its operation (`Apply` managers print without `using`).
    pub operation: String,
    /// Its apiVersion.
    pub api_version: String,
    /// Its subresource.
    pub subresource: Option<String>,
    /// The field, e.g. `.data.k`.
    pub field: String,
}

impl Conflict {
    /// `conflict with "mgr" using v1` (without `using` for Apply managers).
    pub fn describe(&self) -> String {
        let mut s = format!("conflict with \"{}\"", self.manager);
        if self.operation != "Apply" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource \"{sub}\""));
        }
        s
    }
}

/// Renders a path as `.spec.containers[name="c"].image`.
pub fn render_path(path: &[String]) -> String {
    let mut s = String::new();
    for el in path {
        if let Some(f) = el.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = el.strip_prefix("k:") {
            let m: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = el.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

/// The conflict error message of the real server.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if conflicts.len() == 1 {
        let c = &conflicts[0];
        return format!(
            "Apply failed with 1 conflict: {}: {}",
            c.describe(),
            c.field
        );
    }
    let mut by_manager: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for c in conflicts {
        by_manager
            .entry(c.describe().replacen("conflict with", "conflicts with", 1))
            .or_default()
            .push(&c.field);
    }
    let mut s = format!("Apply failed with {} conflicts:", conflicts.len());
    for (who, fields) in by_manager {
        s.push_str(&format!(" {who}:"));
        for f in fields {
            s.push_str(&format!("\n- {f}"));
        }
    }
    s
}

fn merge_into(live: &mut Value, config: &Value, def: &ResourceDef, path: &mut Path) {
    let (Some(lm), Some(cm)) = (live.as_object_mut(), config.as_object()) else {
        *live = config.clone();
        return;
    };
    for (k, cv) in cm {
        path.push(format!("f:{k}"));
        match (lm.get_mut(k), cv) {
            (Some(lv @ Value::Object(_)), Value::Object(_)) => merge_into(lv, cv, def, path),
            (Some(Value::Array(la)), Value::Array(ca)) => {
                match list_kind(def, &path[..path.len() - 1], k) {
                    ListKind::Atomic => *la = ca.clone(),
                    ListKind::Set => {
                        for item in ca {
                            if !la.contains(item) {
                                la.push(item.clone());
                            }
                        }
                    }
                    ListKind::Map(keys) => {
                        for item in ca {
                            let pos = la
                                .iter()
                                .position(|x| keys.iter().all(|key| x.get(key) == item.get(key)));
                            match pos {
                                Some(p) => {
                                    path.push(key_element(item, &keys).unwrap_or_default());
                                    merge_into(&mut la[p], item, def, path);
                                    path.pop();
                                }
                                None => la.push(item.clone()),
                            }
                        }
                    }
                }
            }
            _ => {
                lm.insert(k.clone(), cv.clone());
            }
        }
        path.pop();
    }
}

/// The leaf fields `applied` would change that other managers own.
fn conflicts(
    list: &[Entry],
    applied: &BTreeSet<Path>,
    live: &Value,
    config: &Value,
    manager: &str,
    subresource: Option<&str>,
) -> Vec<Conflict> {
    let mut conflicts = Vec::new();
    for e in list {
        if e.same_manager(manager, "Apply", subresource) {
            continue;
        }
        for p in applied {
            if e.fields.contains(p) && get(live, p) != get(config, p) {
                // Both "owned and changed": a conflict on a leaf value.
                let leaf = get(config, p).is_some_and(|v| !v.is_object());
                if leaf {
                    conflicts.push(Conflict {
                        manager: e.manager.clone(),
                        operation: e.operation.clone(),
                        api_version: e.api_version.clone(),
                        subresource: e.subresource.clone(),
                        field: render_path(p),
                    });
                }
            }
        }
    }
    conflicts
}

/// What of an applied configuration is merged: no apiVersion and kind, of the metadata
/// only labels, annotations, finalizers and owner references; only the status when
/// applied to /status.
fn applied_part(config: &Value, status_only: bool) -> Value {
    let mut trimmed = config.clone();
    if let Some(m) = trimmed.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "labels" | "annotations" | "finalizers" | "ownerReferences"
                )
            });
        }
        if status_only {
            m.retain(|k, _| k == "status");
        }
    }
    trimmed
}

/// Server-side apply of `config` by `manager` onto `live`. Returns the merged object (with
/// updated managedFields) or the conflicts.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    live: &Value,
    config: &Value,
    def: &ResourceDef,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    let status_only = subresource == Some("status");
    let applied = fields(config, def, status_only);
    let mut list = entries(live);
    let conflicts = conflicts(&list, &applied, live, config, manager, subresource);
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let mut result = live.clone();
    // Fields this manager applied before and no longer applies go, unless others own them.
    let previous: BTreeSet<Path> = list
        .iter()
        .find(|e| e.same_manager(manager, "Apply", subresource))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: BTreeSet<Path> = list
        .iter()
        .filter(|e| !e.same_manager(manager, "Apply", subresource))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut dropped: Vec<&Path> = previous
        .iter()
        .filter(|p| !applied.contains(*p) && !others.contains(*p))
        .collect();
    // Deepest first, so removing a parent does not hide a child.
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in dropped {
        remove(&mut result, p);
    }
    let trimmed = applied_part(config, status_only);
    merge_into(&mut result, &trimmed, def, &mut Vec::new());
    // Forced fields leave their previous owners.
    for e in &mut list {
        if !e.same_manager(manager, "Apply", subresource) {
            e.fields.retain(|p| !applied.contains(p));
        }
    }
    match list
        .iter_mut()
        .find(|e| e.same_manager(manager, "Apply", subresource))
    {
        Some(e) => {
            e.fields = applied;
            e.time = now.to_string();
            e.api_version = def.api_version();
        }
        None => list.push(Entry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            api_version: def.api_version(),
            time: now.to_string(),
            subresource: subresource.map(str::to_string),
            fields: applied,
        }),
    }
    store_entries(&mut result, &list);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::catalog::builtins;

    fn cm_def() -> ResourceDef {
        builtins()
            .into_iter()
            .find(|d| d.plural == "configmaps")
            .unwrap_or_else(|| panic!("configmaps"))
    }

    #[test]
    fn fields_round_trip_through_fields_v1() {
        let def = cm_def();
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "b"}, "finalizers": ["x"]}, "data": {"k": "v"}});
        let f = fields(&obj, &def, false);
        assert!(f.contains(&vec!["f:data".to_string(), "f:k".to_string()]));
        assert!(f.contains(&vec![
            "f:metadata".to_string(),
            "f:finalizers".to_string(),
            "v:\"x\"".to_string()
        ]));
        assert!(!f.iter().any(|p| p.contains(&"f:name".to_string())));
        assert_eq!(from_tree(&to_tree(&f)), f);
    }

    #[test]
    fn apply_conflicts_force_and_removal() {
        let def = cm_def();
        let now = "2026-01-01T00:00:00Z";
        let mut live = json!({"metadata": {"name": "c"}, "data": {"k": "v", "other": "o"}});
        record_update(None, &mut live, &def, "editor", None, now);
        // Applying a different value to a field the editor owns conflicts.
        let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "mine"}});
        let err = apply(&live, &cfg, &def, "tool", false, None, now).expect_err("conflict");
        assert_eq!(
            conflict_message(&err),
            "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.k"
        );
        // The same value is no conflict; forcing takes ownership.
        let forced = apply(&live, &cfg, &def, "tool", true, None, now).expect("forced");
        assert_eq!(forced["data"]["k"], "mine");
        assert_eq!(forced["data"]["other"], "o");
        let owners = entries(&forced);
        let editor = owners
            .iter()
            .find(|e| e.manager == "editor")
            .expect("editor");
        assert!(
            !editor
                .fields
                .contains(&vec!["f:data".to_string(), "f:k".to_string()])
        );
        // Dropping a field from the applied config removes it.
        let cfg2 = json!({"metadata": {"name": "c"}, "data": {"k": "mine", "extra": "e"}});
        let second = apply(&forced, &cfg2, &def, "tool", false, None, now).expect("apply");
        let third = apply(
            &second,
            &json!({"metadata": {"name": "c"}, "data": {"k": "mine"}}),
            &def,
            "tool",
            false,
            None,
            now,
        )
        .expect("apply");
        assert!(third["data"].get("extra").is_none());
        assert_eq!(third["data"]["other"], "o", "fields of other managers stay");
    }

    #[test]
    fn multi_conflict_message() {
        let cs = vec![
            Conflict {
                manager: "m".into(),
                operation: "Update".into(),
                api_version: "v1".into(),
                subresource: None,
                field: ".a".into(),
            },
            Conflict {
                manager: "m".into(),
                operation: "Update".into(),
                api_version: "v1".into(),
                subresource: None,
                field: ".b".into(),
            },
        ];
        assert_eq!(
            conflict_message(&cs),
            "Apply failed with 2 conflicts: conflicts with \"m\" using v1:\n- .a\n- .b"
        );
    }
}
