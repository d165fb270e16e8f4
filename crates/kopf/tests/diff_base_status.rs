//! The diff-base in the status (`run --diff-base-storage status`, Kopf's
//! `StatusDiffBaseStorage` with `StatusProgressStorage`): the `minimal` example sends one
//! `/status` PATCH per creation and per update, in Kopf's wire format; objects that Python
//! Kopf handled so (or that kopf-rs handled with the annotation) are continued, not created
//! again; a failed status write loses no result.

#[path = "../examples/minimal.rs"]
#[allow(dead_code)]
mod example;

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use kopf::{Cause, HandlerResult, Operator, persistence::DiffBaseLocation};
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{Running, kex_api, obj, operator_requests, settle, until_object};

const FIELD: &str = "last-handled-configuration";
const ANNOTATION: &str = "kopf.zalando.org/last-handled-configuration";

/// The `minimal` example with the diff-base (and so the progress) in the status.
fn minimal_in_status() -> Operator {
    example::operator().diff_base_storage(DiffBaseLocation::status())
}

/// The stored diff-base of an object, if any.
fn stored(o: Option<&DynamicObject>) -> Option<Value> {
    o.and_then(|o| o.data.pointer("/status/kopf/last-handled-configuration"))
        .cloned()
}

/// The operator's writes as `METHOD path` (the object's path relative to the namespace).
fn write_lines(server: &FakeApiServer) -> Vec<String> {
    operator_requests(server)
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| {
            let path = r
                .path
                .rsplit_once("/kopfexamples/")
                .map_or(r.path.clone(), |(_, p)| p.to_string());
            format!("{} {path}", r.method)
        })
        .collect()
}

fn status_patches() -> RequestPattern {
    RequestPattern::any()
        .verb("patch")
        .resource("kopfexamples")
        .subresource("status")
}

#[tokio::test(start_paused = true)]
async fn minimal_sends_one_status_patch_per_creation_and_per_update() {
    let server = common::paused_server().await;
    let running = Running::start(&server, minimal_in_status()).await;
    let api = kex_api(&server);
    server.clear_requests();
    let names = ["k1", "k2", "k3"];
    for name in names {
        api.create(&PostParams::default(), &obj(name, json!({"field": "a"})))
            .await
            .expect("create");
    }
    for name in names {
        until_object(&api, name, "the creation handled", |o| stored(o).is_some()).await;
    }
    settle(&server).await;
    let mut lines = write_lines(&server);
    lines.sort();
    assert_eq!(
        lines,
        vec!["PATCH k1/status", "PATCH k2/status", "PATCH k3/status"]
    );
    // The exact request: the result and the diff-base, a JSON string without a newline.
    for r in operator_requests(&server) {
        let body: Value = serde_json::from_str(&r.body).expect("JSON");
        assert_eq!(
            body,
            json!({"status": {
                "create_fn": {"message": "hello world"},
                "kopf": {FIELD: "{\"spec\":{\"field\":\"a\"}}"},
            }}),
            "{}",
            r.path
        );
    }
    // Stored as sent; no annotation of ours on the object, no progress left.
    let o = api.get("k1").await.expect("get");
    assert_eq!(
        o.data["status"]["kopf"],
        json!({FIELD: "{\"spec\":{\"field\":\"a\"}}"})
    );
    assert!(o.metadata.annotations.unwrap_or_default().is_empty());

    server.clear_requests();
    for name in names {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"field": "b"}})),
        )
        .await
        .expect("update");
    }
    for name in names {
        until_object(&api, name, "the update handled", |o| {
            stored(o) == Some(json!("{\"spec\":{\"field\":\"b\"}}"))
        })
        .await;
    }
    settle(&server).await;
    let mut lines = write_lines(&server);
    lines.sort();
    assert_eq!(
        lines,
        vec!["PATCH k1/status", "PATCH k2/status", "PATCH k3/status"]
    );
    let o = api.get("k2").await.expect("get");
    assert_eq!(o.data["status"]["update_fn"], json!({"field": "b"}));
    assert_eq!(o.data["status"]["create_fn"]["message"], "hello world");
    running.stop().await;
}

/// Creates `name` with `spec.field = "new"` and the state a previous operator left.
async fn handled_before(api: &Api<DynamicObject>, name: &str, annotations: Value, status: Value) {
    let mut o = obj(name, json!({"field": "new"}));
    o.metadata.annotations = serde_json::from_value(annotations).expect("annotations");
    api.create(&PostParams::default(), &o)
        .await
        .expect("create");
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .expect("status");
}

