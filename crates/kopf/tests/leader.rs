//! Standing by (leader election): the watch stays open and nothing acts — no handler, timer
//! or daemon — until the replica leads; then the objects are processed as after a start,
//! without a new listing. And two operators with leader election on one server: only the
//! leader handles objects, and the other takes over when it stops.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{
    DaemonOptions, HandlerError, Operator, TimerOptions,
    handler::{StopReason, Stopped},
    peering::{Gate, LeaderElection},
};
use kube::api::PostParams;
use serde_json::json;

use common::{Running, eventually, kex_api, obj, operator_requests, until_object};

#[derive(Default)]
struct Seen {
    creations: AtomicUsize,
    ticks: AtomicUsize,
    daemon_starts: AtomicUsize,
    reasons: Mutex<Vec<StopReason>>,
}

fn operator(seen: &Arc<Seen>) -> Operator {
    let (c, t, d) = (seen.clone(), seen.clone(), seen.clone());
    Operator::new()
        .on_create("kopfexamples", "create_fn", move || {
            c.creations.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>("created") }
        })
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

/// The operator's requests about KopfExamples after `seq`, as `METHOD path?query`.
fn kex_requests(server: &kopf::testing::FakeApiServer, after: u64) -> Vec<String> {
    operator_requests(server)
        .into_iter()
        .filter(|r| r.seq > after && r.path.contains("/kopfexamples"))
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn standing_by_the_watch_stays_open_nothing_runs_and_the_leader_processes_at_once() {
    let server = common::paused_server().await;
    let (control, gate) = Gate::channel();
    control.stand_by("b leads (lease default/x)");
    let seen = Arc::new(Seen::default());
    let running = Running::start(&server, operator(&seen).gate(gate)).await;
    let api = kex_api(&server);
    for name in ["s1", "s2"] {
        api.create(&PostParams::default(), &obj(name, json!({"field": "x"})))
            .await
            .expect("create");
    }
    eventually("the standby line", async || {
        running.logs().iter().any(|l| {
            l.contains("Standing by for kopfexamples.kopf.dev (b leads (lease default/x))")
        })
    })
    .await;
    running.settled().await;
    assert_eq!(seen.creations.load(Ordering::SeqCst), 0, "no handler");
    assert_eq!(seen.ticks.load(Ordering::SeqCst), 0, "no timer");
    assert_eq!(seen.daemon_starts.load(Ordering::SeqCst), 0, "no daemon");
    let requests = kex_requests(&server, 0);
    assert!(
        requests.iter().all(|r| r.starts_with("GET")),
        "no write while standing by: {requests:?}"
    );
    assert!(
        requests.iter().any(|r| r.contains("watch=true")),
        "the watch is open: {requests:?}"
    );

    let before = server.requests().last().map_or(0, |r| r.seq);
    control.resume();
    for name in ["s1", "s2"] {
        until_object(&api, name, "the handler's result", |o| {
            o.is_some_and(|o| o.data["status"]["create_fn"] == "created")
        })
        .await;
    }
    eventually("ticks and daemons", async || {
        seen.ticks.load(Ordering::SeqCst) >= 2 && seen.daemon_starts.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(seen.creations.load(Ordering::SeqCst), 2);
    let after = kex_requests(&server, before);
    assert!(
        after
            .iter()
            .all(|r| !r.starts_with("GET") || r.contains("watch=true")),
        "warm: no new listing when elected: {after:?}"
    );

    // Standing by again: the daemons stop as for a pause, the timers with them.
    control.stand_by("c leads (lease default/x)");
    eventually("the daemons stopped", async || {
        seen.reasons.lock().unwrap_or_else(|e| e.into_inner()).len() == 2
    })
    .await;
    running.settled().await;
    let ticks = seen.ticks.load(Ordering::SeqCst);
    running.advance(Duration::from_secs(1)).await;
    assert_eq!(
        seen.ticks.load(Ordering::SeqCst),
        ticks,
        "no tick on standby"
    );
    running.stop().await;
    assert_eq!(
        *seen.reasons.lock().unwrap_or_else(|e| e.into_inner()),
        vec![StopReason::OperatorPausing, StopReason::OperatorPausing]
    );
}

fn elected(seen: &Arc<Seen>) -> Operator {
    operator(seen).leader_election(LeaderElection::new("kex-leader").timings(
        Duration::from_secs(2),
        Duration::from_secs(1),
        Duration::from_millis(200),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_replicas_only_the_leader_acts_and_the_other_takes_over_at_its_stop() {
    let server = common::server().await;
    let (seen_a, seen_b) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let a = Running::start(&server, elected(&seen_a)).await;
    eventually("a leads", async || {
        a.logs()
            .iter()
            .any(|l| l.contains("This replica leads now"))
    })
    .await;
    let b = Running::start(&server, elected(&seen_b)).await;
    let api = kex_api(&server);
    for i in 0..4 {
        api.create(&PostParams::default(), &obj(&format!("e{i}"), json!({})))
            .await
            .expect("create");
    }
    for i in 0..4 {
        until_object(&api, &format!("e{i}"), "handled", |o| {
            o.is_some_and(|o| o.data["status"]["create_fn"] == "created")
        })
        .await;
    }
    // The standby has run nothing so far (and, counted at the end, never ran these
    // creations or daemons at all).
    assert_eq!(seen_a.creations.load(Ordering::SeqCst), 4);
    assert_eq!(
        (
            seen_b.creations.load(Ordering::SeqCst),
            seen_b.ticks.load(Ordering::SeqCst),
            seen_b.daemon_starts.load(Ordering::SeqCst)
        ),
        (0, 0, 0),
        "the standby runs nothing"
    );

    // A graceful stop of the leader: its lease is released, b leads and serves the new
    // objects and the old ones' daemons, without running the done creations again.
    a.stop().await;
    eventually("b leads", async || {
        b.logs()
            .iter()
            .any(|l| l.contains("This replica leads now"))
    })
    .await;
    api.create(&PostParams::default(), &obj("e4", json!({})))
        .await
        .expect("create");
    until_object(&api, "e4", "handled by b", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"] == "created")
    })
    .await;
    eventually("b's daemons", async || {
        seen_b.daemon_starts.load(Ordering::SeqCst) == 5
    })
    .await;
    b.stop().await;
    // Final counts, nothing can run any more: b created only e4, at no time the four a
    // completed, and started each daemon once, after it led.
    assert_eq!(
        seen_b.creations.load(Ordering::SeqCst),
        1,
        "the creations a completed are not run again"
    );
    assert_eq!(seen_b.daemon_starts.load(Ordering::SeqCst), 5);
}
