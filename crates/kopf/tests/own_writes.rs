//! Reading one's own writes: a write is back when the watch shows a state of its
//! resourceVersion or a newer one (resourceVersions compared as numbers, KEP-5504); how long
//! that took is a histogram of the metrics, and so is giving up at the consistency timeout.

mod common;

use std::time::Duration;

use kopf::metrics::Metrics;
use kopf::{HandlerError, Operator, TimerOptions};
use kube::api::PostParams;
use serde_json::json;

use common::{Running, eventually, kex_api, obj, paused_server, until_object};

/// Until the creation is handled (the delayed watch events are the fake server's own
/// timers: settling does not wait for them).
async fn handled(server: &kopf::testing::FakeApiServer) {
    until_object(&kex_api(server), "k", "the diff-base", |o| {
        o.and_then(|o| o.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
    })
    .await;
}

/// The histogram's `_sum` and `_count` for an outcome.
fn waits(metrics: &Metrics, outcome: &str) -> (f64, u64) {
    let labels = format!("resource=\"kopfexamples\",outcome=\"{outcome}\"");
    common::histogram(metrics, "kopf_own_write_seen_seconds", &labels)
}

#[tokio::test(start_paused = true)]
async fn the_wait_for_each_own_write_is_measured_until_the_watch_shows_it() {
    let server = paused_server().await;
    let metrics = Metrics::new();
    let op =
        Operator::new()
            .metrics(metrics.clone())
            .on_create("kopfexamples", "create_fn", || async {
                Ok::<_, HandlerError>(json!("done"))
            });
    let running = Running::start(&server, op).await;
    server.set_watch_event_delay(Duration::from_millis(400));
    kex_api(&server)
        .create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    handled(&server).await;
    eventually("the write seen through the watch", async || {
        waits(&metrics, "seen").1 >= 1
    })
    .await;
    running.settled().await;
    let (sum, count) = waits(&metrics, "seen");
    assert!(count >= 1, "{}", metrics.encode());
    // The fake server sends its watch events one after the other, each after the delay:
    // the state of the cycle's last write (it writes the object, then its status) comes
    // two delays after the writes. Exact under the paused clock.
    let mean = sum / count as f64;
    assert!(
        (0.79..0.81).contains(&mean),
        "mean wait {mean} s over {count}"
    );
    assert_eq!(waits(&metrics, "timeout").1, 0);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_not_back_by_the_consistency_timeout_counts_as_a_timeout() {
    let server = paused_server().await;
    let metrics = Metrics::new();
    // A timer keeps the object's worker (it waits for its write, with a deadline).
    let op = Operator::new()
        .metrics(metrics.clone())
        .consistency_timeout(Duration::from_millis(300))
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>(json!("done"))
        })
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_secs(3600)),
            || async { Ok::<_, HandlerError>(()) },
        );
    let running = Running::start(&server, op).await;
    server.set_watch_event_delay(Duration::from_millis(1200));
    kex_api(&server)
        .create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    handled(&server).await;
    running.settled().await;
    let (sum, count) = waits(&metrics, "timeout");
    assert!(count >= 1, "{}", metrics.encode());
    assert!(
        (sum / count as f64 - 0.3).abs() < 0.01,
        "each gave up at the deadline: {sum} s over {count}"
    );
    running.stop().await;
}

/// A cycle whose writes would change nothing sends nothing (P19: in every write mode): a
/// restart's resume handler that returns what it returned before, on an object whose
/// diff-base is stored, makes no write at all.
#[tokio::test(start_paused = true)]
async fn a_cycle_that_would_change_nothing_sends_nothing() {
    let server = paused_server().await;
    let resumed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let op = || {
        let r = resumed.clone();
        Operator::new()
            .on_create("kopfexamples", "create_fn", || async {
                Ok::<_, HandlerError>(json!("created"))
            })
            .on_resume("kopfexamples", "resume_fn", move || {
                r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok::<_, HandlerError>(json!("the same")) }
            })
    };
    kex_api(&server)
        .create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    let running = Running::start(&server, op()).await;
    running.settled().await;
    running.stop().await;
    let running = Running::start(&server, op()).await;
    running.settled().await;
    running.stop().await;
    // The third start: the resume handler runs again, with the result it stored the last
    // time.
    let mark = server.requests().len();
    let third = Running::start(&server, op()).await;
    third.settled().await;
    third.stop().await;
    let writes: Vec<String> = server.requests()[mark..]
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(writes, Vec::<String>::new(), "no write");
    assert_eq!(
        resumed.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the resume handler ran at the second start and at the third"
    );
}
