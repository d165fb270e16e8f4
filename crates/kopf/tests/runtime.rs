//! The operator binaries as processes: graceful shutdown on SIGTERM, the liveness and
//! metrics endpoints, environment variables for options, and one-line errors for a wrong
//! setup. Each test runs an example binary with `kopf_testing::OperatorRunner` against an
//! in-process fake API server.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{kex_api, obj, operator_client, server, until_object};
use kopf::{HandlerError, Operator};
use kopf_testing::{FakeApiServer, FaultRule, OperatorRunner, RequestPattern, Signal};
use kube::api::PostParams;
use serde_json::{Value, json};

/// An example's binary, built by `cargo test` with the tests (built here if missing, e.g.
/// when this test runs alone).
fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = dir.join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-q", "-p", "kopf", "--example", name])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the example {name}");
    }
    path
}

/// A fake server with the example CRD, and a kubeconfig for it in a fresh directory.
async fn cluster() -> (FakeApiServer, tempfile::TempDir) {
    let server = server().await;
    let dir = tempfile::tempdir().expect("tempdir");
    server
        .write_kubeconfig(dir.path().join("kubeconfig"))
        .expect("kubeconfig");
    (server, dir)
}

fn operator(example: &str, dir: &tempfile::TempDir, args: &[&str]) -> OperatorRunner {
    OperatorRunner::command(example_binary(example))
        .arg("run")
        .args(args)
        .env("KUBECONFIG", dir.path().join("kubeconfig"))
        .env("HOME", dir.path())
        .env_remove("RUST_LOG")
        .start()
        .expect("the operator starts")
}

async fn create(server: &FakeApiServer, name: &str, duration: &str) {
    kex_api(server)
        .create(
            &PostParams::default(),
            &obj(name, json!({"duration": duration})),
        )
        .await
        .expect("create");
}

async fn object(server: &FakeApiServer, name: &str) -> Value {
    let o = kex_api(server).get(name).await.expect("get");
    serde_json::to_value(o).expect("json")
}

#[tokio::test]
async fn sigterm_lets_a_running_handler_finish_and_exits_0() {
    let (server, dir) = cluster().await;
    create(&server, "short", "2s").await;
    let mut op = operator("graceful", &dir, &["-A", "--standalone"]);
    op.wait_for_log("Working for 2s", Duration::from_secs(20))
        .await
        .expect("the handler started");
    let stopped = Instant::now();
    op.signal(Signal::Term).await.expect("SIGTERM");
    let status = op.wait(Duration::from_secs(15)).await.expect("exits");
    assert!(status.success(), "exit 0: {status}\n{}", op.logs());
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "within the grace period"
    );
    assert!(
        op.has_logged("Handler 'work_fn' succeeded"),
        "{}",
        op.logs()
    );
    let body = object(&server, "short").await;
    assert_eq!(
        body["status"]["work_fn"],
        json!({"worked": "2s"}),
        "the result is stored: {body}"
    );
    let logs = op.logs();
    let last = logs.lines().last().unwrap_or_default();
    assert!(
        last.ends_with("[INFO    ] Stopped."),
        "the last line: {logs}"
    );
}

