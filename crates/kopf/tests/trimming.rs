//! What the engine keeps of each object for its daemons and timers: only what they read
//! (their arguments, or `Options::reads`), with metadata and status; their patches outside
//! what was kept still reach the server.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::handler::{Body, HandlerSpec, IntoHandler, Patch, Spec};
use kopf::testing::FakeApiServer;
use kopf::{HandlerError, Operator, Options, TimerOptions};
use kube::api::PostParams;
use serde_json::{Value, json};

use common::{kex_api, obj, paused_server as server, start_here};

async fn create(server: &FakeApiServer, name: &str) {
    let spec = json!({"field": "x", "other": 1, "big": "y".repeat(10_000)});
    kex_api(server)
        .create(&PostParams::default(), &obj(name, spec))
        .await
        .expect("create");
}

/// A timer (every minute) that records the body it is given.
fn recording(
    seen: &Arc<Mutex<Vec<Value>>>,
) -> impl Fn(Body) -> std::future::Ready<Result<Value, HandlerError>> + Send + Sync + 'static {
    let seen = seen.clone();
    move |Body(body)| {
        seen.lock().expect("seen").push(body);
        std::future::ready(Ok(json!({"ticked": true})))
    }
}

fn every_minute() -> TimerOptions {
    TimerOptions::every(Duration::from_secs(60))
}

#[tokio::test(start_paused = true)]
async fn a_timer_that_declares_what_it_reads_is_given_only_that() {
    let server = server().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let timer = HandlerSpec::timer("tick", every_minute(), recording(&seen).into_handler());
    let operator =
        Operator::new().register("kopfexamples", timer, Options::new().reads("spec.field"));
    let running = start_here(&server, operator).await;
    create(&server, "k").await;
    running
        .advance(Duration::from_secs(60))
        .await
        .expect("settles");
    let seen = seen.lock().expect("seen").clone();
    assert!(seen.len() >= 2, "it ticked: {seen:?}");
    for body in &seen {
        assert_eq!(body["spec"], json!({"field": "x"}), "only spec.field");
        assert_eq!(body["metadata"]["name"], "k", "the metadata is kept");
        assert_eq!(body["kind"], "KopfExample");
    }
    // What the timer stored after its first tick is in the status it sees next.
    assert_eq!(
        seen.last().map(|b| &b["status"]["tick"]),
        Some(&json!({"ticked": true})),
        "the status is kept"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timer_of_the_whole_body_is_given_everything() {
    let server = server().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let operator = Operator::new().timer("kopfexamples", "tick", every_minute(), recording(&seen));
    let running = start_here(&server, operator).await;
    create(&server, "k").await;
    running.settled().await.expect("settles");
    let seen = seen.lock().expect("seen").clone();
    let body = seen.first().expect("it ticked");
    assert_eq!(body["spec"]["other"], 1);
    assert_eq!(body["spec"]["big"].as_str().map(str::len), Some(10_000));
}

#[derive(serde::Deserialize)]
struct Field {
    field: String,
}

#[tokio::test(start_paused = true)]
async fn a_patch_that_removes_a_field_the_timer_did_not_read_reaches_the_server() {
    let server = server().await;
    let tick = |Spec(spec): Spec<Field>, patch: Patch| {
        patch.merge(json!({"spec": {"other": null, "big": null, "seen": spec.field}}));
        std::future::ready(Ok::<_, HandlerError>(()))
    };
    let operator = Operator::new().timer("kopfexamples", "tick", every_minute(), tick);
    let running = start_here(&server, operator).await;
    create(&server, "k").await;
    running.settled().await.expect("settles");
    let stored = kex_api(&server).get("k").await.expect("get");
    assert_eq!(
        stored.data["spec"],
        json!({"field": "x", "seen": "x"}),
        "the fields it did not read were removed all the same"
    );
}

/// An idle worker that stays for its timers keeps its state trimmed, but not while its own
/// write has still to come back: if that write comes back too late and the read that then
/// replaces it fails, the state at hand is processed again (at least once), and it must be
/// the whole state. Here every such read fails: the creation handler, run again on the
/// state at hand, must see the spec each time.
#[tokio::test(start_paused = true)]
async fn a_state_processed_again_after_a_failed_read_is_whole() {
    use kopf::testing::{FaultRule, RequestPattern};
    let server = server().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let create_fn = {
        let seen = seen.clone();
        move |Body(body): Body| {
            seen.lock()
                .expect("seen")
                .push(body["spec"]["field"].clone());
            std::future::ready(Ok::<_, HandlerError>(()))
        }
    };
    let tick =
        |kopf::handler::Name(_): kopf::handler::Name| std::future::ready(Ok::<_, HandlerError>(()));
    let operator = Operator::new()
        .consistency_timeout(Duration::from_millis(300))
        .on_create("kopfexamples", "create_fn", create_fn)
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_secs(3600)),
            tick,
        );
    let running = start_here(&server, operator).await;
    // A watch slower than the consistency timeout, and reads of the object that fail.
    server.set_watch_event_delay(Duration::from_secs(30));
    server.inject_fault(FaultRule {
        count: None,
        ..FaultRule::new(RequestPattern::any().verb("get").name("k"), 500, 0)
    });
    create(&server, "k").await;
    running
        .advance(Duration::from_secs(120))
        .await
        .expect("settles");
    let seen = seen.lock().expect("seen").clone();
    assert!(!seen.is_empty(), "the creation handler ran");
    assert!(
        seen.iter().all(|field| field == "x"),
        "every run saw the spec: {seen:?}"
    );
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.method == "GET" && r.path.ends_with("/k")),
        "a read replaced a write that came back late"
    );
}

