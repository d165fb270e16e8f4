//! Per-handler progress records with Kopf 1.x's fields, and the merge-patch operations that
//! store and purge them. Two places, as in Kopf:
//!
//! * annotations `<prefix>/<handler-id>` holding compact JSON (the default; like Kopf's
//!   `SmartProgressStorage`, it also reads and purges records that older Kopf versions left
//!   in `status.kopf.progress`, but never writes there);
//! * the status: `status.<name>.progress.<handler-id>` holding the record as an object
//!   (Kopf's `StatusProgressStorage`), chosen with [`ProgressStorage::status`].

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

/// A stored record that cannot be read: not JSON, not an object, a field of the wrong type,
/// a time that is not a time, an empty purpose or sub-handler id.
#[derive(Debug, thiserror::Error)]
#[error("the progress record in {key} is not valid ({problem}): {value}")]
pub struct ProgressError {
    /// Where it is: the annotation's key, or `status.<name>.progress.<id>`.
    pub key: String,
    /// The stored value, as stored (cut to 200 bytes).
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

/// The longest excerpt of a corrupt stored value quoted in a message.
const VALUE_EXCERPT: usize = 200;

impl ProgressError {
    fn new(key: String, value: &str, problem: impl Into<String>) -> Self {
        ProgressError {
            key,
            value: crate::text::excerpt(value, VALUE_EXCERPT).into_owned(),
            problem: problem.into(),
        }
    }
}

impl ProgressRecord {
    /// Compact JSON, fields in Kopf's order.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// Reads a stored record (`text` is the annotation's value or the status field as
    /// JSON) from `key`; every corrupt form is an error naming the key, the value and what is
    /// wrong, so that it is reported instead of being read as something else.
    pub fn decode(key: &str, value: &Value) -> Result<ProgressRecord, ProgressError> {
        let text = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let error = |problem: String| ProgressError::new(key.to_string(), &text, problem);
        let parsed = match value {
            Value::String(text) => {
                serde_json::from_str::<Value>(text).map_err(|e| error(format!("not JSON: {e}")))?
            }
            other => other.clone(),
        };
        if !parsed.is_object() {
            return Err(error("not a JSON object".into()));
        }
        let record: ProgressRecord =
            serde_json::from_value(parsed).map_err(|e| error(e.to_string()))?;
        record.check().map_err(error)?;
        Ok(record)
    }

    /// What serde accepts but Kopf never writes: times that are not times, an empty
    /// purpose, empty sub-handler ids.
    fn check(&self) -> Result<(), String> {
        for (field, time) in [
            ("started", &self.started),
            ("stopped", &self.stopped),
            ("delayed", &self.delayed),
        ] {
            if let Some(time) = time
                && parse_time(time).is_none()
            {
                return Err(format!("{field} is not a time: {time:?}"));
            }
        }
        if self.purpose.as_deref() == Some("") {
            return Err("purpose is empty".into());
        }
        if self.subrefs.iter().flatten().any(String::is_empty) {
            return Err("subrefs has an empty id".into());
        }
        Ok(())
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

/// Where progress records live.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProgressLocation {
    /// Annotations (Kopf's default); legacy `status.kopf.progress` is read and purged.
    #[default]
    Annotations,
    /// `status.<name>.progress.<handler-id>`.
    Status {
        /// The name under `status` (Kopf: `kopf`).
        name: String,
    },
}

/// Reads, writes and purges progress records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgressStorage {
    /// How annotation keys are formed (and the prefix of the touch annotation).
    pub keys: StorageKeys,
    /// Where the records are.
    pub location: ProgressLocation,
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

/// The `status.<name>.progress` object of a body.
fn status_progress<'a>(body: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    body.get("status")?.get(name)?.get("progress")?.as_object()
}

/// The `status.<name>.progress` object of a patch, created if missing.
fn patch_status_progress<'a>(
    patch: &'a mut Value,
    name: &str,
) -> Option<&'a mut Map<String, Value>> {
    if !patch.is_object() {
        *patch = json!({});
    }
    let mut cur = patch;
    for key in ["status", name, "progress"] {
        cur = cur.as_object_mut()?.entry(key).or_insert_with(|| json!({}));
        if !cur.is_object() {
            *cur = json!({});
        }
    }
    cur.as_object_mut()
}

/// Where Kopf versions before 1.44 kept progress (read and purged, never written).
const LEGACY_STATUS: &str = "kopf";

impl ProgressStorage {
    /// Records in `status.<name>.progress` (e.g. `"kopf"`), as Kopf's status storage.
    pub fn status(name: &str) -> Self {
        ProgressStorage {
            keys: StorageKeys::default(),
            location: ProgressLocation::Status { name: name.into() },
        }
    }

