//! Handlers registered with the attribute macros, run by `Operator::from_registry()`, and
//! the compile errors of wrong macro use (trybuild).
//!
//! Every operator of these tests has every handler of this file: the handlers a test is
//! about match only its objects (by label), each test has its own API server, and what the
//! handlers record is keyed by object names that no other test uses.

use std::sync::Mutex;
use std::time::Duration;

use kopf::{
    HandlerError, Operator,
    handler::{
        Captures, EventType, Index, LogLine, Memo, Name, New, Old, Owner, Spec, StopReason, Stopped,
    },
};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;

use common::{Running, eventually, record, records};

// ---- Changing handlers ----

#[kopf::on::create("kopfexamples")]
async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
    Ok(json!({"message": format!("hello {name}: {}", spec["field"])}))
}

#[kopf::on::field("kopfexamples", field = "spec.field", id = "watch_field")]
async fn field_fn(Old(old): Old, New(new): New) -> Result<Value, HandlerError> {
    Ok(json!({"old": old, "new": new}))
}

/// A sync handler with options: runs on a blocking thread, only for labelled objects (keys
/// as identifiers or string literals).
#[kopf::on::create(
    "kopfexamples",
    id = "labelled",
    labels(tier = "gold", "skip" = absent),
    when = has_spec,
    retries = 3,
    timeout = 30,
    errors = "permanent"
)]
fn labelled_fn(Name(name): Name) -> Result<String, HandlerError> {
    Ok(format!("gold {name}"))
}

/// An update handler restricted to a field with a new-value filter.
#[kopf::on::update("kopfexamples", field = "spec.field", new = "b", backoff = 0.5)]
async fn became_b(New(new): New) -> Result<Value, HandlerError> {
    Ok(json!({"now": new}))
}

fn has_spec(body: &Value) -> bool {
    body.get("spec").is_some()
}

// ---- Timers and daemons (objects labelled test=spawning) ----

/// Counts its calls per object: `status.tick` is the count.
#[kopf::on::timer(
    "kopfexamples",
    labels(test = "spawning"),
    interval = 0.2,
    initial_delay = 0.1,
    sharp,
    retries = 3,
    backoff = 0.5
)]
async fn tick(Name(name): Name) -> Result<usize, HandlerError> {
    record(&name, "tick");
    Ok(records(&name).iter().filter(|r| *r == "tick").count())
}

/// Only for objects with `spec.mode: fast` (its id is `fast/spec.mode`).
#[kopf::on::timer(
    "kopfexamples",
    id = "fast",
    labels(test = "spawning"),
    field = "spec.mode",
    value = "fast",
    interval = 0.2,
    reads = ["spec.mode", "spec.field"]
)]
fn fast(Name(name): Name) -> Result<bool, HandlerError> {
    record(&name, "fast");
    Ok(true)
}

#[kopf::on::daemon(
    "kopfexamples",
    labels(test = "spawning"),
    initial_delay = 0.1,
    cancellation_backoff = 1,
    cancellation_timeout = 5.0,
    cancellation_polling = 10
)]
async fn watcher(Name(name): Name, stopped: Stopped) -> Result<(), HandlerError> {
    record(&name, "daemon started");
    let reason = stopped.wait().await;
    record(&name, format!("daemon stopped: {reason:?}"));
    Ok(())
}

// ---- Indexes and probes (objects labelled test=index) ----

/// Object names by `spec.owner` (only objects that have one).
#[kopf::on::index("kopfexamples", labels(test = "index"), field = "spec.owner")]
async fn by_owner(
    Spec(spec): Spec,
    Name(name): Name,
) -> Result<Option<(String, String)>, HandlerError> {
    Ok(spec["owner"].as_str().map(|o| (o.to_string(), name)))
}

/// The objects of the same owner, from the index.
#[kopf::on::create("kopfexamples", labels(test = "index"))]
async fn siblings(
    Spec(spec): Spec,
    owned: Index<String, String>,
) -> Result<Vec<String>, HandlerError> {
    let owner = spec["owner"].as_str().unwrap_or_default().to_string();
    let mut names = owned.get(&owner);
    names.sort();
    Ok(names)
}

