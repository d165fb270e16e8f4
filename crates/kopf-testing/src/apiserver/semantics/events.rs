//! core/v1 `Event` and events.k8s.io/v1 `Event` are two views of one storage.
//! Events are stored in the core/v1 shape; these functions translate between views.

use serde_json::{Map, Value};

const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &Value, to_new: bool, api_version: &str) -> Value {
    let Some(map) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        let renamed = RENAMES.iter().find_map(|(core, new)| {
            if to_new && k == core {
                Some(*new)
            } else if !to_new && k == new {
                Some(*core)
            } else {
                None
            }
        });
        out.insert(renamed.unwrap_or(k).to_string(), v.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    Value::Object(out)
}

/// Stored (core/v1) shape → events.k8s.io/v1 shape.
pub fn to_events_v1(core: &Value) -> Value {
    rename(core, true, "events.k8s.io/v1")
}

/// events.k8s.io/v1 shape → stored (core/v1) shape.
pub fn to_core(new: &Value) -> Value {
    rename(new, false, "v1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"name": "x"}, "message": "hi", "reason": "R", "count": 2});
        let new = to_events_v1(&core);
        assert_eq!(new["regarding"]["name"], "x");
        assert_eq!(new["note"], "hi");
        assert_eq!(new["deprecatedCount"], 2);
        assert_eq!(new["apiVersion"], "events.k8s.io/v1");
        assert_eq!(to_core(&new), core);
    }
}
