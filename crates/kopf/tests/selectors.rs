//! Less data over the wire, against the fake API server: the user's selectors (`run -l`,
//! `--field-selector`), the label selector derived from the handlers' filters (objects no
//! handler looks at never reach the operator; an object that leaves it is forgotten, not
//! deleted), and streaming lists with their fallback on servers that refuse them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{Cause, Operator, Options, Reason, metrics::Metrics};
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

mod common;

use common::{Running, eventually, kex_api, obj};

type Calls = Arc<Mutex<Vec<String>>>;

fn recorder(
    calls: &Calls,
    id: &'static str,
) -> impl Fn(Cause) -> std::future::Ready<kopf::HandlerResult> + Send + Sync + 'static {
    let calls = calls.clone();
    move |c: Cause| {
        let name = c.body["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        calls.lock().expect("lock").push(format!("{id}:{name}"));
        std::future::ready(Ok(None))
    }
}

fn count(calls: &Calls, prefix: &str) -> usize {
    calls
        .lock()
        .expect("lock")
        .iter()
        .filter(|c| c.starts_with(prefix))
        .count()
}

/// Two objects labelled `app=web`, three others (one `app=db`, two without labels).
async fn five_objects(server: &FakeApiServer) {
    let api = kex_api(server);
    for (name, labels) in [
        ("web-1", json!({"app": "web"})),
        ("web-2", json!({"app": "web", "tier": "front"})),
        ("db-1", json!({"app": "db"})),
        ("plain-1", json!({})),
        ("plain-2", json!({})),
    ] {
        let mut o = obj(name, json!({"field": "a"}));
        o.metadata.labels = serde_json::from_value(labels).expect("labels");
        api.create(&PostParams::default(), &o)
            .await
            .expect("create");
    }
}