#[kopf::on::probe(id = "owners", timeout = 5)]
async fn owners_probe(owned: Index<String, String>) -> Result<usize, HandlerError> {
    Ok(owned.len())
}

#[kopf::on::probe]
fn alive() -> Result<&'static str, HandlerError> {
    Ok("yes")
}

// ---- Raw events (objects labelled test=events) ----

#[kopf::on::event("kopfexamples", labels(test = "events"))]
async fn seen(Name(name): Name, EventType(event): EventType) -> Result<(), HandlerError> {
    record(&name, event.unwrap_or_else(|| "LISTED".into()));
    Ok(())
}

/// Children of other KopfExamples (their controller), among the same objects.
#[kopf::on::event(
    "kopfexamples",
    labels(test = "events"),
    controller_owner = "kopf.dev/KopfExample"
)]
async fn child_seen(Name(name): Name, Owner(owner): Owner) -> Result<(), HandlerError> {
    record(&name, format!("owner:{}", owner.name));
    Ok(())
}

// ---- Pod logs (Pods labelled test=logs) ----

#[kopf::on::log(
    "pods",
    regex = r"^hello (?P<who>\w+)$",
    labels(test = "logs"),
    containers = ["main"]
)]
async fn hello_seen(line: LogLine, caps: Captures) -> Result<(), HandlerError> {
    record(&line.pod, caps.name("who").unwrap_or_default());
    Ok(())
}

// ---- Activities ----

/// The operators' memo: the test's token, and whether the startup handler has run.
#[derive(Clone, Default)]
struct Boot {
    token: String,
    started: bool,
}

/// Slow on purpose: nothing is watched until it is done.
#[kopf::on::startup(retries = 3, backoff = 0.1, timeout = 10)]
async fn boot(memo: Memo<Boot>) -> Result<(), HandlerError> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    memo.update(|b| b.started = true);
    Ok(())
}

/// What an object's memo started from: the startup handler's.
#[kopf::on::create("kopfexamples", labels(test = "startup"))]
async fn after_boot(memo: Memo<Boot>) -> Result<bool, HandlerError> {
    Ok(memo.get().started)
}

#[kopf::on::cleanup(timeout = 5)]
async fn goodbye(memo: Memo<Boot>) -> Result<(), HandlerError> {
    record("cleanup", memo.get().token);
    Ok(())
}

/// The API server the login handler logs in to.
static LOGIN_URL: Mutex<Option<String>> = Mutex::new(None);

#[kopf::on::login]
async fn login() -> Result<kube::Config, HandlerError> {
    let url = LOGIN_URL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or_else(|| HandlerError::permanent("no server to log in to"))?;
    record("login", url.clone());
    Ok(kube::Config::new(url.parse().map_err(HandlerError::other)?))
}

// ---- Conversion ----

/// v1 `spec.items: ["a"]` ⇄ v2 `spec.items: [{"name": "a"}]`.
#[cfg(feature = "admission")]
#[kopf::on::convert("kopfexamples.kopf.dev")]
fn convert(mut obj: Value, to: &str) -> Result<Value, String> {
    if let Some(items) = obj.pointer_mut("/spec/items").and_then(Value::as_array_mut) {
        for item in items.iter_mut() {
            *item = match (to, &*item) {
                ("v2", Value::String(s)) => json!({"name": s}),
                ("v1", Value::Object(o)) => o.get("name").cloned().unwrap_or(Value::Null),
                ("v1" | "v2", other) => other.clone(),
                (other, _) => return Err(format!("no version {other}")),
            };
        }
    }
    Ok(obj)
}

// ---- The harness ----

