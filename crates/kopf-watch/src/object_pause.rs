//! Pausing one object by hand (not the operator's pause, see [`crate::pause`]): while an
//! object carries the pause annotation (`kopf.dev/paused` by default,
//! [`Settings::paused_annotation`](crate::Settings::paused_annotation)) with any value but
//! `false`, none of its handlers, timers, daemons or reconciles run, and nothing is due;
//! its index handlers still see it. Taking the annotation off resumes it: the changes made
//! meanwhile are handled then, once, as one change. A paused object that is deleted keeps
//! the operator's finalizer: its deletion handlers run, and the finalizer is released, once
//! the annotation is taken off.
//!
//! Each move is said once, in the log and as an Event on the object (`kubectl describe`),
//! and the paused objects are counted (`kopf_objects_paused`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kopf_core::events::EventSpec;
use kopf_core::metrics::Metrics;
use serde_json::Value;

use crate::events::Poster;
use crate::object::object_span;
use crate::uid::Uid;

/// Which objects of a resource are paused, and what is said when one pauses or resumes.
pub(crate) struct Pauses {
    /// The annotation that pauses an object.
    annotation: String,
    /// The paused objects, each with whether its deletion is held (said once).
    paused: Mutex<HashMap<Uid, bool>>,
    poster: Arc<Poster>,
    metrics: Option<Metrics>,
    /// The resource's plural, the gauge's label.
    plural: String,
}

impl Pauses {
    pub(crate) fn new(
        annotation: String,
        poster: Arc<Poster>,
        metrics: Option<Metrics>,
        plural: String,
    ) -> Self {
        Pauses {
            annotation,
            paused: Mutex::default(),
            poster,
            metrics,
            plural,
        }
    }

    /// The annotation's value when `body` is paused by it (present, and not `false`).
    pub(crate) fn reason<'a>(&self, body: &'a Value) -> Option<&'a str> {
        paused_by(body, &self.annotation)
    }

    /// Whether the object was paused when it was last seen.
    pub(crate) fn is_paused(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    /// Whether a state of an object changes its pause (paused or resumed).
    pub(crate) fn moves(&self, uid: &str, body: &Value) -> bool {
        self.is_paused(uid) != self.reason(body).is_some()
    }

    /// Whether a state of the object at hand (not its deletion from the API: see `forget`)
    /// is held: it is while paused (said the first time, and the first time its deletion
    /// waits); resumed (said once) when the annotation is gone.
    pub(crate) async fn hold(&self, uid: &str, body: &Value) -> bool {
        let Some(why) = self.reason(body) else {
            if self.lock().remove(uid).is_some() {
                self.count(-1);
                let message = format!(
                    "Resumed: the annotation {} is gone; what changed meanwhile is handled now.",
                    self.annotation
                );
                object_span(body).in_scope(|| tracing::info!("{message}"));
                self.post(uid, body, EventSpec::info("Resumed", message))
                    .await;
            }
            return false;
        };
        let deleting = kopf_core::finalizers::is_deleting(body);
        let (first, held_first) = {
            let mut paused = self.lock();
            let first = !paused.contains_key(uid);
            let held = paused.entry(Uid::from(uid)).or_insert(false);
            let held_first = deleting && !std::mem::replace(held, true);
            (first, held_first)
        };
        if first {
            self.count(1);
            let message = format!(
                "Paused by the annotation {}={why:?}: no handler, timer or daemon runs until it is removed.",
                self.annotation
            );
            object_span(body).in_scope(|| tracing::info!("{message}"));
            self.post(uid, body, EventSpec::info("Paused", message))
                .await;
        }
        if held_first {
            let message = format!(
                "Deleted while paused: its deletion handlers run, and the finalizer is released, once the annotation {} is removed.",
                self.annotation
            );
            object_span(body).in_scope(|| tracing::warn!("{message}"));
            self.post(uid, body, EventSpec::warning("DeletionPaused", message))
                .await;
        }
        true
    }

    /// The object is gone (or no longer served here): it is not counted as paused.
    pub(crate) fn forget(&self, uid: &str) {
        if self.lock().remove(uid).is_some() {
            self.count(-1);
        }
    }

    async fn post(&self, uid: &str, body: &Value, event: EventSpec) {
        self.poster.post(uid, body, vec![event]).await;
    }

    fn count(&self, delta: i64) {
        if let Some(m) = &self.metrics {
            m.paused(&self.plural, delta);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uid, bool>> {
        self.paused.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The value of `annotation` when it pauses `body`: present, and not `false`.
fn paused_by<'a>(body: &'a Value, annotation: &str) -> Option<&'a str> {
    let value = body.get("metadata")?.get("annotations")?.get(annotation)?;
    let text = value.as_str().unwrap_or("");
    (!text.trim().eq_ignore_ascii_case("false")).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reason(annotations: Value) -> Option<String> {
        let body = json!({"metadata": {"annotations": annotations}});
        paused_by(&body, "kopf.dev/paused").map(str::to_string)
    }

    #[test]
    fn any_value_but_false_pauses() {
        assert_eq!(
            reason(json!({"kopf.dev/paused": "true"})),
            Some("true".into())
        );
        assert_eq!(
            reason(json!({"kopf.dev/paused": "alice fixes the volume"})),
            Some("alice fixes the volume".into())
        );
        assert_eq!(reason(json!({"kopf.dev/paused": ""})), Some(String::new()));
        assert_eq!(reason(json!({"kopf.dev/paused": "False"})), None);
        assert_eq!(reason(json!({"kopf.dev/paused-not": "true"})), None);
        assert_eq!(reason(json!({})), None);
    }
}
