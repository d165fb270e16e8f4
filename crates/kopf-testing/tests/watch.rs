//! Watch semantics with `kube::runtime::watcher` and raw watch streams: list+watch,
//! streaming lists, history replay, bookmarks, 410 → relist, selectors, DELETED with the
//! last state, fault injection on watches, KEP-5866 shard selectors on lists and watches.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::Raw;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"a": "b"}}),
    )
    .expect("cm")
}

/// Reads watch lines from a raw streaming response until `n` events or the timeout.
async fn read_events(server: &FakeApiServer, path: &str, n: usize) -> Vec<Value> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let addr = server.addr();
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut reader = BufReader::new(stream);
    let mut events = Vec::new();
    let mut line = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while events.len() < n {
        line.clear();
        let read = tokio::time::timeout_at(deadline, reader.read_line(&mut line)).await;
        match read {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(_)) => {
                // Chunk-size lines of the chunked encoding are skipped: events are objects.
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(line.trim()) {
                    events.push(v);
                }
            }
            Ok(Err(e)) => panic!("read: {e}"),
        }
    }
    events
}

#[tokio::test]
async fn watcher_lists_then_watches_and_sees_deletions_with_last_state() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(&PostParams::default(), &cm("pre", json!({})))
        .await
        .expect("create");
    let mut stream = watcher::watcher(cms.clone(), watcher::Config::default()).boxed();
    let mut initial = Vec::new();
    loop {
        match stream.try_next().await.expect("event").expect("some") {
            Event::Init => {}
            Event::InitApply(o) => initial.push(o.metadata.name.unwrap_or_default()),
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial, vec!["pre"]);
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["x/y".into()]);
    cms.create(&PostParams::default(), &held)
        .await
        .expect("create");
    cms.delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match stream.try_next().await.expect("event").expect("some") {
            Event::Apply(o) => seen.push(("apply", o)),
            Event::Delete(o) => seen.push(("delete", o)),
            _ => {}
        }
    }
    assert_eq!(seen[0].0, "apply");
    assert!(seen[1].1.metadata.deletion_timestamp.is_some());
    assert_eq!(seen[2].0, "delete");
    // DELETED carries the last stored state, still listing the finalizer.
    assert_eq!(
        seen[2].1.metadata.finalizers.as_deref(),
        Some(&["x/y".to_string()][..])
    );
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_a_bookmark() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for n in ["a", "b"] {
        cms.create(&PostParams::default(), &cm(n, json!({})))
            .await
            .expect("create");
    }
    let cfg = watcher::Config::default().streaming_lists();
    let mut stream = watcher::watcher(cms.clone(), cfg).boxed();
    let mut names = Vec::new();
    loop {
        match stream.try_next().await.expect("event").expect("some") {
            Event::InitApply(o) => names.push(o.metadata.name.unwrap_or_default()),
            Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, vec!["a", "b"]);
    let reqs = server.requests();
    let w = reqs
        .iter()
        .find(|r| r.target.verb == "watch")
        .expect("a watch request");
    assert!(w.query.contains("sendInitialEvents=true"), "{}", w.query);
    assert_eq!(
        reqs.iter().filter(|r| r.target.verb == "list").count(),
        0,
        "no list in streaming mode"
    );
    // Raw check of the end marker.
    let events = read_events(&server, "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1", 3).await;
    assert_eq!(events[2]["type"], "BOOKMARK");
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // sendInitialEvents without resourceVersionMatch=NotOlderThan is a 422.
    let r = Raw::new(&server)
        .get("/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true")
        .await;
    assert_eq!(r.status, 422);
}

#[tokio::test]
async fn watch_replays_history_from_a_resource_version() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let a = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .expect("create");
    let rv = a.metadata.resource_version.expect("rv");
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .expect("patch");
    cms.create(&PostParams::default(), &cm("b", json!({})))
        .await
        .expect("create");
    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    let events = read_events(
        &server,
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=1"
        ),
        3,
    )
    .await;
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, vec!["MODIFIED", "ADDED", "DELETED"]);
    assert_eq!(events[2]["object"]["data"]["x"], "1", "the last state");
}