/// The operator of this file's handlers, with the memo of the test `token`; its webhook
/// server (for the converter) on a free local port.
fn operator(token: &str) -> Operator {
    let op = Operator::from_registry().memo(Boot {
        token: token.into(),
        started: false,
    });
    #[cfg(feature = "admission")]
    let op = op.webhook_server(
        kopf::webhooks::WebhookServer::new()
            .addr(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
            .port(0),
    );
    op
}

fn labelled(name: &str, test: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": name, "labels": {"test": test}}, "spec": spec}))
    .expect("obj")
}

async fn status(api: &Api<DynamicObject>, name: &str) -> Value {
    api.get(name).await.expect("get").data["status"].clone()
}

/// Waits until the object's status satisfies `check`.
async fn until_status(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) {
    eventually(what, async || check(&status(api, name).await)).await;
}

// ---- The tests ----

#[tokio::test(start_paused = true)]
async fn macro_registered_handlers_run() {
    let server = common::paused_server().await;
    let running = Running::start(&server, operator("changing")).await;
    let api = common::kex_api(&server);
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "m", "labels": {"tier": "gold"}}, "spec": {"field": "a"}}))
        .expect("obj");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    until_status(&api, "m", "the creation handlers", |s| {
        s.get("create_fn").is_some()
            && s.get("watch_field/spec.field").is_some()
            && s.get("labelled").is_some()
    })
    .await;
    let status_now = status(&api, "m").await;
    assert_eq!(status_now["create_fn"]["message"], "hello m: \"a\"");
    assert_eq!(status_now["labelled"], "gold m");
    // A null in a merge patch removes the key: only "new" is stored.
    assert_eq!(status_now["watch_field/spec.field"], json!({"new": "a"}));
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "b"}})),
    )
    .await
    .expect("patch");
    until_status(&api, "m", "the update handlers", |s| {
        s["watch_field/spec.field"]["new"] == "b" && s.get("became_b/spec.field").is_some()
    })
    .await;
    let status_now = status(&api, "m").await;
    assert_eq!(
        status_now["watch_field/spec.field"],
        json!({"old": "a", "new": "b"})
    );
    assert_eq!(status_now["became_b/spec.field"], json!({"now": "b"}));
    running.stop().await;
}

/// Timers tick with their options, `field`/`value` filter the objects they run for, and a
/// daemon runs until its object is deleted.
#[tokio::test(start_paused = true)]
async fn timers_tick_and_daemons_run_until_their_object_goes() {
    let server = common::paused_server().await;
    let running = Running::start(&server, operator("spawning")).await;
    let api = common::kex_api(&server);
    for (name, mode) in [("spawn-fast", "fast"), ("spawn-slow", "slow")] {
        api.create(
            &PostParams::default(),
            &labelled(name, "spawning", json!({"mode": mode})),
        )
        .await
        .expect("create");
    }
    for name in ["spawn-fast", "spawn-slow"] {
        until_status(&api, name, "three ticks of the timer", |s| {
            s["tick"].as_u64().is_some_and(|n| n >= 3)
        })
        .await;
    }
    let fast = status(&api, "spawn-fast").await;
    assert_eq!(fast["fast/spec.mode"], true, "{fast}");
    let slow = status(&api, "spawn-slow").await;
    assert!(slow.get("fast/spec.mode").is_none(), "{slow}");
    assert!(!records("spawn-slow").contains(&"fast".to_string()));
    assert!(records("spawn-fast").contains(&"daemon started".to_string()));

    api.delete("spawn-fast", &DeleteParams::default())
        .await
        .expect("delete");
    common::until_object(&api, "spawn-fast", "the object gone", |o| o.is_none()).await;
    assert!(
        records("spawn-fast").contains(&format!("daemon stopped: {:?}", StopReason::Deleted)),
        "{:?}",
        records("spawn-fast")
    );
    running.stop().await;
    assert!(
        records("spawn-slow").contains(&format!(
            "daemon stopped: {:?}",
            StopReason::OperatorExiting
        )),
        "{:?}",
        records("spawn-slow")
    );
}