#[tokio::test]
async fn sigterm_cancels_a_long_handler_after_the_grace_period_and_stores_its_progress() {
    let (server, dir) = cluster().await;
    create(&server, "long", "1m").await;
    // The grace period from its environment variable (KOPF_RUN_* mirrors the options).
    let mut op = OperatorRunner::command(example_binary("graceful"))
        .args(["run", "-A"])
        .env("KUBECONFIG", dir.path().join("kubeconfig"))
        .env("KOPF_RUN_GRACE_PERIOD", "1")
        .start()
        .expect("starts");
    op.wait_for_log("Working for 1m", Duration::from_secs(20))
        .await
        .expect("the handler started");
    let stopped = Instant::now();
    op.signal(Signal::Term).await.expect("SIGTERM");
    let status = op.wait(Duration::from_secs(15)).await.expect("exits");
    assert!(status.success(), "exit 0: {status}\n{}", op.logs());
    assert!(
        stopped.elapsed() < Duration::from_secs(8),
        "about 1 s of grace, then out: {:?}",
        stopped.elapsed()
    );
    assert!(
        op.has_logged("running handlers get 1s to finish"),
        "{}",
        op.logs()
    );
    let body = object(&server, "long").await;
    let record: Value = serde_json::from_str(
        body["metadata"]["annotations"]["kopf.zalando.org/work_fn"]
            .as_str()
            .unwrap_or_else(|| panic!("a progress record: {body}")),
    )
    .expect("json record");
    assert_eq!(record["retries"], json!(1), "{record}");
    assert!(
        record["message"]
            .as_str()
            .is_some_and(|m| m.contains("shutting down")),
        "{record}"
    );
    assert!(body["status"].get("work_fn").is_none(), "not done: {body}");

    // The next start runs the handler again, as its second attempt.
    let mut again = operator("graceful", &dir, &["-A"]);
    again
        .wait_for_log("Working for 1m", Duration::from_secs(20))
        .await
        .expect("the handler runs again");
    again.kill().await.expect("killed");
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let (server, dir) = cluster().await;
    create(&server, "long", "1m").await;
    let mut op = operator("graceful", &dir, &["-A", "--grace-period", "60"]);
    op.wait_for_log("Working for 1m", Duration::from_secs(20))
        .await
        .expect("started");
    op.signal(Signal::Term).await.expect("SIGTERM");
    op.wait_for_log("a second signal exits at once", Duration::from_secs(5))
        .await
        .expect("stopping");
    let stopped = Instant::now();
    op.signal(Signal::Int).await.expect("SIGINT");
    let status = op.wait(Duration::from_secs(5)).await.expect("exits");
    assert_eq!(status.code(), Some(1), "{}", op.logs());
    assert!(stopped.elapsed() < Duration::from_secs(3));
    assert!(op.has_logged("A second stop signal: exiting at once."));
}

#[tokio::test]
async fn the_shutdown_timeout_ends_the_process_whatever_runs() {
    let (server, dir) = cluster().await;
    create(&server, "long", "1m").await;
    let mut op = operator(
        "graceful",
        &dir,
        &["-A", "--grace-period", "30", "--shutdown-timeout", "1"],
    );
    op.wait_for_log("Working for 1m", Duration::from_secs(20))
        .await
        .expect("started");
    op.signal(Signal::Term).await.expect("SIGTERM");
    let status = op.wait(Duration::from_secs(6)).await.expect("exits");
    assert_eq!(status.code(), Some(1), "{}", op.logs());
    assert!(op.has_logged("exiting now"), "{}", op.logs());
}

#[tokio::test]
async fn sigterm_ends_the_wait_of_requests_held_by_the_rate_limit() {
    let (_server, dir) = cluster().await;
    // Three requests at once (the discoveries of the engine and of peering), then one per
    // 1e20 s (a year, capped): the engine's first list waits for its token.
    let mut op = operator(
        "graceful",
        &dir,
        &[
            "-A",
            "--qps",
            "1e-20",
            "--burst",
            "3",
            "--shutdown-timeout",
            "30",
        ],
    );
    op.wait_for_log("running without peering", Duration::from_secs(20))
        .await
        .expect("the operator started");
    let stopped = Instant::now();
    op.signal(Signal::Term).await.expect("SIGTERM");
    let status = op.wait(Duration::from_secs(20)).await.expect("exits");
    assert!(status.success(), "exit 0: {status}\n{}", op.logs());
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "at once, not after the shutdown timeout: {:?}",
        stopped.elapsed()
    );
    let logs = op.logs();
    let last = logs.lines().last().unwrap_or_default();
    assert!(
        last.ends_with("[INFO    ] Stopped."),
        "the last line: {logs}"
    );
}