/// The objects the operator keeps a worker for (the engine's gauge).
fn tracked(metrics: &Metrics) -> Option<i64> {
    metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("kopf_objects_tracked{resource=\"kopfexamples\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
}

/// A create handler and an optional delete handler (no finalizer), both on `app=web`.
fn web_operator(calls: &Calls, metrics: &Metrics) -> Operator {
    let web = || Options::default().label("app", "web");
    Operator::new()
        .metrics(metrics.clone())
        .on_with(
            Reason::Create,
            "kopfexamples",
            "create_fn",
            recorder(calls, "create"),
            web(),
        )
        .on_with(
            Reason::Delete,
            "kopfexamples",
            "delete_fn",
            recorder(calls, "delete"),
            web().optional(),
        )
}

#[tokio::test(start_paused = true)]
async fn a_derived_label_selector_keeps_other_objects_off_the_wire() {
    let server = common::paused_server().await;
    five_objects(&server).await;
    let calls: Calls = Arc::default();
    let metrics = Metrics::new();
    let running = Running::start(&server, web_operator(&calls, &metrics)).await;
    eventually("both web objects created", async || {
        count(&calls, "create:") == 2
    })
    .await;
    // The list and the watch asked for the handlers' common label.
    let reads: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/kopfexamples") && r.method == "GET")
        .map(|r| r.query)
        .collect();
    assert!(!reads.is_empty());
    assert!(
        reads.iter().all(|q| q.contains("labelSelector=app%3Dweb")),
        "{reads:?}"
    );
    let watches = server.watches();
    assert!(
        watches
            .iter()
            .filter(|w| w.resource.ends_with("/kopfexamples"))
            .all(|w| w.label_selector == "app=web"),
        "{watches:?}"
    );
    // Only the two matching objects reached the operator.
    assert_eq!(tracked(&metrics), Some(2));
    assert!(
        running
            .logs()
            .iter()
            .any(|l| l.contains("INFO") && l.contains("app=web") && l.contains("every handler")),
        "the derived selector is logged"
    );

    // Leaving the selector: a DELETED for an object that still exists. It is forgotten,
    // its delete handler does not run.
    let api = kex_api(&server);
    api.patch(
        "web-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .expect("relabel");
    eventually("web-1 forgotten", async || tracked(&metrics) == Some(1)).await;
    assert!(api.get_opt("web-1").await.expect("get").is_some());
    // Coming back: known by its diff-base, not created again.
    api.patch(
        "web-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .expect("relabel back");
    eventually("web-1 tracked again", async || tracked(&metrics) == Some(2)).await;
    running.settled().await;
    assert_eq!(count(&calls, "delete:"), 0, "{:?}", calls.lock());
    assert_eq!(count(&calls, "create:"), 2, "{:?}", calls.lock());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_derivation_every_object_reaches_the_operator() {
    let server = common::paused_server().await;
    five_objects(&server).await;
    let calls: Calls = Arc::default();
    let metrics = Metrics::new();
    let op = web_operator(&calls, &metrics).derive_label_selectors(false);
    let running = Running::start(&server, op).await;
    eventually("all five objects tracked", async || {
        tracked(&metrics) == Some(5)
    })
    .await;
    // Tracked on arrival; their creation handlers run after: the two web objects only.
    eventually("the web objects created", async || {
        count(&calls, "create:") >= 2
    })
    .await;
    running.settled().await;
    assert_eq!(count(&calls, "create:"), 2, "{:?}", calls.lock());
    assert!(server.watches().iter().all(|w| w.label_selector.is_empty()));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_needs_the_finalizer_prevents_the_derivation() {
    let server = common::paused_server().await;
    five_objects(&server).await;
    let calls: Calls = Arc::default();
    let metrics = Metrics::new();
    let op = web_operator(&calls, &metrics).on_with(
        Reason::Delete,
        "kopfexamples",
        "cleanup_fn",
        recorder(&calls, "cleanup"),
        Options::default().label("app", "web"),
    );
    let running = Running::start(&server, op).await;
    eventually("all five objects tracked", async || {
        tracked(&metrics) == Some(5)
    })
    .await;
    assert!(server.watches().iter().all(|w| w.label_selector.is_empty()));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_users_selectors_are_combined_with_the_derived_one() {
    let server = common::paused_server().await;
    five_objects(&server).await;
    let calls: Calls = Arc::default();
    let metrics = Metrics::new();
    let op = web_operator(&calls, &metrics)
        .label_selector("tier")
        .field_selector("metadata.name!=web-1");
    let running = Running::start(&server, op).await;
    eventually("web-2 created", async || count(&calls, "create:") == 1).await;
    let watch = server
        .watches()
        .into_iter()
        .find(|w| w.resource.ends_with("/kopfexamples"))
        .expect("a watch");
    assert_eq!(watch.label_selector, "tier,app=web");
    assert_eq!(watch.field_selector, "metadata.name!=web-1");
    assert_eq!(tracked(&metrics), Some(1));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_selector_stops_the_operator_at_start() {
    let server = common::paused_server().await;
    let op = Operator::new()
        .on_create("kopfexamples", "c", recorder(&Calls::default(), "c"))
        .label_selector("app=has space");
    let running = Running::start_with(&server, op, Duration::from_secs(70), false).await;
    let error = running.result().await.expect_err("refused").to_string();
    assert!(error.contains("-l/--label-selector"), "{error}");
    assert!(error.contains("\"app=has space\""), "{error}");
    assert!(error.contains("only alphanumerics"), "{error}");
}

#[test]
fn the_command_line_checks_the_selectors() {
    let about = kopf::cli::About::new("op", "1.0.0");
    let parse = |args: &[&str]| kopf::cli::Cli::try_parse_for(&about, args.iter().copied());
    let parsed = parse(&[
        "op",
        "run",
        "-l",
        "app=web,!legacy",
        "--field-selector",
        "metadata.name!=x",
    ])
    .expect("valid");
    let args = parsed.run_args().expect("run");
    assert_eq!(args.label_selector.as_deref(), Some("app=web,!legacy"));
    assert_eq!(args.field_selector.as_deref(), Some("metadata.name!=x"));
    let error = parse(&["op", "run", "-l", "tier in a"])
        .expect_err("invalid")
        .to_string();
    assert!(error.contains("--label-selector"), "{error}");
    assert!(error.contains("parentheses"), "{error}");
    let error = parse(&["op", "run", "--field-selector", "x"])
        .expect_err("invalid")
        .to_string();
    assert!(error.contains("--field-selector"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn streaming_lists_fall_back_to_listing_on_a_server_that_refuses_them() {
    let server = common::paused_server().await;
    five_objects(&server).await;
    // An API server without streaming lists: resourceVersionMatch on a watch is refused.
    server.inject_fault(FaultRule::new(
        RequestPattern::any().verb("watch").resource("kopfexamples"),
        422,
        1,
    ));
    let calls: Calls = Arc::default();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", recorder(&calls, "create"))
        .streaming_lists(true);
    let running = Running::start(&server, op).await;
    eventually("all created", async || count(&calls, "create:") == 5).await;
    let reads: Vec<(String, String)> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/kopfexamples") && r.method == "GET")
        .map(|r| (r.target.verb.clone(), r.query))
        .collect();
    assert!(reads[0].1.contains("sendInitialEvents=true"), "{reads:?}");
    assert_eq!(reads[1].0, "list", "{reads:?}");
    assert!(
        reads[1..]
            .iter()
            .all(|(_, q)| !q.contains("sendInitialEvents")),
        "not tried again: {reads:?}"
    );
    assert!(
        running
            .logs()
            .iter()
            .any(|l| l.contains("does not support streaming lists")),
        "logged"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn metadata_only_resources_are_watched_without_their_spec() {
    let server = common::paused_server().await;
    five_objects(&server).await;
    let bodies: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let seen = bodies.clone();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", move |c: Cause| {
            seen.lock().expect("lock").push(c.body.clone());
            std::future::ready(kopf::HandlerResult::Ok(Some(json!("done"))))
        })
        .metadata_only("kopfexamples");
    let running = Running::start(&server, op).await;
    eventually("all created", async || {
        bodies.lock().expect("lock").len() == 5
    })
    .await;
    for body in bodies.lock().expect("lock").iter() {
        assert!(body.get("spec").is_none(), "{body}");
        assert_eq!(body["kind"], "KopfExample", "{body}");
        assert!(body["metadata"]["uid"].is_string(), "{body}");
    }
    let reads: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/kopfexamples") && r.method == "GET")
        .map(|r| r.accept)
        .collect();
    assert!(
        reads.iter().all(|a| a.contains("as=PartialObjectMetadata")),
        "{reads:?}"
    );
    // The results are written, and the cycle ends: no handler runs twice.
    let api = kex_api(&server);
    common::until_object(&api, "web-1", "the result written", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"] == "done")
    })
    .await;
    running.settled().await;
    assert_eq!(bodies.lock().expect("lock").len(), 5);
    // The full objects are untouched.
    let full = api.get("web-1").await.expect("get");
    assert_eq!(full.data["spec"]["field"], "a");
    assert!(
        running
            .logs()
            .iter()
            .any(|l| l.contains("watching metadata only")),
        "logged"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn metadata_only_refuses_declared_conditions() {
    let server = common::paused_server().await;
    let op = Operator::new()
        .on_create("kopfexamples", "c", recorder(&Calls::default(), "c"))
        .conditions(
            "kopfexamples",
            kopf::conditions::ConditionsSpec::new().summary("Ready"),
        )
        .metadata_only("kopfexamples");
    let running = Running::start_with(&server, op, Duration::from_secs(70), false).await;
    let error = running.result().await.expect_err("refused").to_string();
    assert!(error.contains("metadata-only"), "{error}");
    assert!(error.contains("conditions"), "{error}");
}