#[tokio::test]
async fn expired_resource_version_gets_410_error_event_and_watcher_relists() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .expect("create");
    cms.create(&PostParams::default(), &cm("b", json!({})))
        .await
        .expect("create");
    server.compact_history(None);
    let events = read_events(
        &server,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1",
        2,
    )
    .await;
    assert_eq!(events.len(), 1, "one ERROR event, then the stream closes");
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
    assert!(
        events[0]["object"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("too old resource version: 1 (")
    );

    // The watcher relists after an injected 410.
    let mut stream = watcher::watcher(cms.clone(), watcher::Config::default()).boxed();
    let mut inits = 0;
    while inits < 1 {
        if let Event::InitDone = stream.try_next().await.expect("event").expect("some") {
            inits += 1;
        }
    }
    server.expire_next_watch(Some("configmaps"));
    server.close_watches(Some("configmaps"));
    let relisted = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stream.next().await {
                Some(Ok(Event::InitDone)) => return true,
                Some(Ok(_)) => {}
                // The 410 itself surfaces as an error item before the relist.
                Some(Err(e)) => assert!(
                    e.to_string().contains("410") || e.to_string().contains("too old"),
                    "{e}"
                ),
                None => return false,
            }
        }
    })
    .await
    .unwrap_or(false);
    assert!(relisted, "the watcher relisted after 410");
    assert!(server.counters().get("list", "configmaps", "") >= 2);
}

#[tokio::test]
async fn bookmarks_only_when_asked() {
    let server = FakeApiServer::builder()
        .bookmark_interval(Duration::from_millis(100))
        .start()
        .await
        .expect("start");
    let with = read_events(&server, "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=1", 1).await;
    assert_eq!(
        with.first().map(|e| e["type"].clone()),
        Some(json!("BOOKMARK"))
    );
    assert_eq!(with[0]["object"]["kind"], "ConfigMap");
    let without = read_events(
        &server,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1&timeoutSeconds=1",
        1,
    )
    .await;
    assert!(without.is_empty(), "{without:?}");
}

#[tokio::test]
async fn selector_watches_see_objects_move_in_and_out() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let a = cms
        .create(&PostParams::default(), &cm("a", json!({"x": "no"})))
        .await
        .expect("create");
    let rv = a.metadata.resource_version.expect("rv");
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "yes"}}})),
    )
    .await
    .expect("in");
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .expect("modify");
    let out = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "no"}}})),
        )
        .await
        .expect("out");
    let events = read_events(&server, &format!("/api/v1/namespaces/default/configmaps?watch=true&labelSelector=x%3Dyes&resourceVersion={rv}&timeoutSeconds=1"), 3).await;
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, vec!["ADDED", "MODIFIED", "DELETED"]);
    // Leaving: the state that matched (as the API server's watch cache sends it), with the
    // resourceVersion of the change that made it leave.
    let gone = &events[2]["object"]["metadata"];
    assert_eq!(gone["labels"]["x"], "yes", "{gone}");
    assert_eq!(
        gone["resourceVersion"].as_str(),
        out.metadata.resource_version.as_deref()
    );
    // A label-selected list has only the matching objects.
    cms.create(&PostParams::default(), &cm("b", json!({"x": "yes"})))
        .await
        .expect("create");
    let listed = cms
        .list(&kube::api::ListParams::default().labels("x=yes"))
        .await
        .expect("list");
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(names, vec!["b"]);
}

