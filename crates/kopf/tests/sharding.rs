//! Sharding across replicas (one Lease per hash range): three replicas share the objects,
//! each object handled exactly once, also while the ranges move at start-up; a killed
//! replica's ranges move to the others after they expire, and its objects complete there.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{HandlerError, Operator, handler::Name, peering::Sharding};
use kube::api::PostParams;
use serde_json::json;

use common::{Running, kex_api, obj};

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
        // Scaled-down timings, with room for a loaded 2-core machine running three
        // operators: a renewal that misses its deadline drops the range, and a cycle still
        // running then may overlap the next holder's work if it outlasts the 3 s between
        // the renew deadline and the lease duration (the documented overlap).
        .sharding(Sharding::new("kex-shards", 3).timings(
            Duration::from_secs(6),
            Duration::from_secs(3),
            Duration::from_millis(500),
        ))
}

/// One test of this file at a time: each runs three operators and the fake server on a
/// 2-core machine.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts a replica; it watches only once it holds a range, so this does not wait for a
/// watch.
async fn start(server: &kopf::testing::FakeApiServer, op: Operator) -> Running {
    Running::start_with(server, op, Duration::from_secs(70), false).await
}

/// Waits (up to a minute: the sharing takes a few lease rounds, slower on a loaded machine)
/// until `check` holds.
async fn sharing(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ranges a replica says it serves, last (`{0, 2}`).
fn serving(r: &Running) -> Option<String> {
    r.logs().iter().rev().find_map(|l| {
        let at = l.find("Serving shards ")?;
        let rest = &l[at + "Serving shards ".len()..];
        Some(rest[..rest.find(" of ")?].to_string())
    })
}

/// The ranges a replica serves, last, as numbers.
fn ranges(r: &Running) -> Vec<u32> {
    serving(r)
        .unwrap_or_default()
        .trim_matches(['{', '}'])
        .split(", ")
        .filter_map(|n| n.parse().ok())
        .collect()
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

/// Waits (up to two minutes, listing every half second) until every object has its result.
async fn all_handled(server: &kopf::testing::FakeApiServer, names: &[String]) {
    let api = kex_api(server);
    let start = std::time::Instant::now();
    loop {
        let list = api.list(&Default::default()).await.expect("list");
        let done: std::collections::HashSet<String> = list
            .items
            .iter()
            .filter(|o| o.data["status"]["create_fn"] == "created")
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        let missing: Vec<&String> = names.iter().filter(|n| !done.contains(*n)).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} objects never handled, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_the_objects_and_handle_each_exactly_once() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = common::server().await;
    let calls: Calls = Arc::default();
    // Objects before, while and after the replicas start and share the ranges.
    let names: Vec<String> = (0..3000).map(|i| format!("o{i}")).collect();
    create(&server, names[..1000].iter().cloned()).await;
    let a = start(&server, replica(0, &calls)).await;
    create(&server, names[1000..2000].iter().cloned()).await;
    let b = start(&server, replica(1, &calls)).await;
    let c = start(&server, replica(2, &calls)).await;
    sharing("each replica serves one range", async || {
        [&a, &b, &c].iter().all(|r| serves_one(r))
    })
    .await;
    create(&server, names[2000..].iter().cloned()).await;
    all_handled(&server, &names).await;
    // Stopped, nothing more can run: the calls are all there is.
    for r in [a, b, c] {
        r.stop().await;
    }
    let by = per_object(&calls);
    let twice: Vec<_> = by.iter().filter(|(_, r)| r.len() != 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    assert_eq!(by.len(), names.len());
    // After the sharing, each replica handled some of the last objects.
    let last: Vec<usize> = names[2000..].iter().map(|n| by[n][0]).collect();
    for r in 0..3 {
        let share = last.iter().filter(|&&x| x == r).count();
        assert!(
            (200..=500).contains(&share),
            "replica {r} handled {share} of the last 1000 (a third expected)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_ranges_move_and_its_objects_complete() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = common::server().await;
    let calls: Calls = Arc::default();
    let a = start(&server, replica(0, &calls)).await;
    let b = start(&server, replica(1, &calls)).await;
    let c = start(&server, replica(2, &calls)).await;
    sharing("each replica serves one range", async || {
        [&a, &b, &c].iter().all(|r| serves_one(r))
    })
    .await;
    let names: Vec<String> = (0..3000).map(|i| format!("k{i}")).collect();
    create(&server, names[..1000].iter().cloned()).await;
    // Killed while it works (no graceful stop, nothing released); the objects created
    // from now on in its range are served only if its range moves.
    c.kill();
    let at_kill = calls.lock().unwrap_or_else(|e| e.into_inner()).len();
    create(&server, names[1000..].iter().cloned()).await;
    all_handled(&server, &names).await;
    let mut served: Vec<u32> = [&a, &b].iter().flat_map(|r| ranges(r)).collect();
    served.sort();
    // Stopped, nothing more can run: the calls are all there is.
    a.stop().await;
    b.stop().await;
    let all = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        all[at_kill..].iter().all(|(r, _)| *r != 2),
        "nothing runs in the killed replica after the kill"
    );
    let by = per_object(&calls);
    assert_eq!(by.len(), names.len());
    // At least once: an object the killed replica was handling (its result not yet
    // written) is handled again by the replica that took the range over, after the kill;
    // every other object exactly once.
    for (name, replicas) in &by {
        match replicas.as_slice() {
            [_] => {}
            [2, r] if *r != 2 => {}
            other => panic!("{name} handled by {other:?}"),
        }
    }
    let again = by.values().filter(|r| r.len() == 2).count();
    assert_eq!(served, [0, 1, 2], "the survivors serve every range");
    eprintln!("handled again after the kill: {again} of {}", names.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_server_without_shard_selectors_the_replicas_filter_by_the_same_hash() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = kopf::testing::FakeApiServer::builder()
        .sharded_list_and_watch(false)
        .start()
        .await
        .expect("the fake server starts");
    server.apply_object(common::crd()).expect("crd");
    let calls: Calls = Arc::default();
    let replicas = [
        start(&server, replica(0, &calls)).await,
        start(&server, replica(1, &calls)).await,
    ];
    sharing("the replicas share the ranges", async || {
        let mut all: Vec<u32> = replicas.iter().flat_map(ranges).collect();
        all.sort();
        all == [0, 1, 2] && replicas.iter().all(|r| !ranges(r).is_empty())
    })
    .await;
    let names: Vec<String> = (0..300).map(|i| format!("u{i}")).collect();
    create(&server, names.iter().cloned()).await;
    all_handled(&server, &names).await;
    let held: Vec<Vec<u32>> = replicas.iter().map(ranges).collect();
    // Stopped, nothing more can run: the calls are all there is.
    for r in replicas {
        r.stop().await;
    }
    let by = per_object(&calls);
    assert_eq!(by.len(), names.len());
    // Each object once, by the replica whose ranges hold its uid's hash.
    let api = kex_api(&server);
    let list = api.list(&Default::default()).await.expect("list");
    for o in list.items {
        let name = o.metadata.name.clone().unwrap_or_default();
        let uid = o.metadata.uid.clone().unwrap_or_default();
        let range = kopf_core::shards::range_of(&uid, 3);
        let handlers = &by[&name];
        assert_eq!(handlers.len(), 1, "{name}: {handlers:?}");
        assert!(
            held[handlers[0]].contains(&range),
            "{name} (range {range}) handled by replica {}",
            handlers[0]
        );
    }
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.path.contains("kopfexamples") && r.query.contains("shardSelector")),
        "the replicas asked for their ranges (the server ignored it)"
    );
}
