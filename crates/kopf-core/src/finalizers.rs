//! The operator's finalizer, added and removed with JSON patches guarded by a
//! `resourceVersion` test so that other controllers' finalizers are never clobbered.

use serde_json::{Value, json};

/// Kopf's finalizer name.
pub const DEFAULT_FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";

fn list(body: &Value) -> Vec<&str> {
    body.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn rv_test(body: &Value) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion",
        "value": body.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)})
}

/// Whether the body carries the finalizer.
pub fn has(body: &Value, finalizer: &str) -> bool {
    list(body).contains(&finalizer)
}

/// Whether deletion has been requested.
pub fn is_deleting(body: &Value) -> bool {
    body.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// JSON-patch operations that add the finalizer (empty if present).
pub fn add_ops(body: &Value, finalizer: &str) -> Vec<Value> {
    let current = list(body);
    if current.contains(&finalizer) {
        return Vec::new();
    }
    let add = if body
        .pointer("/metadata/finalizers")
        .is_some_and(Value::is_array)
    {
        json!({"op": "add", "path": format!("/metadata/finalizers/{}", current.len()), "value": finalizer})
    } else {
        json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
    };
    vec![rv_test(body), add]
}

/// JSON-patch operations that remove the finalizer (empty if absent): the whole list when it
/// was the only one, else just its entries (from the end, so indexes stay valid).
pub fn remove_ops(body: &Value, finalizer: &str) -> Vec<Value> {
    let current = list(body);
    if !current.contains(&finalizer) {
        return Vec::new();
    }
    let mut ops = vec![rv_test(body)];
    if current.iter().all(|f| *f == finalizer) {
        ops.push(json!({"op": "remove", "path": "/metadata/finalizers"}));
    } else {
        for (i, _) in current
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, f)| **f == finalizer)
        {
            ops.push(json!({"op": "remove", "path": format!("/metadata/finalizers/{i}")}));
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_remove() {
        let bare = json!({"metadata": {"resourceVersion": "7"}});
        assert_eq!(
            add_ops(&bare, DEFAULT_FINALIZER),
            vec![
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}),
                json!({"op": "add", "path": "/metadata/finalizers", "value": [DEFAULT_FINALIZER]}),
            ]
        );
        let shared = json!({"metadata": {"resourceVersion": "8", "finalizers": ["other", DEFAULT_FINALIZER]}});
        assert!(add_ops(&shared, DEFAULT_FINALIZER).is_empty());
        assert_eq!(
            remove_ops(&shared, DEFAULT_FINALIZER)[1],
            json!({"op": "remove", "path": "/metadata/finalizers/1"})
        );
        let only = json!({"metadata": {"resourceVersion": "9", "finalizers": [DEFAULT_FINALIZER]}});
        assert_eq!(
            remove_ops(&only, DEFAULT_FINALIZER)[1],
            json!({"op": "remove", "path": "/metadata/finalizers"})
        );
        let other = json!({"metadata": {"finalizers": ["other"]}});
        assert_eq!(
            add_ops(&other, DEFAULT_FINALIZER)[1]["path"],
            "/metadata/finalizers/1"
        );
        assert!(has(&only, DEFAULT_FINALIZER) && !has(&other, DEFAULT_FINALIZER));
    }
}
