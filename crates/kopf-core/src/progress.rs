//! Per-handler progress records, stored in annotations `<prefix>/<handler-id>` as compact
//! JSON with Kopf 1.x's fields, and the merge-patch operations that store and purge them.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::keys::StorageKeys;

/// One handler's progress, as Kopf stores it (absent fields are not written).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressRecord {
    /// Time of the first attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// Set when the handler finished (success or failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The next attempt is not before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delayed: Option<String>,
    /// The reason the handler runs for: `create`, `update`, `delete`, `resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Attempts so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Finished successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// Finished with a permanent failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<bool>,
    /// The last error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Sorted ids of sub-handlers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subrefs: Option<Vec<String>>,
}

/// A stored record that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("the progress record in annotation {key} is not valid ({source}); the handler starts over")]
pub struct ProgressError {
    /// The annotation.
    pub key: String,
    /// The cause.
    pub source: serde_json::Error,
}

impl ProgressRecord {
    /// Compact JSON, fields in Kopf's order.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// Whether the handler finished (success or permanent failure).
    pub fn is_finished(&self) -> bool {
        self.success == Some(true) || self.failure == Some(true)
    }

    /// Whether the handler may run now (not finished, not delayed into the future).
    pub fn is_awake(&self, now: Timestamp) -> bool {
        !self.is_finished()
            && self
                .delayed
                .as_deref()
                .and_then(parse_time)
                .is_none_or(|d| d <= now)
    }
}

/// Kopf's timestamp format: `2026-11-22T05:04:57.126136+00:00`.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
}

/// Parses Kopf's timestamps (and other RFC 3339 forms; naive times are taken as UTC).
pub fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse::<Timestamp>()
        .ok()
        .or_else(|| format!("{s}Z").parse::<Timestamp>().ok())
}

/// Reads, writes and purges progress records in annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgressStorage {
    /// How keys are formed.
    pub keys: StorageKeys,
}

fn annotations(body: &Value) -> Option<&Map<String, Value>> {
    body.pointer("/metadata/annotations")
        .and_then(Value::as_object)
}

fn patch_annotations(patch: &mut Value) -> Option<&mut Map<String, Value>> {
    if !patch.is_object() {
        *patch = json!({});
    }
    let meta = patch
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| json!({}));
    let ann = meta
        .as_object_mut()?
        .entry("annotations")
        .or_insert_with(|| json!({}));
    ann.as_object_mut()
}

impl ProgressStorage {
    /// The record of a handler, from the first of its keys present on the body.
    pub fn fetch(&self, id: &str, body: &Value) -> Option<Result<ProgressRecord, ProgressError>> {
        let ann = annotations(body)?;
        self.keys
            .make_keys(id, Some(body))
            .into_iter()
            .find_map(|key| {
                let text = ann.get(&key)?.as_str()?;
                Some(serde_json::from_str(text).map_err(|source| ProgressError { key, source }))
            })
    }

    /// Adds the record to a merge patch, under every key of the handler.
    pub fn store(&self, id: &str, record: &ProgressRecord, body: &Value, patch: &mut Value) {
        let encoded = record.encode();
        let keys = self.keys.make_keys(id, Some(body));
        if let Some(ann) = patch_annotations(patch) {
            for key in keys {
                ann.insert(key, Value::String(encoded.clone()));
            }
        }
    }

    /// Purges a handler's record: `null` for keys present on the body; keys only pending in
    /// the patch are dropped from it.
    pub fn purge(&self, id: &str, body: &Value, patch: &mut Value) {
        let keys = self.keys.make_keys(id, Some(body));
        let present: Vec<bool> = keys
            .iter()
            .map(|k| annotations(body).is_some_and(|a| a.contains_key(k)))
            .collect();
        if let Some(ann) = patch_annotations(patch) {
            for (key, on_body) in keys.into_iter().zip(present) {
                if on_body {
                    ann.insert(key, Value::Null);
                } else {
                    ann.remove(&key);
                }
            }
        }
        prune_empty(patch);
    }
}

/// Removes empty `annotations` and `metadata` objects from a patch.
pub fn prune_empty(patch: &mut Value) {
    if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
    if let Some(root) = patch.as_object_mut()
        && root
            .get("metadata")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        root.remove("metadata");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_encoding_is_kopfs() {
        let r = ProgressRecord {
            started: Some("2026-11-22T05:04:57.126136+00:00".into()),
            delayed: Some("2026-11-22T05:04:58.126136+00:00".into()),
            purpose: Some("create".into()),
            retries: Some(1),
            success: Some(false),
            failure: Some(false),
            message: Some("not yet".into()),
            ..Default::default()
        };
        assert_eq!(
            r.encode(),
            r#"{"started":"2026-11-22T05:04:57.126136+00:00","delayed":"2026-11-22T05:04:58.126136+00:00","purpose":"create","retries":1,"success":false,"failure":false,"message":"not yet"}"#
        );
        let back: ProgressRecord = serde_json::from_str(&r.encode()).expect("decodes");
        assert_eq!(back, r);
        assert!(!r.is_finished());
        let t = parse_time("2026-11-22T05:04:58.126136+00:00").expect("parses");
        assert!(r.is_awake(t));
        assert!(!r.is_awake(parse_time("2026-11-22T05:04:57+00:00").expect("parses")));
        assert_eq!(format_time(t), "2026-11-22T05:04:58.126136+00:00");
        assert!(
            parse_time("2026-11-22T05:04:58.126136").is_some(),
            "naive times are UTC"
        );
    }

    #[test]
    fn store_fetch_and_purge() {
        let storage = ProgressStorage::default();
        let rec = ProgressRecord {
            retries: Some(0),
            ..Default::default()
        };
        let mut patch = json!({});
        storage.store("create_fn", &rec, &json!({}), &mut patch);
        assert_eq!(
            patch,
            json!({"metadata": {"annotations": {"kopf.zalando.org/create_fn": "{\"retries\":0}"}}})
        );
        let body =
            json!({"metadata": {"annotations": {"kopf.zalando.org/create_fn": "{\"retries\":0}"}}});
        assert_eq!(
            storage.fetch("create_fn", &body).and_then(Result::ok),
            Some(rec)
        );
        let mut purge = json!({});
        storage.purge("create_fn", &body, &mut purge);
        assert_eq!(
            purge,
            json!({"metadata": {"annotations": {"kopf.zalando.org/create_fn": null}}})
        );
        // A key only pending in the patch is dropped, not nulled.
        storage.purge("create_fn", &json!({}), &mut patch);
        assert_eq!(patch, json!({}));
        let broken = json!({"metadata": {"annotations": {"kopf.zalando.org/create_fn": "{"}}});
        assert!(
            storage
                .fetch("create_fn", &broken)
                .is_some_and(|r| r.is_err())
        );
    }
}
