//! Pod-log handlers: a handler called for each line of a Pod's containers' logs that
//! matches a regex, with the line ([`LogLine`]) and the regex's groups ([`Captures`]).
//!
//! Each matching Pod gets a daemon (no finalizer: it stops when the Pod goes) that follows
//! every container, one stream each (`GET .../log?follow=true&timestamps=true&container=`):
//!
//! - **In order, each line once.** A container's lines are handled one at a time, in order.
//!   The follower keeps a watermark: the timestamp of the last line handled and how many
//!   lines it saw with that timestamp. When a stream ends while the container still runs
//!   (a dropped connection, a kubelet's log rotation, a silent stream past the idle
//!   timeout), it reconnects with `sinceTime` (whole seconds, as the API takes it) and drops
//!   what the watermark has seen: nothing is handled twice, nothing in between is missed.
//! - **Restarts.** A stream also ends when its container restarts: the follower reads the
//!   Pod, and follows the new instance from its first line ([`LogLine::restart`] tells
//!   which instance a line is from).
//! - **Where to start.** A Pod created while the operator runs is read from its
//!   containers' first lines. A Pod that was there before the operator started is read from
//!   the operator's start (its older lines were the previous operator's to handle), unless
//!   [`LogSpec::from_start`] asks for everything.
//! - **Failures.** A handler's error is logged and the next line comes (a line is not
//!   retried: the stream goes on). Failed requests are retried with a growing delay (1 s to
//!   30 s); a Pod that is gone (404) ends its follower.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::AsyncBufReadExt;
use jiff::Timestamp;
use kopf_core::extract::FromCause;
use kopf_core::handler::{Cause, Handler, HandlerError, HandlerResult};
use serde_json::Value;

/// When the first log handler was registered: about when the operator started.
static STARTED: OnceLock<Timestamp> = OnceLock::new();

/// What a pod-log handler follows and matches.
#[derive(Debug, Clone)]
pub struct LogSpec {
    /// The lines handled: those this regex finds a match in.
    pub regex: regex::Regex,
    /// Only these containers (default: all of the Pod's `spec.containers`).
    pub containers: Option<Vec<String>>,
    /// Read every Pod from its containers' first lines, even Pods that were there before
    /// the operator started (default: those from the operator's start).
    pub from_start: bool,
    /// A stream that sends nothing for this long is reconnected (a kubelet's log rotation
    /// can leave a follow stream open and silent). Default: 10 minutes.
    pub idle_timeout: Duration,
}

impl LogSpec {
    /// Lines matching `regex`, in every container.
    ///
    /// ```
    /// let spec = kopf_watch::LogSpec::new(r"accuracy=(?P<acc>\d+\.\d+)").expect("a regex");
    /// assert!(spec.regex.is_match("epoch 3 accuracy=0.93"));
    /// ```
    pub fn new(regex: &str) -> Result<Self, regex::Error> {
        STARTED.get_or_init(Timestamp::now);
        Ok(LogSpec {
            regex: regex::Regex::new(regex)?,
            containers: None,
            from_start: false,
            idle_timeout: Duration::from_secs(600),
        })
    }

    /// Only these containers.
    pub fn containers(mut self, names: &[&str]) -> Self {
        self.containers = Some(names.iter().map(|n| (*n).to_string()).collect());
        self
    }

    /// Read every Pod from its containers' first lines (see [`from_start`](#structfield.from_start)).
    pub fn from_start(mut self) -> Self {
        self.from_start = true;
        self
    }

    /// See [`idle_timeout`](#structfield.idle_timeout).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }
}

/// One matching log line (a handler argument).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub pod: String,
    /// The container.
    pub container: String,
    /// The container instance: its restart count when the line was written (as far as the
    /// operator knows).
    pub restart: u32,
    /// The kubelet's timestamp of the line.
    pub timestamp: Timestamp,
    /// The line, without its timestamp and line end (invalid UTF-8 replaced).
    pub text: String,
}

/// The groups of the regex's match in the line (a handler argument): `get(0)` is the whole
/// match, `get(1)` the first group, `name("acc")` a named one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captures {
    groups: Vec<Option<String>>,
    names: Vec<(String, usize)>,
}

impl Captures {
    fn of(regex: &regex::Regex, text: &str) -> Option<Captures> {
        let caps = regex.captures(text)?;
        Some(Captures {
            groups: caps
                .iter()
                .map(|m| m.map(|m| m.as_str().to_string()))
                .collect(),
            names: regex
                .capture_names()
                .enumerate()
                .filter_map(|(i, n)| n.map(|n| (n.to_string(), i)))
                .collect(),
        })
    }

