//! Kopf-compatible diffs of JSON values.
//!
//! Rules (Kopf's `diffs.py`): equal values give nothing; an absent (or `null`) old value gives
//! `add`; an absent new value gives `remove`; two mappings are recursed (added keys first, then
//! removed keys, then common keys, each group in key order); anything else is a `change`.
//! Lists are compared as whole values.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The operation of one diff item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// The field appeared.
    Add,
    /// The field changed its value.
    Change,
    /// The field disappeared.
    Remove,
}

/// One change: operation, path, old and new values (`None` = absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffItem {
    /// What happened.
    pub op: Op,
    /// Where: the keys from the root (empty = the root itself).
    pub path: Vec<String>,
    /// The value before (`None` when added).
    pub old: Option<Value>,
    /// The value after (`None` when removed).
    pub new: Option<Value>,
}

/// A sequence of diff items, in Kopf's order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Diff(Vec<DiffItem>);

impl Diff {
    /// The items.
    pub fn items(&self) -> &[DiffItem] {
        &self.0
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Kopf's tuple form: `[["add", ["spec", "b"], null, 3], ...]`.
    pub fn to_kopf_json(&self) -> Value {
        Value::Array(
            self.0
                .iter()
                .map(|i| {
                    serde_json::json!([
                        i.op,
                        i.path,
                        i.old.clone().unwrap_or(Value::Null),
                        i.new.clone().unwrap_or(Value::Null)
                    ])
                })
                .collect(),
        )
    }
}

impl IntoIterator for Diff {
    type Item = DiffItem;
    type IntoIter = std::vec::IntoIter<DiffItem>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// The diff between two values (`None` or `null` = absent).
pub fn diff(old: Option<&Value>, new: Option<&Value>) -> Diff {
    let mut out = Vec::new();
    diff_into(present(old), present(new), &mut Vec::new(), &mut out);
    Diff(out)
}

fn diff_into(
    old: Option<&Value>,
    new: Option<&Value>,
    path: &mut Vec<String>,
    out: &mut Vec<DiffItem>,
) {
    let item = |op, path: &Vec<String>, old: Option<&Value>, new: Option<&Value>| DiffItem {
        op,
        path: path.clone(),
        old: old.cloned(),
        new: new.cloned(),
    };
    match (old, new) {
        (None, None) => {}
        (Some(a), Some(b)) if a == b => {}
        (None, Some(_)) => out.push(item(Op::Add, path, None, new)),
        (Some(_), None) => out.push(item(Op::Remove, path, old, None)),
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let get = |m: &'_ serde_json::Map<String, Value>, k: &str| present(m.get(k)).is_some();
            // Keys whose value is null count as absent.
            let mut added: Vec<&String> = b.keys().filter(|k| get(b, k) && !get(a, k)).collect();
            let mut removed: Vec<&String> = a.keys().filter(|k| get(a, k) && !get(b, k)).collect();
            let mut common: Vec<&String> = a.keys().filter(|k| get(a, k) && get(b, k)).collect();
            added.sort();
            removed.sort();
            common.sort();
            for k in added {
                path.push(k.clone());
                diff_into(None, present(b.get(k)), path, out);
                path.pop();
            }
            for k in removed {
                path.push(k.clone());
                diff_into(present(a.get(k)), None, path, out);
                path.pop();
            }
            for k in common {
                path.push(k.clone());
                diff_into(present(a.get(k)), present(b.get(k)), path, out);
                path.pop();
            }
        }
        (Some(_), Some(_)) => out.push(item(Op::Change, path, old, new)),
    }
}

/// The value at a path; `None` when any step is absent, `null` or not a mapping.
pub fn resolve<'a, S: AsRef<str>>(value: Option<&'a Value>, path: &[S]) -> Option<&'a Value> {
    let mut cur = present(value)?;
    for key in path {
        cur = present(cur.as_object()?.get(key.as_ref()))?;
    }
    Some(cur)
}

