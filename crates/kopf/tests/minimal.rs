//! The minimal operator against the fake API server: the exact requests it sends.

use kopf::{Cause, HandlerResult, Operator};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;

use common::{Running, kex_api, operator_requests, until_object, writes};

async fn create_fn(_cause: Cause) -> HandlerResult {
    Ok(Some(json!({"message": "hello world"})))
}

async fn delete_fn(_cause: Cause) -> HandlerResult {
    Ok(None)
}

#[tokio::test(start_paused = true)]
async fn minimal_operator_writes_status_and_diffbase_with_one_patch_per_endpoint() {
    let server = common::paused_server().await;
    let op = Operator::new().on_create("kopfexamples", "create_fn", create_fn);
    // Once the operator watches, create the object as a user would.
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    // Start-up costs two discovery requests (aggregated), one list and one watch.
    let mut startup: Vec<String> = operator_requests(&server)
        .into_iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    startup.sort();
    assert_eq!(
        startup,
        vec![
            "GET /api",
            "GET /apis",
            "GET /apis/kopf.dev/v1/kopfexamples",
            "GET /apis/kopf.dev/v1/kopfexamples"
        ],
        "{startup:?}"
    );
    server.clear_requests();
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "kopf-example-1", "labels": {"somelabel": "somevalue"}},
        "spec": {"duration": "1m", "field": "value", "items": ["item1", "item2"]}}))
        .expect("obj");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    until_object(&api, "kopf-example-1", "the status", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello world")
    })
    .await;
    running.settled().await;
    let created = writes(&server);
    insta::assert_json_snapshot!("minimal_create", created);
    // No finalizer without delete handlers; the diff-base is Kopf's.
    let o = api.get("kopf-example-1").await.expect("get");
    assert!(o.metadata.finalizers.is_none());
    assert_eq!(
        o.metadata
            .annotations
            .unwrap_or_default()
            .get("kopf.zalando.org/last-handled-configuration")
            .map(String::as_str),
        Some(
            "{\"spec\":{\"duration\":\"1m\",\"field\":\"value\",\"items\":[\"item1\",\"item2\"]},\"metadata\":{\"labels\":{\"somelabel\":\"somevalue\"}}}\n"
        )
    );
    // A status-only change by someone else: no requests.
    server.clear_requests();
    api.patch_status(
        "kopf-example-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"other": 1}})),
    )
    .await
    .expect("status");
    running.settled().await;
    // The operator sent nothing (a NOOP cause).
    assert_eq!(writes(&server), Vec::<Value>::new());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn delete_handler_adds_and_releases_the_finalizer() {
    let server = common::paused_server().await;
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .on_delete("kopfexamples", "delete_fn", delete_fn);
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    server.clear_requests();
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "k"}, "spec": {"field": "value"}}))
        .expect("obj");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    until_object(&api, "k", "the status", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello world")
    })
    .await;
    running.settled().await;
    api.delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    until_object(&api, "k", "the object to go", |o| o.is_none()).await;
    insta::assert_json_snapshot!("finalizer_cycle", writes(&server));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn unknown_resources_fail_at_start_with_similar_names() {
    let server = common::paused_server().await;
    let err = Operator::new()
        .on_create("kopfexample-typo", "create_fn", create_fn)
        .run_until(server.client(), async {})
        .await
        .expect_err("unknown resource");
    let text = err.to_string();
    assert!(
        text.contains("no served resource matches \"kopfexample-typo\""),
        "{text}"
    );
}