#[tokio::test]
async fn injected_faults_and_latency() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    server.inject_fault(
        FaultRule::new(
            RequestPattern::any().verb("create").resource("configmaps"),
            429,
            1,
        )
        .retry_after(3),
    );
    let raw = Raw::new(&server);
    let r = raw
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": "a"}}),
        )
        .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("3"));
    let status = r.json();
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["details"]["retryAfterSeconds"], 3);
    assert!(
        server
            .objects()
            .iter()
            .all(|o| o["metadata"]["name"] != "a"),
        "the store is untouched"
    );
    // The rule is used up.
    cms.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .expect("create");
    server.inject_fault(FaultRule::new(RequestPattern::any().verb("get"), 503, 1));
    let r = raw.get("/api/v1/namespaces/default/configmaps/a").await;
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (503, json!("ServiceUnavailable"))
    );
    // Latency.
    server.add_latency(
        RequestPattern::any().verb("get"),
        Duration::from_millis(300),
    );
    let t = std::time::Instant::now();
    cms.get("a").await.expect("get");
    assert!(t.elapsed() >= Duration::from_millis(300));
    server.clear_faults();
    // Watch event delay.
    server.set_watch_event_delay(Duration::from_millis(200));
    let t = std::time::Instant::now();
    let events = read_events(
        &server,
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=5",
        1,
    )
    .await;
    assert_eq!(events.len(), 1);
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "the event was delayed"
    );
    server.clear_faults();
    // Counters and the request log.
    server.reset_counters();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"z": "1"}})),
    )
    .await
    .expect("patch");
    let c = server.counters();
    assert_eq!(c.get("patch", "configmaps", ""), 1);
    assert_eq!(c.patches("merge"), 1);
    let last = server.requests().pop().expect("logged");
    assert_eq!(last.method, "PATCH");
    assert_eq!(last.target.name, "a");
    assert!(last.body.contains("\"z\""));
}

