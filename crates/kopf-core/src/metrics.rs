//! The operator's metrics (Prometheus text format) and the health of its watch streams.
//!
//! One [`Metrics`] per operator: the handler stack counts calls, durations, outcomes and
//! retries ([`MetricsLayer`]); the engines report queue depth, tracked objects, watch
//! restarts and whether their watch streams are alive; the API client counts requests by
//! verb and status code. [`Metrics::encode`] renders all of it for a `/metrics` endpoint.
//!
//! ```
//! use kopf_core::metrics::Metrics;
//!
//! let metrics = Metrics::new();
//! metrics.api_request("list", 200);
//! metrics.watch_failed("kopfexamples");
//! let text = metrics.encode();
//! assert!(text.contains(r#"kopf_api_requests_total{verb="list",code="200"} 1"#));
//! assert!(text.contains(r#"kopf_watch_restarts_total{resource="kopfexamples"} 1"#));
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

use crate::handler::error::HandlerError;
use crate::handler::spec::BoxFuture;
use crate::layers::{CallOutcome, HandlerCall, HandlerService};

type Labels = Vec<(&'static str, String)>;

/// Consecutive failures after which a watch stream counts as dead.
const DEAD_AFTER_FAILURES: u32 = 3;

/// The operator's metrics and watch health; cheap to clone (shared).
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

struct Inner {
    registry: Registry,
    handler_calls: Family<Labels, Counter>,
    handler_duration: Family<Labels, Histogram>,
    handler_retries: Family<Labels, Counter>,
    queue_depth: Family<Labels, Gauge>,
    objects: Family<Labels, Gauge>,
    paused: Family<Labels, Gauge>,
    own_write_seen: Family<Labels, Histogram>,
    convergence: Family<Labels, Histogram>,
    api_requests: Family<Labels, Counter>,
    api_retries: Family<Labels, Counter>,
    write_failures: Family<Labels, Counter>,
    watch_restarts: Family<Labels, Counter>,
    leader: Family<Labels, Gauge>,
    leader_transitions: Family<Labels, Counter>,
    leader_renew_failures: Family<Labels, Counter>,
    /// Leader election's state per lease (`true`: leading), for the health endpoint.
    leadership: Mutex<HashMap<String, bool>>,
    watches: Mutex<HashMap<String, WatchHealth>>,
    dead_window: Duration,
}

impl Inner {
    /// Registers the families under their names (after the `kopf_` prefix), in the order
    /// they are exposed.
    fn register(&mut self) {
        self.registry.register(
            "leader_is_leader",
            "Whether this replica holds the leader-election lease (1) or stands by (0)",
            self.leader.clone(),
        );
        self.registry.register(
            "leader_transitions",
            "Times this replica became the leader",
            self.leader_transitions.clone(),
        );
        self.registry.register(
            "leader_renew_failures",
            "Failed attempts of the leader to renew its lease",
            self.leader_renew_failures.clone(),
        );
        self.registry.register(
            "handler_calls",
            "Handler calls by handler id, resource kind and outcome (success, temporary, permanent, error)",
            self.handler_calls.clone(),
        );
        self.registry.register(
            "handler_duration_seconds",
            "Duration of handler calls",
            self.handler_duration.clone(),
        );
        self.registry.register(
            "handler_retries",
            "Handler calls that were retries of an earlier failed attempt",
            self.handler_retries.clone(),
        );
        self.registry.register(
            "queue_depth",
            "Objects with a change that no worker has picked up yet",
            self.queue_depth.clone(),
        );
        self.registry.register(
            "objects_tracked",
            "Objects the operator knows (with a worker or idle)",
            self.objects.clone(),
        );
        self.registry.register(
            "objects_paused",
            "Objects left alone because they carry the pause annotation",
            self.paused.clone(),
        );
        self.registry.register(
            "convergence_seconds",
            "Time from the operator first seeing a change of an object (its creation, an update, its deletion; resume at the start) to its handlers' success being stored, by resource and cause",
            self.convergence.clone(),
        );
        self.registry.register(
            "own_write_seen_seconds",
            "Time from the operator's own write of an object to its watch showing it (outcome=seen: a state of that resourceVersion or newer) or to giving up waiting (outcome=timeout: the object is read, or its older state processed)",
            self.own_write_seen.clone(),
        );
        self.registry.register(
            "api_requests",
            "Requests to the Kubernetes API by verb and HTTP status code",
            self.api_requests.clone(),
        );
        self.registry.register(
            "api_retries",
            "Requests to the Kubernetes API sent again after a transient failure, by verb and the failure's HTTP status code (0: no answer)",
            self.api_retries.clone(),
        );
        self.registry.register(
            "write_failures",
            "Writes of the operator's state (object, status) that failed for good, by endpoint and HTTP status code (0: no answer)",
            self.write_failures.clone(),
        );
        self.registry.register(
            "watch_restarts",
            "Failures of watch streams (each is followed by a reconnection)",
            self.watch_restarts.clone(),
        );
    }
}

/// What is known about one resource's watch stream.
#[derive(Clone, Debug, Default)]
struct WatchHealth {
    /// Failures since the last successful event.
    failures: u32,
    last_failure: Option<Instant>,
    /// The engine has stopped (it is not restarted).
    ended: bool,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Buckets up to an hour: convergence includes retries and their backoff.
fn long_histogram() -> Histogram {
    Histogram::new([
        0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
        3600.0,
    ])
}

fn histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

impl Metrics {
    /// Empty metrics; a watch stream is dead after 3 failures in a row, the last of them
    /// less than 60 s ago.
    pub fn new() -> Self {
        Metrics::with_dead_window(Duration::from_secs(60))
    }

    /// Like [`new`](Self::new), with another window for the last failure of a dead watch.
    pub fn with_dead_window(dead_window: Duration) -> Self {
        let mut inner = Inner {
            registry: Registry::with_prefix("kopf"),
            handler_calls: Family::default(),
            handler_duration: Family::new_with_constructor(histogram as fn() -> Histogram),
            handler_retries: Family::default(),
            queue_depth: Family::default(),
            objects: Family::default(),
            paused: Family::default(),
            own_write_seen: Family::new_with_constructor(histogram as fn() -> Histogram),
            convergence: Family::new_with_constructor(long_histogram as fn() -> Histogram),
            api_requests: Family::default(),
            api_retries: Family::default(),
            write_failures: Family::default(),
            watch_restarts: Family::default(),
            leader: Family::default(),
            leader_transitions: Family::default(),
            leader_renew_failures: Family::default(),
            leadership: Mutex::default(),
            watches: Mutex::default(),
            dead_window,
        };
        inner.register();
        Metrics(Arc::new(inner))
    }

    /// The metrics in Prometheus' text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String does not fail.
        let _ = encode(&mut text, &self.0.registry);
        text
    }

    /// One handler call ended.
    pub fn handler_call(
        &self,
        handler: &str,
        resource: &str,
        outcome: &'static str,
        retry: bool,
        took: Duration,
    ) {
        let base = || {
            vec![
                ("handler", handler.to_string()),
                ("resource", resource.to_string()),
            ]
        };
        let mut labels = base();
        labels.push(("outcome", outcome.to_string()));
        self.0.handler_calls.get_or_create(&labels).inc();
        self.0
            .handler_duration
            .get_or_create(&base())
            .observe(took.as_secs_f64());
        if retry {
            self.0.handler_retries.get_or_create(&base()).inc();
        }
    }

    /// One API request got an answer (`code` 0: no answer, a connection error).
    pub fn api_request(&self, verb: &str, code: u16) {
        let labels = vec![("verb", verb.to_string()), ("code", code.to_string())];
        self.0.api_requests.get_or_create(&labels).inc();
    }

    /// A request failed transiently and is sent again (`code` 0: no answer).
    pub fn api_retry(&self, verb: &str, code: u16) {
        let labels = vec![("verb", verb.to_string()), ("code", code.to_string())];
        self.0.api_retries.get_or_create(&labels).inc();
    }

    /// A write of the operator's state failed for good: `endpoint` is `object` or `status`
    /// (`code` 0: no answer).
    pub fn write_failure(&self, endpoint: &str, code: u16) {
        let labels = vec![
            ("endpoint", endpoint.to_string()),
            ("code", code.to_string()),
        ];
        self.0.write_failures.get_or_create(&labels).inc();
    }

    /// The number of objects waiting for a worker of `resource` changed by `delta`.
    pub fn queue(&self, resource: &str, delta: i64) {
        let labels = vec![("resource", resource.to_string())];
        self.0.queue_depth.get_or_create(&labels).inc_by(delta);
    }

    /// The number of objects of `resource` the operator knows changed by `delta`.
    pub fn tracked(&self, resource: &str, delta: i64) {
        let labels = vec![("resource", resource.to_string())];
        self.0.objects.get_or_create(&labels).inc_by(delta);
    }

    /// The number of paused objects of `resource` (see the pause annotation) changed by
    /// `delta`.
    pub fn paused(&self, resource: &str, delta: i64) {
        let labels = vec![("resource", resource.to_string())];
        self.0.paused.get_or_create(&labels).inc_by(delta);
    }

    /// A change of an object of `resource` (`cause`: create, update, delete, resume) was
    /// handled, and that stored, `took` after the operator first saw it.
    pub fn converged(&self, resource: &str, cause: &str, took: Duration) {
        let labels = vec![
            ("resource", resource.to_string()),
            ("cause", cause.to_string()),
        ];
        self.0
            .convergence
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// The watch of `resource` showed the operator's own write after `waited` (`seen`), or
    /// the operator stopped waiting for it then (not `seen`).
    pub fn own_write(&self, resource: &str, waited: Duration, seen: bool) {
        let outcome = if seen { "seen" } else { "timeout" };
        let labels = vec![
            ("resource", resource.to_string()),
            ("outcome", outcome.to_string()),
        ];
        self.0
            .own_write_seen
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
    }

    /// This replica leads (`true`) or stands by for the lease `lease` (`namespace/name`).
    pub fn leadership(&self, lease: &str, leading: bool) {
        let labels = vec![("lease", lease.to_string())];
        self.0.leader.get_or_create(&labels).set(i64::from(leading));
        self.0
            .leadership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(lease.to_string(), leading);
    }

    /// This replica became the leader of `lease`.
    pub fn leader_transition(&self, lease: &str) {
        let labels = vec![("lease", lease.to_string())];
        self.0.leader_transitions.get_or_create(&labels).inc();
    }

    /// The leader failed an attempt to renew `lease`.
    pub fn leader_renew_failure(&self, lease: &str) {
        let labels = vec![("lease", lease.to_string())];
        self.0.leader_renew_failures.get_or_create(&labels).inc();
    }

    /// Leader election's state per lease: `leading` or `standby` (empty without leader
    /// election).
    pub fn leaderships(&self) -> Vec<(String, &'static str)> {
        let all = self.0.leadership.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<(String, &'static str)> = all
            .iter()
            .map(|(lease, leading)| (lease.clone(), if *leading { "leading" } else { "standby" }))
            .collect();
        all.sort();
        all
    }

    /// The watch stream of `resource` delivered something: it is alive.
    pub fn watch_alive(&self, resource: &str) {
        let mut watches = self.0.watches.lock().unwrap_or_else(|e| e.into_inner());
        let w = watches.entry(resource.to_string()).or_default();
        w.failures = 0;
        w.ended = false;
    }

    /// The watch stream of `resource` failed (it reconnects with a backoff).
    pub fn watch_failed(&self, resource: &str) {
        let labels = vec![("resource", resource.to_string())];
        self.0.watch_restarts.get_or_create(&labels).inc();
        let mut watches = self.0.watches.lock().unwrap_or_else(|e| e.into_inner());
        let w = watches.entry(resource.to_string()).or_default();
        w.failures += 1;
        w.last_failure = Some(Instant::now());
    }

    /// The watch stream of `resource` has ended for good (not at shutdown).
    pub fn watch_ended(&self, resource: &str) {
        let mut watches = self.0.watches.lock().unwrap_or_else(|e| e.into_inner());
        watches.entry(resource.to_string()).or_default().ended = true;
    }

    /// The resources whose watch streams are dead: ended, or failed 3 times in a row with
    /// the last failure within the window (a stream that failed once and reconnected
    /// quietly is alive).
    pub fn dead_watches(&self) -> Vec<String> {
        let watches = self.0.watches.lock().unwrap_or_else(|e| e.into_inner());
        let mut dead: Vec<String> = watches
            .iter()
            .filter(|(_, w)| {
                w.ended
                    || (w.failures >= DEAD_AFTER_FAILURES
                        && w.last_failure
                            .is_some_and(|t| t.elapsed() < self.0.dead_window))
            })
            .map(|(r, _)| r.clone())
            .collect();
        dead.sort();
        dead
    }
}

/// A handler-stack layer (the facade puts it around the attempt, innermost of the user
/// layers there) that counts every attempt in [`Metrics`].
#[derive(Clone, Debug)]
pub struct MetricsLayer(pub Metrics);

impl Layer<HandlerService> for MetricsLayer {
    type Service = MetricsService;

    fn layer(&self, inner: HandlerService) -> MetricsService {
        MetricsService {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// The service of [`MetricsLayer`].
#[derive(Clone)]
pub struct MetricsService {
    inner: HandlerService,
    metrics: Metrics,
}

impl Service<HandlerCall> for MetricsService {
    type Response = CallOutcome;
    type Error = Infallible;
    type Future = BoxFuture<Result<CallOutcome, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        let handler = call.spec.id.clone();
        let resource = call
            .cause
            .body
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        let retry = call.record.retries.unwrap_or(0) > 0;
        let metrics = self.metrics.clone();
        let inner = self.inner.call(call);
        Box::pin(async move {
            let started = Instant::now();
            let outcome = inner.await?;
            let label = match &outcome.result {
                Ok(_) => "success",
                Err(HandlerError::Temporary { .. }) => "temporary",
                Err(HandlerError::Permanent { .. } | HandlerError::Admission { .. }) => "permanent",
                Err(HandlerError::Other { .. }) => "error",
            };
            metrics.handler_call(&handler, &resource, label, retry, started.elapsed());
            Ok(outcome)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let m = Metrics::new();
        m.handler_call(
            "create_fn",
            "KopfExample",
            "success",
            false,
            Duration::from_millis(20),
        );
        m.handler_call(
            "create_fn",
            "KopfExample",
            "temporary",
            true,
            Duration::from_millis(5),
        );
        m.queue("kopfexamples", 2);
        m.queue("kopfexamples", -1);
        m.tracked("kopfexamples", 3);
        let text = m.encode();
        for line in [
            "# TYPE kopf_handler_calls counter",
            r#"kopf_handler_calls_total{handler="create_fn",resource="KopfExample",outcome="success"} 1"#,
            r#"kopf_handler_calls_total{handler="create_fn",resource="KopfExample",outcome="temporary"} 1"#,
            "# TYPE kopf_handler_duration_seconds histogram",
            r#"kopf_handler_duration_seconds_count{handler="create_fn",resource="KopfExample"} 2"#,
            r#"kopf_handler_retries_total{handler="create_fn",resource="KopfExample"} 1"#,
            r#"kopf_queue_depth{resource="kopfexamples"} 1"#,
            r#"kopf_objects_tracked{resource="kopfexamples"} 3"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
    }

    #[test]
    fn a_watch_is_dead_after_failures_in_a_row_and_alive_after_an_event() {
        let m = Metrics::new();
        m.watch_failed("a");
        m.watch_failed("a");
        assert!(m.dead_watches().is_empty(), "two failures are a blip");
        m.watch_failed("a");
        assert_eq!(m.dead_watches(), vec!["a"]);
        m.watch_alive("a");
        assert!(m.dead_watches().is_empty());
        let quick = Metrics::with_dead_window(Duration::ZERO);
        for _ in 0..5 {
            quick.watch_failed("b");
        }
        assert!(quick.dead_watches().is_empty(), "the failures are too old");
        quick.watch_ended("b");
        assert_eq!(quick.dead_watches(), vec!["b"]);
    }
}
