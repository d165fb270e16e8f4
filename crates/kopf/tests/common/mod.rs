//! The harness shared by the integration tests: the example CRD and object, an operator
//! running against a fake API server, waiting, and the operator's own requests.

#![allow(dead_code)]

use std::time::Duration;

use kopf::Operator;
use kopf_testing::{FakeApiServer, RequestRecord};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn example_file(name: &str) -> Value {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `examples/crd.yaml`: KopfExample, kopf.dev/v1, status subresource, short names.
pub fn crd() -> Value {
    example_file("crd.yaml")
}

/// `examples/obj.yaml`: kopf-example-1 in `default`.
pub fn example_object() -> DynamicObject {
    serde_json::from_value(example_file("obj.yaml")).expect("obj.yaml is a KopfExample")
}

/// A KopfExample with a name and a spec.
pub fn obj(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": name}, "spec": spec}))
    .expect("obj")
}

/// A fake API server with the example CRD.
/// An object handled before the operator started (its diff-base says `spec`): its first
/// state is a resume, with no creation.
#[allow(dead_code)]
pub fn handled(name: &str, spec: Value) -> DynamicObject {
    let mut o = obj(name, spec.clone());
    o.metadata.annotations = Some(
        [(
            "kopf.zalando.org/last-handled-configuration".to_string(),
            format!("{}\n", json!({"spec": spec})),
        )]
        .into(),
    );
    o
}

/// Creates `count` new objects, `new-000`, `new-001`... (listed in that order).
#[allow(dead_code)]
pub async fn create_new(api: &Api<DynamicObject>, count: u32) {
    for i in 0..count {
        api.create(
            &kube::api::PostParams::default(),
            &obj(&format!("new-{i:03}"), json!({"field": "x"})),
        )
        .await
        .expect("create");
    }
}

pub async fn server() -> FakeApiServer {
    let s = FakeApiServer::start().await.expect("start");
    s.apply_object(crd()).expect("crd");
    s
}

/// A fake API server in process with the example CRD: an operator started against it runs
/// on the test's own runtime, for tests under a paused clock
/// (`#[tokio::test(start_paused = true)]`) that wait with [`Running::settled`].
pub async fn paused_server() -> FakeApiServer {
    let s = FakeApiServer::in_process().await.expect("start");
    s.apply_object(crd()).expect("crd");
    s
}

/// KopfExamples in `default`, through the test's own client.
pub fn kex_api(server: &FakeApiServer) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(server.client(), "default", &ar)
}

/// The client an operator builds for itself (kopf-rs User-Agent, inactivity timeout).
pub async fn operator_client(server: &FakeApiServer, inactivity: Duration) -> kube::Client {
    let config = kopf::config::client_config(Some(&server.url()), inactivity)
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// An operator on the test's own runtime (so that a paused clock is its clock), with
/// kopf's defaults otherwise.
#[allow(dead_code)]
pub async fn start_here(server: &FakeApiServer, operator: Operator) -> kopf::testing::Running {
    kopf::testing::OperatorTest::new(operator)
        .on_current_runtime(true)
        .start(server)
        .await
        .expect("the operator starts")
}

/// An operator running in the background (on `kopf::testing`'s public runner), with the
/// production settings the engine's tests check (Kopf's 60 s backoff and error delays) and
/// the bare client (every injected failure reaches the engine).
pub struct Running(kopf::testing::Running);

impl Running {
    /// Starts the operator and waits until it watches (a watch request after the start).
    pub async fn start(server: &FakeApiServer, op: Operator) -> Running {
        Self::start_with(server, op, Duration::from_secs(70), true).await
    }

    /// Starts the operator with a client inactivity timeout; waits for a watch if asked.
    pub async fn start_with(
        server: &FakeApiServer,
        op: Operator,
        inactivity: Duration,
        wait_for_watch: bool,
    ) -> Running {
        let delays = kopf_core::throttle::KOPF_ERROR_DELAYS
            .iter()
            .map(|s| Duration::from_secs(*s))
            .collect();
        let running = kopf::testing::OperatorTest::new(op.inactivity_timeout(inactivity))
            .backoff(Duration::from_secs(60))
            .error_delays(delays)
            .client_retries(false)
            .wait_for_watch(wait_for_watch)
            .on_current_runtime(server.is_in_process())
            .start(server)
            .await
            .expect("the operator starts");
        Running(running)
    }

    /// The operator's log lines of a level (`WARN`, `ERROR`) that contain `text`.
    pub fn logged_at(&self, level: &str, text: &str) -> Vec<String> {
        self.0.logged_at(level, text)
    }

    /// The operator's log lines so far.
    pub fn logs(&self) -> Vec<String> {
        self.0.logs()
    }

    /// Waits until the operator is idle (on a [`paused_server`], under a paused clock).
    pub async fn settled(&self) -> kopf::testing::Settled {
        self.0.settled().await.expect("the operator settles")
    }

    /// Runs `duration` of operator time at once, then waits until the operator is idle.
    pub async fn advance(&self, duration: Duration) -> kopf::testing::Settled {
        self.0
            .advance(duration)
            .await
            .expect("the operator settles")
    }

    /// Kills the operator (no graceful stop); returns once nothing of it runs.
    #[allow(dead_code)] // not every test file kills
    pub fn kill(self) {
        self.0.kill();
    }

    /// Stops the operator; it must have run without error.
    pub async fn stop(self) {
        self.0.stop().await.expect("the operator ran");
    }

    /// Waits for the operator to end by itself and returns its result.
    pub async fn result(self) -> Result<(), kopf::Error> {
        self.0.finished().await
    }
}

/// Polls `check` every 25 ms for up to 20 s.
pub async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..800 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Waits until the object (None: gone) satisfies `check`.
pub async fn until_object(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    check: impl Fn(Option<&DynamicObject>) -> bool,
) {
    eventually(what, async || {
        check(api.get_opt(name).await.expect("get").as_ref())
    })
    .await;
}

/// Waits until the operator has sent nothing for 300 ms (at most 10 s): the writes of the
/// cycle in progress (e.g. the `/status` PATCH after the object's) have all arrived.
pub async fn settle(server: &FakeApiServer) {
    let mut seen = operator_requests(server).len();
    for _ in 0..33 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = operator_requests(server).len();
        if now == seen {
            return;
        }
        seen = now;
    }
}

