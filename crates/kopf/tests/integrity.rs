//! Kopf's contract under API faults and bad stored state: a handler's outcome is stored or
//! the handler runs again, delete handlers always run before an object goes, failed and
//! pruned writes are visible, outages are logged and bounded, and state the operator did not
//! write is not trusted. Each test injects the fault through the fake API server.
//!
//! The operator runs on `kopf::testing`'s runner, which captures its log lines.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use kopf::{HandlerError, Operator, Options, Reason, TimerOptions, metrics::Metrics};
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

use common::{Running, crd, eventually, kex_api, obj, operator_requests, until_object};

const DIFF_BASE: &str = "kopf.zalando.org/last-handled-configuration";

fn counter() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

fn annotation(o: Option<&DynamicObject>, key: &str) -> Option<String> {
    o.and_then(|o| o.metadata.annotations.as_ref())
        .and_then(|a| a.get(key).cloned())
}

/// Creates the object `k` and waits until its creation is handled (its diff-base stored).
async fn create_handled(api: &Api<DynamicObject>) {
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(api, "k", "the creation handled", |o| {
        annotation(o, DIFF_BASE).is_some()
    })
    .await;
}

/// The status PATCHes of the object named `name`, as the codes the server answered.
fn status_codes(server: &FakeApiServer, name: &str) -> Vec<u16> {
    operator_requests(server)
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/{name}/status")))
        .map(|r| r.status)
        .collect()
}

/// The operator's successful writes never stored a diff-base before the result it stands
/// for: every object PATCH carrying the diff-base comes after a stored `status.<id>`.
fn assert_result_before_diffbase(server: &FakeApiServer, name: &str, id: &str) {
    let mut stored = false;
    for r in operator_requests(server) {
        if r.method != "PATCH" || !(200..300).contains(&r.status) {
            continue;
        }
        if r.path.ends_with(&format!("/{name}/status")) && r.body.contains(&format!("\"{id}\"")) {
            stored = true;
        } else if r.path.ends_with(&format!("/{name}")) && r.body.contains(DIFF_BASE) {
            assert!(
                stored,
                "the diff-base was written before the result: {}",
                r.body
            );
        }
    }
}

/// A creating operator whose handler counts its calls.
fn creating(calls: &Arc<AtomicU32>) -> Operator {
    let calls = calls.clone();
    Operator::new().on_create("kopfexamples", "create_fn", move || {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, HandlerError>(json!({"message": "hello"})) }
    })
}

fn status_patches() -> RequestPattern {
    RequestPattern::any()
        .verb("patch")
        .resource("kopfexamples")
        .subresource("status")
}

fn object_patches() -> RequestPattern {
    RequestPattern::any()
        .verb("patch")
        .resource("kopfexamples")
        .subresource("")
}

