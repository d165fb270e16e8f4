//! The operator's gate (what peering closes): while it is paused the operator sends no list
//! or watch request for its resources, starts no handler cycle, and stops its timers and
//! daemons; when it opens, it lists again and carries on as after a start.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{
    DaemonOptions, HandlerError, Operator, TimerOptions,
    handler::{StopReason, Stopped},
    peering::Gate,
};
use kube::api::PostParams;
use serde_json::json;

use common::{Running, eventually, kex_api, obj, operator_requests, until_object};

const BLOCKER: &str = "in favour of other@host (priority 100)";

/// The operator's requests about KopfExamples (lists, watches, PATCHes), after `seq`.
fn kex_requests(server: &kopf::testing::FakeApiServer, after: u64) -> Vec<String> {
    operator_requests(server)
        .into_iter()
        .filter(|r| r.seq > after && r.path.contains("/kopfexamples"))
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect()
}

fn last_seq(server: &kopf::testing::FakeApiServer) -> u64 {
    server.requests().last().map_or(0, |r| r.seq)
}

async fn logged(running: &Running, text: &str) {
    eventually(&format!("a log line with {text:?}"), async || {
        running.logs().iter().any(|l| l.contains(text))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn paused_from_the_start_nothing_runs_until_the_gate_opens() {
    let server = common::paused_server().await;
    let (control, gate) = Gate::channel();
    control.pause(BLOCKER);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let op = Operator::new()
        .gate(gate)
        .on_create("kopfexamples", "create_fn", move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(json!({"message": "hello"})) }
        });
    let running = Running::start_with(&server, op, Duration::from_secs(70), false).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("g1", json!({"field": "x"})))
        .await
        .expect("create");
    logged(
        &running,
        &format!("Pausing the watch-stream for kopfexamples.kopf.dev (blockers: {BLOCKER})."),
    )
    .await;
    running.settled().await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "no handler runs while paused"
    );
    assert_eq!(kex_requests(&server, 0), Vec::<String>::new());
    let status = api.get("g1").await.expect("get").data["status"].clone();
    assert!(status.is_null(), "nothing written while paused: {status}");

    let before = last_seq(&server);
    control.resume();
    until_object(&api, "g1", "the handler's result", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello")
    })
    .await;
    logged(
        &running,
        "Resuming the watch-stream for kopfexamples.kopf.dev.",
    )
    .await;
    running.settled().await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the create handler runs once"
    );
    let requests = kex_requests(&server, before);
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET") && !r.contains("watch=true")),
        "a listing after the resume: {requests:?}"
    );
    assert_eq!(
        running.logged_at("INFO", "Pausing the watch-stream").len(),
        1,
        "logged once per pause"
    );
    running.stop().await;
}

#[derive(Default)]
struct Seen {
    ticks: AtomicUsize,
    daemon_starts: AtomicUsize,
    reasons: Mutex<Vec<StopReason>>,
}

fn spawning_operator(seen: &Arc<Seen>, gate: Gate) -> Operator {
    let (t, d) = (seen.clone(), seen.clone());
    Operator::new()
        .gate(gate)
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_millis(200)),
            move || {
                t.ticks.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, HandlerError>(()) }
            },
        )
        .daemon(
            "kopfexamples",
            "watchful",
            DaemonOptions::new(),
            move |stopped: Stopped| {
                let seen = d.clone();
                async move {
                    seen.daemon_starts.fetch_add(1, Ordering::SeqCst);
                    let reason = stopped.wait().await;
                    seen.reasons
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(reason);
                    Ok::<_, HandlerError>(())
                }
            },
        )
}

fn reasons(seen: &Seen) -> Vec<StopReason> {
    seen.reasons
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

#[tokio::test(start_paused = true)]
async fn timers_and_daemons_stop_while_paused_and_start_again_after() {
    let server = common::paused_server().await;
    let (control, gate) = Gate::channel();
    let seen = Arc::new(Seen::default());
    let running = Running::start(&server, spawning_operator(&seen, gate)).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("t1", json!({"field": "x"})))
        .await
        .expect("create");
    eventually("ticks and the daemon", async || {
        seen.ticks.load(Ordering::SeqCst) >= 3 && seen.daemon_starts.load(Ordering::SeqCst) == 1
    })
    .await;

    control.pause(BLOCKER);
    eventually("the daemon to be stopped", async || {
        !reasons(&seen).is_empty()
    })
    .await;
    assert_eq!(reasons(&seen), vec![StopReason::OperatorPausing]);
    logged(
        &running,
        "Pausing the watch-stream for kopfexamples.kopf.dev",
    )
    .await;
    // The timer was stopped with the daemon; a tick already under way may end.
    running.settled().await;
    let ticks = seen.ticks.load(Ordering::SeqCst);
    let before = last_seq(&server);
    // Five of the timer's intervals.
    running.advance(Duration::from_secs(1)).await;
    assert_eq!(
        seen.ticks.load(Ordering::SeqCst),
        ticks,
        "no tick while paused"
    );
    assert_eq!(
        kex_requests(&server, before),
        Vec::<String>::new(),
        "no request while paused"
    );
    assert_eq!(seen.daemon_starts.load(Ordering::SeqCst), 1);

    control.resume();
    eventually("ticks and the daemon again", async || {
        seen.ticks.load(Ordering::SeqCst) >= ticks + 3
            && seen.daemon_starts.load(Ordering::SeqCst) == 2
    })
    .await;
    logged(
        &running,
        "Resuming the watch-stream for kopfexamples.kopf.dev.",
    )
    .await;
    assert!(
        kex_requests(&server, before)
            .iter()
            .any(|r| r.starts_with("GET") && r.contains("watch=true")),
        "the operator watches again"
    );
    running.stop().await;
    assert_eq!(
        reasons(&seen),
        vec![StopReason::OperatorPausing, StopReason::OperatorExiting]
    );
}

