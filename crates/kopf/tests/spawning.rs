//! Timers, daemons, indexes, raw events, activities and children against the fake API
//! server, through the examples where there is one.

#[path = "../examples/timers.rs"]
mod timers_example;

#[path = "../examples/daemons.rs"]
mod daemons_example;

#[path = "../examples/indexes.rs"]
mod indexes_example;

#[path = "../examples/children.rs"]
mod children_example;

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{
    DaemonOptions, HandlerError, Operator, TimerOptions,
    handler::{EventType, Index, Name, Spec, Stopped},
};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use common::{Running, eventually, kex_api, obj, operator_requests, until_object, writes};

const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";

fn has_finalizer(o: Option<&DynamicObject>) -> bool {
    o.and_then(|o| o.metadata.finalizers.as_ref())
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

fn status(o: Option<&DynamicObject>, pointer: &str) -> Option<Value> {
    o?.data.pointer(&format!("/status{pointer}")).cloned()
}

async fn delete_and_wait_gone(api: &Api<DynamicObject>, name: &str) {
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    until_object(api, name, "the object to be gone", |o| o.is_none()).await;
}

#[tokio::test(start_paused = true)]
async fn timers_tick_until_the_object_is_deleted() {
    let server = common::paused_server().await;
    let running = Running::start(&server, timers_example::operator()).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("t1", json!({"field": "x"})))
        .await
        .expect("create");
    until_object(&api, "t1", "three ticks", |o| {
        has_finalizer(o) && status(o, "/tick/count").and_then(|c| c.as_u64()) >= Some(3)
    })
    .await;
    delete_and_wait_gone(&api, "t1").await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_hundred_objects_each_get_their_ticks() {
    let server = common::paused_server().await;
    for i in 0..100 {
        let mut o = serde_json::to_value(obj(&format!("o{i}"), json!({"field": i}))).expect("obj");
        o["metadata"]["namespace"] = json!("default");
        server.apply_object(o).expect("apply");
    }
    let op = Operator::new().memo(Counter::default()).timer(
        "kopfexamples",
        "tick",
        TimerOptions::every(Duration::from_secs(1)).sharp(true),
        count_ticks,
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    eventually("every object to tick three times", async || {
        let list = api.list(&Default::default()).await.expect("list");
        list.items.len() == 100
            && list
                .items
                .iter()
                .all(|o| status(Some(o), "/tick").and_then(|c| c.as_u64()) >= Some(3))
    })
    .await;
    running.stop().await;
    // Every status PATCH is a tick: one per object per second, none lost or doubled.
    let ticks = writes(&server)
        .into_iter()
        .filter(|w| w["path"].as_str().is_some_and(|p| p.ends_with("/status")))
        .count();
    let stored: u64 = api
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .filter_map(|o| status(Some(o), "/tick").and_then(|c| c.as_u64()))
        .sum();
    assert_eq!(ticks as u64, stored);
}

#[derive(Clone, Default)]
struct Counter(u64);

async fn count_ticks(counter: kopf::handler::Memo<Counter>) -> Result<u64, HandlerError> {
    Ok(counter.update(|c| {
        c.0 += 1;
        c.0
    }))
}

#[tokio::test]
async fn daemons_run_until_the_object_is_deleted_and_stop_with_the_operator() {
    // Real time: the example's sync daemon blocks a thread, which holds a paused clock still.
    let server = common::server().await;
    let running = Running::start(&server, daemons_example::operator()).await;
    let api = kex_api(&server);
    for name in ["d1", "d2"] {
        api.create(&PostParams::default(), &obj(name, json!({"field": "x"})))
            .await
            .expect("create");
    }
    for name in ["d1", "d2"] {
        until_object(&api, name, "heartbeats", |o| {
            status(o, "/monitor/beats").and_then(|c| c.as_u64()) >= Some(2)
        })
        .await;
    }
    // Deleted: both daemons stop, the finalizer goes, the object goes.
    delete_and_wait_gone(&api, "d1").await;
    // The operator exits: the remaining daemons stop well within their timeouts.
    let t0 = std::time::Instant::now();
    running.stop().await;
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(has_finalizer(
        api.get_opt("d2").await.expect("get").as_ref()
    ));
}

async fn stubborn_async() -> Result<(), HandlerError> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

fn stubborn_sync() -> Result<(), HandlerError> {
    std::thread::sleep(Duration::from_secs(3));
    Ok(())
}

#[tokio::test]
async fn daemons_ignoring_the_stop_are_cancelled_or_abandoned_and_the_object_still_goes() {
    // Real time: a sync daemon's thread is abandoned while it sleeps for real.
    let server = common::server().await;
    let stopping = |timeout_ms: u64| {
        DaemonOptions::new()
            .cancellation_backoff(Duration::from_millis(100))
            .cancellation_timeout(Duration::from_millis(timeout_ms))
    };
    let op = Operator::new()
        .daemon(
            "kopfexamples",
            "stubborn_async",
            stopping(200),
            stubborn_async,
        )
        .daemon(
            "kopfexamples",
            "stubborn_sync",
            stopping(200),
            stubborn_sync,
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("s1", json!({})))
        .await
        .expect("create");
    until_object(&api, "s1", "the finalizer", has_finalizer).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = std::time::Instant::now();
    delete_and_wait_gone(&api, "s1").await;
    // The async one is cancelled after 100 ms, the sync one abandoned after 300 ms: the
    // object goes long before the sync daemon's 3 s sleep would end.
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_probe_and_a_handler_read_the_same_index() {
    let server = common::paused_server().await;
    let op = indexes_example::operator();
    let probes = op.probes();
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    for name in ["i1", "i2", "i3"] {
        let field = if name == "i3" { "other" } else { "shared" };
        api.create(&PostParams::default(), &obj(name, json!({"field": field})))
            .await
            .expect("create");
        until_object(&api, name, "the creation handled", |o| {
            status(o, "/create_fn/peers").is_some()
        })
        .await;
    }
    let peers = status(
        api.get_opt("i2").await.expect("get").as_ref(),
        "/create_fn/peers",
    );
    assert_eq!(peers, Some(json!(["i1"])));
    running.settled().await;
    assert_eq!(
        probes.run().await,
        json!({"fields": {"shared": 2, "other": 1}})
    );
    delete_and_wait_gone(&api, "i1").await;
    // The probe's results are cached for 10 s.
    running.advance(Duration::from_secs(10)).await;
    assert_eq!(
        probes.run().await,
        json!({"fields": {"shared": 1, "other": 1}})
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn handlers_wait_for_the_initial_listing_to_be_indexed() {
    let server = common::paused_server().await;
    for i in 0..20 {
        let mut o =
            serde_json::to_value(obj(&format!("x{i}"), json!({"field": "f"}))).expect("obj");
        o["metadata"]["namespace"] = json!("default");
        server.apply_object(o).expect("apply");
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let op = Operator::new()
        .index("kopfexamples", "names", |Name(name): Name| async move {
            Ok::<_, HandlerError>(vec![("all".to_string(), name)])
        })
        .on_create(
            "kopfexamples",
            "create",
            move |index: Index<String, String>| {
                let s = s.clone();
                async move {
                    s.lock().expect("lock").push(index.get(&"all".into()).len());
                    Ok::<_, HandlerError>(())
                }
            },
        );
    let running = Running::start(&server, op).await;
    eventually("every object handled", async || {
        seen.lock().expect("lock").len() == 20
    })
    .await;
    running.stop().await;
    // Even the first creation handler saw all 20 objects in the index.
    assert!(seen.lock().expect("lock").iter().all(|n| *n == 20));
}

#[tokio::test(start_paused = true)]
async fn raw_event_handlers_see_every_event_type() {
    let server = common::paused_server().await;
    let mut o = serde_json::to_value(obj("pre", json!({}))).expect("obj");
    o["metadata"]["namespace"] = json!("default");
    server.apply_object(o).expect("apply");
    let seen = Arc::new(Mutex::new(Vec::<(String, Option<String>)>::new()));
    let s = seen.clone();
    let op = Operator::new().on_event(
        "kopfexamples",
        "log",
        move |Name(n): Name, EventType(t): EventType| {
            s.lock().expect("lock").push((n, t));
            Err::<(), _>(HandlerError::other("errors are ignored"))
        },
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("e1", json!({"a": 1})))
        .await
        .expect("create");
    api.patch(
        "e1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"a": 2}})),
    )
    .await
    .expect("patch");
    api.delete("e1", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the deletion event", async || {
        seen.lock()
            .expect("lock")
            .iter()
            .any(|(_, t)| t.as_deref() == Some("DELETED"))
    })
    .await;
    running.stop().await;
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen[0], ("pre".into(), None));
    let e1: Vec<Option<&str>> = seen
        .iter()
        .filter(|(n, _)| n == "e1")
        .map(|(_, t)| t.as_deref())
        .collect();
    assert_eq!(e1, vec![Some("ADDED"), Some("MODIFIED"), Some("DELETED")]);
    // No state, no finalizer: the operator wrote nothing.
    assert_eq!(writes(&server), Vec::<Value>::new());
}

#[tokio::test(start_paused = true)]
async fn startup_handlers_run_and_retry_before_any_watch() {
    let server = common::paused_server().await;
    let attempts = Arc::new(AtomicUsize::new(0));
    let a = attempts.clone();
    let op = timers_example::operator().on_startup(
        "connect",
        move |kopf::handler::Client(client): kopf::handler::Client| {
            let n = a.fetch_add(1, Ordering::SeqCst);
            async move {
                // A request of the operator's own client: it shows in the request log.
                client
                    .apiserver_version()
                    .await
                    .map_err(HandlerError::other)?;
                if n == 0 {
                    return Err(HandlerError::temporary(
                        "not ready yet",
                        Duration::from_millis(300),
                    ));
                }
                Ok(())
            }
        },
    );
    let running = Running::start(&server, op).await;
    running.stop().await;
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    let paths: Vec<(String, bool)> = operator_requests(&server)
        .into_iter()
        .map(|r| (r.path, r.query.contains("watch=true")))
        .collect();
    assert_eq!(paths[0], ("/version".to_string(), false));
    assert_eq!(paths[1], ("/version".to_string(), false));
    assert!(paths[2..].iter().all(|(p, _)| p != "/version"), "{paths:?}");
    assert!(paths.iter().any(|(_, watch)| *watch));
}

#[tokio::test(start_paused = true)]
async fn a_failing_startup_handler_stops_the_operator_before_it_watches() {
    let server = common::paused_server().await;
    let op = timers_example::operator().on_startup("broken", || async {
        Err::<(), _>(HandlerError::permanent("no credentials"))
    });
    let running = Running::start_with(&server, op, Duration::from_secs(70), false).await;
    let err = running.result().await.expect_err("fails");
    assert_eq!(
        format!("{err:?}"),
        "the startup handler 'broken' failed: no credentials"
    );
    assert!(operator_requests(&server).is_empty());
}

#[tokio::test(start_paused = true)]
async fn children_are_adopted_and_deleted_with_their_owner() {
    let server = common::paused_server().await;
    let running = Running::start(&server, children_example::operator()).await;
    let api = kex_api(&server);
    let mut parent = obj("parent", json!({"field": "value"}));
    parent.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    api.create(&PostParams::default(), &parent)
        .await
        .expect("create");
    until_object(&api, "parent", "the child's name in the status", |o| {
        status(o, "/create_fn/child").is_some()
    })
    .await;
    let parent = api.get("parent").await.expect("get");
    let child_name = status(Some(&parent), "/create_fn/child")
        .and_then(|v| v.as_str().map(str::to_string))
        .expect("name");
    assert!(child_name.starts_with("parent-"), "{child_name}");
    let cms: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        ),
    );
    let child = cms.get(&child_name).await.expect("the child exists");
    let owners = child.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        owners[0].uid,
        parent.metadata.uid.clone().unwrap_or_default()
    );
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(
        child
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("team")
            .map(String::as_str),
        Some("a")
    );
    assert_eq!(child.data["data"]["field"], json!("value"));
    delete_and_wait_gone(&api, "parent").await;
    eventually("the child to be collected", async || {
        cms.get_opt(&child_name).await.expect("get").is_none()
    })
    .await;
    running.stop().await;
}

async fn created(Name(name): Name) -> Result<Value, HandlerError> {
    Ok(json!({"created": name}))
}

async fn updated(Spec(spec): Spec) -> Result<Value, HandlerError> {
    Ok(json!({"field": spec["field"]}))
}

async fn hourly(index: Index<String, String>) -> Result<usize, HandlerError> {
    Ok(index.len())
}

async fn once(stopped: Stopped) -> Result<&'static str, HandlerError> {
    Ok(if stopped.is_set() { "stopped" } else { "ran" })
}

