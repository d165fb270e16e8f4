//! Kubernetes Events about objects, in the shape Kopf posts them (core/v1, `kopf-event-`
//! names, `source.component`, three timestamps), and a per-object rate limit.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

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

/// The text of a handler failure, for logs and events: Kopf's "Handler 'x' failed
/// temporarily: ..." unless the message already names the handler (retry limits, timeouts).
pub fn failure_message(handler_id: &str, message: &str, retrying: bool) -> String {
    if message.starts_with("Handler '") {
        return message.to_string();
    }
    let how = if retrying {
        "temporarily"
    } else {
        "permanently"
    };
    format!("Handler '{handler_id}' failed {how}: {message}")
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

/// Per-object rate limit, a token bucket: up to `burst` events at once, then one per
/// `interval`; events refused meanwhile are counted and mentioned in the next one that
/// passes.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    burst: u32,
    objects: HashMap<String, Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
    suppressed: u32,
}

impl RateLimiter {
    /// A limiter of one event per object per `interval` (no burst).
    pub fn new(interval: Duration) -> Self {
        Self::with_burst(interval, 1)
    }

    /// A limiter of `burst` events per object at once, then one per `interval`.
    pub fn with_burst(interval: Duration, burst: u32) -> Self {
        RateLimiter {
            interval,
            burst: burst.max(1),
            objects: HashMap::new(),
        }
    }

    /// Whether an event about `uid` may go out now; the message gains a note about events
    /// suppressed since the last one.
    pub fn admit(&mut self, uid: &str, spec: &mut EventSpec, now: Instant) -> bool {
        let burst = f64::from(self.burst);
        let bucket = self.objects.entry(uid.to_string()).or_insert(Bucket {
            tokens: burst,
            refilled: now,
            suppressed: 0,
        });
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        let per_token = self.interval.as_secs_f64().max(f64::EPSILON);
        bucket.tokens = (bucket.tokens + elapsed / per_token).min(burst);
        bucket.refilled = now;
        if bucket.tokens < 1.0 {
            bucket.suppressed += 1;
            return false;
        }
        bucket.tokens -= 1.0;
        if bucket.suppressed > 0 {
            spec.message = format!(
                "{} ({} similar event(s) suppressed)",
                spec.message, bucket.suppressed
            );
            bucket.suppressed = 0;
        }
        true
    }

    /// Forgets an object (it is gone).
    pub fn forget(&mut self, uid: &str) {
        self.objects.remove(uid);
    }
}

/// Folds the framework's own warnings of one cycle (reason `Logging`, e.g. several handlers
/// failing at once) into one event; the handlers' own events are kept as they are.
pub fn aggregate(events: Vec<EventSpec>) -> Vec<EventSpec> {
    let mut out: Vec<EventSpec> = Vec::with_capacity(events.len());
    for e in events {
        match out
            .iter_mut()
            .find(|o| o.reason == "Logging" && o.reason == e.reason && o.type_ == e.type_)
        {
            Some(first) => {
                first.message.push_str("; ");
                first.message.push_str(&e.message);
            }
            None => out.push(e),
        }
    }
    out
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

    #[test]
    fn bursts_then_one_per_interval() {
        let mut rl = RateLimiter::with_burst(Duration::from_secs(10), 3);
        let t0 = Instant::now();
        let admitted: Vec<bool> = (0..5)
            .map(|_| rl.admit("a", &mut EventSpec::info("r", "m"), t0))
            .collect();
        assert_eq!(admitted, vec![true, true, true, false, false]);
        assert!(!rl.admit(
            "a",
            &mut EventSpec::info("r", "m"),
            t0 + Duration::from_secs(5)
        ));
        let mut next = EventSpec::info("r", "m");
        assert!(rl.admit("a", &mut next, t0 + Duration::from_secs(10)));
        assert_eq!(next.message, "m (3 similar event(s) suppressed)");
    }

    #[test]
    fn one_cycle_of_failures_is_one_event() {
        let folded = aggregate(vec![
            EventSpec::warning("Logging", "Handler 'a' failed temporarily: x"),
            EventSpec::info("Greeting", "hi"),
            EventSpec::warning("Logging", "Handler 'b' failed permanently: y"),
            EventSpec::info("Greeting", "again"),
        ]);
        assert_eq!(
            folded,
            vec![
                EventSpec::warning(
                    "Logging",
                    "Handler 'a' failed temporarily: x; Handler 'b' failed permanently: y"
                ),
                EventSpec::info("Greeting", "hi"),
                EventSpec::info("Greeting", "again"),
            ]
        );
    }
}
