//! Pausing one object by hand (`kopf.dev/paused`): nothing of it runs while paused, for as
//! long as it stays paused (operator time, under a paused clock), and what changed meanwhile
//! is handled once when the annotation is taken off; its deletion waits for that too.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::handler::{Body, StopReason, Stopped};
use kopf::metrics::Metrics;
use kopf::{DaemonOptions, HandlerError, Operator, TimerOptions};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use common::{Running, kex_api, obj, paused_server};

/// What the handlers saw.
#[derive(Default)]
struct Seen {
    created: AtomicUsize,
    updated: Mutex<Vec<Value>>,
    deleted: AtomicUsize,
    ticks: AtomicUsize,
    daemon_starts: AtomicUsize,
    stops: Mutex<Vec<StopReason>>,
}

impl Seen {
    fn count(&self, what: &str) -> usize {
        match what {
            "created" => self.created.load(Ordering::SeqCst),
            "updated" => lock(&self.updated).len(),
            "deleted" => self.deleted.load(Ordering::SeqCst),
            "ticks" => self.ticks.load(Ordering::SeqCst),
            "daemon starts" => self.daemon_starts.load(Ordering::SeqCst),
            _ => unreachable!("{what}"),
        }
    }

    /// Every count at once, to compare before and after.
    fn counts(&self) -> Vec<(&'static str, usize)> {
        ["created", "updated", "deleted", "ticks", "daemon starts"]
            .into_iter()
            .map(|w| (w, self.count(w)))
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creation, update and deletion handlers, a timer every minute and a daemon, on
/// KopfExamples.
fn operator(seen: &Arc<Seen>) -> Operator {
    let (c, u, d, t, s) = (
        seen.clone(),
        seen.clone(),
        seen.clone(),
        seen.clone(),
        seen.clone(),
    );
    Operator::new()
        .on_create("kopfexamples", "create_fn", move || {
            c.created.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(()) }
        })
        .on_update("kopfexamples", "update_fn", move |Body(body): Body| {
            lock(&u.updated).push(body["spec"].clone());
            async { Ok::<_, HandlerError>(()) }
        })
        .on_delete("kopfexamples", "delete_fn", move || {
            d.deleted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(()) }
        })
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_secs(60)),
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
                let seen = s.clone();
                async move {
                    seen.daemon_starts.fetch_add(1, Ordering::SeqCst);
                    let reason = stopped.wait().await;
                    lock(&seen.stops).push(reason);
                    Ok::<_, HandlerError>(())
                }
            },
        )
}

async fn annotate(api: &Api<DynamicObject>, name: &str, key: &str, value: Value) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
}

async fn set_field(api: &Api<DynamicObject>, name: &str, value: &str) {
    let patch = json!({"spec": {"field": value}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the spec");
}

/// The Events posted about objects: (reason, message).
async fn events(server: &kopf::testing::FakeApiServer) -> Vec<(String, String)> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Event"), "events"),
    );
    let list = api.list(&Default::default()).await.expect("events");
    list.items
        .iter()
        .map(|e| {
            let text = |k: &str| e.data[k].as_str().unwrap_or("").to_string();
            (text("reason"), text("message"))
        })
        .collect()
}

fn paused_gauge(metrics: &Metrics) -> Option<String> {
    metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("kopf_objects_paused{resource=\"kopfexamples\"}"))
        .map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
}

