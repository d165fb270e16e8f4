//! The engine's run-time behaviour against the fake API server: framework errors throttled
//! per object, the touch annotation after delays, reconnecting silent watches, resources
//! that appear and disappear while running, progress in the status, memos, user layers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{
    Cause, HandlerError, Operator, Reason, Selector, TemporaryError,
    handler::{Memo, Retry},
    layers::{AttemptService, HandlerCall, HandlerService},
    persistence::ProgressStorage,
};
use kopf_testing::{FaultRule, RequestPattern};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tower::ServiceExt;

mod common;

use common::{
    Running, count, crd, create_new, eventually, handled, kex_api, obj, operator_requests, server,
    until_object, writes,
};

type Attempt = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<&'static str, TemporaryError>> + Send>,
>;

/// A handler that fails temporarily on its first attempt (retried after `delay`), then
/// returns "done".
fn fails_once(delay: Duration) -> impl Fn(Retry) -> Attempt + Send + Sync + 'static {
    move |Retry(retry): Retry| {
        Box::pin(async move {
            if retry == 0 {
                return Err(TemporaryError {
                    message: "later".into(),
                    delay: Some(delay),
                });
            }
            Ok("done")
        })
    }
}

fn status_of(o: Option<&DynamicObject>, key: &str) -> Value {
    o.map(|o| o.data["status"][key].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(start_paused = true)]
async fn framework_errors_are_throttled_per_object() {
    let server = common::paused_server().await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let op = Operator::new().on_create("kopfexamples", "create_fn", move || {
        c.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, HandlerError>("created") }
    });
    let running = Running::start(&server, op).await;
    // The object's PATCHes fail twice (the API server is unhappy, not the handler).
    server.inject_fault(FaultRule::new(
        RequestPattern::any()
            .verb("patch")
            .resource("kopfexamples")
            .subresource(""),
        500,
        2,
    ));
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the diff-base after two failures", |o| {
        o.and_then(|o| o.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
    })
    .await;
    assert_eq!(
        status_of(api.get_opt("k").await.expect("get").as_ref(), "create_fn"),
        "created",
        "the result is stored before the diff-base"
    );
    let patches: Vec<u64> = operator_requests(&server)
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/k"))
        .map(|r| r.micros)
        .collect();
    assert_eq!(patches.len(), 3, "two failed PATCHes and the good one");
    // Kopf's error delays: 1 s, then 1 s again (lower bounds: a loaded machine is slower).
    for pair in patches.windows(2) {
        assert!(
            pair[1] - pair[0] >= 900_000,
            "throttled: {} µs between attempts",
            pair[1] - pair[0]
        );
    }
    // Nothing was stored by the failed cycles: the handler ran again each time.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_after_delays_when_asked() {
    let server = server().await;
    let op = Operator::new().touch_delays(true).on_create(
        "kopfexamples",
        "create_fn",
        fails_once(Duration::from_millis(300)),
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the retry", |o| {
        status_of(o, "create_fn") == "done"
            && o.and_then(|o| o.metadata.annotations.as_ref())
                .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
    })
    .await;
    // Logged once the cycle's writes are all done (the status one too).
    eventually("the cycle's end", async || {
        running
            .logs()
            .iter()
            .any(|l| l.contains("Handler 'create_fn' succeeded"))
    })
    .await;
    let o = api.get("k").await.expect("get");
    assert!(
        !o.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("kopf.zalando.org/touch-dummy"),
        "the completing PATCH clears the touch"
    );
    // Records, the touch, then the purge with the diff-base (clearing the touch), the status;
    // and the warning event about the first attempt.
    insta::assert_json_snapshot!("touch_after_delays", writes(&server));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_watches_reconnect_without_relisting() {
    let server = server().await;
    let op = Operator::new().on_create("kopfexamples", "create_fn", || async {
        Ok::<_, HandlerError>("created")
    });
    // A 1 s inactivity timeout; the fake server sends bookmarks only every 60 s.
    let running = Running::start_with(&server, op, Duration::from_secs(1), true).await;
    let watches = || {
        operator_requests(&server)
            .into_iter()
            .filter(|r| r.path.ends_with("/kopfexamples") && r.query.contains("watch=true"))
            .collect::<Vec<_>>()
    };
    eventually("a reconnect after the silence", async || {
        watches().len() >= 2
    })
    .await;
    let lists = operator_requests(&server)
        .iter()
        .filter(|r| r.path.ends_with("/kopfexamples") && !r.query.contains("watch=true"))
        .count();
    assert_eq!(lists, 1, "the reconnect resumes the watch, no relist");
    let again = &watches()[1];
    assert!(
        again.query.contains("resourceVersion="),
        "resumed from the last resourceVersion: {}",
        again.query
    );
    // And it still serves.
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the creation", |o| {
        status_of(o, "create_fn") == "created"
    })
    .await;
    running.stop().await;
}

