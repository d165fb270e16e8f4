//! Diff-bases too large to be stored: with the object's other annotations, the diff-base
//! annotation would exceed what kube allows (256 KiB for all annotations together), and
//! every write that carries it is refused with 422, so that the handlers would run again and
//! again. The processor leaves such a diff-base out of the cycle's writes
//! ([`kopf_core::cycle::UnstoredDiffBase`]); the engine keeps it here, in memory, and puts it
//! back on the object's next states as if it were stored: the handlers run once per state,
//! and the object is reported once (an ERROR and a Warning Event naming the limit and the
//! settings that store it). After a restart, the handlers take such an object for a new one
//! (at least once, not exactly once).

use std::collections::HashMap;
use std::sync::Mutex;

use kopf_core::events::EventSpec;
use kopf_core::processing::UnstoredDiffBase;
use kopf_diff::essence::{ANNOTATIONS_LIMIT, EssenceSettings, encode, stored};
use serde_json::Value;

use crate::uid::Uid;

/// The diff-bases of a resource's objects that could not be stored, each encoded as the
/// annotation would hold it.
pub(crate) struct Oversized {
    settings: EssenceSettings,
    kept: Mutex<HashMap<Uid, String>>,
}

impl Oversized {
    pub(crate) fn new(settings: EssenceSettings) -> Self {
        Oversized {
            settings,
            kept: Mutex::default(),
        }
    }

    /// `body` with the diff-base kept in memory for it, as its annotation, if one is kept
    /// and the object has none stored (one stored since replaces the kept one). None: the
    /// body as it is.
    pub(crate) fn restore(&self, uid: &str, body: &Value) -> Option<Value> {
        let mut kept = self.lock();
        if kept.is_empty() {
            return None;
        }
        let encoded = kept.get(uid)?;
        if stored(body, &self.settings).is_some() {
            kept.remove(uid);
            return None;
        }
        let mut body = body.clone();
        let annotations = body
            .as_object_mut()?
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()))
            .as_object_mut()?
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()))
            .as_object_mut()?;
        annotations.insert(self.settings.annotation(), Value::String(encoded.clone()));
        Some(body)
    }

    /// A cycle's writes went through without its diff-base: it is kept. The Event to post
    /// and the line to log the first time for this object (None after).
    pub(crate) fn keep(&self, uid: &str, unstored: &UnstoredDiffBase) -> Option<EventSpec> {
        let encoded = encode(&unstored.essence);
        let first = self
            .lock()
            .insert(Uid::from(uid), encoded.clone())
            .is_none();
        first.then(|| {
            EventSpec::warning(
                "DiffBaseTooLarge",
                format!(
                    "The diff-base of this object ({} bytes) is not stored: with it, the object's annotations would be {} bytes, more than the {ANNOTATIONS_LIMIT} kube allows. It is kept in memory: the handlers run once per change while the operator runs, but after a restart they take the object for a new one. To store it, keep the diff-base in the status (Operator::diff_base_storage(DiffBaseLocation::status()), or `run --diff-base-storage status`, with a status schema that keeps `status.kopf`), or leave the large fields out of it (Persistence.essence.ignored_fields).",
                    encoded.len(),
                    unstored.annotations_size,
                ),
            )
        })
    }

    /// The object is gone.
    pub(crate) fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uid, String>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn unstored(spec: Value) -> UnstoredDiffBase {
        UnstoredDiffBase {
            essence: json!({"spec": spec}),
            annotations_size: ANNOTATIONS_LIMIT + 1,
        }
    }

    #[test]
    fn a_kept_diff_base_is_restored_until_one_is_stored() {
        let oversized = Oversized::new(EssenceSettings::default());
        let body = json!({"metadata": {"name": "k"}, "spec": {"a": 1}});
        assert_eq!(oversized.restore("u", &body), None, "nothing kept");

        let event = oversized.keep("u", &unstored(json!({"a": 1})));
        assert!(event.is_some_and(|e| e.reason == "DiffBaseTooLarge"));
        assert!(
            oversized.keep("u", &unstored(json!({"a": 2}))).is_none(),
            "reported once"
        );
        let restored = oversized.restore("u", &body).expect("restored");
        let essence = stored(&restored, &EssenceSettings::default())
            .expect("as if stored")
            .expect("readable");
        assert_eq!(essence, json!({"spec": {"a": 2}}), "the latest kept");
        assert_eq!(oversized.restore("other", &body), None);

        // A diff-base stored on the object since (it fits again) wins, and the kept one goes.
        let stored_since = restored;
        assert_eq!(oversized.restore("u", &stored_since), None);
        assert_eq!(oversized.restore("u", &body), None, "forgotten");
    }
}