async fn by_name(Name(name): Name) -> Result<HashMap<String, String>, HandlerError> {
    Ok(HashMap::from([(name.clone(), name)]))
}

#[tokio::test(start_paused = true)]
async fn handler_kinds_compose_without_extra_requests() {
    let server = common::paused_server().await;
    let op = Operator::new()
        .index("kopfexamples", "by_name", by_name)
        .on_create("kopfexamples", "created", created)
        .on_update("kopfexamples", "updated", updated)
        .timer(
            "kopfexamples",
            "hourly",
            TimerOptions::every(Duration::from_secs(3600)),
            hourly,
        )
        .daemon("kopfexamples", "once", DaemonOptions::new(), once);
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("c1", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "c1", "creation, timer and daemon", |o| {
        status(o, "/created").is_some()
            && status(o, "/hourly") == Some(json!(1))
            && status(o, "/once") == Some(json!("ran"))
    })
    .await;
    api.patch(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "b"}})),
    )
    .await
    .expect("patch");
    until_object(&api, "c1", "the update", |o| {
        status(o, "/updated/field") == Some(json!("b"))
    })
    .await;
    delete_and_wait_gone(&api, "c1").await;
    running.settled().await;
    running.stop().await;
    // The timer's and the daemon's writes race with each other: sorted for the snapshot.
    let mut all = writes(&server);
    all.sort_by_key(|w| w.to_string());
    insta::assert_json_snapshot!(all);
}