#[tokio::test(start_paused = true)]
async fn a_500_on_the_status_patch_of_a_creation_loses_no_result() {
    let server = common::paused_server().await;
    let calls = counter();
    let running = Running::start(&server, creating(&calls)).await;
    server.inject_fault(FaultRule::new(status_patches(), 500, 1));
    let api = kex_api(&server);
    create_handled(&api).await;
    let o = api.get("k").await.expect("get");
    assert_eq!(o.data["status"]["create_fn"]["message"], "hello");
    assert_eq!(status_codes(&server, "k"), vec![500, 200]);
    assert_result_before_diffbase(&server, "k", "create_fn");
    // Nothing of the failed cycle was stored: the handler ran again (at least once).
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_409_on_the_status_patch_is_sent_again() {
    let server = common::paused_server().await;
    let calls = counter();
    let running = Running::start(&server, creating(&calls)).await;
    server.inject_fault(FaultRule::new(status_patches(), 409, 1));
    let api = kex_api(&server);
    create_handled(&api).await;
    assert_eq!(
        api.get("k").await.expect("get").data["status"]["create_fn"]["message"],
        "hello"
    );
    assert_eq!(status_codes(&server, "k"), vec![409, 200]);
    assert_result_before_diffbase(&server, "k", "create_fn");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a conflict is retried as a write, not by running the handler again"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_500_on_the_diffbase_patch_runs_the_handler_again() {
    let server = common::paused_server().await;
    let calls = counter();
    let running = Running::start(&server, creating(&calls)).await;
    server.inject_fault(FaultRule::new(object_patches(), 500, 1));
    let api = kex_api(&server);
    create_handled(&api).await;
    assert_result_before_diffbase(&server, "k", "create_fn");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    running.stop().await;
}

/// The record of a handler, parsed.
fn record(o: &DynamicObject, id: &str) -> Value {
    let text = annotation(Some(o), &format!("kopf.zalando.org/{id}")).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

#[tokio::test(start_paused = true)]
async fn a_422_on_the_status_patch_is_a_failure_of_the_handler() {
    let server = common::paused_server().await;
    let calls = counter();
    let running = Running::start(&server, creating(&calls)).await;
    // As kube-apiserver words a schema violation (no causes: the message names the field).
    let mut rule = FaultRule::new(status_patches(), 422, 1);
    rule.message = Some(
        r#"KopfExample.kopf.dev "k" is invalid: status.create_fn: Invalid value: "object": status.create_fn in body must be of type string: "object""#
            .into(),
    );
    server.inject_fault(rule);
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "the failure record", |o| {
        o.is_some_and(|o| record(o, "create_fn")["retries"] == 1)
    })
    .await;
    let o = api.get("k").await.expect("get");
    let rec = record(&o, "create_fn");
    assert!(
        rec["message"]
            .as_str()
            .is_some_and(|m| m.contains("refused to store") && m.contains("status.create_fn")),
        "{rec}"
    );
    assert!(
        rec["delayed"].is_string(),
        "retried after its backoff: {rec}"
    );
    assert!(
        annotation(Some(&o), DIFF_BASE).is_none(),
        "never a diff-base without the result"
    );
    assert!(o.data["status"]["create_fn"].is_null());
    let errors = running.logged_at("ERROR", "Handler 'create_fn' returned a result");
    assert_eq!(errors.len(), 1, "{:#?}", running.logs());
    assert!(errors[0].contains("status.create_fn"), "{}", errors[0]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "not called again before its backoff"
    );
    running.stop().await;
}

/// The example CRD with a status schema of its own (no unknown fields kept).
fn crd_with_status(status: Value) -> Value {
    let mut crd = crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] = status;
    crd
}

async fn server_with_status_schema(status: Value) -> FakeApiServer {
    let s = FakeApiServer::in_process().await.expect("start");
    s.apply_object(crd_with_status(status)).expect("crd");
    s
}

