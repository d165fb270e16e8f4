//! Changes made during a long listing: a second watch brings them ahead of the rest of the
//! listing, and what both bring is handled once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{Cause, HandlerError, Operator};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

mod common;

use common::{Running, create_new, eventually, handled, kex_api, operator_requests};

const LISTED: u32 = 300;

/// Per handler and object name: how many creations had run when it ran, once per call.
type Calls = Arc<Mutex<BTreeMap<(String, String), Vec<u32>>>>;

fn record(calls: &Calls, created: &Arc<AtomicU32>, id: &str, cause: &Cause) {
    let name = cause.body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((id.to_string(), name))
        .or_default()
        .push(created.load(Ordering::SeqCst));
}

/// The listing of 302 objects is slowed to 10 ms per object (a streaming list, whose
/// initial events the fake server delays): about 3 s. Once the early watch has opened
/// (after 250 ms), two objects handled before change: `a-first` after it was listed,
/// `z-last` before (it is listed last). At the start, no handler runs before the listing
/// ends (the sync gate); then both changes are handled while fewer than half of the
/// listing's objects are created, where they would wait for all of them; both still get
/// their resume handler, once (`a-first`'s listed state was replaced before a worker took
/// it), and `z-last`'s older listed state is dropped (one update, one resume, no other
/// call).
#[tokio::test(start_paused = true)]
async fn changes_during_a_long_listing_are_handled_before_it_ends_and_once() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    for name in ["a-first", "z-last"] {
        api.create(
            &PostParams::default(),
            &handled(name, json!({"field": "a"})),
        )
        .await
        .expect("create");
    }
    create_new(&api, LISTED).await;
    server.set_watch_event_delay(Duration::from_millis(10));
    let created = Arc::new(AtomicU32::new(0));
    let calls: Calls = Arc::default();
    let op = {
        let (c1, c2, c3) = (created.clone(), created.clone(), created.clone());
        let (k1, k2) = (calls.clone(), calls.clone());
        Operator::new()
            .streaming_lists(true)
            .on_create("kopfexamples", "create_fn", move || {
                c1.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, HandlerError>(()) }
            })
            .on_update("kopfexamples", "update_fn", move |c: Cause| {
                record(&k1, &c2, "update_fn", &c);
                async { Ok::<_, HandlerError>(()) }
            })
            .on_resume("kopfexamples", "resume_fn", move |c: Cause| {
                record(&k2, &c3, "resume_fn", &c);
                async { Ok::<_, HandlerError>(()) }
            })
    };
    let running = Running::start(&server, op).await;
    eventually("the early watch", async || {
        operator_requests(&server)
            .iter()
            .filter(|r| r.query.split('&').any(|p| p == "watch=true"))
            .count()
            == 2
    })
    .await;
    for name in ["a-first", "z-last"] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"field": "b"}})),
        )
        .await
        .expect("patch");
    }
    let updated = |name: &str| {
        calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&("update_fn".to_string(), name.to_string()))
            .cloned()
    };
    eventually("both updates handled", async || {
        updated("a-first").is_some() && updated("z-last").is_some()
    })
    .await;
    for name in ["a-first", "z-last"] {
        let at = updated(name).unwrap_or_default();
        assert!(
            at.iter().all(|n| *n < LISTED / 2),
            "{name}'s update ran after {at:?} of {LISTED} creations"
        );
    }
    eventually("every creation", async || {
        created.load(Ordering::SeqCst) == LISTED
    })
    .await;
    server.set_watch_event_delay(Duration::ZERO);
    // The listing's watch replays the changes since the listing began: nothing runs twice.
    // Past the delay of the events already under way.
    running.advance(Duration::from_millis(500)).await;
    let calls: Vec<(String, String, usize)> = calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|((id, name), at)| (id.clone(), name.clone(), at.len()))
        .collect();
    let once = |id: &str, name: &str| (id.to_string(), name.to_string(), 1);
    assert_eq!(
        calls,
        [
            once("resume_fn", "a-first"),
            once("resume_fn", "z-last"),
            once("update_fn", "a-first"),
            once("update_fn", "z-last"),
        ]
    );
    // The early watch: one list of one object (the current resourceVersion), one watch.
    let requests = operator_requests(&server);
    let gets = |param: &str| {
        requests
            .iter()
            .filter(|r| r.method == "GET" && r.query.split('&').any(|p| p == param))
            .count()
    };
    assert_eq!(
        (gets("watch=true"), gets("limit=1")),
        (2, 1),
        "{requests:#?}"
    );
    running.stop().await;
}