fn crds(server: &kopf_testing::FakeApiServer) -> Api<DynamicObject> {
    Api::all_with(
        server.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_that_appear_later_are_served_when_waiting_for_them() {
    let server = kopf_testing::FakeApiServer::start().await.expect("start");
    let op =
        Operator::new()
            .wait_for_resources(true)
            .on_create("kopfexamples", "create_fn", || async {
                Ok::<_, HandlerError>("created")
            });
    // Not an error: the operator starts and watches CRDs.
    let running = Running::start(&server, op).await;
    assert!(
        operator_requests(&server)
            .iter()
            .any(|r| r.path.ends_with("/customresourcedefinitions")),
        "CRDs are watched"
    );
    server.apply_object(crd()).expect("the CRD appears");
    let api = kex_api(&server);
    eventually("the resource served", async || {
        server
            .watches()
            .iter()
            .any(|w| w.resource.contains("kopfexamples"))
    })
    .await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the creation", |o| {
        status_of(o, "create_fn") == "created"
    })
    .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicate_selectors_follow_crds_that_come_and_go() {
    let server = kopf_testing::FakeApiServer::start().await.expect("start");
    let op = Operator::new().on_with(
        Reason::Create,
        Selector::predicate(|d| d.api_resource.group == "kopf.dev"),
        "create_fn",
        || async { Ok::<_, HandlerError>("created") },
        Default::default(),
    );
    let running = Running::start(&server, op).await;
    server.apply_object(crd()).expect("the CRD appears");
    let served = |server: &kopf_testing::FakeApiServer| {
        server
            .watches()
            .iter()
            .any(|w| w.resource.contains("kopfexamples"))
    };
    eventually("the new resource served", async || served(&server)).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the creation", |o| {
        status_of(o, "create_fn") == "created"
    })
    .await;
    crds(&server)
        .delete("kopfexamples.kopf.dev", &Default::default())
        .await
        .expect("delete the CRD");
    eventually("the resource not served any more", async || {
        !served(&server)
    })
    .await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn progress_in_the_status_when_asked() {
    let server = common::paused_server().await;
    let op = Operator::new()
        .progress_storage(ProgressStorage::status("kopf"))
        .on_create(
            "kopfexamples",
            "flaky",
            fails_once(Duration::from_millis(100)),
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the retry", |o| status_of(o, "flaky") == "done").await;
    let status_patches: Vec<Value> = writes(&server)
        .into_iter()
        .filter(|w| w["path"].as_str().is_some_and(|p| p.ends_with("/status")))
        .map(|w| w["body"].clone())
        .collect();
    assert_eq!(
        status_patches[0]["status"]["kopf"]["progress"]["flaky"],
        json!({"started": "<time>", "delayed": "<time>", "purpose": "create", "retries": 1,
            "success": false, "failure": false, "message": "later"})
    );
    assert_eq!(
        status_patches[1]["status"],
        json!({"flaky": "done", "kopf": {"progress": {"flaky": null}}}),
        "the result and the purge in one PATCH"
    );
    let o = api.get("k").await.expect("get");
    assert!(
        !o.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("kopf.zalando.org/flaky"),
        "no progress annotations"
    );
    running.stop().await;
}

#[derive(Clone, Default)]
struct Seen(u32);

#[tokio::test(start_paused = true)]
async fn memos_live_per_object_across_cycles() {
    let server = common::paused_server().await;
    let op = Operator::new().memo(Seen(100)).on_update(
        "kopfexamples",
        "update_fn",
        |memo: Memo<Seen>| async move {
            Ok::<_, HandlerError>(memo.update(|s| {
                s.0 += 1;
                s.0
            }))
        },
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &obj(name, json!({"n": 0})))
            .await
            .expect("create");
        until_object(&api, name, "the diff-base", |o| {
            o.and_then(|o| o.metadata.annotations.as_ref())
                .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
        })
        .await;
    }
    for n in 1..=2 {
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"n": n}})),
        )
        .await
        .expect("update");
        until_object(&api, "a", "the update", |o| {
            status_of(o, "update_fn") == json!(100 + n)
        })
        .await;
    }
    api.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"n": 1}})),
    )
    .await
    .expect("update");
    until_object(&api, "b", "b's own memo", |o| {
        status_of(o, "update_fn") == json!(101)
    })
    .await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn user_layers_wrap_every_handler_call() {
    let server = common::paused_server().await;
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let log = seen.clone();
    let op = Operator::new()
        .layer(tower::layer::layer_fn(move |inner: HandlerService| {
            let log = log.clone();
            tower::service_fn(move |call: HandlerCall| {
                let log = log.clone();
                let id = call.spec.id.clone();
                let inner = inner.clone();
                async move {
                    let outcome = inner.oneshot(call).await?;
                    log.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((id, outcome.result.is_ok()));
                    Ok(outcome)
                }
            })
        }))
        .on_create("kopfexamples", "ok_fn", || async {
            Ok::<_, HandlerError>(1)
        })
        .on_create("kopfexamples", "bad_fn", |_c: Cause| async {
            Err::<(), _>(HandlerError::permanent("no"))
        });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the creation", |o| {
        status_of(o, "ok_fn") == 1
            && o.and_then(|o| o.metadata.annotations.as_ref())
                .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
    })
    .await;
    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    s.sort();
    assert_eq!(
        s,
        vec![("bad_fn".to_string(), false), ("ok_fn".to_string(), true)]
    );
    assert_eq!(
        count(&server, "PATCH", "/k"),
        1,
        "one object PATCH per cycle"
    );
    running.stop().await;
}