/// The requests the operator sent (by its User-Agent).
pub fn operator_requests(server: &FakeApiServer) -> Vec<RequestRecord> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.user_agent == kopf::config::USER_AGENT)
        .collect()
}

/// The operator's writes, as method, path, patch type and body, with resourceVersions and
/// timestamps replaced by placeholders (for snapshots).
pub fn writes(server: &FakeApiServer) -> Vec<Value> {
    operator_requests(server)
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| {
            let mut body: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
            normalise(&mut body);
            json!({"method": r.method, "path": r.path, "patch": r.patch_type, "body": body})
        })
        .collect()
}

/// Replaces what changes from run to run: resourceVersions in JSON-patch tests, times, uids.
fn normalise(v: &mut Value) {
    match v {
        Value::Array(items) => {
            for item in items.iter_mut() {
                if item["op"] == "test" && item["path"] == "/metadata/resourceVersion" {
                    item["value"] = json!("<rv>");
                }
                normalise(item);
            }
        }
        Value::Object(m) => {
            for (k, item) in m.iter_mut() {
                let is_time = matches!(
                    k.as_str(),
                    "firstTimestamp"
                        | "lastTimestamp"
                        | "eventTime"
                        | "started"
                        | "stopped"
                        | "delayed"
                        | "lastTransitionTime"
                ) || k.ends_with("/touch-dummy");
                if is_time && item.is_string() {
                    *item = json!("<time>");
                } else if k == "uid" && item.is_string() {
                    *item = json!("<uid>");
                } else if let Some(text) = item.as_str()
                    && text.starts_with('{')
                {
                    // Progress records are JSON strings in annotations: blank their times,
                    // keeping the bytes (and the field order) otherwise.
                    *item = Value::String(blank_times(text));
                } else {
                    normalise(item);
                }
            }
        }
        _ => {}
    }
}

/// `"started":"…"` (and `stopped`, `delayed`) inside a JSON text become `"<time>"`.
fn blank_times(text: &str) -> String {
    let mut out = text.to_string();
    for key in ["\"started\":\"", "\"stopped\":\"", "\"delayed\":\""] {
        let mut from = 0;
        while let Some(at) = out[from..].find(key) {
            let start = from + at + key.len();
            let Some(len) = out[start..].find('"') else {
                break;
            };
            out.replace_range(start..start + len, "<time>");
            from = start + "<time>".len();
        }
    }
    out
}

/// How many requests of a verb the operator sent to paths ending with `suffix`.
pub fn count(server: &FakeApiServer, method: &str, suffix: &str) -> usize {
    operator_requests(server)
        .iter()
        .filter(|r| r.method == method && r.path.ends_with(suffix))
        .count()
}

/// Log lines captured from the current thread (tests that read logs run on tokio's
/// current-thread runtime, so the operator's tasks log on the test's thread).
#[allow(unused_imports)] // not every test binary reads logs
pub use kopf::logging::LogBuffer as Logs;

/// What handlers did, by key (an object's name, or "cleanup", "login"...): for handlers
/// registered by attribute macros, which cannot capture a test's own state.
static RECORDS: std::sync::Mutex<std::collections::BTreeMap<String, Vec<String>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Records what a handler did under `key`.
pub fn record(key: &str, what: impl Into<String>) {
    RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.to_string())
        .or_default()
        .push(what.into());
}

/// What was recorded under `key`.
pub fn records(key: &str) -> Vec<String> {
    RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(key)
        .cloned()
        .unwrap_or_default()
}

/// The ConfigMap `<name>-cm` holding `field`, owned by the KopfExample `owner` (a body).
pub fn owned_configmap(owner: &Value, field: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    let name = owner["metadata"]["name"].as_str().unwrap_or_default();
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{name}-cm"),
            "ownerReferences": [{
                "apiVersion": "kopf.dev/v1", "kind": "KopfExample", "name": name,
                "uid": owner["metadata"]["uid"], "controller": true,
            }],
        },
        "data": {"field": field},
    }))
    .expect("a ConfigMap")
}

/// A histogram's `_sum` and `_count` in the metrics' text, for its labels as encoded
/// (`resource="kopfexamples",cause="create"`); zeros when it has no such series yet.
pub fn histogram(metrics: &kopf::metrics::Metrics, name: &str, labels: &str) -> (f64, u64) {
    let text = metrics.encode();
    let value = |suffix: &str| {
        let key = format!("{name}_{suffix}{{{labels}}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(key.as_str()))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (value("sum"), value("count") as u64)
}