/// The diff relative to a field: items under the field lose the prefix; an item at a parent
/// of the field (e.g. the whole `spec` added) is re-diffed for the field; others are dropped.
pub fn reduce<S: AsRef<str>>(diff: &Diff, field: &[S]) -> Diff {
    if field.is_empty() {
        return diff.clone();
    }
    let field: Vec<&str> = field.iter().map(AsRef::as_ref).collect();
    let mut out = Vec::new();
    for item in &diff.0 {
        let n = field.len().min(item.path.len());
        let shared = item.path[..n]
            .iter()
            .map(String::as_str)
            .eq(field[..n].iter().copied());
        if !shared {
            continue;
        }
        if item.path.len() >= field.len() {
            out.push(DiffItem {
                op: item.op,
                path: item.path[field.len()..].to_vec(),
                old: item.old.clone(),
                new: item.new.clone(),
            });
        } else {
            let tail = &field[item.path.len()..];
            let old = resolve(item.old.as_ref(), tail);
            let new = resolve(item.new.as_ref(), tail);
            diff_into(old, new, &mut Vec::new(), &mut out);
        }
    }
    Diff(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(a: Value, b: Value) -> Value {
        diff(Some(&a), Some(&b)).to_kopf_json()
    }

    #[test]
    fn kopf_order_and_shapes() {
        assert_eq!(
            d(
                json!({"spec": {"a": 1, "c": 5}}),
                json!({"spec": {"a": 2, "b": 3}})
            ),
            json!([
                ["add", ["spec", "b"], null, 3],
                ["remove", ["spec", "c"], 5, null],
                ["change", ["spec", "a"], 1, 2]
            ])
        );
        assert_eq!(
            d(json!({"l": [1, 2]}), json!({"l": [1, 3]})),
            json!([["change", ["l"], [1, 2], [1, 3]]])
        );
        assert_eq!(d(json!(1), json!("x")), json!([["change", [], 1, "x"]]));
        assert_eq!(
            diff(None, Some(&json!({"a": 1}))).to_kopf_json(),
            json!([["add", [], null, {"a": 1}]])
        );
        assert!(
            d(json!({"a": null}), json!({}))
                .as_array()
                .is_some_and(Vec::is_empty)
        );
    }

    /// Expected values produced by Kopf 1.45.2's `diffs.diff` and `diffs.reduce`.
    #[test]
    fn matches_kopf_fixtures() {
        let a = json!({"spec": {"a": 1, "c": 5, "n": null}});
        let b = json!({"spec": {"a": 2, "b": 3, "d": {"x": [1]}}});
        assert_eq!(
            d(a, b),
            json!([["add", ["spec", "b"], null, 3], ["add", ["spec", "d"], null, {"x": [1]}],
                   ["remove", ["spec", "c"], 5, null], ["change", ["spec", "a"], 1, 2]])
        );
        let full = diff(Some(&json!({})), Some(&json!({"spec": {"x": {"y": 1}}})));
        assert_eq!(
            full.to_kopf_json(),
            json!([["add", ["spec"], null, {"x": {"y": 1}}]])
        );
        assert_eq!(
            reduce(&full, &["spec", "x"]).to_kopf_json(),
            json!([["add", [], null, {"y": 1}]])
        );
    }

    #[test]
    fn reduce_to_a_field() {
        let full = diff(
            Some(&json!({"spec": {"x": {"y": 1}, "z": 1}})),
            Some(&json!({"spec": {"x": {"y": 2}, "z": 2}})),
        );
        assert_eq!(
            reduce(&full, &["spec", "x"]).to_kopf_json(),
            json!([["change", ["y"], 1, 2]])
        );
        let added = diff(Some(&json!({})), Some(&json!({"spec": {"x": {"y": 1}}})));
        assert_eq!(
            reduce(&added, &["spec", "x", "y"]).to_kopf_json(),
            json!([["add", [], null, 1]])
        );
        assert!(reduce(&added, &["status"]).is_empty());
    }
}