/// `GET path` over HTTP/1.0: the status code and the body.
async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Polls `GET path` until `check` holds (20 s at most); returns the last answer.
async fn until_http(addr: &str, path: &str, check: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let mut last = None;
    for _ in 0..200 {
        last = http_get(addr, path).await;
        if let Some((code, body)) = &last
            && check(*code, body)
        {
            return (*code, body.clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("GET {path} never satisfied the check; last answer: {last:?}");
}

#[tokio::test]
async fn liveness_and_metrics_are_scraped() {
    let (server, dir) = cluster().await;
    create(&server, "one", "1s").await;
    let addr = format!("127.0.0.1:{}", free_port());
    let mut op = operator(
        "indexes",
        &dir,
        &[
            "-A",
            "--liveness",
            &format!("http://{addr}/healthz"),
            "--metrics",
            &addr,
        ],
    );
    op.wait_for_log("Handler 'create_fn' succeeded", Duration::from_secs(20))
        .await
        .expect("handled");

    // The probe handlers' results, as JSON.
    let (_, body) = until_http(&addr, "/healthz", |code, _| code == 200).await;
    let probes: Value = serde_json::from_str(&body).expect("json");
    assert!(probes.get("fields").is_some(), "{probes}");

    // Prometheus text, names with units and _total suffixes; polled until the object's own
    // writes have come back and been processed (the queue is empty again).
    let expected = [
        "# TYPE kopf_handler_calls counter",
        r#"kopf_handler_calls_total{handler="create_fn",resource="KopfExample",outcome="success"} 1"#,
        "# TYPE kopf_handler_duration_seconds histogram",
        r#"kopf_handler_duration_seconds_count{handler="create_fn",resource="KopfExample"} 1"#,
        r#"kopf_objects_tracked{resource="kopfexamples"} 1"#,
        r#"kopf_queue_depth{resource="kopfexamples"} 0"#,
        // (Watches are counted when their response starts: the fake server starts it with
        // the first event.)
        r#"kopf_api_requests_total{verb="get",code="200"}"#,
        r#"kopf_api_requests_total{verb="patch",code="200"}"#,
        "# EOF",
    ];
    let (_, text) = until_http(&addr, "/metrics", |code, text| {
        code == 200 && expected.iter().all(|e| text.contains(e))
    })
    .await;
    assert!(!text.contains(
        "kopf_handler_calls_total{handler=\"create_fn\",resource=\"KopfExample\",outcome=\"error\""
    ));

    // Watch streams that keep failing make the operator unhealthy...
    for verb in ["list", "watch"] {
        server.inject_fault(FaultRule {
            pattern: RequestPattern::any().verb(verb).resource("kopfexamples"),
            code: 500,
            count: None,
            retry_after: None,
            message: None,
        });
    }
    server.close_watches(Some("kopfexamples"));
    let (_, body) = until_http(&addr, "/healthz", |code, _| code == 503).await;
    assert!(body.contains("kopfexamples"), "{body}");
    let (_, text) = until_http(&addr, "/metrics", |_, _| true).await;
    assert!(
        text.contains(r#"kopf_watch_restarts_total{resource="kopfexamples"}"#),
        "{text}"
    );
    // ...and healthy again once they deliver again (a reconnected watch says nothing until
    // something changes; without a change, the failures age out of the 60 s window).
    server.clear_faults();
    let patch = json!({"spec": {"duration": "2s"}});
    kex_api(&server)
        .patch(
            "one",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("patch");
    until_http(&addr, "/healthz", |code, _| code == 200).await;
    let status = op.stop(Duration::from_secs(10)).await.expect("stops");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn with_leader_election_the_probe_and_metrics_say_who_leads() {
    let (_server, dir) = cluster().await;
    let addr = format!("127.0.0.1:{}", free_port());
    let mut op = operator(
        "minimal",
        &dir,
        &[
            "-A",
            "--leader-election=probe-leader",
            "--lease-duration",
            "2",
            "--renew-deadline",
            "1",
            "--retry-period",
            "0.2",
            "--liveness",
            &format!("http://{addr}/healthz"),
            "--metrics",
            &addr,
        ],
    );
    op.wait_for_log("This replica leads now", Duration::from_secs(20))
        .await
        .expect("leads");
    let (_, body) = until_http(&addr, "/healthz", |code, body| {
        code == 200 && body.contains("leading")
    })
    .await;
    let probe: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        probe["leadership"]["default/probe-leader"], "leading",
        "{probe}"
    );
    let (_, text) = until_http(&addr, "/metrics", |code, _| code == 200).await;
    for line in [
        r#"kopf_leader_is_leader{lease="default/probe-leader"} 1"#,
        r#"kopf_leader_transitions_total{lease="default/probe-leader"} 1"#,
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    let status = op.stop(Duration::from_secs(10)).await.expect("stops");
    assert!(status.success(), "{status}");
    assert!(
        op.logs()
            .contains("Released the lease default/probe-leader"),
        "released at exit"
    );
}

/// The operator's output when it fails at start: exit status 1 and the error's line.
async fn failing_start(dir: &tempfile::TempDir, kubeconfig: &std::path::Path) -> String {
    failing_start_logs(dir, kubeconfig).await.0
}

/// [`failing_start`], with all the lines the operator wrote.
async fn failing_start_logs(
    dir: &tempfile::TempDir,
    kubeconfig: &std::path::Path,
) -> (String, String) {
    let mut op = OperatorRunner::command(example_binary("minimal"))
        .args(["run", "-A"])
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", dir.path())
        .start()
        .expect("starts");
    let status = op.wait(Duration::from_secs(30)).await.expect("exits");
    assert_eq!(status.code(), Some(1), "{}", op.logs());
    let logs = op.logs();
    assert!(
        !logs.contains("panicked") && !logs.contains("Status {"),
        "no dumps: {logs}"
    );
    let errors: Vec<&str> = logs.lines().filter(|l| l.contains("Error")).collect();
    assert_eq!(errors.len(), 1, "one error line: {logs}");
    (errors[0].to_string(), logs)
}

#[tokio::test]
async fn a_wrong_setup_gives_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nowhere/kubeconfig");
    let line = failing_start(&dir, &missing).await;
    assert!(
        line.contains("cannot read the kubeconfig") && line.contains("set KUBECONFIG"),
        "{line}"
    );

    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, "clusters: [").expect("write");
    let line = failing_start(&dir, &garbage).await;
    assert!(line.contains("cannot read the kubeconfig"), "{line}");

    // A server that is not there (a port nobody listens on).
    let (server, down) = cluster().await;
    server.shutdown().await;
    let (line, logs) = failing_start_logs(&dir, &down.path().join("kubeconfig")).await;
    assert!(
        line.contains("cannot reach the Kubernetes API server at http://127.0.0.1:")
            && line.contains("Connection refused"),
        "{line}"
    );
    // Never reached: not retried (no backoff, no retry WARNINGs), at most 3 lines.
    assert!(
        logs.lines().count() <= 3 && !logs.contains("API request") && !logs.contains("retrying"),
        "{logs}"
    );

    // No CRD.
    let bare = FakeApiServer::start().await.expect("start");
    bare.write_kubeconfig(dir.path().join("bare"))
        .expect("kubeconfig");
    let line = failing_start(&dir, &dir.path().join("bare")).await;
    assert!(
        line.contains(r#"no served resource matches "kopfexamples""#)
            && line.contains("CustomResourceDefinition"),
        "{line}"
    );

    // Forbidden by RBAC.
    let (server, forbidden) = cluster().await;
    server.inject_fault(FaultRule {
        pattern: RequestPattern::any().verb("list").resource("kopfexamples"),
        code: 403,
        count: None,
        retry_after: None,
        message: None,
    });
    let line = failing_start(&dir, &forbidden.path().join("kubeconfig")).await;
    assert!(
        line.contains("forbids listing kopfexamples.kopf.dev") && line.contains("rbac"),
        "{line}"
    );
}

async fn hello() -> Result<Value, HandlerError> {
    Ok(json!({"message": "hello"}))
}

#[tokio::test]
async fn a_429_is_sent_again_after_its_retry_after_and_the_handler_runs_once() {
    let server = server().await;
    server.inject_fault(FaultRule {
        pattern: RequestPattern {
            subresource: Some("status".into()),
            ..RequestPattern::any().verb("patch").resource("kopfexamples")
        },
        code: 429,
        count: Some(2),
        retry_after: Some(1),
        message: None,
    });
    let op = Operator::new().on_create("kopfexamples", "hello", hello);
    let client = op.wrap_client(operator_client(&server, Duration::from_secs(70)).await);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(op.run_until(client, async {
        let _ = stopped.await;
    }));
    create(&server, "busy", "1s").await;
    let api = kex_api(&server);
    until_object(&api, "busy", "the result", |o| {
        o.is_some_and(|o| o.data["status"]["hello"]["message"] == "hello")
    })
    .await;
    let patches: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/busy/status"))
        .collect();
    let codes: Vec<u16> = patches.iter().map(|r| r.status).collect();
    assert_eq!(codes, vec![429, 429, 200], "the same PATCH, sent again");
    let waited = Duration::from_micros(patches[1].micros - patches[0].micros);
    assert!(
        waited >= Duration::from_millis(900),
        "Retry-After: 1 honoured: {waited:?}"
    );
    let body = object(&server, "busy").await;
    assert!(
        body["metadata"]["annotations"]
            .get("kopf.zalando.org/hello")
            .is_none(),
        "no handler retry was recorded: {body}"
    );
    let _ = stop.send(());
    running.await.expect("join").expect("ran");
}
