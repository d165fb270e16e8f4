//! The engine's semantics against the fake API server: update and field handlers with
//! Kopf-format diffs, retries that survive a restart, objects changed while the operator was
//! down, resume handlers, corrupt diff-bases, panicking handlers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::{Cause, HandlerError, Operator};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

mod common;

use common::{Running, crd, eventually, kex_api, obj};

type Calls = Arc<Mutex<Vec<(String, Value)>>>;

fn recorder(
    calls: &Calls,
    id: &'static str,
) -> impl Fn(Cause) -> std::future::Ready<kopf::HandlerResult> + Send + Sync + 'static {
    let calls = calls.clone();
    move |c: Cause| {
        calls.lock().expect("lock").push((
            id.to_string(),
            json!({"reason": c.reason, "diff": c.diff.to_kopf_json(), "old": c.old, "new": c.new}),
        ));
        std::future::ready(Ok(None))
    }
}

#[tokio::test(start_paused = true)]
async fn update_and_field_handlers_get_kopf_diffs_in_one_cycle() {
    let server = common::paused_server().await;
    let calls: Calls = Arc::default();
    let op = Operator::new()
        .on_update("kopfexamples", "update_fn", recorder(&calls, "update_fn"))
        .on_field(
            "kopfexamples",
            "field_fn",
            "spec.field",
            recorder(&calls, "field_fn"),
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(
        &PostParams::default(),
        &obj("k", json!({"field": "a", "other": 1})),
    )
    .await
    .expect("create");
    // Creation: the field handler fires (the field is set), the update handler does not.
    eventually("the creation cycle", async || {
        calls.lock().expect("lock").len() == 1
    })
    .await;
    eventually("the diff-base", async || {
        api.get("k")
            .await
            .ok()
            .and_then(|o| o.metadata.annotations)
            .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
    })
    .await;
    server.clear_requests();
    api.patch(
        "k",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "b"}})),
    )
    .await
    .expect("patch");
    eventually("the update cycle", async || {
        calls.lock().expect("lock").len() == 3
    })
    .await;
    let c = calls.lock().expect("lock").clone();
    assert_eq!(c[0].0, "field_fn");
    assert_eq!(c[0].1["diff"], json!([["add", [], null, "a"]]));
    assert_eq!(c[1].0, "update_fn");
    assert_eq!(
        c[1].1["diff"],
        json!([["change", ["spec", "field"], "a", "b"]])
    );
    assert_eq!(c[2].0, "field_fn");
    assert_eq!(c[2].1["diff"], json!([["change", [], "a", "b"]]));
    assert_eq!(
        (c[2].1["old"].clone(), c[2].1["new"].clone()),
        (json!("a"), json!("b"))
    );
    running.settled().await;
    // Both handlers finished in one cycle: one PATCH (the new diff-base), no progress records.
    let patches: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .collect();
    assert_eq!(
        patches.len(),
        2,
        "the user's patch and one operator patch: {:?}",
        patches.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    assert!(
        patches[1].body.contains("last-handled-configuration")
            && !patches[1].body.contains("update_fn")
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn retries_survive_a_restart_and_missed_changes_are_handled() {
    let server = common::paused_server().await;
    let attempts: Arc<Mutex<Vec<(u32, String)>>> = Arc::default();
    let make = |attempts: Arc<Mutex<Vec<(u32, String)>>>| {
        move |c: Cause| {
            let attempts = attempts.clone();
            async move {
                attempts
                    .lock()
                    .expect("lock")
                    .push((c.retry, c.started.clone()));
                if c.retry < 1 {
                    Err(HandlerError::temporary(
                        "not yet",
                        Duration::from_millis(600),
                    ))
                } else {
                    Ok(Some(json!("done")))
                }
            }
        }
    };
    let running = Running::start(
        &server,
        Operator::new().on_create("kopfexamples", "flaky", make(attempts.clone())),
    )
    .await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the first attempt", async || {
        attempts.lock().expect("lock").len() == 1
    })
    .await;
    eventually("the stored progress", async || {
        api.get("k")
            .await
            .ok()
            .and_then(|o| o.metadata.annotations)
            .is_some_and(|a| a.contains_key("kopf.zalando.org/flaky"))
    })
    .await;
    // Stop while the handler waits to retry; start a new operator process.
    running.stop().await;
    let running = Running::start(
        &server,
        Operator::new().on_create("kopfexamples", "flaky", make(attempts.clone())),
    )
    .await;
    eventually("the retry after restart", async || {
        api.get("k")
            .await
            .ok()
            .is_some_and(|o| o.data["status"]["flaky"] == "done")
    })
    .await;
    let a = attempts.lock().expect("lock").clone();
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[1].0, 1, "the retry count was preserved");
    assert_eq!(a[0].1, a[1].1, "the start time was preserved");
    // The progress record was purged once done.
    eventually("the purge", async || {
        api.get("k")
            .await
            .ok()
            .and_then(|o| o.metadata.annotations)
            .is_some_and(|a| !a.contains_key("kopf.zalando.org/flaky"))
    })
    .await;
    running.stop().await;

    // While no operator runs: one object is created, another is changed.
    let calls: Calls = Arc::default();
    api.create(&PostParams::default(), &obj("new", json!({"field": "x"})))
        .await
        .expect("create");
    api.patch(
        "k",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "changed"}})),
    )
    .await
    .expect("patch");
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", recorder(&calls, "create_fn"))
        .on_update("kopfexamples", "update_fn", recorder(&calls, "update_fn"));
    let running = Running::start(&server, op).await;
    eventually("both objects handled", async || {
        calls.lock().expect("lock").len() == 2
    })
    .await;
    let mut c: Vec<(String, String)> = calls
        .lock()
        .expect("lock")
        .iter()
        .map(|(id, v)| (id.clone(), v["reason"].as_str().unwrap_or("").to_string()))
        .collect();
    c.sort();
    assert_eq!(
        c,
        vec![
            ("create_fn".to_string(), "create".to_string()),
            ("update_fn".to_string(), "update".to_string())
        ]
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn resume_corrupt_diffbase_and_panics() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    // An object handled before (a valid diff-base) and one with a corrupt diff-base.
    let mut handled = obj("handled", json!({"field": "a"}));
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
    let mut corrupt = obj("corrupt", json!({"field": "a"}));
    corrupt.metadata.annotations = Some(
        [(
            "kopf.zalando.org/last-handled-configuration".to_string(),
            "{not json".to_string(),
        )]
        .into(),
    );
    api.create(&PostParams::default(), &corrupt)
        .await
        .expect("create");
    let calls: Calls = Arc::default();
    let op = Operator::new()
        .on_resume("kopfexamples", "resume_fn", recorder(&calls, "resume_fn"))
        .on_create("kopfexamples", "create_fn", recorder(&calls, "create_fn"))
        .on_update("kopfexamples", "boom", |_c: Cause| async {
            if true {
                panic!("kaboom");
            }
            Ok::<(), HandlerError>(())
        });
    let running = Running::start(&server, op).await;
    eventually("resume and creation", async || {
        calls.lock().expect("lock").len() >= 2
    })
    .await;
    let mut c: Vec<String> = calls
        .lock()
        .expect("lock")
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    c.sort();
    assert_eq!(
        c,
        vec!["create_fn", "resume_fn"],
        "resume for the handled object, creation for the corrupt one"
    );
    // A panicking handler is an error of that handler: retried, the operator keeps serving.
    api.patch(
        "handled",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "b"}})),
    )
    .await
    .expect("patch");
    eventually("the failure recorded", async || {
        api.get("handled")
            .await
            .ok()
            .and_then(|o| o.metadata.annotations)
            .and_then(|a| a.get("kopf.zalando.org/boom").cloned())
            .is_some_and(|r| r.contains("panicked"))
    })
    .await;
    api.create(&PostParams::default(), &obj("later", json!({"field": "z"})))
        .await
        .expect("create");
    eventually("the operator still serves", async || {
        calls
            .lock()
            .expect("lock")
            .iter()
            .any(|(id, v)| id == "create_fn" && v["new"]["spec"]["field"] == "z")
    })
    .await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_conflicting_guarded_patch_keeps_the_handler_outcomes() {
    use kopf_testing::{FaultRule, RequestPattern};
    let server = common::paused_server().await;
    let calls: Calls = Arc::default();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", recorder(&calls, "create_fn"))
        .on_delete("kopfexamples", "delete_fn", recorder(&calls, "delete_fn"));
    let running = Running::start(&server, op).await;
    // The first PATCH of the object (the guarded JSON patch with the finalizer) meets a
    // concurrent change.
    server.inject_fault(FaultRule::new(
        RequestPattern::any()
            .verb("patch")
            .resource("kopfexamples")
            .subresource(""),
        422,
        1,
    ));
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the finalizer and the diff-base", async || {
        api.get("k").await.ok().is_some_and(|o| {
            o.metadata
                .finalizers
                .is_some_and(|f| f.contains(&"kopf.zalando.org/KopfFinalizerMarker".to_string()))
                && o.metadata
                    .annotations
                    .is_some_and(|a| a.contains_key("kopf.zalando.org/last-handled-configuration"))
        })
    })
    .await;
    let created = calls
        .lock()
        .expect("lock")
        .iter()
        .filter(|(id, _)| id == "create_fn")
        .count();
    assert_eq!(
        created, 1,
        "the creation handler ran once despite the conflict"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn namespace_patterns_select_the_served_objects() {
    let server = common::paused_server().await;
    for ns in ["team-a", "team-legacy", "other"] {
        server
            .apply_object(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .expect("namespace");
    }
    let calls: Calls = Arc::default();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", recorder(&calls, "create_fn"))
        .namespace_patterns(&["team-*,!team-legacy"])
        .worker_limit(1);
    let running = Running::start(&server, op).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    for ns in ["team-a", "team-legacy", "other"] {
        let api: Api<DynamicObject> = Api::namespaced_with(server.client(), ns, &ar);
        api.create(&PostParams::default(), &obj("k", json!({"ns": ns})))
            .await
            .expect("create");
    }
    eventually("team-a handled", async || {
        calls.lock().expect("lock").len() == 1
    })
    .await;
    running.settled().await;
    let c = calls.lock().expect("lock").clone();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].1["new"]["spec"]["ns"], "team-a");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn failures_post_warning_events_rate_limited_per_object() {
    let server = common::paused_server().await;
    // Seven failures and a greeting: eight events, of which the first five go out (the
    // burst); the others are counted, for the next event that passes.
    let op = Operator::new().on_create("kopfexamples", "flaky", |c: Cause| async move {
        if c.retry < 7 {
            Err(HandlerError::temporary(
                "not yet",
                Duration::from_millis(20),
            ))
        } else {
            c.events.info("Greeting", "hello");
            Ok(Some(json!("done")))
        }
    });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the handler to succeed", async || {
        api.get("k")
            .await
            .ok()
            .is_some_and(|o| o.data["status"]["flaky"] == "done")
    })
    .await;
    running.settled().await;
    let events: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Event"), "events"),
    );
    let list = events.list(&Default::default()).await.expect("events");
    let posted: Vec<(String, String)> = list
        .items
        .iter()
        .map(|e| {
            (
                e.data["type"].as_str().unwrap_or("").to_string(),
                e.data["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let warning = (
        "Warning".to_string(),
        "Handler 'flaky' failed temporarily: not yet".to_string(),
    );
    assert_eq!(posted, vec![warning; 5], "eight events, five posted");
    assert_eq!(list.items[0].data["involvedObject"]["name"], "k");
    assert_eq!(list.items[0].data["source"]["component"], "kopf");
    running.stop().await;
}

/// State written by Python Kopf (progress records and diff-base in Kopf's format) is
/// continued: the succeeded handler is not re-run, the retrying one resumes its count.
#[tokio::test(start_paused = true)]
async fn continues_progress_written_by_kopf() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let mut o = obj("from-kopf", json!({"field": "value"}));
    o.metadata.annotations = Some(
        [
            (
                "kopf.zalando.org/done_fn".to_string(),
                r#"{"started":"2026-11-22T05:04:57.126136+00:00","stopped":"2026-11-22T05:04:57.226136+00:00","purpose":"create","retries":1,"success":true,"failure":false}"#.to_string(),
            ),
            (
                "kopf.zalando.org/retry_fn".to_string(),
                r#"{"started":"2026-11-22T05:04:57.126136+00:00","delayed":"2026-11-22T05:04:58.126136+00:00","purpose":"create","retries":3,"success":false,"failure":false,"message":"not yet"}"#.to_string(),
            ),
        ]
        .into(),
    );
    api.create(&PostParams::default(), &o)
        .await
        .expect("create");
    let calls: Calls = Arc::default();
    let retries: Arc<Mutex<Vec<(u32, String)>>> = Arc::default();
    let seen = retries.clone();
    let op = Operator::new()
        .on_create("kopfexamples", "done_fn", recorder(&calls, "done_fn"))
        .on_create("kopfexamples", "retry_fn", move |c: Cause| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .expect("lock")
                    .push((c.retry, c.started.clone()));
                Ok::<_, HandlerError>(json!("finally"))
            }
        });
    let running = Running::start(&server, op).await;
    eventually("the retry", async || {
        api.get("from-kopf")
            .await
            .ok()
            .is_some_and(|o| o.data["status"]["retry_fn"] == "finally")
    })
    .await;
    assert!(
        calls.lock().expect("lock").is_empty(),
        "done_fn had succeeded under Kopf"
    );
    assert_eq!(
        retries.lock().expect("lock").clone(),
        vec![(3, "2026-11-22T05:04:57.126136+00:00".to_string())]
    );
    eventually("the purge and the diff-base", async || {
        api.get("from-kopf")
            .await
            .ok()
            .and_then(|o| o.metadata.annotations)
            .is_some_and(|a| {
                !a.contains_key("kopf.zalando.org/done_fn")
                    && !a.contains_key("kopf.zalando.org/retry_fn")
                    && a.get("kopf.zalando.org/last-handled-configuration")
                        .map(String::as_str)
                        == Some("{\"spec\":{\"field\":\"value\"}}\n")
            })
    })
    .await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_resource_whose_crd_comes_back_is_served_again() {
    let server = common::paused_server().await;
    let calls: Calls = Arc::default();
    let running = Running::start(
        &server,
        Operator::new().on_create("kopfexamples", "create_fn", recorder(&calls, "create_fn")),
    )
    .await;
    let raw_crds: Api<DynamicObject> = Api::all_with(
        server.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    raw_crds
        .delete("kopfexamples.kopf.dev", &Default::default())
        .await
        .expect("delete the CRD");
    eventually("the CRD to go", async || {
        raw_crds
            .get_opt("kopfexamples.kopf.dev")
            .await
            .ok()
            .flatten()
            .is_none()
    })
    .await;
    // Make the watch notice now rather than at its next timeout.
    server.close_watches(Some("kopfexamples"));
    running.settled().await;
    server.apply_object(crd()).expect("the CRD again");
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("back", json!({"field": "a"})))
        .await
        .expect("create");
    // The CRD is established on the server's clock, then the operator serves it again.
    common::eventually("the object of the re-created CRD handled", async || {
        !calls.lock().expect("lock").is_empty()
    })
    .await;
    running.settled().await;
    assert_eq!(
        calls.lock().expect("lock").len(),
        1,
        "the object of the re-created CRD was handled"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn streaming_lists_replace_the_initial_list() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("pre", json!({"field": "a"})))
        .await
        .expect("create");
    server.clear_requests();
    let calls: Calls = Arc::default();
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", recorder(&calls, "create_fn"))
        .streaming_lists(true);
    let running = Running::start(&server, op).await;
    eventually("the existing object handled", async || {
        calls.lock().expect("lock").len() == 1
    })
    .await;
    let reads: Vec<(String, String)> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/kopfexamples"))
        .map(|r| (r.target.verb.clone(), r.query.clone()))
        .collect();
    assert!(
        reads.iter().all(|(verb, _)| verb == "watch"),
        "no list request: {reads:?}"
    );
    assert!(
        reads
            .iter()
            .any(|(_, q)| q.contains("sendInitialEvents=true")),
        "{reads:?}"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn selectors_by_short_name_and_group_version_plural() {
    let server = common::paused_server().await;
    // The test CRD has no short names; give it one through a patch of the CRD.
    let crds: Api<DynamicObject> = Api::all_with(
        server.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.patch(
        "kopfexamples.kopf.dev",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"names": {"shortNames": ["kex"]}}})),
    )
    .await
    .expect("short name");
    let calls: Calls = Arc::default();
    let op = Operator::new()
        .on_create("kex", "by_short_name", recorder(&calls, "by_short_name"))
        .on_create(
            kopf::Selector::gvp("kopf.dev", "v1", "kopfexamples"),
            "by_gvp",
            recorder(&calls, "by_gvp"),
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("s", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("both handlers", async || {
        calls.lock().expect("lock").len() == 2
    })
    .await;
    assert_eq!(
        server
            .watches()
            .iter()
            .filter(|w| w.resource.ends_with("/kopfexamples"))
            .count(),
        1,
        "one watch for both selectors"
    );
    running.stop().await;
}

/// A handler's own error type, with a source (as `thiserror` makes them).
#[derive(Debug)]
struct Storing(std::io::Error);

impl std::fmt::Display for Storing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the report could not be stored")
    }
}

impl std::error::Error for Storing {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

fn store_report() -> Result<(), Storing> {
    Err(Storing(std::io::Error::other("the disk is full")))
}

/// `?` on a user's error in a handler keeps it: the log line of the failure shows the
/// user's message and its source; the progress record keeps the user's message.
#[tokio::test(start_paused = true)]
async fn a_users_error_is_logged_with_its_source() {
    let server = common::paused_server().await;
    let op = Operator::new().on_create("kopfexamples", "store_fn", |_c: Cause| async move {
        store_report()?;
        Ok::<_, HandlerError>(())
    });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    let line =
        "Handler 'store_fn' failed temporarily: the report could not be stored: the disk is full";
    eventually("the failure logged with its source", async || {
        !running.logged_at("ERROR", line).is_empty()
    })
    .await;
    eventually("the progress record", async || {
        api.get("k").await.ok().is_some_and(|o| {
            o.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kopf.zalando.org/store_fn"))
                .and_then(|r| serde_json::from_str::<Value>(r).ok())
                .is_some_and(|r| r["message"] == "the report could not be stored")
        })
    })
    .await;
    running.stop().await;
}
