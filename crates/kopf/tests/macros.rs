//! Handlers registered with the attribute macros, run by `Operator::from_registry()`, and
//! the compile errors of wrong macro use (trybuild).

use std::time::Duration;

use kopf::{HandlerError, Name, New, Old, Operator, Spec};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[kopf::on::create("kopfexamples")]
async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
    Ok(json!({"message": format!("hello {name}: {}", spec["field"])}))
}

#[kopf::on::field("kopfexamples", field = "spec.field", id = "watch_field")]
async fn field_fn(Old(old): Old, New(new): New) -> Result<Value, HandlerError> {
    Ok(json!({"old": old, "new": new}))
}

/// A sync handler with options: runs on a blocking thread, only for labelled objects.
#[kopf::on::create(
    "kopfexamples",
    id = "labelled",
    labels("tier" = "gold", "skip" = absent),
    when = has_spec,
    retries = 3,
    timeout = 30,
    errors = "permanent"
)]
fn labelled_fn(Name(name): Name) -> Result<String, HandlerError> {
    Ok(format!("gold {name}"))
}

/// An update handler restricted to a field with a new-value filter.
#[kopf::on::update("kopfexamples", field = "spec.field", new = "b", backoff = 0.5)]
async fn became_b(New(new): New) -> Result<Value, HandlerError> {
    Ok(json!({"now": new}))
}

fn has_spec(body: &Value) -> bool {
    body.get("spec").is_some()
}

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn macro_registered_handlers_run() {
    let server = common::server().await;
    let running = common::Running::start(&server, Operator::from_registry()).await;
    let api = common::kex_api(&server);
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "m", "labels": {"tier": "gold"}}, "spec": {"field": "a"}}))
        .expect("obj");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let mut status = Value::Null;
    for _ in 0..400 {
        status = api.get("m").await.expect("get").data["status"].clone();
        if status.get("create_fn").is_some()
            && status.get("watch_field/spec.field").is_some()
            && status.get("labelled").is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(status["create_fn"]["message"], "hello m: \"a\"");
    assert_eq!(status["labelled"], "gold m");
    // A null in a merge patch removes the key: only "new" is stored.
    assert_eq!(status["watch_field/spec.field"], json!({"new": "a"}));
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "b"}})),
    )
    .await
    .expect("patch");
    for _ in 0..400 {
        status = api.get("m").await.expect("get").data["status"].clone();
        if status["watch_field/spec.field"]["new"] == "b"
            && status.get("became_b/spec.field").is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        status["watch_field/spec.field"],
        json!({"old": "a", "new": "b"})
    );
    assert_eq!(status["became_b/spec.field"], json!({"now": "b"}));
    running.stop().await;
}

/// Wrong uses of the macros fail to compile with messages that point at the user's code.
#[test]
fn macro_misuse_is_a_clear_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
