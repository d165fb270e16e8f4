//! The operator's client against the fake API server: transient failures are sent again
//! (visibly: a WARNING line for the first failure of an outage, a summary every 10 s, a
//! metric per failure), others reach the caller at once, and kube's own hidden retry is
//! off.

mod common;

use std::time::Duration;

use common::{Logs, operator_client};
use k8s_openapi::api::core::v1::ConfigMap;
use kopf::{Operator, metrics::Metrics};
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern, RequestRecord};
use kube::api::{Api, ListParams, PostParams, WatchParams};
use serde_json::json;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// The client's warnings about failed requests.
fn failures(logs: &Logs) -> Vec<String> {
    logs.matching("WARN", "API request ")
}

/// The fake server, an operator with metrics, and its client.
async fn setup() -> (FakeApiServer, Metrics, kube::Client) {
    let server = FakeApiServer::start().await.expect("start");
    let metrics = Metrics::new();
    let op = Operator::new().metrics(metrics.clone());
    let client = op.wrap_client(operator_client(&server, Duration::from_secs(70)).await);
    (server, metrics, client)
}

/// The server's records of requests to `path` with `method`.
fn requests(server: &FakeApiServer, method: &str, path: &str) -> Vec<RequestRecord> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.method == method && r.path == path)
        .collect()
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"a": "b"}}))
        .expect("configmap")
}

#[tokio::test]
async fn two_503s_are_retried_and_the_caller_gets_the_answer() {
    let (logs, _guard) = Logs::capture();
    let (server, metrics, client) = setup().await;
    server.inject_fault(FaultRule::new(
        RequestPattern::any().verb("list").resource("configmaps"),
        503,
        2,
    ));
    let api = Api::<ConfigMap>::namespaced(client, "default");
    let list = api
        .list(&ListParams::default().limit(10))
        .await
        .expect("listed");
    assert!(list.items.is_empty());

    let codes: Vec<u16> = requests(&server, "GET", CONFIGMAPS)
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(codes, vec![503, 503, 200], "the same GET, sent again");
    // The first failure is a WARNING, the second (within 10 s) is counted; the answer
    // that ends the outage is one INFO line.
    let failures = failures(&logs);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].contains(&format!(
            "API request GET {CONFIGMAPS} failed: 503 Service Unavailable: injected fault: 503; retrying in"
        )) && failures[0].contains("attempt 2 of 6")
            && !failures[0].contains("limit=10"),
        "{}",
        failures[0]
    );
    let back = logs.matching(
        "INFO",
        "The API server answers again, after 2 failed attempt(s)",
    );
    assert_eq!(back.len(), 1, "{:#?}", logs.lines());
    let text = metrics.encode();
    for expected in [
        r#"kopf_api_retries_total{verb="get",code="503"} 2"#,
        r#"kopf_api_requests_total{verb="get",code="503"} 2"#,
        r#"kopf_api_requests_total{verb="get",code="200"} 1"#,
    ] {
        assert!(text.contains(expected), "{expected} in {text}");
    }
}

#[tokio::test]
async fn a_500_on_a_post_is_not_retried_but_on_a_get_it_is() {
    let (logs, _guard) = Logs::capture();
    let (server, metrics, client) = setup().await;
    server.inject_fault(FaultRule::new(
        RequestPattern::any().verb("create").resource("configmaps"),
        500,
        3,
    ));
    let api = Api::<ConfigMap>::namespaced(client, "default");
    let error = api
        .create(&PostParams::default(), &configmap("one"))
        .await
        .expect_err("failed");
    match &error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 500);
            assert_eq!(status.message, "injected fault: 500", "the Status body");
        }
        other => panic!("not the API's answer: {other:?}"),
    }
    assert_eq!(requests(&server, "POST", CONFIGMAPS).len(), 1, "sent once");
    let failures = failures(&logs);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].contains("POST") && failures[0].contains("not sent again"),
        "{}",
        failures[0]
    );
    assert!(!metrics.encode().contains("kopf_api_retries_total{"));

    server.inject_fault(FaultRule::new(
        RequestPattern::any().verb("get").resource("configmaps"),
        500,
        1,
    ));
    let missing = api.get_opt("one").await.expect("retried, then 404");
    assert!(missing.is_none());
    let codes: Vec<u16> = requests(&server, "GET", &format!("{CONFIGMAPS}/one"))
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(codes, vec![500, 404]);
}