#[tokio::test(start_paused = true)]
async fn objects_of_kopf_and_of_the_annotation_are_continued_as_updates() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    // As Python Kopf leaves it with StatusDiffBaseStorage and StatusProgressStorage: the
    // essence as compact JSON in a string, the purged progress an empty object.
    handled_before(
        &api,
        "by-kopf",
        json!({}),
        json!({"create_fn": {"message": "by kopf"},
            "kopf": {"progress": {}, FIELD: "{\"spec\":{\"field\":\"old\"}}"}}),
    )
    .await;
    // As kopf-rs (or Kopf) left it with the default annotation storage.
    handled_before(
        &api,
        "by-annotation",
        json!({ANNOTATION: "{\"spec\":{\"field\":\"old\"}}\n"}),
        json!({"create_fn": {"message": "by annotation"}}),
    )
    .await;
    server.clear_requests();
    let running = Running::start(&server, minimal_in_status()).await;
    for name in ["by-kopf", "by-annotation"] {
        until_object(&api, name, "the update handled", |o| {
            stored(o) == Some(json!("{\"spec\":{\"field\":\"new\"}}"))
        })
        .await;
    }
    settle(&server).await;
    let mut lines = write_lines(&server);
    lines.sort();
    assert_eq!(
        lines,
        vec!["PATCH by-annotation/status", "PATCH by-kopf/status"]
    );
    for (name, message) in [("by-kopf", "by kopf"), ("by-annotation", "by annotation")] {
        let o = api.get(name).await.expect("get");
        assert_eq!(
            o.data["status"]["create_fn"]["message"], message,
            "not created again"
        );
        assert_eq!(o.data["status"]["update_fn"], json!({"field": "new"}));
    }
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_503_on_the_one_status_patch_loses_no_result() {
    let server = common::paused_server().await;
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", move |_c: Cause| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { HandlerResult::Ok(Some(json!({"message": "hello"}))) }
        })
        .diff_base_storage(DiffBaseLocation::status());
    let running = Running::start(&server, op).await;
    server.inject_fault(FaultRule::new(status_patches(), 503, 1));
    server.clear_requests();
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the creation handled", |o| stored(o).is_some()).await;
    settle(&server).await;
    let o = api.get("k").await.expect("get");
    assert_eq!(o.data["status"]["create_fn"]["message"], "hello");
    let codes: Vec<(String, u16)> = operator_requests(&server)
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| {
            (
                r.path.rsplit('/').next().unwrap_or("").to_string(),
                r.status,
            )
        })
        .collect();
    assert_eq!(
        codes,
        vec![("status".to_string(), 503), ("status".to_string(), 200)]
    );
    // Nothing of the failed cycle was stored: the handler ran again (at least once).
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_handlers_object_patch_goes_before_the_claiming_status_write() {
    let server = common::paused_server().await;
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", move |c: Cause| {
            counted.fetch_add(1, Ordering::SeqCst);
            c.patch
                .merge(json!({"metadata": {"labels": {"handled": "yes"}}}));
            async { HandlerResult::Ok(Some(json!({"message": "hello"}))) }
        })
        .diff_base_storage(DiffBaseLocation::status());
    let running = Running::start(&server, op).await;
    // The status write fails once after the object's went through: the cause is not claimed.
    server.inject_fault(FaultRule::new(status_patches(), 500, 1));
    server.clear_requests();
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the creation handled", |o| stored(o).is_some()).await;
    settle(&server).await;
    let o = api.get("k").await.expect("get");
    assert_eq!(o.data["status"]["create_fn"]["message"], "hello");
    assert_eq!(
        o.metadata
            .labels
            .unwrap_or_default()
            .get("handled")
            .map(String::as_str),
        Some("yes")
    );
    let codes: Vec<(String, u16)> = operator_requests(&server)
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| {
            (
                r.path.rsplit('/').next().unwrap_or("").to_string(),
                r.status,
            )
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            ("k".to_string(), 200),
            ("status".to_string(), 500),
            ("status".to_string(), 200),
        ],
        "the object first, then the status; the second cycle's object patch is a no-op"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_delete_handler_costs_the_finalizer_patch_then_one_status_patch() {
    let server = common::paused_server().await;
    let op = minimal_in_status().on_delete("kopfexamples", "delete_fn", |_c: Cause| async {
        HandlerResult::Ok(None)
    });
    let running = Running::start(&server, op).await;
    server.clear_requests();
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the creation handled", |o| stored(o).is_some()).await;
    settle(&server).await;
    assert_eq!(write_lines(&server), vec!["PATCH k", "PATCH k/status"]);
    let o = api.get("k").await.expect("get");
    assert_eq!(
        o.metadata.finalizers.unwrap_or_default(),
        vec!["kopf.zalando.org/KopfFinalizerMarker".to_string()]
    );
    running.stop().await;
}
