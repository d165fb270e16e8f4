//! Introspection (request log, counters) and fault injection of the fake API server.
//!
//! Everything here is reachable through the Rust API of [`FakeApiServer`](crate::FakeApiServer)
//! and over HTTP under the reserved prefix [`CONTROL_PREFIX`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The reserved path prefix of the control endpoints. It cannot collide with Kubernetes paths.
pub const CONTROL_PREFIX: &str = "/__kopf";

/// What a request was, resolved from its method and path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestTarget {
    /// `get|list|watch|create|update|patch|delete|deletecollection`, or `discovery`,
    /// `openapi`, `version`, `health`, `other`.
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource (`status`, `scale`, ...), empty for none.
    pub subresource: String,
    /// Namespace from the URL, empty for none.
    pub namespace: String,
    /// Object name from the URL, empty for none.
    pub name: String,
}

/// One logged API request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// Arrival order, from 1.
    pub seq: u64,
    /// Arrival time, RFC 3339 with microseconds.
    pub time: String,
    /// Microseconds since the server started, on tokio's clock of the server's runtime (for
    /// latency measurements; under a paused clock, the time the test advanced).
    pub micros: u64,
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The raw query string.
    pub query: String,
    /// User-Agent header.
    pub user_agent: String,
    /// Accept header.
    pub accept: String,
    /// Content-Type header.
    pub content_type: String,
    /// The request body, or its head for large or binary bodies.
    pub body: String,
    /// Response status code (0 while the request is being served: records are written on
    /// arrival, before any effect of the request can be observed).
    pub status: u16,
    /// The patch type for PATCH requests (`merge`, `json`, `strategic`, `apply`).
    pub patch_type: String,
    /// What the request addressed.
    #[serde(flatten)]
    pub target: RequestTarget,
}

/// A counter key: verb × group/version/resource × subresource × patch type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterKey {
    /// The verb.
    pub verb: String,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource, empty for none.
    pub subresource: String,
    /// Patch type for patches, empty otherwise.
    pub patch_type: String,
}

/// Request counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counters {
    /// Counts per key.
    pub by_key: BTreeMap<CounterKey, u64>,
}

impl Counters {
    /// Total number of counted requests.
    pub fn total(&self) -> u64 {
        self.by_key.values().sum()
    }

    /// Requests of one verb (any resource).
    pub fn verb(&self, verb: &str) -> u64 {
        self.by_key
            .iter()
            .filter(|(k, _)| k.verb == verb)
            .map(|(_, v)| v)
            .sum()
    }

    /// Requests of one verb on one resource plural and subresource (`""` for the main resource).
    pub fn get(&self, verb: &str, resource: &str, subresource: &str) -> u64 {
        self.by_key
            .iter()
            .filter(|(k, _)| {
                k.verb == verb && k.resource == resource && k.subresource == subresource
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// Patches of one patch type.
    pub fn patches(&self, patch_type: &str) -> u64 {
        self.by_key
            .iter()
            .filter(|(k, _)| k.verb == "patch" && k.patch_type == patch_type)
            .map(|(_, v)| v)
            .sum()
    }

    /// As JSON rows (for the HTTP endpoint).
    pub fn to_rows(&self) -> Vec<serde_json::Value> {
        self.by_key
            .iter()
            .map(|(k, v)| {
                let mut row = serde_json::to_value(k).unwrap_or_default();
                row["count"] = serde_json::json!(v);
                row
            })
            .collect()
    }
}

/// Which requests a fault or delay applies to. Empty fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestPattern {
    /// Verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`).
    pub verb: Option<String>,
    /// API group.
    pub group: Option<String>,
    /// Plural resource.
    pub resource: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// A part of the User-Agent header (to fault one client of several: one replica).
    pub user_agent: Option<String>,
}

impl RequestPattern {
    /// Matches everything.
    pub fn any() -> Self {
        Self::default()
    }

    /// Sets the verb.
    pub fn verb(mut self, verb: &str) -> Self {
        self.verb = Some(verb.into());
        self
    }

    /// Sets the resource plural.
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Sets the subresource.
    pub fn subresource(mut self, sub: &str) -> Self {
        self.subresource = Some(sub.into());
        self
    }

    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// Sets the object name.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Only requests whose User-Agent contains `part` (e.g. one replica's identity).
    pub fn user_agent(mut self, part: &str) -> Self {
        self.user_agent = Some(part.into());
        self
    }

    /// Whether a request matches (with the User-Agent it came with).
    pub fn matches_request(&self, t: &RequestTarget, user_agent: &str) -> bool {
        self.user_agent
            .as_deref()
            .is_none_or(|part| user_agent.contains(part))
            && self.matches_target(t)
    }

    /// Whether a request matches, not looking at its User-Agent (a pattern that names one
    /// matches nothing here: use [`matches_request`](Self::matches_request)).
    pub fn matches(&self, t: &RequestTarget) -> bool {
        self.user_agent.is_none() && self.matches_target(t)
    }

    fn matches_target(&self, t: &RequestTarget) -> bool {
        let ok = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        ok(&self.verb, &t.verb)
            && ok(&self.group, &t.group)
            && ok(&self.resource, &t.resource)
            && ok(&self.subresource, &t.subresource)
            && ok(&self.namespace, &t.namespace)
            && ok(&self.name, &t.name)
    }
}

/// Answer matching requests with an error instead of serving them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    /// Which requests.
    #[serde(default)]
    pub pattern: RequestPattern,
    /// The HTTP status code (429, 500, 503, ...).
    pub code: u16,
    /// How many requests to fail; `None` = until cleared.
    #[serde(default)]
    pub count: Option<u64>,
    /// Seconds for `Retry-After` and `details.retryAfterSeconds`.
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// The Status message (a default is derived from the code).
    #[serde(default)]
    pub message: Option<String>,
}

impl FaultRule {
    /// A rule failing the next `count` matching requests with `code`.
    pub fn new(pattern: RequestPattern, code: u16, count: u64) -> Self {
        FaultRule {
            pattern,
            code,
            count: Some(count),
            retry_after: None,
            message: None,
        }
    }

