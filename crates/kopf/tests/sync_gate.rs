//! At the start, no handler runs before every watch of the operator has listed once: its
//! own resource's, and those of the other resources it watches (owned, related, indexed),
//! so that no handler works on a partial view. A watch that cannot list is named in a
//! warning every minute.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::testing::RequestPattern;
use kopf::{HandlerError, Operator};
use kube::api::PostParams;
use serde_json::json;
use tokio::time::Instant;

use common::{Running, kex_api, obj, paused_server};

/// When the creation handler ran, after the operator's start.
type Ran = Arc<Mutex<Option<Duration>>>;

fn operator(ran: &Ran, start: Instant) -> Operator {
    let ran = ran.clone();
    Operator::new()
        .on_create("kopfexamples", "create_fn", move || {
            *ran.lock().expect("lock") = Some(start.elapsed());
            async { Ok::<_, HandlerError>(()) }
        })
        // Another resource the operator watches (as a reconcile's owned kind would be).
        .on_event("configmaps", "seen_fn", || async {
            Ok::<_, HandlerError>(())
        })
}

fn slow_configmap_listing() -> RequestPattern {
    RequestPattern::any().verb("list").resource("configmaps")
}

#[tokio::test(start_paused = true)]
async fn no_handler_runs_before_every_watch_has_listed_once() {
    let server = paused_server().await;
    kex_api(&server)
        .create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    server.add_latency(slow_configmap_listing(), Duration::from_secs(10));
    let ran: Ran = Arc::default();
    let running = Running::start(&server, operator(&ran, Instant::now())).await;
    // The listing's latency is the fake server's own timer: operator time is advanced past it.
    running.advance(Duration::from_secs(15)).await;
    let after = ran.lock().expect("lock").expect("the handler ran");
    assert!(
        after >= Duration::from_secs(10),
        "it ran after the configmaps were listed, not {after:?} after the start"
    );
    assert!(running.logged_at("WARN", "No handler runs yet").is_empty());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_does_not_list_is_named_every_minute() {
    let server = paused_server().await;
    kex_api(&server)
        .create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    server.add_latency(slow_configmap_listing(), Duration::from_secs(150));
    let ran: Ran = Arc::default();
    let running = Running::start(&server, operator(&ran, Instant::now())).await;
    running.advance(Duration::from_secs(155)).await;
    let warnings = running.logged_at("WARN", "No handler runs yet");
    assert_eq!(warnings.len(), 2, "at 60 and 120 s: {warnings:?}");
    assert!(
        warnings[0].contains("/v1/configmaps@*") && !warnings[0].contains("kopfexamples"),
        "names the watch that has not listed: {}",
        warnings[0]
    );
    assert!(
        ran.lock()
            .expect("lock")
            .is_some_and(|t| t >= Duration::from_secs(150))
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn while_the_gate_holds_a_listing_waits_in_the_backlog_not_in_workers() {
    let server = paused_server().await;
    common::create_new(&kex_api(&server), 300).await;
    server.add_latency(slow_configmap_listing(), Duration::from_secs(10));
    let metrics = kopf::metrics::Metrics::new();
    let ran: Ran = Arc::default();
    let op = operator(&ran, Instant::now()).metrics(metrics.clone());
    let running = Running::start(&server, op).await;
    running.advance(Duration::from_secs(5)).await;
    // Each started worker is a state waiting for it (the queue's gauge): as many as the
    // places, the rest of the listing waits as text (before: all 300, each with its body).
    let queued = metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix("kopf_queue_depth{resource=\"kopfexamples\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        (1..=64).contains(&queued),
        "{queued} workers started while the gate holds"
    );
    running.advance(Duration::from_secs(10)).await;
    assert!(ran.lock().expect("lock").is_some(), "then they run");
    running.stop().await;
}