#[tokio::test]
async fn control_endpoints_over_http() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let r = raw
        .post_json(
            "/__kopf/faults/respond",
            &json!({"pattern": {"verb": "list"}, "code": 500, "count": 1}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(raw.get("/api/v1/namespaces").await.status, 500);
    assert_eq!(raw.get("/api/v1/namespaces").await.status, 200);
    let counters = raw.get("/__kopf/counters").await.json();
    assert_eq!(
        counters["total"], 2,
        "control requests are not counted: {counters}"
    );
    let log = raw.get("/__kopf/requests").await.json();
    assert_eq!(log.as_array().map(Vec::len), Some(2));
    assert_eq!(log[0]["status"], 500);
    assert_eq!(log[0]["verb"], "list");
    assert_eq!(
        raw.send("DELETE", "/__kopf/requests", None, b"")
            .await
            .status,
        200
    );
    assert_eq!(
        raw.get("/__kopf/requests")
            .await
            .json()
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    let state = raw.get("/__kopf/state").await.json();
    assert!(state["resourceVersion"].as_str().is_some());
    // Compaction over HTTP makes old RVs expire.
    let r = raw.post_json("/__kopf/faults/compact", &json!({})).await;
    assert_eq!(r.status, 200);
    let events = read_events(
        &server,
        "/api/v1/namespaces?watch=true&resourceVersion=1",
        1,
    )
    .await;
    assert_eq!(events[0]["object"]["code"], 410);
    // Expire-next-watch and close-watches over HTTP.
    raw.post_json(
        "/__kopf/faults/expire-next-watch",
        &json!({"resource": "namespaces"}),
    )
    .await;
    let events = read_events(&server, "/api/v1/namespaces?watch=true", 1).await;
    assert_eq!(events[0]["type"], "ERROR");
    // Settings: the reported version.
    let r = raw
        .send(
            "PATCH",
            "/__kopf/settings",
            Some("application/json"),
            br#"{"version": {"major": "1", "minor": "32", "gitVersion": "v1.32.4"}}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(raw.get("/version").await.json()["minor"], "32");
    assert_eq!(raw.get("/__kopf/nope").await.status, 404);
}

#[tokio::test]
async fn close_watches_ends_streams_cleanly() {
    let server = FakeApiServer::start().await.expect("start");
    let addr = server.url();
    let reader = tokio::spawn(async move {
        let raw = Raw { base: addr };
        // Ends when the server closes the stream (not by timeout: 60 s).
        raw.get(
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1&timeoutSeconds=60",
        )
        .await
    });
    for _ in 0..250 {
        if !server.watches().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.watches().len(), 1);
    assert_eq!(server.watches()[0].resource, "v1/configmaps");
    server.close_watches(None);
    let r = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("closed in time")
        .expect("join");
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn default_watch_timeout_ends_watches_without_timeout_seconds() {
    let server = FakeApiServer::builder()
        .default_watch_timeout(Duration::from_millis(300))
        .start()
        .await
        .expect("start");
    let raw = Raw::new(&server);
    let t = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        raw.get("/api/v1/namespaces?watch=true&resourceVersion=1"),
    )
    .await
    .expect("the watch ended by itself");
    assert_eq!(r.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(300));
}

const LOWER_HALF: &str =
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
const UPPER_HALF: &str =
    "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')";

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The uids of a list's items and its metadata.
async fn list_uids(raw: &Raw, query: &str) -> (BTreeSet<String>, Value) {
    let r = raw
        .get(&format!("/api/v1/namespaces/default/configmaps?{query}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json();
    let uids = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    (uids, list["metadata"].clone())
}

/// The uids of watch events.
fn event_uids(events: &[Value]) -> BTreeSet<String> {
    events
        .iter()
        .filter_map(|e| e["object"]["metadata"]["uid"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn shard_selectors_split_lists_and_watches() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let (_, meta) = list_uids(&raw, "").await;
    let rv0 = meta["resourceVersion"].as_str().expect("rv").to_string();
    assert!(meta.get("shardInfo").is_none(), "no selector, no shardInfo");
    let mut all = BTreeSet::new();
    for i in 0..40 {
        let c = cms
            .create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .expect("create");
        all.insert(c.metadata.uid.expect("uid"));
    }

    // Two complementary halves: every object in exactly one.
    let lower_q = format!("shardSelector={}", encode(LOWER_HALF));
    let upper_q = format!("shardSelector={}", encode(UPPER_HALF));
    let (lower, lower_meta) = list_uids(&raw, &lower_q).await;
    let (upper, upper_meta) = list_uids(&raw, &upper_q).await;
    assert_eq!(lower.union(&upper).cloned().collect::<BTreeSet<_>>(), all);
    assert!(lower.is_disjoint(&upper));
    assert!(!lower.is_empty() && !upper.is_empty(), "40 random uids");
    assert_eq!(lower_meta["shardInfo"], json!({"selector": LOWER_HALF}));
    assert_eq!(upper_meta["shardInfo"], json!({"selector": UPPER_HALF}));
    let both = format!("{LOWER_HALF} || {UPPER_HALF}");
    let (joined, _) = list_uids(&raw, &format!("shardSelector={}", encode(&both))).await;
    assert_eq!(joined, all);
    // Paginated: the shard selector applies to every page.
    let (page, page_meta) = list_uids(&raw, &format!("{lower_q}&limit=5")).await;
    assert!(page.is_subset(&lower) && page.len() == lower.len().min(5));
    assert!(page_meta.get("remainingItemCount").is_none());

    // Malformed selectors: 400 BadRequest naming the problem.
    for (bad, says) in [
        ("", "empty"),
        (
            "hashRange(object.metadata.uid, '0x0', '0x1')",
            "unknown function",
        ),
        (
            "shardRange(object.metadata.name, '0x0', '0x1')",
            "unknown field",
        ),
        (
            "shardRange(object.metadata.uid, '0xzz', '0x1')",
            "bad start bound",
        ),
        (
            "shardRange(object.metadata.uid, '0x2', '0x1')",
            "must be less than",
        ),
        (
            "shardRange(object.metadata.uid, '0x0', '0x1') || shardRange(object.metadata.namespace, '0x1', '0x2')",
            "same field",
        ),
    ] {
        let r = raw
            .get(&format!(
                "/api/v1/namespaces/default/configmaps?shardSelector={}",
                encode(bad)
            ))
            .await;
        assert_eq!(r.status, 400, "{bad}");
        let status = r.json();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "BadRequest");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{bad}: {message}");
        let w = raw
            .get(&format!(
                "/api/v1/namespaces/default/configmaps?watch=true&shardSelector={}",
                encode(bad)
            ))
            .await;
        assert_eq!(w.status, 400, "watch: {bad}");
    }

    // Watches: the replay from before the creations, and the synthetic ADDED events.
    let base = "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1";
    let replay = read_events(
        &server,
        &format!("{base}&resourceVersion={rv0}&{lower_q}"),
        40,
    )
    .await;
    assert!(replay.iter().all(|e| e["type"] == "ADDED"), "{replay:?}");
    assert_eq!(event_uids(&replay), lower);
    assert_eq!(replay.len(), lower.len());
    let initial = read_events(&server, &format!("{base}&{upper_q}"), 40).await;
    assert_eq!(event_uids(&initial), upper);
    assert_eq!(initial.len(), upper.len());
    // Live events: only objects in the shard, created and modified while watching.
    let (_, meta) = list_uids(&raw, "").await;
    let rv1 = meta["resourceVersion"].as_str().expect("rv").to_string();
    let live_path = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=2&resourceVersion={rv1}&{upper_q}"
    );
    let write = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for i in 0..10 {
            let name = format!("live{i}");
            cms.create(&PostParams::default(), &cm(&name, json!({})))
                .await
                .expect("create");
            cms.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": "v"}})),
            )
            .await
            .expect("modify");
        }
    };
    let (live, ()) = tokio::join!(read_events(&server, &live_path, 100), write);
    let (upper_now, _) = list_uids(&raw, &upper_q).await;
    let upper_new: BTreeSet<String> = upper_now.difference(&upper).cloned().collect();
    assert_eq!(event_uids(&live), upper_new);
    let types: Vec<&str> = live.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types.len(), 2 * upper_new.len(), "{types:?}");
    assert!(
        types.chunks(2).all(|t| t == ["ADDED", "MODIFIED"]),
        "{types:?}"
    );

    // The knob at run time: a server before the feature sends everything.
    let r = raw
        .send(
            "PATCH",
            "/__kopf/settings",
            Some("application/json"),
            br#"{"shardedListAndWatch": false}"#,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        raw.get("/__kopf/settings").await.json()["shardedListAndWatch"],
        false
    );
    let (everything, meta) = list_uids(&raw, &lower_q).await;
    assert_eq!(everything.len(), 50);
    assert!(meta.get("shardInfo").is_none());
}

#[tokio::test]
async fn older_servers_ignore_shard_selectors() {
    let server = FakeApiServer::builder()
        .sharded_list_and_watch(false)
        .start()
        .await
        .expect("start");
    let raw = Raw::new(&server);
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut all = BTreeSet::new();
    for i in 0..40 {
        let c = cms
            .create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .expect("create");
        all.insert(c.metadata.uid.expect("uid"));
    }
    for selector in [LOWER_HALF, UPPER_HALF, "notAFunction(", ""] {
        let q = format!("shardSelector={}", encode(selector));
        let (uids, meta) = list_uids(&raw, &q).await;
        assert_eq!(uids, all, "{selector}");
        assert!(meta.get("shardInfo").is_none(), "{meta}");
    }
    let events = read_events(
        &server,
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&shardSelector={}",
            encode(LOWER_HALF)
        ),
        40,
    )
    .await;
    assert_eq!(event_uids(&events), all);
}

#[tokio::test]
async fn metadata_only_gets_lists_and_watches() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(&PostParams::default(), &cm("a", json!({"x": "y"})))
        .await
        .expect("create");
    let one = cms.get_metadata("a").await.expect("get");
    assert_eq!(
        one.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("x"))
            .map(String::as_str),
        Some("y")
    );
    assert_eq!(
        one.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    let list = cms
        .list_metadata(&kube::api::ListParams::default())
        .await
        .expect("list");
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.types.kind, "PartialObjectMetadataList",
        "{:?}",
        list.types
    );
    // The raw bodies have no data, and a watch's events neither.
    let raw = server.client();
    let req = http::Request::get("/api/v1/namespaces/default/configmaps")
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .expect("request");
    let body: Value = raw.request(req).await.expect("raw list");
    assert_eq!(body["apiVersion"], "meta.k8s.io/v1");
    assert!(body["items"][0].get("data").is_none(), "{body}");
    let rv = list.metadata.resource_version.clone().expect("rv");
    let mut events = cms
        .watch_metadata(&kube::api::WatchParams::default().timeout(5), &rv)
        .await
        .expect("watch")
        .boxed();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"big": "value"}})),
    )
    .await
    .expect("modify");
    match events.try_next().await.expect("event") {
        Some(kube::api::WatchEvent::Modified(o)) => {
            assert_eq!(o.metadata.name.as_deref(), Some("a"));
            assert_eq!(
                o.types.map(|t| t.kind),
                Some("PartialObjectMetadata".into())
            );
        }
        other => panic!("{other:?}"),
    }
    // Without the Accept: the full object.
    let full = cms.get("a").await.expect("full");
    assert!(full.data.is_some());
}