type Places = Arc<Mutex<Vec<(String, &'static str, String)>>>;

/// How an outcome looks to a user layer.
fn label(result: &Result<Option<Value>, HandlerError>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(HandlerError::Temporary { .. }) => "temporary".into(),
        Err(_) => "permanent".into(),
    }
}

/// A user layer at a place below the progress record's: logs the call's handler and the
/// outcome it sees.
fn at(
    place: &'static str,
    log: Places,
) -> impl tower::Layer<HandlerService, Service = HandlerService> + Clone {
    tower::layer::layer_fn(move |inner: HandlerService| {
        let log = log.clone();
        HandlerService::new(tower::service_fn(move |call: HandlerCall| {
            let log = log.clone();
            let id = call.spec.id.clone();
            let inner = inner.clone();
            async move {
                let outcome = inner.oneshot(call).await?;
                log.lock().unwrap_or_else(|e| e.into_inner()).push((
                    id,
                    place,
                    label(&outcome.result),
                ));
                Ok(outcome)
            }
        }))
    })
}

#[tokio::test(start_paused = true)]
async fn user_layers_run_at_each_place_in_order() {
    let server = common::paused_server().await;
    let log: Places = Arc::default();
    let before = log.clone();
    let op = Operator::new()
        .layer_around_handler(at("around the handler", log.clone()))
        .layer(at("around the attempt", log.clone()))
        .layer_before_filters(tower::layer::layer_fn(move |inner: AttemptService| {
            let log = before.clone();
            AttemptService::new(tower::service_fn(move |call: HandlerCall| {
                let log = log.clone();
                let id = call.spec.id.clone();
                let inner = inner.clone();
                async move {
                    let attempt = inner.oneshot(call).await?;
                    let seen = match &attempt {
                        kopf::layers::Attempt::Done { outcome, .. } => label(&outcome.result),
                        kopf::layers::Attempt::Skipped => "skipped".into(),
                    };
                    log.lock().unwrap_or_else(|e| e.into_inner()).push((
                        id,
                        "before the filters",
                        seen,
                    ));
                    Ok(attempt)
                }
            }))
        }))
        .on_create("kopfexamples", "ok_fn", || async {
            Ok::<_, HandlerError>(1)
        })
        .on_with(
            Reason::Create,
            "kopfexamples",
            "last_fn",
            |_c: Cause| async {
                Err::<(), _>(HandlerError::temporary("later", Duration::from_secs(1)))
            },
            kopf::Options::new().retries(1),
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the creation", |o| {
        status_of(o, "ok_fn") == 1
            && o.and_then(|o| o.metadata.annotations.as_ref())
                .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
    })
    .await;
    let mut seen = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // Calls of different handlers may interleave; each handler's own entries stay in the
    // order its call went back up the stack.
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let entry =
        |id: &str, place: &'static str, seen: &str| (id.to_string(), place, seen.to_string());
    assert_eq!(
        seen,
        vec![
            // The last allowed attempt fails temporarily: the handler's own outcome inside,
            // Kopf's look-ahead makes it permanent outside the classification.
            entry("last_fn", "around the handler", "temporary"),
            entry("last_fn", "around the attempt", "permanent"),
            entry("last_fn", "before the filters", "permanent"),
            entry("ok_fn", "around the handler", "ok"),
            entry("ok_fn", "around the attempt", "ok"),
            entry("ok_fn", "before the filters", "ok"),
        ]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_expired_watch_relists_and_keeps_serving() {
    let server = common::paused_server().await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let op = Operator::new().on_resume("kopfexamples", "resume_fn", move || {
        c.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, HandlerError>(()) }
    });
    let op = op.on_create("kopfexamples", "create_fn", || async {
        Ok::<_, HandlerError>("created")
    });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(
        &PostParams::default(),
        &obj("before", json!({"field": "a"})),
    )
    .await
    .expect("create");
    until_object(&api, "before", "the first creation", |o| {
        status_of(o, "create_fn") == "created"
    })
    .await;
    // The next watch gets 410 Gone: the operator lists again, then watches on.
    server.expire_next_watch(Some("kopfexamples"));
    server.close_watches(Some("kopfexamples"));
    let lists = || {
        operator_requests(&server)
            .iter()
            .filter(|r| r.path.ends_with("/kopfexamples") && !r.query.contains("watch=true"))
            .count()
    };
    eventually("the relist", async || lists() >= 2).await;
    api.create(&PostParams::default(), &obj("after", json!({"field": "b"})))
        .await
        .expect("create");
    until_object(&api, "after", "the creation after the relist", |o| {
        status_of(o, "create_fn") == "created"
    })
    .await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a relist is not a restart: objects already handled are not resumed"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn kopfs_one_handler_per_cycle_runs_each_handler_once() {
    let server = common::paused_server().await;
    let calls: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let mut op = Operator::new().lifecycle(kopf::persistence::Lifecycle::Asap);
    for id in ["a_fn", "b_fn", "c_fn"] {
        let calls = calls.clone();
        op = op.on_create("kopfexamples", id, move || {
            calls.lock().unwrap_or_else(|e| e.into_inner()).push(id);
            async { Ok::<_, HandlerError>(()) }
        });
    }
    let running = Running::start(&server, op).await;
    // A slow watch: our own writes come back late; the next cycle must wait for them
    // (consistency) instead of running on the state from before the write.
    server.set_watch_event_delay(Duration::from_millis(150));
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the diff-base", |o| {
        o.and_then(|o| o.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
    })
    .await;
    running.settled().await;
    let mut seen = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    seen.sort();
    assert_eq!(
        seen,
        vec!["a_fn", "b_fn", "c_fn"],
        "each once, one per cycle"
    );
    assert_eq!(
        count(&server, "PATCH", "/k"),
        3,
        "a PATCH per cycle, as Kopf"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_that_comes_back_later_than_the_consistency_timeout_is_read_not_redone() {
    let server = common::paused_server().await;
    let calls: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let mut op = Operator::new()
        .lifecycle(kopf::persistence::Lifecycle::Asap)
        .consistency_timeout(Duration::from_millis(300));
    for id in ["a_fn", "b_fn"] {
        let calls = calls.clone();
        op = op.on_create("kopfexamples", id, move || {
            calls.lock().unwrap_or_else(|e| e.into_inner()).push(id);
            async { Ok::<_, HandlerError>(()) }
        });
    }
    let running = Running::start(&server, op).await;
    // A watch slower than the consistency timeout: the state at hand after each write is
    // older than the write; processing it would run the first handler again.
    server.set_watch_event_delay(Duration::from_millis(1200));
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("slow", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "slow", "the diff-base", |o| {
        o.and_then(|o| o.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
    })
    .await;
    running.settled().await;
    let mut seen = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    seen.sort();
    assert_eq!(seen, vec!["a_fn", "b_fn"], "each once");
    // Its worker retired after each write, leaving the write's resourceVersion: the older
    // states that came later were skipped, and nothing had to be read.
    assert_eq!(count(&server, "GET", "/slow"), 0);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_retrying_resume_handler_is_retried() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    // Handled before: the diff-base matches, so the operator's start is a resume.
    let mut handled = obj("k", json!({"field": "a"}));
    handled.metadata.annotations = Some(
        [(
            "kopf.zalando.org/last-handled-configuration".to_string(),
            "{\"spec\":{\"field\":\"a\"}}\n".to_string(),
        )]
        .into(),
    );
    api.create(&PostParams::default(), &handled)
        .await
        .expect("create");
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let op = Operator::new().on_resume("kopfexamples", "resume_fn", move |Retry(retry): Retry| {
        c.fetch_add(1, Ordering::SeqCst);
        async move {
            if retry == 0 {
                return Err(TemporaryError {
                    message: "not yet".into(),
                    delay: Some(Duration::from_millis(100)),
                });
            }
            Ok("resumed")
        }
    });
    let running = Running::start(&server, op).await;
    until_object(&api, "k", "the resume after its retry", |o| {
        status_of(o, "resume_fn") == "resumed"
    })
    .await;
    running.settled().await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let o = api.get("k").await.expect("get");
    assert!(
        !o.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("kopf.zalando.org/resume_fn"),
        "purged once done"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_touch_goes_where_the_progress_is() {
    let server = server().await;
    let op = Operator::new()
        .touch_delays(true)
        .progress_storage(ProgressStorage::status("kopf"))
        .on_create(
            "kopfexamples",
            "flaky",
            fails_once(Duration::from_millis(200)),
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the retry", |o| status_of(o, "flaky") == "done").await;
    let touches: Vec<Value> = writes(&server)
        .into_iter()
        .filter(|w| w["body"]["status"]["kopf"].get("dummy").is_some())
        .collect();
    assert_eq!(
        touches.len(),
        2,
        "the touch, then its clearing: {touches:?}"
    );
    assert!(
        touches
            .iter()
            .all(|w| w["path"].as_str().is_some_and(|p| p.ends_with("/k/status"))),
        "through the status subresource"
    );
    assert_eq!(touches[1]["body"]["status"]["kopf"]["dummy"], Value::Null);
    running.stop().await;
}

/// The queue-depth gauge returns to 0 once every object's latest state has been processed,
/// with many objects and updates interleaving on the runtime's threads. (The race this guards
/// against, a state picked by its worker before the dispatcher counted it, is too narrow to
/// hit on demand; `runtime.rs::liveness_and_metrics_are_scraped` used to show it now and then.)
#[tokio::test(start_paused = true)]
async fn the_queue_gauge_returns_to_zero_when_everything_is_processed() {
    let server = common::paused_server().await;
    let metrics = kopf::metrics::Metrics::new();
    let op = Operator::new()
        .metrics(metrics.clone())
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>("created")
        })
        .on_update("kopfexamples", "update_fn", || async {
            Ok::<_, HandlerError>("updated")
        });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    let names: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    for name in &names {
        api.create(&PostParams::default(), &obj(name, json!({"field": "a"})))
            .await
            .expect("create");
    }
    for round in 0..3 {
        for name in &names {
            let patch = json!({"spec": {"field": format!("b{round}")}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("patch");
        }
    }
    eventually("every object's last state handled", async || {
        let list = api.list(&Default::default()).await.expect("list");
        list.items.len() == names.len()
            && list.items.iter().all(|o| {
                o.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("kopf.zalando.org/last-handled-configuration"))
                    .is_some_and(|c| c.contains("b2"))
            })
    })
    .await;
    let settled = r#"kopf_queue_depth{resource="kopfexamples"} 0"#;
    eventually("the queue gauge back at 0", async || {
        metrics.encode().contains(settled)
    })
    .await;
    running.stop().await;
}

/// A change made while a listing's objects are still being processed goes ahead of them:
/// with a worker limit of 4, the changed object is the first in the queue, before the 64
/// listed objects waiting there (and the rest of the listing, waiting in the backlog).
#[tokio::test(start_paused = true)]
async fn a_change_during_a_listing_flood_goes_ahead_of_it() {
    const LISTED: u32 = 300;
    let server = common::paused_server().await;
    let api = kex_api(&server);
    // Handled before: its start is a resume (no create handler), then a change.
    api.create(
        &PostParams::default(),
        &handled("changed", json!({"field": "a"})),
    )
    .await
    .expect("create");
    create_new(&api, LISTED).await;
    let created = Arc::new(AtomicU32::new(0));
    let at_update: Arc<Mutex<Option<u32>>> = Arc::default();
    let op = {
        let (created, at_update) = (created.clone(), at_update.clone());
        let creating = created.clone();
        Operator::new()
            .worker_limit(4)
            .on_create("kopfexamples", "create_fn", move || {
                let created = creating.clone();
                async move {
                    // Slow enough that the listing's objects take many rounds of places.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    created.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, HandlerError>(())
                }
            })
            .on_update("kopfexamples", "update_fn", move || {
                let (created, at_update) = (created.clone(), at_update.clone());
                async move {
                    *at_update.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(created.load(Ordering::SeqCst));
                    Ok::<_, HandlerError>(())
                }
            })
    };
    let running = Running::start(&server, op).await;
    eventually("the first creations", async || {
        created.load(Ordering::SeqCst) > 0
    })
    .await;
    api.patch(
        "changed",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "b"}})),
    )
    .await
    .expect("patch");
    eventually("the update handled", async || {
        at_update
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    })
    .await;
    let done_before = at_update
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or(LISTED);
    // Behind the listed objects waiting for places, it would have waited for 64 of them.
    assert!(
        done_before < 32,
        "the update ran after {done_before} of {LISTED} creations"
    );
    eventually("every creation", async || {
        created.load(Ordering::SeqCst) == LISTED
    })
    .await;
    running.stop().await;
}