    /// Adds a `Retry-After`.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// Whether the rule can be answered: its code is an HTTP error status (400–599).
    ///
    /// ```
    /// use kopf_testing::{FaultRule, RequestPattern};
    /// assert!(FaultRule::new(RequestPattern::any(), 503, 1).check().is_ok());
    /// assert!(FaultRule::new(RequestPattern::any(), 1000, 1).check().is_err());
    /// ```
    pub fn check(&self) -> Result<(), String> {
        if (400..=599).contains(&self.code) {
            Ok(())
        } else {
            Err(format!(
                "code {} is not an HTTP error status: a fault answers with 400 to 599",
                self.code
            ))
        }
    }
}

/// Delay matching requests before answering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LatencyRule {
    /// Which requests.
    #[serde(default)]
    pub pattern: RequestPattern,
    /// The delay in milliseconds.
    pub millis: u64,
}

/// The active faults.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Error answers.
    pub responses: Vec<FaultRule>,
    /// Added latency.
    pub latency: Vec<LatencyRule>,
    /// Next watches to answer with 410: a resource plural, or None for any.
    pub expire_next_watch: Vec<Option<String>>,
    /// Delay before each watch event is delivered.
    pub watch_event_delay: Duration,
}

impl Faults {
    /// Takes the first fault rule matching a request, counting it down.
    pub fn take_response(&mut self, t: &RequestTarget, user_agent: &str) -> Option<FaultRule> {
        let idx = self
            .responses
            .iter()
            .position(|r| r.pattern.matches_request(t, user_agent) && r.count != Some(0))?;
        let rule = self.responses[idx].clone();
        if let Some(c) = self.responses[idx].count.as_mut() {
            *c -= 1;
            if *c == 0 {
                self.responses.remove(idx);
            }
        }
        Some(rule)
    }

    /// The total added latency for a request.
    pub fn latency_for(&self, t: &RequestTarget, user_agent: &str) -> Duration {
        self.latency
            .iter()
            .filter(|l| l.pattern.matches_request(t, user_agent))
            .map(|l| Duration::from_millis(l.millis))
            .sum()
    }

    /// Whether the next watch of `resource` must be expired (consumes the entry).
    pub fn take_expire(&mut self, resource: &str) -> bool {
        let idx = self
            .expire_next_watch
            .iter()
            .position(|r| r.as_deref().is_none_or(|r| r == resource));
        match idx {
            Some(i) => {
                self.expire_next_watch.remove(i);
                true
            }
            None => false,
        }
    }
}

/// A watch stream that is currently open (for introspection).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenWatch {
    /// Watch id.
    pub id: u64,
    /// group/version/plural.
    pub resource: String,
    /// Namespace, empty for all.
    pub namespace: String,
    /// The label selector.
    pub label_selector: String,
    /// The field selector.
    pub field_selector: String,
    /// The shard selector (KEP-5866) the watch honours; empty when none or ignored.
    pub shard_selector: String,
    /// The start resourceVersion as requested.
    pub resource_version: String,
}

/// The request log, the counters and the open watches.
#[derive(Default)]
pub(crate) struct Introspection {
    pub log: Vec<RequestRecord>,
    pub counters: Counters,
    pub seq: u64,
    pub watches: Vec<OpenWatch>,
    pub watch_seq: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(verb: &str, resource: &str) -> RequestTarget {
        RequestTarget {
            verb: verb.into(),
            resource: resource.into(),
            ..Default::default()
        }
    }

    #[test]
    fn fault_rules_count_down() {
        let mut f = Faults::default();
        f.responses
            .push(FaultRule::new(RequestPattern::any().verb("get"), 500, 2));
        assert!(f.take_response(&target("list", "pods"), "").is_none());
        assert!(f.take_response(&target("get", "pods"), "").is_some());
        assert!(f.take_response(&target("get", "pods"), "").is_some());
        assert!(f.take_response(&target("get", "pods"), "").is_none());
    }

    #[test]
    fn expire_entries_match_resource_or_any() {
        let mut f = Faults::default();
        f.expire_next_watch.push(Some("pods".into()));
        assert!(!f.take_expire("configmaps"));
        assert!(f.take_expire("pods"));
        assert!(!f.take_expire("pods"));
        f.expire_next_watch.push(None);
        assert!(f.take_expire("configmaps"));
    }
}