#[tokio::test]
async fn login_handlers_run_again_after_a_401() {
    // Real time: the login makes a client for the server's socket.
    let server = common::server().await;
    let logins = Arc::new(AtomicUsize::new(0));
    let l = logins.clone();
    let url = server.url();
    let op = timers_example::operator().on_login(move || {
        l.fetch_add(1, Ordering::SeqCst);
        let url = url.clone();
        async move {
            kopf::config::client_config(Some(&url), Duration::from_secs(70))
                .await
                .map_err(|e| HandlerError::other(format!("{e:?}")))
        }
    });
    let client = op.connect().await.expect("logged in");
    assert_eq!(logins.load(Ordering::SeqCst), 1);
    // The next list of KopfExamples is refused as if the token had expired.
    server.inject_fault(kopf_testing::FaultRule::new(
        kopf_testing::RequestPattern {
            verb: Some("list".into()),
            resource: Some("kopfexamples".into()),
            ..Default::default()
        },
        401,
        1,
    ));
    let stop = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(op.run_until(client, async {
        let _ = stop.1.await;
    }));
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("l1", json!({})))
        .await
        .expect("create");
    // The watch restarts after the 401, with the new login, and the timer ticks.
    until_object(&api, "l1", "a tick after logging in again", |o| {
        status(o, "/tick/count").is_some()
    })
    .await;
    assert_eq!(logins.load(Ordering::SeqCst), 2);
    let _ = stop.0.send(());
    task.await.expect("join").expect("ran");
}