    /// A group by index (0: the whole match); `None` when it did not take part.
    pub fn get(&self, index: usize) -> Option<&str> {
        self.groups.get(index).and_then(|g| g.as_deref())
    }

    /// A named group.
    pub fn name(&self, name: &str) -> Option<&str> {
        self.names
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, i)| self.get(*i))
    }
}

/// The line and its captures, as the framework hands them to the handler's call.
#[derive(Debug, Clone)]
struct LogMatch(LogLine, Captures);

fn log_match(cause: &Cause) -> Result<&LogMatch, HandlerError> {
    cause.extensions.get::<LogMatch>().ok_or_else(|| {
        HandlerError::permanent("a LogLine or Captures argument is only for pod-log handlers")
    })
}

impl FromCause for LogLine {
    fn reads() -> kopf_core::reads::Reads {
        kopf_core::reads::Reads::nothing()
    }

    fn from_cause(cause: &Cause) -> Result<Self, HandlerError> {
        log_match(cause).map(|m| m.0.clone())
    }
}

impl FromCause for Captures {
    fn reads() -> kopf_core::reads::Reads {
        kopf_core::reads::Reads::nothing()
    }

    fn from_cause(cause: &Cause) -> Result<Self, HandlerError> {
        log_match(cause).map(|m| m.1.clone())
    }
}

/// What the follower of a container has handled: the last line's timestamp, and how many
/// lines it has seen with exactly that timestamp.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Watermark {
    at: Option<Timestamp>,
    count: usize,
}

impl Watermark {
    /// A follower that starts at an instant (the operator's start, for a Pod older than
    /// it): the lines before it, in the second `sinceTime` brings back, are not new.
    fn starting_at(at: Timestamp) -> Self {
        Watermark {
            at: Some(at),
            count: 0,
        }
    }

    /// Whether a line of a stream (re)started at `sinceTime` is new; `seen_at` counts the
    /// lines of this stream with the watermark's timestamp so far.
    fn admit(&mut self, at: Timestamp, seen_at: &mut usize) -> bool {
        match self.at {
            Some(last) if at < last => false,
            Some(last) if at == last => {
                *seen_at += 1;
                if *seen_at <= self.count {
                    return false;
                }
                self.count += 1;
                true
            }
            _ => {
                self.at = Some(at);
                self.count = 1;
                *seen_at = 1;
                true
            }
        }
    }
}

/// A line as `timestamps=true` sends it: `<RFC 3339 time> <text>`.
fn parse_line(raw: &[u8]) -> Option<(Timestamp, String)> {
    let line = String::from_utf8_lossy(raw);
    let line = line.trim_end_matches(['\n', '\r']);
    let (stamp, text) = line.split_once(' ').unwrap_or((line, ""));
    Some((stamp.parse().ok()?, text.to_string()))
}

/// The pod-log handler's daemon: follows the Pod's containers, calls `handler` per
/// matching line. Register it with [`HandlerSpec::daemon`](kopf_core::handler::HandlerSpec::daemon)
/// and no finalizer.
pub fn follower(spec: Arc<LogSpec>, id: String, handler: Arc<dyn Handler>) -> Arc<dyn Handler> {
    Arc::new(move |cause: Cause| {
        let spec = spec.clone();
        let handler = handler.clone();
        let id = id.clone();
        Box::pin(async move { follow_pod(cause, spec, id, handler).await })
            as kopf_core::handler::BoxFuture<HandlerResult>
    })
}

/// The containers to follow, with their restart counts.
fn containers(body: &Value, spec: &LogSpec) -> Vec<(String, u32)> {
    let restarts = |name: &str| {
        body.pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|s| s.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|s| s.get("restartCount").and_then(Value::as_u64))
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    body.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .filter(|n| {
            spec.containers
                .as_ref()
                .is_none_or(|only| only.iter().any(|o| o == n))
        })
        .map(|n| (n.to_string(), restarts(n)))
        .collect()
}

async fn follow_pod(
    cause: Cause,
    spec: Arc<LogSpec>,
    id: String,
    handler: Arc<dyn Handler>,
) -> HandlerResult {
    let Some(client) = cause.extensions.get::<kube::Client>().cloned() else {
        return Err(HandlerError::permanent(
            "no Kubernetes client to read logs with",
        ));
    };
    let stopped = cause.stopped.clone().unwrap_or_default();
    let namespace = cause.namespace().unwrap_or("default").to_string();
    let pod = cause.name().to_string();
    let created: Option<Timestamp> = cause
        .body
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse().ok());
    let started = STARTED.get().copied();
    // A Pod older than the operator: from the operator's start (unless asked otherwise).
    let since = match (spec.from_start, created, started) {
        (false, Some(created), Some(started)) if created < started => Some(started),
        _ => None,
    };
    let mut followers = tokio::task::JoinSet::new();
    for (container, restart) in containers(&cause.body, &spec) {
        let follower = Follower {
            client: client.clone(),
            spec: spec.clone(),
            id: id.clone(),
            handler: handler.clone(),
            cause: cause.clone(),
            namespace: namespace.clone(),
            pod: pod.clone(),
            container,
            restart,
        };
        followers.spawn(follower.run(since));
    }
    tokio::select! {
        _ = stopped.wait() => {}
        () = async { while followers.join_next().await.is_some() {} } => {}
    }
    followers.abort_all();
    Ok(None)
}