#[tokio::test(start_paused = true)]
async fn a_paused_object_gets_nothing_for_ten_minutes_and_its_changes_once_after() {
    let server = paused_server().await;
    let seen = Arc::new(Seen::default());
    let metrics = Metrics::new();
    let running = Running::start(&server, operator(&seen).metrics(metrics.clone())).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    running.settled().await;
    assert_eq!(
        seen.counts(),
        [
            ("created", 1),
            ("updated", 0),
            ("deleted", 0),
            ("ticks", 1),
            ("daemon starts", 1)
        ]
    );

    annotate(
        &api,
        "k",
        "kopf.dev/paused",
        json!("alice fixes its volume"),
    )
    .await;
    running.settled().await;
    assert_eq!(lock(&seen.stops).clone(), vec![StopReason::Paused]);
    assert_eq!(paused_gauge(&metrics).as_deref(), Some("1"));
    let at_pause = seen.counts();

    // Changes while paused, and ten minutes of operator time: nothing runs.
    set_field(&api, "k", "b").await;
    running.settled().await;
    set_field(&api, "k", "c").await;
    running.advance(Duration::from_secs(600)).await;
    assert_eq!(seen.counts(), at_pause, "nothing ran while paused");
    let paused_lines = running.logged_at("INFO", "Paused by the annotation kopf.dev/paused");
    assert_eq!(paused_lines.len(), 1, "said once: {paused_lines:?}");
    assert!(
        paused_lines[0].contains("alice fixes its volume"),
        "{paused_lines:?}"
    );

    // Taken off: the two changes are one update, and the timer and daemon start again.
    annotate(&api, "k", "kopf.dev/paused", Value::Null).await;
    running.settled().await;
    assert_eq!(
        lock(&seen.updated).clone(),
        vec![json!({"field": "c"})],
        "one update with what changed meanwhile"
    );
    assert_eq!(seen.count("ticks"), at_pause[3].1 + 1, "the timer again");
    assert_eq!(seen.count("daemon starts"), 2, "the daemon again");
    assert_eq!(paused_gauge(&metrics).as_deref(), Some("0"));
    assert_eq!(
        running.logged_at("INFO", "Resumed: the annotation").len(),
        1
    );
    let reasons: Vec<String> = events(&server).await.into_iter().map(|e| e.0).collect();
    assert!(
        reasons.contains(&"Paused".to_string()) && reasons.contains(&"Resumed".to_string()),
        "{reasons:?}"
    );

    // And it is handled as usual afterwards.
    set_field(&api, "k", "d").await;
    running.settled().await;
    assert_eq!(lock(&seen.updated).len(), 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_object_s_deletion_waits_for_it_to_be_resumed() {
    let server = paused_server().await;
    let seen = Arc::new(Seen::default());
    let running = Running::start(&server, operator(&seen)).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    running.settled().await;
    annotate(&api, "k", "kopf.dev/paused", json!("true")).await;
    running.settled().await;

    api.delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    running.advance(Duration::from_secs(600)).await;
    let held = api.get("k").await.expect("still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(
        held.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.contains(&"kopf.zalando.org/KopfFinalizerMarker".to_string())),
        "the finalizer stays: {:?}",
        held.metadata.finalizers
    );
    assert_eq!(seen.count("deleted"), 0);
    assert_eq!(running.logged_at("WARN", "Deleted while paused").len(), 1);

    annotate(&api, "k", "kopf.dev/paused", Value::Null).await;
    running.settled().await;
    assert_eq!(seen.count("deleted"), 1);
    assert!(api.get_opt("k").await.expect("get").is_none(), "gone");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_pause_annotation_can_be_named_and_false_does_not_pause() {
    let server = paused_server().await;
    let seen = Arc::new(Seen::default());
    let op = operator(&seen).paused_annotation(Some("example.com/hands-off"));
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    running.settled().await;

    // The default name means nothing here, nor does `false` under the chosen one (as any
    // annotation, they are changes for the update handler).
    annotate(&api, "k", "kopf.dev/paused", json!("true")).await;
    annotate(&api, "k", "example.com/hands-off", json!("false")).await;
    running.settled().await;
    let before = lock(&seen.updated).len();
    set_field(&api, "k", "b").await;
    running.settled().await;
    assert_eq!(lock(&seen.updated).len(), before + 1, "not paused");

    annotate(&api, "k", "example.com/hands-off", json!("yes")).await;
    running.settled().await;
    let paused = lock(&seen.updated).len();
    set_field(&api, "k", "c").await;
    running.settled().await;
    assert_eq!(
        lock(&seen.updated).len(),
        paused,
        "paused by the chosen name"
    );
    assert_eq!(paused, before + 1, "pausing is no change of its own");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_object_is_not_reconciled_even_when_requeued() {
    let server = paused_server().await;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let s = seen.clone();
    let op = Operator::new().reconcile(
        "kopfexamples",
        move |obj: Arc<Value>, _ctx: kopf::ReconcileContext| {
            lock(&s).push(obj["spec"]["field"].clone());
            async { Ok::<_, HandlerError>(kopf::Action::requeue(Duration::from_secs(60))) }
        },
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    running.advance(Duration::from_secs(120)).await;
    let before = lock(&seen).len();
    assert!(before >= 2, "requeued every minute: {before}");

    annotate(&api, "k", "kopf.dev/paused", json!("true")).await;
    running.settled().await;
    let at_pause = lock(&seen).len();
    set_field(&api, "k", "b").await;
    running.advance(Duration::from_secs(600)).await;
    assert_eq!(lock(&seen).len(), at_pause, "no reconcile while paused");

    annotate(&api, "k", "kopf.dev/paused", Value::Null).await;
    running.settled().await;
    assert_eq!(
        lock(&seen).last(),
        Some(&json!("b")),
        "reconciled on resume"
    );
    running.advance(Duration::from_secs(60)).await;
    assert!(lock(&seen).len() >= at_pause + 2, "requeued again");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_object_listed_at_a_start_gets_its_resume_handler_once_resumed() {
    let server = paused_server().await;
    let resumed = Arc::new(AtomicUsize::new(0));
    let op = || {
        let r = resumed.clone();
        Operator::new()
            .on_create("kopfexamples", "create_fn", || async {
                Ok::<_, HandlerError>(())
            })
            .on_resume("kopfexamples", "resume_fn", move || {
                r.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, HandlerError>(()) }
            })
    };
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    let running = Running::start(&server, op()).await;
    running.settled().await;
    running.stop().await;

    // Paused while the operator is down, then listed at its next start: held.
    annotate(&api, "k", "kopf.dev/paused", json!("true")).await;
    let running = Running::start(&server, op()).await;
    running.advance(Duration::from_secs(60)).await;
    assert_eq!(resumed.load(Ordering::SeqCst), 0, "not while paused");
    annotate(&api, "k", "kopf.dev/paused", Value::Null).await;
    running.settled().await;
    assert_eq!(
        resumed.load(Ordering::SeqCst),
        1,
        "its resume handler, once resumed"
    );
    running.stop().await;
}
