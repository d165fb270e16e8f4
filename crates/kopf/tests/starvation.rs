//! A steady flood of changes does not starve the objects of a listing: changed objects go
//! first, but once a listed object has waited 5 s (`LISTED_AGING`), places go to the two
//! kinds in turn.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::handler::Name;
use kopf::{HandlerError, Operator};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

use common::{Running, kex_api, obj, paused_server};

/// Listed objects, created before the operator starts.
const LISTED: usize = 40;
/// Objects changed all the time, created after it started.
const HOT: usize = 10;
/// Each cycle's handler takes this long, two cycles at a time: 20 cycles per second.
const WORK: Duration = Duration::from_millis(100);
/// The flood: twice the operator's throughput, for a minute.
const FLOOD_PER_SECOND: u64 = 40;
const FLOOD: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn under_a_flood_at_twice_the_throughput_every_listed_object_is_handled_within_the_bound() {
    let server = paused_server().await;
    let api = kex_api(&server);
    for i in 0..LISTED {
        api.create(
            &PostParams::default(),
            &obj(&format!("listed-{i:02}"), json!({"n": 0})),
        )
        .await
        .expect("create");
    }
    let handled: Arc<Mutex<BTreeMap<String, Duration>>> = Arc::default();
    let start = Instant::now();
    let h = handled.clone();
    let op = Operator::new()
        .worker_limit(2)
        .on_create("kopfexamples", "create_fn", move |Name(name): Name| {
            let h = h.clone();
            async move {
                tokio::time::sleep(WORK).await;
                h.lock().expect("lock").insert(name, start.elapsed());
                Ok::<_, HandlerError>(())
            }
        })
        .on_update("kopfexamples", "update_fn", || async {
            tokio::time::sleep(WORK).await;
            Ok::<_, HandlerError>(())
        });
    let running = Running::start(&server, op).await;
    for i in 0..HOT {
        api.create(
            &PostParams::default(),
            &obj(&format!("hot-{i}"), json!({"n": 0})),
        )
        .await
        .expect("create");
    }
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / FLOOD_PER_SECOND));
    for n in 0..FLOOD_PER_SECOND * FLOOD.as_secs() {
        tick.tick().await;
        let name = format!("hot-{}", n as usize % HOT);
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"n": n}})),
        )
        .await
        .expect("patch");
    }
    running.settled().await;

    let handled = handled.lock().expect("lock").clone();
    let listed: Vec<(&String, &Duration)> = handled
        .iter()
        .filter(|(n, _)| n.starts_with("listed-"))
        .collect();
    assert_eq!(listed.len(), LISTED, "every listed object handled");
    let last = listed.iter().map(|(_, t)| **t).max().unwrap_or_default();
    // The bound: the aging (5 s), then every other place, at 20 places a second, for the
    // listed objects still waiting (at most all of them): 5 + 40 × 2 / 20 = 9 s; a second of
    // margin for the start. Without the aging they wait for the end of the flood (60 s).
    let bound = Duration::from_secs(5) + WORK * 2 * LISTED as u32 / 2 + Duration::from_secs(1);
    assert!(
        last <= bound,
        "the last listed object was handled after {last:?} (bound {bound:?}) under a flood of {FLOOD:?}"
    );
    eprintln!("the last listed object was handled after {last:?} (bound {bound:?})");
    running.stop().await;
}