/// One container's follower.
struct Follower {
    client: kube::Client,
    spec: Arc<LogSpec>,
    id: String,
    handler: Arc<dyn Handler>,
    cause: Cause,
    namespace: String,
    pod: String,
    container: String,
    restart: u32,
}

/// How a stream ended.
enum Ended {
    /// The stream closed, or went silent for too long: read the Pod, go on.
    Closed,
    /// The request failed: wait, then go on.
    Failed(String),
    /// The Pod is gone.
    Gone,
}

impl Follower {
    async fn run(mut self, mut since: Option<Timestamp>) {
        let mut watermark = since.map_or_else(Watermark::default, Watermark::starting_at);
        let mut delay = Duration::from_secs(1);
        loop {
            let from = watermark.at.or(since).map(floor_to_second);
            let before = watermark;
            match self.stream(from, &mut watermark).await {
                Ended::Gone => return,
                Ended::Failed(why) => {
                    tracing::warn!(
                        "Log handler '{}': the log of {}/{} ({}) cannot be read: {why}; retrying in {}s.",
                        self.id,
                        self.pod,
                        self.container,
                        self.namespace,
                        delay.as_secs()
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
                Ended::Closed => {
                    // Has the container restarted? (Then its new instance, from its start.)
                    match self.current_restart().await {
                        Ok(None) => return,
                        Ok(Some(restart)) if restart != self.restart => {
                            self.restart = restart;
                            watermark = Watermark::default();
                            since = None;
                            delay = Duration::from_secs(1);
                        }
                        Ok(Some(_)) if watermark == before => {
                            // Nothing new: a terminated container's stream ends at once.
                            // Wait longer each time (up to 30 s): a finished Pod costs a
                            // request now and then, not a loop.
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(30));
                        }
                        Ok(Some(_)) => delay = Duration::from_secs(1),
                        Err(why) => {
                            tracing::warn!(
                                "Log handler '{}': cannot read the Pod {}/{}: {why}",
                                self.id,
                                self.namespace,
                                self.pod
                            );
                            tokio::time::sleep(delay).await;
                        }
                    }
                }
            }
        }
    }

    /// The container's restart count now (None: the Pod is gone).
    async fn current_restart(&self) -> Result<Option<u32>, String> {
        let request = http::Request::get(format!(
            "/api/v1/namespaces/{}/pods/{}",
            self.namespace, self.pod
        ))
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
        match self.client.request::<Value>(request).await {
            Ok(body) => Ok(Some(
                containers(&body, &self.spec)
                    .into_iter()
                    .find(|(c, _)| *c == self.container)
                    .map_or(self.restart, |(_, r)| r),
            )),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// One follow stream, from `since`: each new matching line handled.
    async fn stream(&self, since: Option<Timestamp>, watermark: &mut Watermark) -> Ended {
        let mut url = format!(
            "/api/v1/namespaces/{}/pods/{}/log?follow=true&timestamps=true&container={}",
            self.namespace, self.pod, self.container
        );
        if let Some(since) = since {
            url.push_str(&format!(
                "&sinceTime={}",
                since.strftime("%Y-%m-%dT%H:%M:%SZ")
            ));
        }
        let request = match http::Request::get(url).body(Vec::new()) {
            Ok(r) => r,
            Err(e) => return Ended::Failed(e.to_string()),
        };
        let mut reader = match self.client.request_stream(request).await {
            Ok(r) => Box::pin(r),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ended::Gone,
            Err(e) => return Ended::Failed(e.to_string()),
        };
        let mut seen_at = 0;
        let mut raw = Vec::new();
        loop {
            raw.clear();
            let read =
                tokio::time::timeout(self.spec.idle_timeout, reader.read_until(b'\n', &mut raw))
                    .await;
            match read {
                Err(_) | Ok(Ok(0)) => return Ended::Closed,
                Ok(Err(e)) => return Ended::Failed(e.to_string()),
                Ok(Ok(_)) if !raw.ends_with(b"\n") => return Ended::Closed,
                Ok(Ok(_)) => {}
            }
            let Some((at, text)) = parse_line(&raw) else {
                continue;
            };
            if !watermark.admit(at, &mut seen_at) {
                continue;
            }
            if let Some(captures) = Captures::of(&self.spec.regex, &text) {
                self.handle(
                    LogLine {
                        namespace: self.namespace.clone(),
                        pod: self.pod.clone(),
                        container: self.container.clone(),
                        restart: self.restart,
                        timestamp: at,
                        text,
                    },
                    captures,
                )
                .await;
            }
        }
    }

    async fn handle(&self, line: LogLine, captures: Captures) {
        let mut cause = self.cause.clone();
        cause.extensions.insert(LogMatch(line, captures));
        if let Err(e) = self.handler.call(cause).await {
            tracing::warn!(
                "Log handler '{}' failed for a line of {}/{} ({}): {e}",
                self.id,
                self.pod,
                self.container,
                self.namespace
            );
        }
    }
}

fn floor_to_second(at: Timestamp) -> Timestamp {
    Timestamp::from_second(at.as_second()).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn the_watermark_drops_what_a_reconnection_sends_again() {
        let mut w = Watermark::default();
        let mut seen = 0;
        // First stream: a, b, c at the same instant, then d.
        let first = [
            "2026-01-01T00:00:01.5Z",
            "2026-01-01T00:00:01.5Z",
            "2026-01-01T00:00:01.5Z",
        ];
        assert!(first.iter().all(|t| w.admit(at(t), &mut seen)));
        // The stream drops; the reconnection from the second before sends them again, and
        // an earlier line of that second, then one more at the same instant and a later one.
        let mut seen = 0;
        let again = [
            ("2026-01-01T00:00:01.1Z", false),
            ("2026-01-01T00:00:01.5Z", false),
            ("2026-01-01T00:00:01.5Z", false),
            ("2026-01-01T00:00:01.5Z", false),
            ("2026-01-01T00:00:01.5Z", true),
            ("2026-01-01T00:00:02Z", true),
        ];
        for (t, new) in again {
            assert_eq!(w.admit(at(t), &mut seen), new, "{t}");
        }
        assert_eq!(
            floor_to_second(at("2026-01-01T00:00:01.5Z")),
            at("2026-01-01T00:00:01Z")
        );
    }

    #[test]
    fn a_follower_from_the_operators_start_drops_the_earlier_lines_of_that_second() {
        let mut w = Watermark::starting_at(at("2026-01-01T00:00:01.5Z"));
        let mut seen = 0;
        // `sinceTime` is the whole second: its earlier lines come too.
        for (t, new) in [
            ("2026-01-01T00:00:01.1Z", false),
            ("2026-01-01T00:00:01.5Z", true),
            ("2026-01-01T00:00:01.7Z", true),
        ] {
            assert_eq!(w.admit(at(t), &mut seen), new, "{t}");
        }
    }

    #[test]
    fn lines_and_captures() {
        let (ts, text) =
            parse_line(b"2026-01-01T00:00:01.123456789Z accuracy=0.93 ok\r\n").expect("a line");
        assert_eq!(ts, at("2026-01-01T00:00:01.123456789Z"));
        assert_eq!(text, "accuracy=0.93 ok");
        assert_eq!(parse_line(b"no timestamp\n"), None);
        let lossy = parse_line(b"2026-01-01T00:00:01Z bad \xff byte\n").expect("a line");
        assert_eq!(lossy.1, "bad \u{fffd} byte");
        let spec = LogSpec::new(r"accuracy=(?P<acc>\d+\.\d+)(x)?").expect("regex");
        let caps = Captures::of(&spec.regex, &text).expect("matches");
        assert_eq!(caps.get(0), Some("accuracy=0.93"));
        assert_eq!(caps.get(1), Some("0.93"));
        assert_eq!(caps.name("acc"), Some("0.93"));
        assert_eq!(caps.get(2), None, "an optional group that did not match");
        assert!(Captures::of(&spec.regex, "loss=1").is_none());
    }

    #[test]
    fn containers_come_from_the_spec_with_their_restarts() {
        let body = serde_json::json!({
            "spec": {"containers": [{"name": "main"}, {"name": "side"}]},
            "status": {"containerStatuses": [{"name": "side", "restartCount": 2}]},
        });
        let spec = LogSpec::new("x").expect("regex");
        assert_eq!(
            containers(&body, &spec),
            [("main".into(), 0), ("side".into(), 2)]
        );
        let only = spec.containers(&["side"]);
        assert_eq!(containers(&body, &only), [("side".into(), 2)]);
    }
}