#[tokio::test(start_paused = true)]
async fn the_watch_closes_while_paused_and_the_operator_relists_after() {
    let server = common::paused_server().await;
    let (control, gate) = Gate::channel();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let resumes = Arc::new(AtomicUsize::new(0));
    let r = resumes.clone();
    let op = Operator::new()
        .gate(gate)
        .on_create("kopfexamples", "create_fn", move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>("created") }
        })
        .on_update("kopfexamples", "update_fn", || async {
            Ok::<_, HandlerError>("updated")
        })
        .on_resume("kopfexamples", "resume_fn", move || {
            r.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>("resumed") }
        });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("w1", json!({"field": "x"})))
        .await
        .expect("create");
    until_object(&api, "w1", "the create handler's result", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"] == "created")
    })
    .await;
    running.settled().await;
    let resumed_before = resumes.load(Ordering::SeqCst);

    control.pause(BLOCKER);
    logged(
        &running,
        "Pausing the watch-stream for kopfexamples.kopf.dev",
    )
    .await;
    // Changed while paused: nobody looks, nobody lists or watches.
    let before = last_seq(&server);
    let patch = kube::api::Patch::Merge(json!({"spec": {"field": "y"}}));
    api.patch("w1", &kube::api::PatchParams::default(), &patch)
        .await
        .expect("patch");
    running.settled().await;
    assert_eq!(kex_requests(&server, before), Vec::<String>::new());
    let status = api.get("w1").await.expect("get").data["status"].clone();
    assert!(
        status.get("update_fn").is_none(),
        "no update while paused: {status}"
    );

    control.resume();
    until_object(&api, "w1", "the update handler's result", |o| {
        o.is_some_and(|o| o.data["status"]["update_fn"] == "updated")
    })
    .await;
    let requests = kex_requests(&server, before);
    let list = requests
        .iter()
        .position(|r| r.starts_with("GET") && !r.contains("watch=true"));
    let watch = requests
        .iter()
        .position(|r| r.starts_with("GET") && r.contains("watch=true"));
    assert!(
        list.is_some() && list < watch,
        "a listing, then a watch, after the resume: {requests:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "created once");
    // As after a restart, the listed object's resume handlers run again.
    running.settled().await;
    assert_eq!(resumes.load(Ordering::SeqCst), resumed_before + 1);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_while_paused_is_prompt() {
    let server = common::server().await;
    let (control, gate) = Gate::channel();
    let seen = Arc::new(Seen::default());
    let running = Running::start(&server, spawning_operator(&seen, gate)).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("s1", json!({"field": "x"})))
        .await
        .expect("create");
    eventually("the daemon", async || {
        seen.daemon_starts.load(Ordering::SeqCst) == 1
    })
    .await;
    control.pause(BLOCKER);
    logged(
        &running,
        "Pausing the watch-stream for kopfexamples.kopf.dev",
    )
    .await;
    eventually("the daemon to be stopped", async || {
        !reasons(&seen).is_empty()
    })
    .await;
    let t0 = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), running.stop())
        .await
        .expect("the operator stops while paused");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(reasons(&seen), vec![StopReason::OperatorPausing]);
}

#[tokio::test(start_paused = true)]
async fn a_cycle_under_way_finishes_but_no_new_one_starts_while_paused() {
    let server = common::paused_server().await;
    let (control, gate) = Gate::channel();
    let started = Arc::new(Mutex::new(Vec::<String>::new()));
    let s = started.clone();
    // One cycle at a time: the second object's worker waits for the first one's cycle.
    let op = Operator::new().gate(gate).worker_limit(1).on_create(
        "kopfexamples",
        "create_fn",
        move |kopf::handler::Name(name): kopf::handler::Name| {
            s.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(name.clone());
            async move {
                if name == "slow" {
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                }
                Ok::<_, HandlerError>("created")
            }
        },
    );
    let running = Running::start(&server, op).await;
    let names = || started.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("slow", json!({"field": "x"})))
        .await
        .expect("create");
    eventually("the slow handler to start", async || !names().is_empty()).await;
    api.create(&PostParams::default(), &obj("next", json!({"field": "x"})))
        .await
        .expect("create");
    // The second object's state has reached its worker, which waits for the only permit.
    running.settled().await;
    control.pause(BLOCKER);
    until_object(
        &api,
        "slow",
        "the slow handler's result (its cycle finishes)",
        |o| o.is_some_and(|o| o.data["status"]["create_fn"] == "created"),
    )
    .await;
    running.settled().await;
    assert_eq!(
        names(),
        vec!["slow".to_string()],
        "no cycle starts while paused"
    );

    control.resume();
    until_object(&api, "next", "the next handler's result", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"] == "created")
    })
    .await;
    assert_eq!(names(), vec!["slow".to_string(), "next".to_string()]);
    running.stop().await;
}
