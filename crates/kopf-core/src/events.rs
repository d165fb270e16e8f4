//! Kubernetes Events about objects, in the shape Kopf posts them (core/v1, `kopf-event-`
//! names, `source.component`, three timestamps), and a per-object rate limit.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::progress::format_time;

/// The longest message the API accepts.
pub const MAX_MESSAGE: usize = 1024;

/// One event to post.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// `Normal`, `Warning` (Kopf also uses `Error`, `Debug`, `Fatal`).
    pub type_: String,
    /// A short reason, e.g. `Logging`.
    pub reason: String,
    /// The message (cut to the API limit).
    pub message: String,
}

impl EventSpec {
    /// A `Normal` event.
    pub fn info(reason: &str, message: impl Into<String>) -> Self {
        EventSpec {
            type_: "Normal".into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// The `Normal` event of a succeeded handler (only when success events are on).
    pub fn success(handler_id: &str) -> Self {
        EventSpec::info("Success", format!("Handler '{handler_id}' succeeded."))
    }

    /// A `Warning` event.
    pub fn warning(reason: &str, message: impl Into<String>) -> Self {
        EventSpec {
            type_: "Warning".into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Who posts: `reportingComponent`/`source.component` and `reportingInstance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// The component (`kopf`).
    pub component: String,
    /// The instance (`dev`).
    pub instance: String,
}

impl Default for Reporter {
    fn default() -> Self {
        Reporter {
            component: "kopf".into(),
            instance: "dev".into(),
        }
    }
}

/// Cuts a message to the API's limit, keeping its head and tail around `...`.
pub fn cut_message(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    if chars.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let keep = MAX_MESSAGE - 3;
    let head: String = chars[..keep / 2].iter().collect();
    let tail: String = chars[chars.len() - (keep - keep / 2)..].iter().collect();
    format!("{head}...{tail}")
}

/// The namespace and body of `POST /api/v1/namespaces/<ns>/events` about an object;
/// None for core Events themselves (no events about events).
pub fn event_body(
    involved: &Value,
    spec: &EventSpec,
    reporter: &Reporter,
    now: Timestamp,
) -> Option<(String, Value)> {
    let api_version = involved
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = involved.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version == "v1" && kind == "Event" {
        return None;
    }
    let meta = involved.get("metadata").cloned().unwrap_or(json!({}));
    let namespace = meta
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let mut reference = json!({"apiVersion": api_version, "kind": kind, "name": meta.get("name"), "uid": meta.get("uid")});
    if let Some(ns) = meta.get("namespace") {
        reference["namespace"] = ns.clone();
    }
    let t = format_time(now);
    let body = json!({
        "metadata": {"namespace": namespace, "generateName": "kopf-event-"},
        "action": "Action?",
        "type": spec.type_,
        "reason": spec.reason,
        "message": cut_message(&spec.message),
        "reportingComponent": reporter.component,
        "reportingInstance": reporter.instance,
        "source": {"component": reporter.component},
        "involvedObject": reference,
        "firstTimestamp": t,
        "lastTimestamp": t,
        "eventTime": t,
    });
    Some((namespace, body))
}

/// Per-object rate limit: at most one event per object per `interval`; events in between
/// are counted and mentioned in the next one that passes.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    last: HashMap<String, (Instant, u32)>,
}

impl RateLimiter {
    /// A limiter with the minimum interval between events of one object.
    pub fn new(interval: Duration) -> Self {
        RateLimiter {
            interval,
            last: HashMap::new(),
        }
    }

    /// Whether an event about `uid` may go out now; the message gains a note about events
    /// suppressed since the last one.
    pub fn admit(&mut self, uid: &str, spec: &mut EventSpec, now: Instant) -> bool {
        match self.last.get_mut(uid) {
            Some((at, suppressed)) if now.duration_since(*at) < self.interval => {
                *suppressed += 1;
                false
            }
            Some((at, suppressed)) => {
                if *suppressed > 0 {
                    spec.message = format!(
                        "{} ({} similar event(s) suppressed)",
                        spec.message, suppressed
                    );
                }
                *at = now;
                *suppressed = 0;
                true
            }
            None => {
                self.last.insert(uid.to_string(), (now, 0));
                true
            }
        }
    }

    /// Forgets an object (it is gone).
    pub fn forget(&mut self, uid: &str) {
        self.last.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_in_kopfs_shape() {
        let obj = json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "k", "namespace": "ns", "uid": "u"}});
        let now = Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let (ns, body) = event_body(
            &obj,
            &EventSpec::warning("Logging", "boom"),
            &Reporter::default(),
            now,
        )
        .expect("body");
        assert_eq!(ns, "ns");
        assert_eq!(
            body["involvedObject"],
            json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "name": "k", "uid": "u", "namespace": "ns"})
        );
        assert_eq!(body["metadata"]["generateName"], "kopf-event-");
        assert_eq!(body["source"]["component"], "kopf");
        assert_eq!(body["eventTime"], "2027-01-15T08:00:00.000000+00:00");
        let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}});
        assert!(event_body(&ev, &EventSpec::info("x", "y"), &Reporter::default(), now).is_none());
        let long = "x".repeat(3000);
        let cut = cut_message(&long);
        assert_eq!(cut.chars().count(), MAX_MESSAGE);
        assert!(cut.contains("..."));
    }

    #[test]
    fn rate_limit_per_object() {
        let mut rl = RateLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let mut e = EventSpec::warning("r", "m");
        assert!(rl.admit("a", &mut e, t0));
        assert!(!rl.admit("a", &mut e.clone(), t0 + Duration::from_secs(1)));
        assert!(
            rl.admit("b", &mut e.clone(), t0 + Duration::from_secs(1)),
            "other objects are independent"
        );
        let mut later = EventSpec::warning("r", "m");
        assert!(rl.admit("a", &mut later, t0 + Duration::from_secs(11)));
        assert_eq!(later.message, "m (1 similar event(s) suppressed)");
    }
}
