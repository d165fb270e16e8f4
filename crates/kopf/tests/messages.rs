//! What the operator says when the API server refuses a write, or when the state it
//! stored on an object is corrupt: the server's own words, the object, the key and value.
//!
//! The operator runs on `kopf::testing`'s runner, which captures its log lines.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use kopf::{HandlerError, Operator};
use kopf_testing::{FaultRule, RequestPattern};
use kube::api::PostParams;
use serde_json::json;

use common::{Running, eventually, kex_api, obj, server, settle};

/// A creating operator whose handler counts its calls.
fn creating(calls: &Arc<AtomicU32>) -> Operator {
    let calls = calls.clone();
    Operator::new().on_create("kopfexamples", "create_fn", move || {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, HandlerError>(json!({"message": "hello"})) }
    })
}

/// Nothing the operator logged took the refusal for a change of the object.
fn assert_no_change_reported(running: &Running) {
    let changing: Vec<String> = running
        .logs()
        .into_iter()
        .filter(|l| l.contains("keeps changing") || l.contains("changed while it was written"))
        .collect();
    assert!(changing.is_empty(), "{changing:#?}");
}

/// A handler's patch that takes the object's annotations beyond kube's 256 KiB: the
/// object's PATCH is refused with 422 Invalid, and the log says what the server said (not
/// that the object keeps changing, which is what a failed resourceVersion test means). (A
/// diff-base too large is not sent at all: see `large_objects.rs`.)
#[tokio::test]
async fn a_refused_object_patch_is_logged_with_the_servers_message() {
    let server = server().await;
    // A delete handler: the finalizer goes with the handler's patch, in the guarded JSON
    // patch.
    let op = Operator::new()
        .on_create(
            "kopfexamples",
            "create_fn",
            |patch: kopf::handler::Patch| {
                let blob = "x".repeat(300 * 1024);
                patch.merge(json!({"metadata": {"annotations": {"example.com/blob": blob}}}));
                async { Ok::<_, HandlerError>(()) }
            },
        )
        .on_delete("kopfexamples", "delete_fn", || async {
            Ok::<_, HandlerError>(())
        });
    let running = Running::start(&server, op).await;
    kex_api(&server)
        .create(&PostParams::default(), &obj("big", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the refusal logged", async || {
        !running
            .logged_at("ERROR", "metadata.annotations: Too long")
            .is_empty()
    })
    .await;
    let refused = running.logged_at("ERROR", "metadata.annotations: Too long");
    assert!(
        refused[0].contains("name=big ")
            && refused[0].contains(
                r#"the PATCH of the object failed with 422: KopfExample.kopf.dev "big" is invalid"#
            ),
        "{}",
        refused[0]
    );
    assert_no_change_reported(&running);
    running.stop().await;
}

/// A 422 Invalid on the guarded JSON patch (the finalizer with the object's other changes)
/// is the server refusing the content, not a failed resourceVersion test: it is logged with
/// the server's message (before, it read "the object keeps changing").
#[tokio::test]
async fn a_422_on_the_finalizer_patch_is_not_taken_for_a_change() {
    let server = server().await;
    let message = r#"KopfExample.kopf.dev "k" is invalid: metadata.finalizers[0]: Invalid value: "kopf.zalando.org/KopfFinalizerMarker": refused here"#;
    server.inject_fault(FaultRule {
        pattern: RequestPattern::any()
            .verb("patch")
            .resource("kopfexamples")
            .name("k"),
        code: 422,
        count: None,
        retry_after: None,
        message: Some(message.into()),
    });
    let calls = Arc::new(AtomicU32::new(0));
    let op = creating(&calls).on_delete("kopfexamples", "delete_fn", || async {
        Ok::<_, HandlerError>(())
    });
    let running = Running::start(&server, op).await;
    kex_api(&server)
        .create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the refusal logged", async || {
        !running.logged_at("ERROR", "refused here").is_empty()
    })
    .await;
    let refused = running.logged_at("ERROR", "refused here");
    assert!(
        refused[0].contains("the PATCH of the object failed with 422: ")
            && refused[0].contains(message),
        "{}",
        refused[0]
    );
    assert_no_change_reported(&running);
    running.stop().await;
}

/// Corrupt progress records of every kind: each one is a WARNING that names the object,
/// the annotation and its value, once; the handler then runs as if there were none.
#[tokio::test]
async fn each_corrupt_progress_record_is_one_warning_with_its_key_and_value() {
    let server = server().await;
    let api = kex_api(&server);
    let corrupt = [
        ("c-json", "{"),
        ("c-empty", ""),
        ("c-array", "[]"),
        ("c-type", r#"{"retries":"3"}"#),
        ("c-time", r#"{"delayed":"soon"}"#),
        ("c-started", r#"{"started":""}"#),
        ("c-purpose", r#"{"purpose":""}"#),
        ("c-subrefs", r#"{"subrefs":[""]}"#),
    ];
    for (name, value) in corrupt {
        let mut o = obj(name, json!({"field": "a"}));
        o.metadata.annotations = Some(
            [("kopf.zalando.org/create_fn".to_string(), value.to_string())]
                .into_iter()
                .collect(),
        );
        api.create(&PostParams::default(), &o)
            .await
            .expect("create");
    }
    let calls = Arc::new(AtomicU32::new(0));
    let running = Running::start(&server, creating(&calls)).await;
    eventually("every handler ran", async || {
        calls.load(Ordering::SeqCst) >= corrupt.len() as u32
    })
    .await;
    settle(&server).await;
    for (name, value) in corrupt {
        let lines: Vec<String> = running
            .logged_at(
                "WARN",
                "The progress record of handler 'create_fn' is not readable",
            )
            .into_iter()
            .filter(|l| l.contains(&format!("name={name} ")))
            .collect();
        assert_eq!(lines.len(), 1, "{name}: {:#?}", running.logs());
        assert!(
            lines[0].contains(&format!("kopf.zalando.org/create_fn is '{value}' (")),
            "{name}: {}",
            lines[0]
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), corrupt.len() as u32);
    running.stop().await;
}