#[tokio::test(start_paused = true)]
async fn a_status_schema_that_rejects_a_result_names_the_handler_and_the_field() {
    let server = server_with_status_schema(json!({"type": "object", "properties": {
        "create_fn": {"type": "object", "properties": {"message": {"type": "string"}}}}}))
    .await;
    let op = Operator::new().on_with(
        Reason::Create,
        "kopfexamples",
        "create_fn",
        || async { Ok::<_, HandlerError>(json!({"message": 42})) },
        Options {
            errors: Some(kopf::handler::ErrorsMode::Permanent),
            ..Options::default()
        },
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    // Failed for good (its errors mode): the creation is handled, with the failure logged.
    until_object(&api, "k", "the creation handled", |o| {
        annotation(o, DIFF_BASE).is_some()
    })
    .await;
    let errors = running.logged_at("ERROR", "Handler 'create_fn' returned a result");
    assert_eq!(errors.len(), 1, "{:#?}", running.logs());
    assert!(
        errors[0].contains("status.create_fn.message"),
        "the field: {}",
        errors[0]
    );
    assert!(
        errors[0].contains("must be of type string"),
        "{}",
        errors[0]
    );
    assert!(
        !running
            .logs()
            .iter()
            .any(|l| l.contains("Handler 'create_fn' succeeded")),
        "a rejected result is not a success: {:#?}",
        running.logs()
    );
    assert!(
        !running
            .logged_at("ERROR", "Handler 'create_fn' failed")
            .is_empty(),
        "the failure, as the handler's: {:#?}",
        running.logs()
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_status_schema_that_prunes_a_result_warns_once_per_handler_and_field() {
    let server = server_with_status_schema(json!({"type": "object", "properties": {
        "create_fn": {"type": "object", "properties": {"message": {"type": "string"}}}}}))
    .await;
    let op = Operator::new().on_create("kopfexamples", "create_fn", || async {
        Ok::<_, HandlerError>(json!({"message": "hello", "extra": {"n": 1}}))
    });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &obj(name, json!({"field": name})))
            .await
            .expect("create");
        until_object(&api, name, "the creation handled", |o| {
            annotation(o, DIFF_BASE).is_some()
        })
        .await;
    }
    let o = api.get("a").await.expect("get");
    assert_eq!(o.data["status"]["create_fn"], json!({"message": "hello"}));
    let warnings = running.logged_at("WARN", "dropped status.create_fn.extra.n");
    assert_eq!(
        warnings.len(),
        1,
        "once for both objects: {:#?}",
        running.logs()
    );
    assert!(
        warnings[0].contains("x-kubernetes-preserve-unknown-fields")
            && warnings[0].contains("kopfexamples.kopf.dev"),
        "how to fix it: {}",
        warnings[0]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_timer_whose_result_is_rejected_fails_visibly_and_backs_off() {
    let server = server_with_status_schema(json!({"type": "object", "properties": {
        "tick": {"type": "string"}}}))
    .await;
    let calls = counter();
    let c = calls.clone();
    let op = Operator::new()
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_millis(200)),
            move || {
                c.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, HandlerError>(json!({"not": "a string"})) }
            },
        )
        .on_delete("kopfexamples", "delete_fn", || async {
            Ok::<_, HandlerError>(())
        });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the rejection logged", async || {
        !running
            .logged_at("ERROR", "Handler 'tick' returned a result")
            .is_empty()
    })
    .await;
    running.advance(Duration::from_secs(2)).await;
    // Without the backoff it would tick ten times in 2 s.
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "retried after its backoff (60 s)"
    );
    assert_eq!(status_codes(&server, "k"), vec![422]);
    assert!(
        !running
            .logged_at("ERROR", "Timer 'tick' failed temporarily")
            .is_empty(),
        "{:#?}",
        running.logs()
    );
    running.stop().await;
}

/// A deletion while the create handler runs, with slow object PATCHes: the finalizer is on
/// the object before the handler starts, so the deletion waits for the delete handler.
#[tokio::test(start_paused = true)]
async fn deletion_during_a_slow_create_handler_runs_the_delete_handler() {
    let server = common::paused_server().await;
    let (created, deleted) = (counter(), counter());
    let (c, d) = (created.clone(), deleted.clone());
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", move || {
            c.fetch_add(1, Ordering::SeqCst);
            s.notify_one();
            async { Ok::<_, HandlerError>("created") }
        })
        .on_delete("kopfexamples", "delete_fn", move || {
            d.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(()) }
        });
    let running = Running::start(&server, op).await;
    server.add_latency(object_patches(), Duration::from_secs(3));
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    tokio::time::timeout(Duration::from_secs(20), started.notified())
        .await
        .expect("the create handler runs");
    running.advance(Duration::from_secs(1)).await;
    api.delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    until_object(&api, "k", "the object to go", |o| o.is_none()).await;
    assert_eq!(created.load(Ordering::SeqCst), 1);
    assert_eq!(deleted.load(Ordering::SeqCst), 1, "the delete handler ran");
    running.stop().await;
}

