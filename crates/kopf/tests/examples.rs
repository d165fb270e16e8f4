//! The examples against the fake API server: each one creates, updates and deletes
//! kopf-example-1, and the exact requests the operator sent are snapshotted (insta), so a
//! change in what goes over the wire shows up in review.

#[path = "../examples/minimal.rs"]
mod minimal_example;

#[path = "../examples/handlers.rs"]
mod handlers_example;

#[path = "../examples/errors.rs"]
mod errors_example;

#[path = "../examples/filters.rs"]
mod filters_example;

#[path = "../examples/events.rs"]
mod events_example;

#[path = "../examples/subhandlers.rs"]
mod subhandlers_example;

mod common;

use kopf::Operator;
use kopf_testing::FakeApiServer;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{Running, example_object, kex_api, until_object, writes};

const NAME: &str = "kopf-example-1";
const DIFFBASE: &str = "kopf.zalando.org/last-handled-configuration";

fn diffbase(o: Option<&DynamicObject>) -> Option<Value> {
    let text = o?.metadata.annotations.as_ref()?.get(DIFFBASE)?;
    serde_json::from_str(text).ok()
}

/// The object after a step: what the test checks beyond the snapshot.
struct Steps {
    created: DynamicObject,
    updated: DynamicObject,
}

/// Creates the example object, waits until its creation is handled (the diff-base holds
/// its spec), applies `update` to the spec and waits likewise, deletes it and waits until
/// it is gone. Returns the object after each handled step, and the server.
async fn create_update_delete(op: Operator, update: Value) -> (FakeApiServer, Steps) {
    let server = common::server().await;
    let running = Running::start(&server, op).await;
    let api: Api<DynamicObject> = kex_api(&server);
    api.create(&PostParams::default(), &example_object())
        .await
        .expect("create");
    let spec = example_object().data["spec"].clone();
    until_object(&api, NAME, "the creation to be handled", |o| {
        diffbase(o).is_some_and(|d| d["spec"] == spec)
    })
    .await;
    common::settle(&server).await;
    let created = api.get(NAME).await.expect("get");
    api.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": update })),
    )
    .await
    .expect("update");
    let spec = api.get(NAME).await.expect("get").data["spec"].clone();
    until_object(&api, NAME, "the update to be handled", |o| {
        diffbase(o).is_some_and(|d| d["spec"] == spec)
    })
    .await;
    common::settle(&server).await;
    let updated = api.get(NAME).await.expect("get");
    api.delete(NAME, &DeleteParams::default())
        .await
        .expect("delete");
    until_object(&api, NAME, "the deletion", |o| o.is_none()).await;
    running.stop().await;
    (server, Steps { created, updated })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimal_example() {
    let (server, steps) =
        create_update_delete(minimal_example::operator(), json!({"field": "changed"})).await;
    assert_eq!(
        steps.created.data["status"]["create_fn"],
        json!({"message": "hello world"})
    );
    assert!(
        steps.created.metadata.finalizers.is_none(),
        "no delete handler, no finalizer"
    );
    insta::assert_json_snapshot!("minimal_example", writes(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_example() {
    let (server, steps) =
        create_update_delete(handlers_example::operator(), json!({"field": "changed"})).await;
    assert_eq!(
        steps.created.data["status"]["create_fn"]["message"],
        "created"
    );
    assert_eq!(
        steps.updated.data["status"]["field_fn/spec.field"],
        json!({"old": "value", "new": "changed"})
    );
    insta::assert_json_snapshot!("handlers_example", writes(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_example() {
    let (server, steps) =
        create_update_delete(errors_example::operator(), json!({"field": "changed"})).await;
    let status = &steps.created.data["status"];
    assert_eq!(status["eventually_fn"], "done after 2 retries");
    for failed in ["permanent_fn", "flaky_fn", "slow_fn"] {
        assert!(
            status.get(failed).is_none(),
            "failed handlers deliver nothing"
        );
    }
    let annotations = steps
        .created
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert!(
        !annotations.keys().any(|k| k.ends_with("_fn")),
        "records are purged once every handler has finished: {annotations:?}"
    );
    insta::assert_json_snapshot!("errors_example", writes(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_example() {
    let (server, steps) =
        create_update_delete(filters_example::operator(), json!({"field": "changed"})).await;
    let keys = |o: &DynamicObject| -> Vec<String> {
        let mut k: Vec<String> = o.data["status"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        k.sort();
        k
    };
    assert_eq!(
        keys(&steps.created),
        vec![
            "annotation_absent_fn",
            "annotation_present_fn",
            "field_value_fn/spec.field",
            "label_predicate_fn",
            "label_value_fn",
            "when_fn"
        ]
    );
    assert_eq!(
        steps.updated.data["status"]["field_changed_fn/spec.field"],
        json!({"from": "value", "to": "changed"})
    );
    insta::assert_json_snapshot!("filters_example", writes(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_example() {
    let (server, _) =
        create_update_delete(events_example::operator(), json!({"duration": "soon"})).await;
    let posted: Vec<Value> = writes(&server)
        .into_iter()
        .filter(|w| w["method"] == "POST")
        .map(|w| w["body"].clone())
        .collect();
    let summary: Vec<(&str, &str, &str)> = posted
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or(""),
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("Normal", "Greeting", "Hello, kopf-example-1!"),
            (
                "Error",
                "ParseIntError",
                "Cannot read spec.duration \"soon\": invalid digit found in string"
            ),
        ]
    );
    assert_eq!(posted[0]["involvedObject"]["kind"], "KopfExample");
    assert_eq!(posted[0]["reportingComponent"], "kopf");
    insta::assert_json_snapshot!("events_example", writes(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subhandlers_example() {
    let (server, steps) = create_update_delete(
        subhandlers_example::operator(),
        json!({"items": ["item1", "item2", "item3"]}),
    )
    .await;
    let status = &steps.created.data["status"];
    assert_eq!(status["create_fn"], json!({"items": 2}));
    assert_eq!(status["create_fn/item1"], json!({"created": "item1"}));
    assert_eq!(status["create_fn/item2"], json!({"created": "item2"}));
    assert_eq!(
        steps.updated.data["status"]["items_fn/spec.items/item3"],
        json!({"added": "item3"})
    );
    insta::assert_json_snapshot!("subhandlers_example", writes(&server));
}
