//! Handlers that call a service outside the cluster, against a mock HTTP service
//! (wiremock): a call the service fails is retried through the handler's temporary error,
//! and its result lands in the status once.

use std::net::SocketAddr;
use std::time::Duration;

use kopf::{HandlerError, Operator, handler::Name};
use kube::api::PostParams;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::{body_string, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod common;

use common::{Running, eventually, kex_api, obj};

/// `POST /charge` with the object's name (a plain HTTP/1.1 client): the status code and
/// the body.
async fn charge(service: SocketAddr, name: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(service).await?;
    let request = format!(
        "POST /charge HTTP/1.1\r\nHost: {service}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}",
        name.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    Ok((status, body.to_string()))
}

#[tokio::test(start_paused = true)]
async fn a_failed_external_call_is_retried_and_its_result_lands_once() {
    let service = MockServer::start().await;
    // Busy twice, then a receipt.
    Mock::given(method("POST"))
        .and(path("/charge"))
        .and(body_string("order-1"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(2)
        .expect(2)
        .mount(&service)
        .await;
    Mock::given(method("POST"))
        .and(path("/charge"))
        .respond_with(ResponseTemplate::new(200).set_body_string("receipt-7"))
        .expect(1)
        .mount(&service)
        .await;
    let address = *service.address();

    let server = common::paused_server().await;
    let op = Operator::new().on_create(
        "kopfexamples",
        "charge",
        move |Name(name): Name| async move {
            let (status, body) = charge(address, &name).await.map_err(|e| {
                HandlerError::temporary(
                    format!("the service is unreachable: {e}"),
                    Duration::from_millis(50),
                )
            })?;
            match status {
                200 => Ok(body),
                503 => Err(HandlerError::temporary(
                    "the service is busy",
                    Duration::from_millis(50),
                )),
                other => Err(HandlerError::permanent(format!(
                    "the service answered {other}"
                ))),
            }
        },
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(
        &PostParams::default(),
        &obj("order-1", json!({"field": "x"})),
    )
    .await
    .expect("create");
    eventually("the receipt in the status", async || {
        api.get("order-1").await.expect("get").data["status"]["charge"] == "receipt-7"
    })
    .await;
    running.settled().await;
    // Exactly the three calls: two refused, one charged (no call after the success).
    service.verify().await;
    assert_eq!(service.received_requests().await.map(|r| r.len()), Some(3));
    assert_eq!(
        running
            .logged_at("INFO", "Handler 'charge' succeeded")
            .len(),
        1,
        "{:#?}",
        running.logs()
    );
    running.stop().await;
}