/// Objects deleted right after their creation: whatever a create handler provisioned, the
/// delete handler cleans up (a create handler never runs without the finalizer on).
#[tokio::test(start_paused = true)]
async fn objects_deleted_at_once_leak_nothing() {
    let server = common::paused_server().await;
    let live = Arc::new(std::sync::Mutex::new(
        std::collections::HashSet::<String>::new(),
    ));
    let (l1, l2) = (live.clone(), live.clone());
    let op = Operator::new()
        .on_create(
            "kopfexamples",
            "create_fn",
            move |kopf::handler::Name(name): kopf::handler::Name| {
                l1.lock().expect("lock").insert(name);
                async { Ok::<_, HandlerError>("created") }
            },
        )
        .on_delete(
            "kopfexamples",
            "delete_fn",
            move |kopf::handler::Name(name): kopf::handler::Name| {
                l2.lock().expect("lock").remove(&name);
                async { Ok::<_, HandlerError>(()) }
            },
        );
    let running = Running::start(&server, op).await;
    server.add_latency(object_patches(), Duration::from_millis(200));
    let api = kex_api(&server);
    for i in 0..10 {
        let name = format!("k{i}");
        api.create(&PostParams::default(), &obj(&name, json!({"field": i})))
            .await
            .expect("create");
        tokio::time::sleep(Duration::from_millis(50 * i)).await;
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    for i in 0..10 {
        until_object(&api, &format!("k{i}"), "the object to go", |o| o.is_none()).await;
    }
    assert!(
        live.lock().expect("lock").is_empty(),
        "created but never cleaned up: {:?}",
        live.lock().expect("lock")
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn diffbases_of_the_wrong_shape_are_warned_about_and_handled_as_creations() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let bad = [
        "42",
        "null",
        "[1,2]",
        "\"s\"",
        "{\"spec\":\"x\"}",
        "{\"metadata\":5}",
    ];
    for (i, value) in bad.iter().enumerate() {
        let mut o = obj(&format!("bad-{i}"), json!({"field": "a"}));
        o.metadata.annotations = Some([(DIFF_BASE.to_string(), value.to_string())].into());
        api.create(&PostParams::default(), &o)
            .await
            .expect("create");
    }
    let calls = counter();
    let running = Running::start(&server, creating(&calls)).await;
    for i in 0..bad.len() {
        until_object(&api, &format!("bad-{i}"), "the creation", |o| {
            o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello")
                && annotation(o, DIFF_BASE).is_some_and(|d| d.starts_with("{\"spec\""))
        })
        .await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), bad.len() as u32);
    for (i, value) in bad.iter().enumerate() {
        let warnings: Vec<String> = running
            .logged_at("WARN", "the object is handled as newly created")
            .into_iter()
            .filter(|l| l.contains(&format!("name=bad-{i} ")))
            .collect();
        assert_eq!(
            warnings.len(),
            1,
            "bad-{i} ({value}): {:#?}",
            running.logs()
        );
        assert!(warnings[0].contains("diff-base"), "{}", warnings[0]);
    }
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn corrupt_progress_records_are_warned_about_and_treated_as_absent() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let mut o = obj("k", json!({"field": "a"}));
    o.metadata.annotations = Some(
        [(
            "kopf.zalando.org/create_fn".to_string(),
            "{\"retries\":\"many\"}".to_string(),
        )]
        .into(),
    );
    api.create(&PostParams::default(), &o)
        .await
        .expect("create");
    let calls = counter();
    let running = Running::start(&server, creating(&calls)).await;
    until_object(&api, "k", "the creation", |o| {
        annotation(o, DIFF_BASE).is_some()
    })
    .await;
    let o = api.get("k").await.expect("get");
    assert_eq!(o.data["status"]["create_fn"]["message"], "hello");
    assert!(
        annotation(Some(&o), "kopf.zalando.org/create_fn").is_none(),
        "purged with the finished creation"
    );
    let warnings = running.logged_at("WARN", "progress record of handler 'create_fn'");
    assert_eq!(warnings.len(), 1, "{:#?}", running.logs());
    assert!(
        warnings[0].contains("kopf.zalando.org/create_fn"),
        "{}",
        warnings[0]
    );
    running.stop().await;
}

/// An outage of the API server's listing at start: every failure is seen (kube's own hidden
/// retry is off), logged, counted towards liveness, and the operator recovers at once.
#[tokio::test(start_paused = true)]
async fn a_list_outage_at_start_is_logged_and_recovered_from() {
    let server = common::paused_server().await;
    let lists = RequestPattern::any().verb("list").resource("kopfexamples");
    let mut outage = FaultRule::new(lists, 503, 0);
    outage.count = None; // until cleared
    server.inject_fault(outage);
    let metrics = Metrics::new();
    let calls = counter();
    let op = creating(&calls).metrics(metrics.clone());
    let running = Running::start_with(&server, op, Duration::from_secs(70), false).await;
    eventually("liveness to report the watch dead", async || {
        metrics.dead_watches() == vec!["kopfexamples".to_string()]
    })
    .await;
    running.advance(Duration::from_secs(3)).await;
    server.clear_faults();
    let api = kex_api(&server);
    create_handled(&api).await;
    assert!(metrics.dead_watches().is_empty(), "alive again");
    let failures = running.logged_at("WARN", "watch stream of kopfexamples");
    assert!(!failures.is_empty(), "{:#?}", running.logs());
    assert!(failures[0].contains("503"), "the code: {}", failures[0]);
    assert!(
        !running.logged_at("INFO", "is back after").is_empty(),
        "{:#?}",
        running.logs()
    );
    // Attempts during the outage are at most about a second apart (the backoff's cap), so a
    // recovered server is noticed within about a second.
    let attempts: Vec<u64> = operator_requests(&server)
        .iter()
        .filter(|r| r.path.ends_with("/kopfexamples") && !r.query.contains("watch=true"))
        .map(|r| r.micros)
        .collect();
    assert!(attempts.len() >= 4, "{attempts:?}");
    let widest = attempts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    assert!(widest < 1_900_000, "{widest} µs between two listings");
    running.stop().await;
}

/// An object of an odd shape (a spec of mixed types, nulls and a 200 KB string) neither
/// stops the watch nor the other objects: objects are read as plain JSON, and it is handled
/// like any other; log lines about it stay bounded. (The fake server, like kube-apiserver,
/// refuses metadata a typed client could not decode, such as a number as a label value.)
#[tokio::test(start_paused = true)]
async fn an_odd_object_is_handled_and_logged_in_bounded_lines() {
    let server = common::paused_server().await;
    server
        .apply_object(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "odd", "namespace": "default", "labels": {"n": "1"}},
            "spec": {"blob": "x".repeat(200_000), "n": [1, {"x": null}, "é\u{0}"]}}))
        .expect("stored");
    server
        .apply_object(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "plain", "namespace": "default"},
            "spec": {"field": "a"}}))
        .expect("stored");
    let calls = counter();
    let running =
        Running::start_with(&server, creating(&calls), Duration::from_secs(70), false).await;
    eventually("both handled", async || calls.load(Ordering::SeqCst) == 2).await;
    let lines = running.logs();
    let longest = lines
        .iter()
        .max_by_key(|l| l.len())
        .cloned()
        .unwrap_or_default();
    assert!(
        longest.len() < 3_000,
        "a log line of {} bytes: {}…",
        longest.len(),
        &longest[..300]
    );
    assert!(
        running
            .logged_at("WARN", "watch stream of kopfexamples")
            .is_empty(),
        "the watch did not fail"
    );
    running.stop().await;
}

