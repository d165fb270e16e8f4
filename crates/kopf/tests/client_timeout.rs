//! A server that answered once, then accepts connections but never answers: with a 1 s
//! request timeout, each attempt warns that it is still waiting, then gives up; the request
//! is sent again, and the caller gets the timeout error after the retries. The client
//! comes from the kubeconfig (`Operator::connect`), which also logs the server's URL before
//! any request. (A server that never answered at all is not retried: see the client's
//! unit tests.)
//!
//! (One test in this binary: it sets `KUBECONFIG` for the process.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kopf::Operator;
use kube::api::Api;

mod common;

use common::Logs;

#[tokio::test]
async fn a_server_that_never_answers_times_out_after_the_retries() {
    let (logs, _guard) = Logs::capture();

    // Answers the first request with a 404, then accepts connections, keeps them open and
    // says nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let silent = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                answer_once(&mut socket).await;
            }
            open.push(socket);
        }
    });

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: silent
  cluster:
    server: http://127.0.0.1:{port}
users:
- name: nobody
  user: {{}}
contexts:
- name: silent
  context: {{cluster: silent, user: nobody, namespace: default}}
current-context: silent
"
        ),
    )
    .expect("kubeconfig");
    // SAFETY: the only test of this binary, and nothing else runs yet.
    unsafe { std::env::set_var("KUBECONFIG", &kubeconfig) };

    let client = Operator::new()
        .request_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("a client");
    let url = format!("http://127.0.0.1:{port}");
    assert!(
        logs.lines().iter().any(|l| l.contains("INFO")
            && l.contains(&format!(
                "Connecting to the Kubernetes API server at {url}."
            ))),
        "{:#?}",
        logs.lines()
    );

    let api = Api::<ConfigMap>::namespaced(client, "default");
    let first = api.get_opt("first").await.expect("answered: not found");
    assert!(first.is_none());
    let started = Instant::now();
    let error = api.get("any").await.expect_err("no answer");
    let waited = started.elapsed();
    let expected = format!(
        "the API server at {url} did not answer GET /api/v1/namespaces/default/configmaps/any within 1 s"
    );
    assert!(error.to_string().contains(&expected), "{error}");
    assert!(
        waited >= Duration::from_millis(6 * 1000 + 1700),
        "6 attempts of 1 s and 5 delays: {waited:?}"
    );
    assert!(accepted.load(Ordering::SeqCst) >= 1);

    let lines = logs.lines();
    let waiting = lines
        .iter()
        .filter(|l| {
            l.contains("WARN")
                && l.contains("No answer from the API server to GET /api/v1/namespaces/default/configmaps/any after 0.33 s; still waiting.")
        })
        .count();
    assert_eq!(waiting, 6, "{lines:#?}");
    let failed: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("WARN") && l.contains(&format!("failed: no answer: {expected}")))
        .collect();
    // The other five failures came within 10 s of the first: counted, not each a WARNING.
    assert_eq!(failed.len(), 1, "{lines:#?}");
    assert!(failed[0].contains("retrying in") && failed[0].contains("(attempt 2 of 6)"));
    silent.abort();
}

/// Reads one request's head and answers it with a 404 Status (the connection stays open).
async fn answer_once(socket: &mut tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.expect("read");
        assert!(n > 0, "the client closed the connection");
        head.extend_from_slice(&buf[..n]);
    }
    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"configmaps \"first\" not found"}"#;
    let answer = format!(
        "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(answer.as_bytes()).await.expect("write");
}
