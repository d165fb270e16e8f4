//! The minimal operator against the fake API server: the exact requests it sends.

use std::time::Duration;

use kopf::{Cause, HandlerResult, Operator};
use kopf_testing::FakeApiServer;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "kopfexamples.kopf.dev"},
        "spec": {"group": "kopf.dev", "scope": "Namespaced",
            "names": {"kind": "KopfExample", "plural": "kopfexamples", "singular": "kopfexample", "shortNames": ["kex"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
}

fn api(server: &FakeApiServer) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(server.client(), "default", &ar)
}

async fn wait_for(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&DynamicObject>) -> bool,
) {
    for _ in 0..200 {
        let obj = api.get_opt(name).await.expect("get");
        if pred(obj.as_ref()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The operator's writes (PATCH requests), as method, path, patch type and body.
fn writes(server: &FakeApiServer) -> Vec<Value> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| {
            let mut body: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
            if let Some(ops) = body.as_array_mut() {
                for op in ops {
                    if op["path"] == "/metadata/resourceVersion" {
                        op["value"] = json!("<rv>");
                    }
                }
            }
            json!({"path": r.path, "patch": r.patch_type, "body": body})
        })
        .collect()
}

async fn create_fn(_cause: Cause) -> HandlerResult {
    Ok(Some(json!({"message": "hello world"})))
}

async fn delete_fn(_cause: Cause) -> HandlerResult {
    Ok(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimal_operator_writes_status_and_diffbase_with_one_patch_per_endpoint() {
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(crd()).expect("crd");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let op = Operator::new().on_create("kopfexamples", "create_fn", create_fn);
    let client = server.client();
    let running = tokio::spawn(async move {
        op.run_until(client, async {
            let _ = stop_rx.await;
        })
        .await
    });
    let api = api(&server);
    // Wait for the operator to watch, then create the object as a user would.
    for _ in 0..100 {
        if server
            .watches()
            .iter()
            .any(|w| w.resource.ends_with("kopfexamples"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Start-up costs two discovery requests (aggregated), one list and one watch.
    let mut startup: Vec<String> = server
        .requests()
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
    wait_for(&api, "kopf-example-1", "the status", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello world")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Only the test's own status PATCH: the operator sent nothing (a NOOP cause).
    assert_eq!(writes(&server).len(), 1, "{:?}", writes(&server));
    let _ = stop_tx.send(());
    running.await.expect("join").expect("operator ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_handler_adds_and_releases_the_finalizer() {
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(crd()).expect("crd");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .on_delete("kopfexamples", "delete_fn", delete_fn);
    let client = server.client();
    let running = tokio::spawn(async move {
        op.run_until(client, async {
            let _ = stop_rx.await;
        })
        .await
    });
    let api = api(&server);
    for _ in 0..100 {
        if server
            .watches()
            .iter()
            .any(|w| w.resource.ends_with("kopfexamples"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.clear_requests();
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "k"}, "spec": {"field": "value"}}))
        .expect("obj");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    wait_for(&api, "k", "the status", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello world")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    api.delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(&api, "k", "the object to go", |o| o.is_none()).await;
    insta::assert_json_snapshot!("finalizer_cycle", writes(&server));
    let _ = stop_tx.send(());
    running.await.expect("join").expect("operator ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_resources_fail_at_start_with_similar_names() {
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(crd()).expect("crd");
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
