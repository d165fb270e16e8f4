//! Settling: an operator on the test's runtime under a paused clock is waited for until it
//! is idle (`Running::settled`), so that a test asserts what did not happen without sleeping,
//! and runs hours of operator time at once (`Running::advance`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kopf::testing::{FakeApiServer, TestError};
use kopf::{HandlerError, Operator, TimerOptions};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{kex_api, obj, paused_server as server, start_here};

async fn create(server: &FakeApiServer, name: &str) {
    kex_api(server)
        .create(
            &PostParams::default(),
            &obj(name, json!({"field": "x", "other": 1})),
        )
        .await
        .expect("create");
}

/// A counter the handlers bump.
fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// A handler that counts its calls in `calls` and answers `answer(n)` to its n-th (from 0).
fn counted(
    calls: &Arc<AtomicUsize>,
    answer: impl Fn(usize) -> Result<Value, HandlerError> + Send + Sync + 'static,
) -> impl Fn() -> std::future::Ready<Result<Value, HandlerError>> + Send + Sync + 'static {
    let calls = calls.clone();
    move || std::future::ready(answer(calls.fetch_add(1, Ordering::SeqCst)))
}

#[tokio::test(start_paused = true)]
async fn once_settled_the_whole_cycle_is_done_and_the_next_timer_is_named() {
    let server = server().await;
    let ticks = counter();
    let operator = Operator::new()
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>(json!("created"))
        })
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_secs(60)),
            counted(&ticks, |n| Ok(json!(n + 1))),
        );
    let running = start_here(&server, operator).await;
    let idle = running.settled().await.expect("settles");
    assert_eq!(idle.next, None, "no object yet, nothing is due: {idle}");

    create(&server, "k").await;
    let settled = running.settled().await.expect("settles");
    // No polling: the handler ran, and its result and the timer's first are stored.
    let obj = kex_api(&server).get("k").await.expect("get");
    assert_eq!(obj.data["status"]["create_fn"], json!("created"), "{obj:?}");
    assert_eq!(obj.data["status"]["tick"], json!(1), "{obj:?}");
    assert_eq!(ticks.load(Ordering::SeqCst), 1);
    let (after, what) = settled.next.expect("the timer is due");
    assert_eq!(what, "a timer's next call", "{settled}");
    assert!(
        after <= Duration::from_secs(60) && after > Duration::from_secs(59),
        "{settled}"
    );
    running.stop().await.expect("stops");
}

#[tokio::test(start_paused = true)]
async fn an_hour_advances_at_once_with_every_tick_of_it() {
    let server = server().await;
    let ticks = counter();
    let operator = Operator::new().timer(
        "kopfexamples",
        "tick",
        TimerOptions::every(Duration::from_secs(60)).sharp(true),
        counted(&ticks, |n| Ok(json!(n + 1))),
    );
    let running = start_here(&server, operator).await;
    create(&server, "k").await;
    running.settled().await.expect("settles");
    assert_eq!(ticks.load(Ordering::SeqCst), 1, "the first call at once");
    let wall = std::time::Instant::now();
    let settled = running
        .advance(Duration::from_secs(3600))
        .await
        .expect("advances");
    eprintln!(
        "an hour of operator time in {:?} of wall time",
        wall.elapsed()
    );
    assert_eq!(ticks.load(Ordering::SeqCst), 61, "one more call a minute");
    let obj = kex_api(&server).get("k").await.expect("get");
    assert_eq!(obj.data["status"]["tick"], json!(61), "{obj:?}");
    assert_eq!(
        settled.next.map(|(_, what)| what),
        Some("a timer's next call")
    );
    running.stop().await.expect("stops");
}

#[tokio::test(start_paused = true)]
async fn a_change_of_another_field_calls_no_field_handler() {
    let server = server().await;
    let calls = counter();
    let operator = Operator::new().on_field(
        "kopfexamples",
        "field_fn",
        "spec.field",
        counted(&calls, |_| Ok(json!("seen"))),
    );
    let running = start_here(&server, operator).await;
    create(&server, "k").await;
    running.settled().await.expect("settles");
    let at_creation = calls.load(Ordering::SeqCst);
    let requests = server.requests().len();

    let patch = json!({"spec": {"other": 2}});
    kex_api(&server)
        .patch("k", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    running.settled().await.expect("settles");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        at_creation,
        "spec.other is not spec.field"
    );

    // The same wait sees a change of the field itself: the assertion above could fail.
    let patch = json!({"spec": {"field": "y"}});
    kex_api(&server)
        .patch("k", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    running.settled().await.expect("settles");
    assert_eq!(calls.load(Ordering::SeqCst), at_creation + 1);
    assert!(
        server.requests().len() > requests + 2,
        "the handler's writes"
    );
    running.stop().await.expect("stops");
}

#[tokio::test(start_paused = true)]
async fn a_failing_handler_is_due_again_after_its_backoff() {
    let server = server().await;
    let calls = counter();
    let flaky = counted(&calls, |n| match n {
        0 => Err(HandlerError::temporary("not yet", Duration::from_secs(30))),
        _ => Ok(json!("done")),
    });
    let operator = Operator::new().on_create("kopfexamples", "flaky", flaky);
    let running = start_here(&server, operator).await;
    create(&server, "k").await;
    let settled = running.settled().await.expect("settles");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let (after, what) = settled.next.expect("the retry is due");
    assert!(what.starts_with("an object's next cycle"), "{settled}");
    assert!(
        after <= Duration::from_secs(30) && after > Duration::from_secs(29),
        "{settled}"
    );

    // Not a moment before its time...
    running
        .advance(after - Duration::from_secs(1))
        .await
        .expect("advances");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // ...and at its time.
    let settled = running
        .advance(Duration::from_secs(1))
        .await
        .expect("advances");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(settled.next, None, "done: nothing is due; {settled}");
    running.stop().await.expect("stops");
}

#[tokio::test]
async fn settling_needs_a_paused_clock_and_says_so() {
    let server = server().await;
    let operator = Operator::new().on_create("kopfexamples", "create_fn", || async {
        Ok::<_, HandlerError>(())
    });
    let running = start_here(&server, operator).await;
    let error = running.settled().await.expect_err("the clock runs");
    assert!(
        matches!(error, TestError::NotSettleable(why) if why.contains("start_paused = true")),
        "{error}"
    );
    running.stop().await.expect("stops");
}

#[tokio::test(start_paused = true)]
async fn settling_waits_for_work_that_sends_nothing_yet() {
    let server = server().await;
    let calls = counter();
    let c = calls.clone();
    let operator = Operator::new().on_create("kopfexamples", "busy", move || {
        let c = c.clone();
        async move {
            // Work on the runtime with no request and no log line for a long while.
            for _ in 0..1000 {
                tokio::task::yield_now().await;
            }
            c.fetch_add(1, Ordering::SeqCst);
            Ok::<_, HandlerError>(json!("done"))
        }
    });
    let running = start_here(&server, operator).await;
    create(&server, "k").await;
    running.settled().await.expect("settles");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler has finished");
    let obj = kex_api(&server).get("k").await.expect("get");
    assert_eq!(obj.data["status"]["busy"], json!("done"), "{obj:?}");
    running.stop().await.expect("stops");
}
