//! RFC 7386 JSON merge patches: computing one between two values, and applying one.

use serde_json::{Map, Value};

/// A merge patch that turns `from` into `to`: changed keys of mappings recursively, removed
/// keys as `null`, anything else replaced whole.
pub fn merge_patch(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for (k, va) in a {
                match b.get(k) {
                    None => {
                        out.insert(k.clone(), Value::Null);
                    }
                    Some(vb) if vb != va => {
                        out.insert(k.clone(), merge_patch(va, vb));
                    }
                    Some(_) => {}
                }
            }
            for (k, vb) in b {
                if !a.contains_key(k) {
                    out.insert(k.clone(), vb.clone());
                }
            }
            Value::Object(out)
        }
        _ => to.clone(),
    }
}

/// Applies a merge patch (RFC 7386): mappings merged recursively, `null` removes a key,
/// anything else replaces the target (json-patch's `merge`, under the name the crates use).
pub fn apply_merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Whether a merge patch changes nothing (an empty mapping).
pub fn is_noop(patch: &Value) -> bool {
    patch.as_object().is_some_and(Map::is_empty)
}