/// An index's entries are read by a handler of another object and by a probe; probes run
/// with `Operator::probes()`, under their ids (the function's name by default).
#[tokio::test(start_paused = true)]
async fn indexes_are_read_by_handlers_and_probes() {
    let server = common::paused_server().await;
    let op = operator("index");
    // Declared by `from_registry`: readable before anything is watched.
    assert_eq!(
        op.probes().run().await,
        json!({"owners": 0, "alive": "yes"})
    );
    let running = Running::start(&server, op.clone()).await;
    let api = common::kex_api(&server);
    api.create(
        &PostParams::default(),
        &labelled("idx-a", "index", json!({"owner": "alice"})),
    )
    .await
    .expect("create");
    until_status(&api, "idx-a", "the handler of idx-a", |s| {
        s.get("siblings").is_some()
    })
    .await;
    assert_eq!(status(&api, "idx-a").await["siblings"], json!(["idx-a"]));
    for (name, spec) in [
        ("idx-b", json!({"owner": "alice"})),
        ("idx-c", json!({"owner": "bob"})),
        ("idx-none", json!({})),
    ] {
        api.create(&PostParams::default(), &labelled(name, "index", spec))
            .await
            .expect("create");
    }
    until_status(&api, "idx-b", "the handler of idx-b", |s| {
        s.get("siblings").is_some()
    })
    .await;
    assert_eq!(
        status(&api, "idx-b").await["siblings"],
        json!(["idx-a", "idx-b"])
    );
    // `field = "spec.owner"`: objects without it are not indexed.
    until_status(&api, "idx-none", "the handler of idx-none", |s| {
        s.get("siblings").is_some()
    })
    .await;
    assert_eq!(status(&api, "idx-none").await["siblings"], json!([]));
    // A fresh `Probes` each time: their results are cached for 10 s.
    eventually("the probe counting two owners", async || {
        op.probes().run().await == json!({"owners": 2, "alive": "yes"})
    })
    .await;
    running.stop().await;
}

/// Raw event handlers see the objects of the initial listing, then every event.
#[tokio::test(start_paused = true)]
async fn raw_events_are_seen() {
    let server = common::paused_server().await;
    let api = common::kex_api(&server);
    api.create(
        &PostParams::default(),
        &labelled("ev-0", "events", json!({})),
    )
    .await
    .expect("create");
    let running = Running::start(&server, operator("events")).await;
    // ev-1 is created once the listing is through (ev-0 seen in it): the watch, which
    // continues from the listing's resourceVersion, then sees it as ADDED. The server's
    // first watch request alone does not say that this resource's listing is done.
    eventually("ev-0 in the listing", async || {
        records("ev-0").first().map(String::as_str) == Some("LISTED")
    })
    .await;
    let ev1 = api
        .create(
            &PostParams::default(),
            &labelled("ev-1", "events", json!({})),
        )
        .await
        .expect("create");
    let mut child = labelled("ev-child", "events", json!({}));
    child.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "name": "ev-1", "uid": ev1.metadata.uid, "controller": true}))
        .expect("an owner reference"),
    ]);
    api.create(&PostParams::default(), &child)
        .await
        .expect("create");
    eventually("the child's owner handler", async || {
        records("ev-child").contains(&"owner:ev-1".to_string())
    })
    .await;
    eventually("the ADDED event", async || {
        records("ev-1").contains(&"ADDED".to_string())
    })
    .await;
    api.patch(
        "ev-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"x": 1}})),
    )
    .await
    .expect("patch");
    api.delete("ev-1", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the DELETED event", async || {
        records("ev-1").contains(&"DELETED".to_string())
    })
    .await;
    let ev1 = records("ev-1");
    assert!(ev1.contains(&"MODIFIED".to_string()), "{ev1:?}");
    assert_eq!(records("ev-0").first().map(String::as_str), Some("LISTED"));
    assert!(
        !ev1.iter()
            .chain(&records("ev-0"))
            .any(|r| r.starts_with("owner:")),
        "objects without an owner are not children: {ev1:?}"
    );
    running.stop().await;
}

