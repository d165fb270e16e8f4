//! Sharding across replicas (one Lease per hash range): three replicas share the objects,
//! each object handled exactly once, also while the ranges move at start-up; a killed
//! replica's ranges move to the others after they expire, and its objects complete there.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{HandlerError, Name, Operator, Sharding};
use kube::api::PostParams;
use serde_json::json;

use common::{Running, eventually, kex_api, obj, until_object};

/// Which replica handled which object's creation, in order.
type Calls = Arc<Mutex<Vec<(usize, String)>>>;

fn replica(index: usize, calls: &Calls) -> Operator {
    let calls = calls.clone();
    Operator::new()
        .on_create("kopfexamples", "create_fn", move |Name(name): Name| {
            calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((index, name));
            async { Ok::<_, HandlerError>("created") }
        })
        .sharding(Sharding::new("kex-shards", 3).timings(
            Duration::from_secs(2),
            Duration::from_secs(1),
            Duration::from_millis(200),
        ))
}

/// The ranges a replica says it serves, last (`{0, 2}`).
fn serving(r: &Running) -> Option<String> {
    r.logs().iter().rev().find_map(|l| {
        let at = l.find("Serving shards ")?;
        let rest = &l[at + "Serving shards ".len()..];
        Some(rest[..rest.find(" of ")?].to_string())
    })
}

/// Whether a replica serves exactly one range.
fn serves_one(r: &Running) -> bool {
    serving(r).is_some_and(|s| s != "{}" && !s.contains(','))
}

fn per_object(calls: &Calls) -> HashMap<String, Vec<usize>> {
    let mut by: HashMap<String, Vec<usize>> = HashMap::new();
    for (replica, name) in calls.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        by.entry(name.clone()).or_default().push(*replica);
    }
    by
}

async fn create(server: &kopf::testing::FakeApiServer, names: impl Iterator<Item = String>) {
    let api = kex_api(server);
    for name in names {
        api.create(&PostParams::default(), &obj(&name, json!({})))
            .await
            .expect("create");
    }
}

async fn all_handled(server: &kopf::testing::FakeApiServer, names: &[String]) {
    let api = kex_api(server);
    for name in names {
        until_object(&api, name, "handled", |o| {
            o.is_some_and(|o| o.data["status"]["create_fn"] == "created")
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_the_objects_and_handle_each_exactly_once() {
    let server = common::server().await;
    let calls: Calls = Arc::default();
    // Objects before, while and after the replicas start and share the ranges.
    let names: Vec<String> = (0..150).map(|i| format!("o{i}")).collect();
    create(&server, names[..50].iter().cloned()).await;
    let a = Running::start(&server, replica(0, &calls)).await;
    create(&server, names[50..100].iter().cloned()).await;
    let b = Running::start(&server, replica(1, &calls)).await;
    let c = Running::start(&server, replica(2, &calls)).await;
    eventually("each replica serves one range", async || {
        [&a, &b, &c].iter().all(|r| serves_one(r))
    })
    .await;
    create(&server, names[100..].iter().cloned()).await;
    all_handled(&server, &names).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let by = per_object(&calls);
    let twice: Vec<_> = by.iter().filter(|(_, r)| r.len() != 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    assert_eq!(by.len(), names.len());
    // After the sharing, each replica handled some of the last objects.
    let last: Vec<usize> = names[100..].iter().map(|n| by[n][0]).collect();
    for r in 0..3 {
        assert!(last.contains(&r), "replica {r} handled none of {last:?}");
    }
    for r in [a, b, c] {
        r.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_ranges_move_and_its_objects_complete() {
    let server = common::server().await;
    let calls: Calls = Arc::default();
    let a = Running::start(&server, replica(0, &calls)).await;
    let b = Running::start(&server, replica(1, &calls)).await;
    let c = Running::start(&server, replica(2, &calls)).await;
    eventually("each replica serves one range", async || {
        [&a, &b, &c].iter().all(|r| serves_one(r))
    })
    .await;
    // Killed (no graceful stop, nothing released).
    drop(c);
    let names: Vec<String> = (0..60).map(|i| format!("k{i}")).collect();
    create(&server, names.iter().cloned()).await;
    all_handled(&server, &names).await;
    let by = per_object(&calls);
    assert!(
        by.values().all(|r| r.len() == 1 && r[0] != 2),
        "each once, none by the dead replica: {by:?}"
    );
    let took_over = [&a, &b]
        .iter()
        .any(|r| serving(r).is_some_and(|s| s.contains(", ")));
    assert!(took_over, "a survivor serves two ranges now");
    a.stop().await;
    b.stop().await;
}