fn finalizers_of(o: Option<&DynamicObject>) -> Vec<String> {
    o.and_then(|o| o.metadata.finalizers.clone())
        .unwrap_or_default()
}

const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";

/// Objects handled before the operator had delete handlers get the finalizer (and nothing
/// runs again); objects whose operator no longer needs it lose it (other controllers'
/// finalizers stay).
#[tokio::test(start_paused = true)]
async fn the_finalizer_follows_the_handlers_the_operator_has_now() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let handled = |name: &str, finalizers: Vec<String>| {
        let mut o = obj(name, json!({"field": "a"}));
        o.metadata.annotations = Some(
            [(
                DIFF_BASE.to_string(),
                "{\"spec\":{\"field\":\"a\"}}\n".to_string(),
            )]
            .into(),
        );
        o.metadata.finalizers = Some(finalizers);
        o
    };
    api.create(&PostParams::default(), &handled("old", vec![]))
        .await
        .expect("create");
    let calls = counter();
    let running = Running::start(
        &server,
        creating(&calls).on_delete("kopfexamples", "delete_fn", || async {
            Ok::<_, HandlerError>(())
        }),
    )
    .await;
    until_object(&api, "old", "the finalizer added", |o| {
        finalizers_of(o) == vec![FINALIZER.to_string()]
    })
    .await;
    running.stop().await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing runs again");

    api.create(
        &PostParams::default(),
        &handled(
            "kept",
            vec!["other.example.com/keep".into(), FINALIZER.into()],
        ),
    )
    .await
    .expect("create");
    let running = Running::start(&server, creating(&calls)).await;
    for name in ["old", "kept"] {
        until_object(&api, name, "our finalizer removed", |o| {
            !finalizers_of(o).contains(&FINALIZER.to_string())
        })
        .await;
    }
    assert_eq!(
        finalizers_of(api.get_opt("kept").await.expect("get").as_ref()),
        vec!["other.example.com/keep".to_string()]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing runs again");
    running.stop().await;
}