/// A pod-log handler by attribute: its regex, its container, its Pods.
#[tokio::test(start_paused = true)]
async fn log_lines_reach_the_macro_registered_handler() {
    let server = common::paused_server().await;
    let running = Running::start(&server, operator("logs")).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(server.client(), "default");
    for (name, test) in [("log-pod", "logs"), ("log-other", "other")] {
        let pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"test": test}},
            "spec": {"containers": [{"name": "main", "image": "x"}, {"name": "side", "image": "x"}]},
        }))
        .expect("a Pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create");
        server.append_log("default", name, "main", &["hello world", "goodbye"]);
        server.append_log("default", name, "side", &["hello side"]);
    }
    eventually("the matching line", async || !records("log-pod").is_empty()).await;
    running.settled().await;
    assert_eq!(
        records("log-pod"),
        ["world"],
        "the main container's matching line only"
    );
    assert!(records("log-other").is_empty(), "another Pod's labels");
    running.stop().await;
}

/// Startup handlers run before anything is watched (objects start from the memo they
/// set); cleanup handlers run when the operator stops.
#[tokio::test(start_paused = true)]
async fn startup_runs_before_watching_and_cleanup_at_stop() {
    let server = common::paused_server().await;
    let api = common::kex_api(&server);
    api.create(
        &PostParams::default(),
        &labelled("boot-1", "startup", json!({})),
    )
    .await
    .expect("create");
    let running = Running::start(&server, operator("activities")).await;
    until_status(&api, "boot-1", "the handler of boot-1", |s| {
        s.get("after_boot").is_some()
    })
    .await;
    assert_eq!(status(&api, "boot-1").await["after_boot"], true);
    assert!(!records("cleanup").contains(&"activities".to_string()));
    running.stop().await;
    assert!(
        records("cleanup").contains(&"activities".to_string()),
        "{:?}",
        records("cleanup")
    );
}

/// The login handler gives the operator's client its server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_handler_connects_the_operator() {
    let server = common::server().await;
    *LOGIN_URL.lock().unwrap_or_else(|e| e.into_inner()) = Some(server.url());
    let client = operator("login").connect().await.expect("logged in");
    assert_eq!(records("login"), vec![server.url()]);
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Api::<DynamicObject>::all_with(client, &ar)
        .list(&ListParams::default())
        .await
        .expect("listed through the logged-in client");
    assert!(
        common::operator_requests(&server)
            .iter()
            .any(|r| r.path.ends_with("/kopfexamples")),
        "the operator's client went to the login's server"
    );
}

/// The converter converts between the CRD's versions, called by the API server.
#[cfg(feature = "admission")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_converter_converts_between_versions() {
    let server = kopf_testing::FakeApiServer::start().await.expect("start");
    let path = format!(
        "{}/../../examples/admission-crd.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    server
        .apply_file(std::path::Path::new(&path))
        .expect("the CRD");
    let running = Running::start(&server, operator("convert").webhooks_managed("kopf.dev")).await;
    let crds: Api<DynamicObject> = Api::all_with(
        server.client(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            ),
            "customresourcedefinitions",
        ),
    );
    eventually("the CRD's conversion webhook", async || {
        crds.get("kopfexamples.kopf.dev")
            .await
            .expect("the CRD")
            .data["spec"]["conversion"]["strategy"]
            == "Webhook"
    })
    .await;
    let kex = |version: &str| {
        Api::<DynamicObject>::namespaced_with(
            server.client(),
            "default",
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk("kopf.dev", version, "KopfExample"),
                "kopfexamples",
            ),
        )
    };
    kex("v1")
        .create(
            &PostParams::default(),
            &labelled("conv-1", "convert", json!({"items": ["a", "b"]})),
        )
        .await
        .expect("create");
    let as_v2 = kex("v2").get("conv-1").await.expect("get as v2");
    assert_eq!(
        as_v2.data["spec"]["items"],
        json!([{"name": "a"}, {"name": "b"}])
    );
    running.stop().await;
    server.shutdown().await;
}

/// Wrong uses of the macros fail to compile with messages that point at the user's code.
#[test]
fn macro_misuse_is_a_clear_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
