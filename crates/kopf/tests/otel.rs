//! The spans the `otel` feature exports: one per processing cycle of an object, with the
//! object and the cause, and under it one per handler call, with the handler's id, retry
//! number and outcome. Read from `kopf::otel::CollectedSpans` (kept in memory), with the operator running
//! against the fake API server.
//!
//! `cargo test -p kopf --features otel --test otel`

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{kex_api, obj, server};
use kopf::otel::CollectedSpans;
use kopf::testing::OperatorTest;
use kopf::{Cause, HandlerError, Operator};
use kube::api::PostParams;
use opentelemetry::trace::{SpanId, Status};
use opentelemetry::{Key, Value as OtelValue};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};
use serde_json::json;
use tracing_subscriber::Layer;

/// A span's attribute, as text.
fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == Key::from(key.to_string()))
        .map(|kv| match &kv.value {
            OtelValue::String(s) => s.to_string(),
            other => other.to_string(),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_span_per_cycle_and_a_handler_span_per_call_under_it() {
    let server = server().await;
    let exporter = CollectedSpans::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let operator = Operator::new().on_create("kopfexamples", "create_fn", move |c: Cause| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            if c.retry == 0 {
                Err(HandlerError::temporary(
                    "not yet",
                    Duration::from_millis(100),
                ))
            } else {
                Ok(Some(json!("done")))
            }
        }
    });
    let tracing_provider = provider.clone();
    let running = OperatorTest::new(operator)
        .layer(move || kopf::otel::layer(&tracing_provider).boxed())
        .start(&server)
        .await
        .expect("the operator starts");
    let api = kex_api(&server);
    let created = api
        .create(&PostParams::default(), &obj("k", json!({"field": "x"})))
        .await
        .expect("create");
    let uid = created.metadata.uid.clone().expect("a uid");
    running
        .wait_for_log("Handler 'create_fn' succeeded", Duration::from_secs(10))
        .await
        .expect("the handler succeeds on its second attempt");
    // The span of the cycle ends after its log lines: wait for it to be exported too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans = exporter.spans();
        let handlers = spans.iter().filter(|s| s.name == "handler").count();
        let cycles_done = spans
            .iter()
            .filter(|s| s.name == "cycle" && attr(s, "outcome").as_deref() == Some("done"))
            .count();
        if (handlers >= 2 && cycles_done >= 1) || tokio::time::Instant::now() > deadline {
            break spans;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    running.stop().await.expect("the operator stops cleanly");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "two attempts");

    let by_id: HashMap<SpanId, &SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    let cycles: Vec<&SpanData> = spans.iter().filter(|s| s.name == "cycle").collect();
    // Every cycle is about the object, with its cause.
    assert!(!cycles.is_empty());
    for cycle in &cycles {
        assert_eq!(attr(cycle, "resource").as_deref(), Some("kopfexamples"));
        assert_eq!(attr(cycle, "namespace").as_deref(), Some("default"));
        assert_eq!(attr(cycle, "name").as_deref(), Some("k"));
        assert_eq!(attr(cycle, "kind").as_deref(), Some("KopfExample"));
        assert_eq!(attr(cycle, "uid").as_deref(), Some(uid.as_str()));
        assert!(attr(cycle, "reason").is_some(), "{cycle:?}");
        assert!(attr(cycle, "outcome").is_some(), "{cycle:?}");
    }

    // The handler calls, in order: each under a cycle of the creation, of the same trace.
    let mut handlers: Vec<&SpanData> = spans.iter().filter(|s| s.name == "handler").collect();
    handlers.sort_by_key(|s| s.start_time);
    assert_eq!(handlers.len(), 2, "{handlers:#?}");
    let mut parents = Vec::new();
    for handler in &handlers {
        let parent = by_id
            .get(&handler.parent_span_id)
            .unwrap_or_else(|| panic!("the parent of {handler:?} is exported"));
        assert_eq!(parent.name, "cycle");
        assert_eq!(
            parent.span_context.trace_id(),
            handler.span_context.trace_id(),
            "a handler call is in its cycle's trace"
        );
        assert_eq!(attr(parent, "reason").as_deref(), Some("create"));
        assert_eq!(attr(handler, "handler").as_deref(), Some("create_fn"));
        parents.push(parent.span_context.span_id());
    }
    assert_ne!(parents[0], parents[1], "one cycle per attempt");

    let (first, second) = (handlers[0], handlers[1]);
    assert_eq!(attr(first, "retry").as_deref(), Some("0"));
    assert_eq!(attr(first, "outcome").as_deref(), Some("failed-temporary"));
    assert_eq!(attr(first, "delay").as_deref(), Some("0.1"));
    assert!(
        matches!(&first.status, Status::Error { description } if description.contains("not yet")),
        "{:?}",
        first.status
    );
    assert_eq!(
        attr(by_id[&first.parent_span_id], "outcome").as_deref(),
        Some("pending")
    );
    assert_eq!(attr(second, "retry").as_deref(), Some("1"));
    assert_eq!(attr(second, "outcome").as_deref(), Some("succeeded"));
    assert_eq!(second.status, Status::Unset);
    assert_eq!(
        attr(by_id[&second.parent_span_id], "outcome").as_deref(),
        Some("done")
    );

    // The plain log spans of the object (not cycles) are not exported; nor is anything
    // else named `object`.
    assert!(spans.iter().all(|s| s.name != "object"));
    provider.shutdown().expect("the provider shuts down");
}