    /// The record of a handler, from the first of its places present on the body.
    pub fn fetch(&self, id: &str, body: &Value) -> Option<Result<ProgressRecord, ProgressError>> {
        let from_status = |name: &str| {
            let value = status_progress(body, name)?.get(id)?;
            Some(ProgressRecord::decode(
                &format!("status.{name}.progress.{id}"),
                value,
            ))
        };
        match &self.location {
            ProgressLocation::Status { name } => from_status(name),
            ProgressLocation::Annotations => {
                let in_annotations = annotations(body).and_then(|ann| {
                    self.keys
                        .make_keys(id, Some(body))
                        .into_iter()
                        .find_map(|key| {
                            let value = ann.get(&key)?;
                            Some(ProgressRecord::decode(&key, value))
                        })
                });
                in_annotations.or_else(|| from_status(LEGACY_STATUS))
            }
        }
    }

    /// Adds the record to a merge patch, in every place of the handler.
    pub fn store(&self, id: &str, record: &ProgressRecord, body: &Value, patch: &mut Value) {
        match &self.location {
            ProgressLocation::Status { name } => {
                let value = serde_json::to_value(record).unwrap_or_else(|_| json!({}));
                if let Some(progress) = patch_status_progress(patch, name) {
                    progress.insert(id.to_string(), value);
                }
            }
            ProgressLocation::Annotations => {
                let encoded = record.encode();
                let keys = self.keys.make_keys(id, Some(body));
                if let Some(ann) = patch_annotations(patch) {
                    for key in keys {
                        ann.insert(key, Value::String(encoded.clone()));
                    }
                }
            }
        }
    }