/// Objects trimmed as they arrive (no change handler) never have their diff-base rewritten
/// from a trimmed state: one left by an earlier version of the operator stays as it is.
#[tokio::test(start_paused = true)]
async fn a_diff_base_left_on_a_trimmed_object_is_not_rewritten() {
    let server = server().await;
    let base = "{\"spec\":{\"field\":\"old\",\"other\":1}}";
    let mut o = obj(
        "k",
        json!({"field": "x", "other": 1, "big": "y".repeat(1_000)}),
    );
    o.metadata.annotations = Some(
        [(
            "kopf.zalando.org/last-handled-configuration".to_string(),
            base.to_string(),
        )]
        .into(),
    );
    kex_api(&server)
        .create(&PostParams::default(), &o)
        .await
        .expect("create");
    let tick = |Spec(spec): Spec<Field>| std::future::ready(Ok::<_, HandlerError>(spec.field));
    let operator = Operator::new().timer("kopfexamples", "tick", every_minute(), tick);
    let running = start_here(&server, operator).await;
    running
        .advance(Duration::from_secs(120))
        .await
        .expect("settles");
    let stored = kex_api(&server).get("k").await.expect("get");
    assert_eq!(stored.data["status"]["tick"], "x", "the timer ran");
    assert_eq!(
        stored
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kopf.zalando.org/last-handled-configuration"))
            .map(String::as_str),
        Some(base),
        "the diff-base is untouched"
    );
}

/// A timer's `when` filter is checked again at each call, on the state the timer keeps: one
/// that looks at a field the timer's arguments do not read keeps whole objects (or says
/// what it reads), so the timer still runs.
#[tokio::test(start_paused = true)]
async fn a_timer_whose_filter_looks_elsewhere_still_runs() {
    let server = server().await;
    let tick = |Spec(spec): Spec<Field>| std::future::ready(Ok::<_, HandlerError>(spec.field));
    let timer = HandlerSpec::timer("tick", every_minute(), tick.into_handler());
    let operator = Operator::new()
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>(())
        })
        .register(
            "kopfexamples",
            timer,
            Options::new().when(|b| b["spec"]["other"] == 1),
        );
    let running = start_here(&server, operator).await;
    create(&server, "k").await;
    running
        .advance(Duration::from_secs(180))
        .await
        .expect("settles");
    let stored = kex_api(&server).get("k").await.expect("get");
    assert_eq!(stored.data["status"]["tick"], "x", "the timer ran");
}