#[tokio::test]
async fn a_404_is_not_retried() {
    let (logs, _guard) = Logs::capture();
    let (server, metrics, client) = setup().await;
    let api = Api::<ConfigMap>::namespaced(client, "default");
    let error = api.get("missing").await.expect_err("not found");
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 404),
        "{error:?}"
    );
    assert_eq!(
        requests(&server, "GET", &format!("{CONFIGMAPS}/missing")).len(),
        1
    );
    assert!(failures(&logs).is_empty(), "{:#?}", failures(&logs));
    assert!(!metrics.encode().contains("kopf_api_retries_total{"));
}

#[tokio::test]
async fn after_five_retries_the_caller_gets_the_503() {
    let (logs, _guard) = Logs::capture();
    let (server, metrics, client) = setup().await;
    server.inject_fault(FaultRule::new(
        RequestPattern::any().verb("list").resource("configmaps"),
        503,
        10,
    ));
    let api = Api::<ConfigMap>::namespaced(client, "default");
    let started = std::time::Instant::now();
    let error = api
        .list(&ListParams::default())
        .await
        .expect_err("still failing");
    let waited = started.elapsed();
    match &error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 503);
            assert_eq!(status.message, "injected fault: 503", "the Status body");
        }
        other => panic!("not the API's answer: {other:?}"),
    }
    assert_eq!(
        requests(&server, "GET", CONFIGMAPS).len(),
        6,
        "1 + 5 retries"
    );
    assert!(
        waited >= Duration::from_millis(1700),
        "0.2 + 0.4 + 0.8 + 1 + 1 s, each at least halved: {waited:?}"
    );
    // One WARNING: the other five failures came within 10 s of it.
    let failures = failures(&logs);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].contains("retrying in") && failures[0].contains("(attempt 2 of 6)"),
        "{}",
        failures[0]
    );
    assert!(
        metrics
            .encode()
            .contains(r#"kopf_api_retries_total{verb="get",code="503"} 5"#)
    );
}

#[tokio::test]
async fn a_watch_is_not_retried() {
    let (logs, _guard) = Logs::capture();
    let (server, _metrics, client) = setup().await;
    server.inject_fault(FaultRule::new(
        RequestPattern::any().verb("watch").resource("configmaps"),
        503,
        3,
    ));
    let api = Api::<ConfigMap>::namespaced(client, "default");
    let result = api.watch(&WatchParams::default(), "0").await;
    assert!(result.is_err(), "the 503 reaches the watcher");
    let watches: Vec<_> = requests(&server, "GET", CONFIGMAPS)
        .into_iter()
        .filter(|r| r.query.contains("watch=true"))
        .collect();
    assert_eq!(watches.len(), 1, "{watches:#?}");
    assert!(failures(&logs).is_empty(), "{:#?}", failures(&logs));
}

#[tokio::test]
async fn kube_does_not_retry_by_itself() {
    let server = FakeApiServer::start().await.expect("start");
    server.inject_fault(FaultRule::new(
        RequestPattern::any().verb("list").resource("configmaps"),
        503,
        1,
    ));
    // A client from `client_config` without the operator's layer.
    let bare = operator_client(&server, Duration::from_secs(70)).await;
    let api = Api::<ConfigMap>::namespaced(bare, "default");
    let error = api
        .list(&ListParams::default())
        .await
        .expect_err("the 503 at once");
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 503),
        "{error:?}"
    );
    assert_eq!(requests(&server, "GET", CONFIGMAPS).len(), 1, "one request");
}

#[tokio::test]
async fn a_quiet_watch_outlives_the_request_timeout() {
    use futures::{StreamExt, TryStreamExt};
    let (logs, _guard) = Logs::capture();
    let server = FakeApiServer::start().await.expect("start");
    let op = Operator::new().request_timeout(Duration::from_secs(1));
    let client = op.wrap_client(operator_client(&server, Duration::from_secs(70)).await);
    let api = Api::<ConfigMap>::namespaced(client, "default");
    let stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("the watch's head comes at once");
    let mut stream = stream.boxed();
    // Nothing happens for longer than the request timeout: only the head is timed.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    Api::<ConfigMap>::namespaced(server.client(), "default")
        .create(&PostParams::default(), &configmap("late"))
        .await
        .expect("created");
    let event = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("an event in time")
        .expect("no error")
        .expect("the stream goes on");
    assert!(
        matches!(&event, kube::api::WatchEvent::Added(cm) if cm.metadata.name.as_deref() == Some("late")),
        "{event:?}"
    );
    let lines = logs.text();
    assert!(!lines.contains("No answer"), "{lines}");
}