    /// Purges a handler's record: `null` where it is on the body; where it is only pending
    /// in the patch, it is dropped from the patch.
    pub fn purge(&self, id: &str, body: &Value, patch: &mut Value) {
        let status_name = match &self.location {
            ProgressLocation::Status { name } => Some(name.as_str()),
            ProgressLocation::Annotations => Some(LEGACY_STATUS),
        };
        if let Some(name) = status_name {
            let on_body = status_progress(body, name).is_some_and(|p| p.contains_key(id));
            let pending = patch
                .pointer(&format!(
                    "/status/{}/progress",
                    name.replace('~', "~0").replace('/', "~1")
                ))
                .is_some_and(|p| p.get(id).is_some());
            if (on_body || pending)
                && let Some(progress) = patch_status_progress(patch, name)
            {
                if on_body {
                    progress.insert(id.to_string(), Value::Null);
                } else {
                    progress.remove(id);
                }
            }
            prune_empty_status(patch, name);
        }
        if matches!(self.location, ProgressLocation::Status { .. }) {
            return;
        }
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

impl ProgressStorage {
    /// The merge patch that touches an object to provoke a new watch event (Kopf's
    /// `touch-dummy` annotation, or `status.<name>.dummy` with the status storage).
    pub fn touch_patch(&self, now: jiff::Timestamp) -> Value {
        let stamp = format_time(now);
        match &self.location {
            ProgressLocation::Annotations => {
                json!({"metadata": {"annotations": {self.touch_key(): stamp}}})
            }
            ProgressLocation::Status { name } => json!({"status": {name: {"dummy": stamp}}}),
        }
    }

    /// The merge patch that clears a touch found on the body (None when there is none).
    pub fn touch_clear(&self, body: &Value) -> Option<Value> {
        match &self.location {
            ProgressLocation::Annotations => annotations(body)
                .is_some_and(|a| a.contains_key(&self.touch_key()))
                .then(|| json!({"metadata": {"annotations": {self.touch_key(): null}}})),
            ProgressLocation::Status { name } => body
                .get("status")
                .and_then(|s| s.get(name))
                .and_then(|s| s.get("dummy"))
                .map(|_| json!({"status": {name: {"dummy": null}}})),
        }
    }

    fn touch_key(&self) -> String {
        format!("{}/touch-dummy", self.keys.prefix)
    }
}

/// Removes an empty `status.<name>.progress` (and then empty parents) from a patch.
fn prune_empty_status(patch: &mut Value, name: &str) {
    let empty = |v: Option<&Value>| v.and_then(Value::as_object).is_some_and(Map::is_empty);
    if let Some(named) = patch.get_mut("status").and_then(|s| s.get_mut(name))
        && empty(named.get("progress"))
        && let Some(m) = named.as_object_mut()
    {
        m.remove("progress");
    }
    if let Some(status) = patch.get_mut("status")
        && empty(status.get(name))
        && let Some(m) = status.as_object_mut()
    {
        m.remove(name);
    }
    if empty(patch.get("status"))
        && let Some(m) = patch.as_object_mut()
    {
        m.remove("status");
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
        // Records left in the status by Kopf < 1.44 are read, and purged with the others.
        let legacy = json!({"status": {"kopf": {"progress": {"create_fn": {"retries": 2}}}}});
        assert_eq!(
            storage
                .fetch("create_fn", &legacy)
                .and_then(Result::ok)
                .and_then(|r| r.retries),
            Some(2)
        );
        let mut purge = json!({});
        storage.purge("create_fn", &legacy, &mut purge);
        assert_eq!(
            purge,
            json!({"status": {"kopf": {"progress": {"create_fn": null}}}})
        );
        let broken = json!({"metadata": {"annotations": {"kopf.zalando.org/create_fn": "{"}}});
        assert!(
            storage
                .fetch("create_fn", &broken)
                .is_some_and(|r| r.is_err())
        );
    }

    #[test]
    fn every_corrupt_record_is_an_error_naming_its_key_value_and_problem() {
        let storage = ProgressStorage::default();
        for (text, problem) in [
            ("{", "not JSON"),
            ("", "not JSON"),
            ("null", "not a JSON object"),
            ("[]", "not a JSON object"),
            (r#"["2026-01-01T00:00:00+00:00"]"#, "not a JSON object"),
            ("5", "not a JSON object"),
            (
                r#"{"retries":"3"}"#,
                "invalid type: string \"3\", expected u32",
            ),
            (r#"{"success":"yes"}"#, "expected a boolean"),
            (r#"{"subrefs":[1]}"#, "expected a string"),
            (r#"{"started":""}"#, "started is not a time: \"\""),
            (r#"{"delayed":"soon"}"#, "delayed is not a time: \"soon\""),
            (r#"{"stopped":"2026-13-45"}"#, "stopped is not a time"),
            (r#"{"purpose":""}"#, "purpose is empty"),
            (r#"{"subrefs":["a",""]}"#, "subrefs has an empty id"),
        ] {
            let body = json!({"metadata": {"annotations": {"kopf.zalando.org/create_fn": text}}});
            let error = match storage.fetch("create_fn", &body) {
                Some(Err(e)) => e,
                other => panic!("{text:?} is corrupt, read as {other:?}"),
            };
            assert_eq!(error.key, "kopf.zalando.org/create_fn", "{text:?}");
            assert_eq!(error.value, text);
            assert!(
                error.problem.contains(problem),
                "{text:?}: {}",
                error.problem
            );
        }
        // What Kopf writes (nulls included) is read.
        let kopf = r#"{"started":"2026-11-22T05:04:57.126136+00:00","stopped":null,"delayed":null,"purpose":"create","retries":0,"success":false,"failure":false,"message":null,"subrefs":null}"#;
        let body = json!({"metadata": {"annotations": {"kopf.zalando.org/create_fn": kopf}}});
        assert!(matches!(storage.fetch("create_fn", &body), Some(Ok(_))));
        // The status storage reads objects, and says where the corrupt one is.
        let status = ProgressStorage::status("kopf");
        let body = json!({"status": {"kopf": {"progress": {"create_fn": {"delayed": 1}}}}});
        let error = status.fetch("create_fn", &body).and_then(Result::err);
        assert!(error.is_some_and(
            |e| e.key == "status.kopf.progress.create_fn" && e.value == r#"{"delayed":1}"#
        ),);
    }

    #[test]
    fn status_storage() {
        let storage = ProgressStorage::status("kopf");
        let rec = ProgressRecord {
            retries: Some(1),
            message: Some("later".into()),
            ..Default::default()
        };
        let mut patch = json!({});
        storage.store("create_fn/sub", &rec, &json!({}), &mut patch);
        assert_eq!(
            patch,
            json!({"status": {"kopf": {"progress": {"create_fn/sub": {"retries": 1, "message": "later"}}}}})
        );
        let body = patch.clone();
        assert_eq!(
            storage.fetch("create_fn/sub", &body).and_then(Result::ok),
            Some(rec)
        );
        let mut purge = json!({});
        storage.purge("create_fn/sub", &body, &mut purge);
        assert_eq!(
            purge,
            json!({"status": {"kopf": {"progress": {"create_fn/sub": null}}}})
        );
        // Only pending: dropped from the patch, which becomes empty.
        storage.purge("create_fn/sub", &json!({}), &mut patch);
        assert_eq!(patch, json!({}));
        let touched = storage.touch_patch(jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(
            touched["status"]["kopf"]["dummy"],
            "1970-01-01T00:00:00.000000+00:00"
        );
        assert_eq!(
            storage.touch_clear(&touched),
            Some(json!({"status": {"kopf": {"dummy": null}}}))
        );
        let annotations = ProgressStorage::default();
        let touched = annotations.touch_patch(jiff::Timestamp::UNIX_EPOCH);
        assert!(touched["metadata"]["annotations"]["kopf.zalando.org/touch-dummy"].is_string());
        assert!(annotations.touch_clear(&touched).is_some());
        assert_eq!(annotations.touch_clear(&json!({})), None);
    }
}