/// A relist while a delete handler runs brings back the object as it was before its release;
/// once the operator has removed its (last) finalizer, that state must not run the delete
/// handler a second time.
#[tokio::test(start_paused = true)]
async fn a_released_object_is_not_deleted_twice_after_a_relist() {
    let server = common::paused_server().await;
    let deleted = counter();
    let d = deleted.clone();
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>("created")
        })
        .on_delete("kopfexamples", "delete_fn", move || {
            d.fetch_add(1, Ordering::SeqCst);
            s.notify_one();
            async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok::<_, HandlerError>(())
            }
        });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    create_handled(&api).await;
    api.delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    tokio::time::timeout(Duration::from_secs(20), started.notified())
        .await
        .expect("the delete handler runs");
    // The watch breaks while the handler runs: the relist brings the deleting object back,
    // and the DELETED event that follows the release comes late.
    let before = server.requests().last().map_or(0, |r| r.seq);
    server.expire_next_watch(Some("kopfexamples"));
    server.close_watches(Some("kopfexamples"));
    eventually("the relist", async || {
        operator_requests(&server).iter().any(|r| {
            r.seq > before && r.path.ends_with("/kopfexamples") && !r.query.contains("watch=true")
        })
    })
    .await;
    server.set_watch_event_delay(Duration::from_millis(700));
    until_object(&api, "k", "the object to go", |o| o.is_none()).await;
    // Past the watch events' delay (0.7 s): every event of the deletion has come.
    running.advance(Duration::from_secs(1)).await;
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        1,
        "the delete handler ran once"
    );
    running.stop().await;
}

/// The release of a deleted object meets a concurrent change (its guarded JSON patch fails
/// its resourceVersion test): the operator reads the object as it is now and releases it,
/// without running the delete handler again.
#[tokio::test(start_paused = true)]
async fn a_conflicting_release_is_retried_on_the_fresh_object() {
    let server = common::paused_server().await;
    let deleted = counter();
    let d = deleted.clone();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>("created")
        })
        .on_delete("kopfexamples", "delete_fn", move || {
            d.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(()) }
        });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    create_handled(&api).await;
    let before = server.requests().last().map_or(0, |r| r.seq);
    // kube-apiserver's answer to a JSON patch whose `test` fails (any other 422 is a
    // refusal of the content, see tests/messages.rs).
    let mut failed_test = FaultRule::new(object_patches(), 422, 1);
    failed_test.message =
        Some("the server rejected our request due to an error in our request".into());
    server.inject_fault(failed_test);
    api.delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    until_object(&api, "k", "the object to go", |o| o.is_none()).await;
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        1,
        "the delete handler ran once"
    );
    let after: Vec<(String, u16)> = operator_requests(&server)
        .into_iter()
        .filter(|r| r.seq > before && r.path.ends_with("/kopfexamples/k"))
        .map(|r| (r.method, r.status))
        .collect();
    assert_eq!(
        after,
        vec![
            ("PATCH".to_string(), 422),
            ("GET".to_string(), 200),
            ("PATCH".to_string(), 200)
        ],
        "{:#?}",
        operator_requests(&server)
            .iter()
            .filter(|r| r.seq > before)
            .map(|r| format!(
                "{} {} {} {} {}",
                r.micros, r.method, r.path, r.status, r.body
            ))
            .collect::<Vec<_>>()
    );
    running.stop().await;
}
