use super::*;
use crate::events::EventSpec;
use crate::handler::spec::Cause;
use crate::handler::{ErrorsMode, HandlerError};
use crate::layers::Stack;
use crate::plan::PatchRequest;
use crate::progress::{ProgressRecord, format_time};
use jiff::Timestamp;
use kopf_diff::essence;
use serde_json::json;
use std::time::Duration;

fn kex() -> Value {
    json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "k", "namespace": "default", "resourceVersion": "5", "labels": {"a": "b"}},
        "spec": {"field": "value"}})
}

fn create_fn() -> HandlerSpec {
    HandlerSpec::new("create_fn", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!({"message": "hello world"})))
    })
}

#[tokio::test]
async fn creation_writes_result_then_diffbase_one_patch_per_endpoint() {
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        &[create_fn()],
        &Persistence::default(),
    )
    .await;
    assert_eq!(out.reason, Reason::Create);
    assert!(out.done);
    let reqs = out.plan.requests(&kex(), true);
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    // The result first: the diff-base may only claim the creation handled once it is stored.
    assert_eq!(
        reqs[0],
        PatchRequest::MergeStatus(json!({"status": {"create_fn": {"message": "hello world"}}}))
    );
    assert_eq!(
        reqs[1],
        PatchRequest::MergeObject(json!({"metadata": {"annotations": {
            "kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"}}}))
    );
    assert_eq!(
        out.delivered,
        vec![(
            "create_fn".to_string(),
            json!({"status": {"create_fn": {"message": "hello world"}}})
        )]
    );
}

fn in_status() -> Persistence {
    let mut p = Persistence {
        progress: ProgressStorage::status("kopf"),
        ..Persistence::default()
    };
    p.essence.location = essence::DiffBaseLocation::status();
    p
}

fn update_fn() -> HandlerSpec {
    HandlerSpec::new("update_fn", Some(Reason::Update), |c: Cause| async move {
        Ok(Some(json!({"field": c.body["spec"]["field"].clone()})))
    })
    .with_options(crate::handler::Options::new().field("spec.field"))
}

/// Kopf's `StatusDiffBaseStorage` with `StatusProgressStorage`: a creation and an update
/// are one `/status` PATCH each, the result and the diff-base together.
#[tokio::test]
async fn diff_base_in_status_makes_one_status_write_per_cause() {
    let handlers = [create_fn(), update_fn()];
    let out = process(EventKind::Added, &kex(), false, &handlers, &in_status()).await;
    assert_eq!(out.reason, Reason::Create);
    assert!(out.plan.status_claims());
    let reqs = out.plan.requests(&kex(), true);
    assert_eq!(
        reqs,
        vec![PatchRequest::MergeStatus(json!({"status": {
            "create_fn": {"message": "hello world"},
            "kopf": {"last-handled-configuration":
                "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}"},
        }}))]
    );
    // Without a status subresource: one object PATCH with both.
    assert!(matches!(
        out.plan.requests(&kex(), false).as_slice(),
        [PatchRequest::MergeObject(m)] if m["status"]["kopf"].is_object()
    ));
    // Its own write coming back is nothing to do.
    let created = out.plan.preview(&kex());
    let again = process(
        EventKind::Modified,
        &created,
        false,
        &handlers,
        &in_status(),
    )
    .await;
    assert_eq!(again.reason, Reason::Noop);
    assert!(again.plan.requests(&created, true).is_empty());
    // An update: one status write again.
    let mut changed = created.clone();
    changed["spec"]["field"] = json!("new");
    let upd = process(
        EventKind::Modified,
        &changed,
        false,
        &handlers,
        &in_status(),
    )
    .await;
    assert_eq!(upd.reason, Reason::Update);
    assert_eq!(
        upd.plan.requests(&changed, true),
        vec![PatchRequest::MergeStatus(json!({"status": {
            "update_fn/spec.field": {"field": "new"},
            "kopf": {"last-handled-configuration":
                "{\"spec\":{\"field\":\"new\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}"},
        }}))]
    );
}

/// An object that Python Kopf handled with `StatusDiffBaseStorage` continues as an update;
/// one handled with the annotation (before a switch) too.
#[tokio::test]
async fn kopf_status_diff_bases_and_old_annotations_are_continued() {
    let mut kopf_made = kex();
    kopf_made["spec"]["field"] = json!("new");
    kopf_made["status"] = json!({"create_fn": {"message": "hello world"},
        "kopf": {"last-handled-configuration": "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}"}});
    let handlers = [create_fn(), update_fn()];
    let out = process(
        EventKind::Modified,
        &kopf_made,
        false,
        &handlers,
        &in_status(),
    )
    .await;
    assert_eq!(out.reason, Reason::Update);
    assert_eq!(out.counts, (1, 0));
    let mut annotated = kex();
    annotated["metadata"]["annotations"] = json!({"kopf.zalando.org/last-handled-configuration":
        "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"});
    let out = process(EventKind::Added, &annotated, false, &handlers, &in_status()).await;
    assert_eq!(out.reason, Reason::Noop, "not a creation");
    assert!(
        out.plan.is_noop_for(&annotated),
        "the annotation stays valid: nothing to write"
    );
}

/// What the object still gets (a handler's own patch) goes first: the status write that
/// claims the cause is the last. A retry keeps its progress in the status, no diff-base.
#[tokio::test]
async fn with_the_diff_base_in_status_the_claiming_write_is_last() {
    let labeller = HandlerSpec::new("labeller", Some(Reason::Create), |c: Cause| async move {
        c.patch
            .merge(json!({"metadata": {"labels": {"done": "yes"}}}));
        Ok(None)
    });
    let out = process(EventKind::Added, &kex(), false, &[labeller], &in_status()).await;
    let reqs = out.plan.requests(&kex(), true);
    assert!(
        matches!(reqs.as_slice(), [PatchRequest::MergeObject(o), PatchRequest::MergeStatus(s)]
            if o["metadata"]["labels"]["done"] == "yes" && s["status"]["kopf"]["last-handled-configuration"].is_string()),
        "{reqs:?}"
    );
    let flaky = HandlerSpec::new("flaky", Some(Reason::Create), |_c: Cause| async {
        Err(HandlerError::temporary("not yet", Duration::from_secs(5)))
    });
    let out = process(EventKind::Added, &kex(), false, &[flaky], &in_status()).await;
    assert!(!out.done && !out.plan.status_claims());
    let reqs = out.plan.requests(&kex(), true);
    assert!(
        matches!(reqs.as_slice(), [PatchRequest::MergeStatus(s)]
            if s["status"]["kopf"]["progress"]["flaky"]["retries"] == 1
                && s["status"]["kopf"].get("last-handled-configuration").is_none()),
        "{reqs:?}"
    );
}

#[tokio::test]
async fn temporary_errors_store_progress_and_retry_later() {
    let flaky = HandlerSpec::new("flaky", Some(Reason::Create), |c: Cause| async move {
        if c.retry == 0 {
            Err(HandlerError::temporary("not yet", Duration::from_secs(5)))
        } else {
            Ok(None)
        }
    });
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        std::slice::from_ref(&flaky),
        &Persistence::default(),
    )
    .await;
    assert!(!out.done);
    assert_eq!(out.delay, Some(Duration::from_secs(5)));
    let patch = out.plan.effective(&kex());
    let record: ProgressRecord = serde_json::from_str(
        patch["metadata"]["annotations"]["kopf.zalando.org/flaky"]
            .as_str()
            .unwrap_or("{}"),
    )
    .unwrap_or_default();
    assert_eq!(record.retries, Some(1));
    assert_eq!(record.message.as_deref(), Some("not yet"));
    assert_eq!(record.purpose.as_deref(), Some("create"));
    // The stored record survives a restart: the next cycle sees retry=1 once awake.
    let mut body = out.plan.preview(&kex());
    let mut rec = record.clone();
    rec.delayed = Some(format_time(Timestamp::now()));
    body["metadata"]["annotations"]["kopf.zalando.org/flaky"] = json!(rec.encode());
    let second = process(
        EventKind::Modified,
        &body,
        false,
        &[flaky],
        &Persistence::default(),
    )
    .await;
    assert!(second.done);
    let patch = second.plan.effective(&body);
    assert_eq!(
        patch["metadata"]["annotations"]["kopf.zalando.org/flaky"],
        Value::Null,
        "purged"
    );
    assert!(
        patch["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"].is_string()
    );
}

#[tokio::test]
async fn finalizer_first_then_delete_handler_releases() {
    let del = HandlerSpec::new("delete_fn", Some(Reason::Delete), |_c: Cause| async {
        Ok(None)
    });
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        std::slice::from_ref(&del),
        &Persistence::default(),
    )
    .await;
    // The finalizer first, alone: no handler runs before it is on the object.
    let reqs = out.plan.requests(&kex(), true);
    assert!(
        matches!(reqs.as_slice(), [PatchRequest::JsonObject(ops)]
            if ops.len() == 2 && ops[1]["path"] == "/metadata/finalizers"),
        "{reqs:?}"
    );
    assert!(!out.done && out.ran.is_empty());
    let mut with_finalizer = kex();
    with_finalizer["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
    let out = process(
        EventKind::Modified,
        &with_finalizer,
        false,
        std::slice::from_ref(&del),
        &Persistence::default(),
    )
    .await;
    assert!(out.done);
    assert_eq!(out.finalizer, None);
    assert!(
        matches!(out.plan.requests(&with_finalizer, true).as_slice(), [PatchRequest::MergeObject(m)]
            if m["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"].is_string()),
        "then the creation (no handlers) writes its diff-base"
    );
    let mut deleting = kex();
    deleting["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let out = process(
        EventKind::Modified,
        &deleting,
        false,
        &[del],
        &Persistence::default(),
    )
    .await;
    assert_eq!(out.reason, Reason::Delete);
    let reqs = out.plan.requests(&deleting, true);
    assert!(
        matches!(reqs.as_slice(), [PatchRequest::JsonObject(ops)] if ops[1] == json!({"op": "remove", "path": "/metadata/finalizers"})),
        "{reqs:?}"
    );
}

#[tokio::test]
async fn panics_and_field_handlers() {
    let boom = HandlerSpec::new("boom", Some(Reason::Update), |_c: Cause| async {
        panic!("kaboom")
    });
    let mut field = HandlerSpec::new("field_fn/spec.field", None, |c: Cause| async move {
        Ok(Some(json!({"old": c.old, "new": c.new})))
    });
    field.field = Some(vec!["spec".into(), "field".into()]);
    let mut body = kex();
    body["metadata"]["annotations"] = json!({"kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"field\":\"old\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"});
    let out = process(
        EventKind::Modified,
        &body,
        false,
        &[boom, field],
        &Persistence::default(),
    )
    .await;
    assert_eq!(out.reason, Reason::Update);
    assert!(
        matches!(&out.ran[0].1, HandlerOutcome::Retrying { message } if message.contains("panicked"))
    );
    assert_eq!(out.ran[1].1, HandlerOutcome::Succeeded);
    assert_eq!(
        out.plan.preview(&body)["status"]["field_fn/spec.field"],
        json!({"old": "old", "new": "value"})
    );
}

#[tokio::test]
async fn timeouts_cancel_a_running_handler() {
    let mut slow = HandlerSpec::new("slow", Some(Reason::Create), |_c: Cause| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(None)
    });
    slow.timeout = Some(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        &[slow],
        &Persistence::default(),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cancelled at the deadline"
    );
    assert!(
        matches!(&out.ran[0].1, HandlerOutcome::Failed { message } if message.contains("timed out"))
    );
    assert!(out.done, "a permanent failure finishes the cause");
}

#[tokio::test]
async fn filters_select_handlers_and_the_finalizer() {
    use crate::handler::MetaFilter;
    use std::sync::Arc;
    let mut labelled = HandlerSpec::new("labelled", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(1)))
    });
    labelled.labels = vec![("a".into(), MetaFilter::Value("b".into()))];
    let mut absent = HandlerSpec::new("absent", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(2)))
    });
    absent.annotations = vec![("skip".into(), MetaFilter::Present)];
    let mut when = HandlerSpec::new("when", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(3)))
    });
    when.when = Some(Arc::new(|b: &Value| b["spec"]["field"] == "value"));
    let mut del = HandlerSpec::new("del", Some(Reason::Delete), |_c: Cause| async { Ok(None) });
    del.labels = vec![("a".into(), MetaFilter::Absent)];
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        &[labelled, absent, when, del],
        &Persistence::default(),
    )
    .await;
    let ran: Vec<&str> = out.ran.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ran, vec!["labelled", "when"]);
    assert_eq!(
        out.finalizer, None,
        "the delete handler does not match, so no finalizer"
    );
}

#[tokio::test]
async fn an_object_no_handler_matches_gets_no_state() {
    use crate::handler::{MetaFilter, Options};
    let labelled = HandlerSpec::new("labelled", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(1)))
    })
    .with_options(Options::new().label("a", MetaFilter::Value("other".into())));
    let owned = HandlerSpec::new("owned", None, |_c: Cause| async { Ok(Some(json!(2))) })
        .with_options(Options::new().owner("KopfExample"));
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        &[labelled, owned],
        &Persistence::default(),
    )
    .await;
    assert!(out.ran.is_empty());
    assert!(out.done);
    assert!(
        out.plan.is_empty(),
        "no diff-base, no progress (Kopf's prematch): {:?}",
        out.plan.merge_patch()
    );
}

#[tokio::test]
async fn asap_lifecycle_runs_one_handler_per_cycle() {
    let a = HandlerSpec::new("a", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(1)))
    });
    let b = HandlerSpec::new("b", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(2)))
    });
    let persistence = Persistence {
        lifecycle: Lifecycle::Asap,
        ..Default::default()
    };
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        &[a.clone(), b.clone()],
        &persistence,
    )
    .await;
    assert_eq!(out.ran.len(), 1);
    assert!(!out.done);
    assert_eq!(
        out.delay,
        Some(Duration::ZERO),
        "the next cycle follows at once"
    );
    // The next cycle (on the patched body) runs the other one and completes the cause.
    let mut body = out.plan.preview(&kex());
    body["metadata"]["resourceVersion"] = json!("6");
    let second = process(EventKind::Modified, &body, false, &[a, b], &persistence).await;
    assert_eq!(second.ran.len(), 1);
    assert_ne!(second.ran[0].0, out.ran[0].0);
    assert!(second.done);
}

#[tokio::test]
async fn succeeded_handlers_are_not_rerun_while_others_retry() {
    let ok = HandlerSpec::new("ok", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(1)))
    });
    let later = HandlerSpec::new("later", Some(Reason::Create), |c: Cause| async move {
        if c.retry == 0 {
            Err(HandlerError::temporary("wait", Duration::ZERO))
        } else {
            Ok(None)
        }
    });
    let first = process(
        EventKind::Added,
        &kex(),
        false,
        &[ok.clone(), later.clone()],
        &Persistence::default(),
    )
    .await;
    assert!(!first.done);
    let body = first.plan.preview(&kex());
    let second = process(
        EventKind::Modified,
        &body,
        false,
        &[ok, later],
        &Persistence::default(),
    )
    .await;
    let ran: Vec<&str> = second.ran.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ran, vec!["later"], "the succeeded handler is not run again");
    assert!(second.done);
}

fn annotations(patch: &Value) -> serde_json::Map<String, Value> {
    patch["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

fn record(patch: &Value, key: &str) -> ProgressRecord {
    serde_json::from_str(
        patch["metadata"]["annotations"][key]
            .as_str()
            .unwrap_or("{}"),
    )
    .unwrap_or_default()
}

fn parent_with_children() -> HandlerSpec {
    HandlerSpec::new("create_fn", Some(Reason::Create), |c: Cause| async move {
        c.subhandlers
            .register("a", |_c: Cause| async { Ok::<_, HandlerError>(json!(1)) });
        c.subhandlers.register("b", |c: Cause| async move {
            if c.retry == 0 {
                Err(HandlerError::temporary("b not yet", Duration::ZERO))
            } else {
                Ok(Some(json!(2)))
            }
        });
        Ok(Some(json!("parent")))
    })
}

#[tokio::test]
async fn subhandlers_keep_progress_until_all_finish() {
    let handlers = [parent_with_children()];
    let first = process(
        EventKind::Added,
        &kex(),
        false,
        &handlers,
        &Persistence::default(),
    )
    .await;
    let ran: Vec<(&str, &HandlerOutcome)> =
        first.ran.iter().map(|(id, o)| (id.as_str(), o)).collect();
    assert_eq!(ran[0], ("create_fn/a", &HandlerOutcome::Succeeded));
    assert!(matches!(
        ran[1],
        ("create_fn/b", HandlerOutcome::Retrying { .. })
    ));
    assert_eq!(ran[2], ("create_fn", &HandlerOutcome::Waiting));
    assert!(!first.done);
    assert_eq!(first.delay, Some(Duration::ZERO));
    let patch = first.plan.effective(&kex());
    let parent = record(&patch, "kopf.zalando.org/create_fn");
    assert_eq!(
        parent.subrefs,
        Some(vec!["create_fn/a".to_string(), "create_fn/b".to_string()])
    );
    assert_eq!((parent.success, parent.retries), (Some(false), Some(1)));
    assert!(record(&patch, "kopf.zalando.org/create_fn.a").is_finished());
    assert_eq!(
        record(&patch, "kopf.zalando.org/create_fn.b").retries,
        Some(1)
    );
    assert_eq!(patch["status"]["create_fn/a"], json!(1));
    assert!(
        patch["status"].get("create_fn").is_none(),
        "the parent's result waits for its children"
    );

    // The next cycle: the parent runs again, the succeeded child does not.
    let mut body = first.plan.preview(&kex());
    body["metadata"]["resourceVersion"] = json!("6");
    let second = process(
        EventKind::Modified,
        &body,
        false,
        &handlers,
        &Persistence::default(),
    )
    .await;
    let ran: Vec<&str> = second.ran.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ran, vec!["create_fn/b", "create_fn"]);
    assert!(second.done);
    let patch = second.plan.effective(&body);
    assert_eq!(patch["status"]["create_fn"], json!("parent"));
    assert_eq!(patch["status"]["create_fn/b"], json!(2));
    let ann = annotations(&patch);
    for key in ["create_fn", "create_fn.a", "create_fn.b"] {
        assert_eq!(
            ann[&format!("kopf.zalando.org/{key}")],
            Value::Null,
            "{key} purged"
        );
    }
    assert!(ann["kopf.zalando.org/last-handled-configuration"].is_string());
}

#[tokio::test]
async fn subhandlers_that_finish_at_once_write_no_records() {
    let parent = HandlerSpec::new("create_fn", Some(Reason::Create), |c: Cause| async move {
        for item in ["x", "y"] {
            c.subhandlers.register(
                item,
                move |_c: Cause| async move { Ok::<_, HandlerError>(item) },
            );
        }
        Ok(None)
    });
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        &[parent],
        &Persistence::default(),
    )
    .await;
    assert!(out.done);
    let patch = out.plan.effective(&kex());
    let ann = annotations(&patch);
    assert_eq!(
        ann.keys().collect::<Vec<_>>(),
        vec!["kopf.zalando.org/last-handled-configuration"]
    );
    assert_eq!(
        patch["status"],
        json!({"create_fn/x": "x", "create_fn/y": "y"})
    );
}

#[tokio::test]
async fn field_filters_follow_kopfs_matching_order() {
    use crate::handler::{FieldFilter, Options};
    let body = {
        let mut b = kex();
        b["metadata"]["annotations"] = json!({"kopf.zalando.org/last-handled-configuration":
            "{\"spec\":{\"field\":\"old\",\"other\":1},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"});
        b["spec"]["other"] = json!(1);
        b
    };
    let ok = |id: &str, reason: Option<Reason>, options: Options| {
        HandlerSpec::new(id, reason, |c: Cause| async move {
            Ok(Some(json!({"old": c.old, "new": c.new})))
        })
        .with_options(options)
    };
    let handlers = vec![
        ok(
            "on_field_change",
            Some(Reason::Update),
            Options::new().field("spec.field"),
        ),
        ok(
            "on_other",
            Some(Reason::Update),
            Options::new().field("spec.other"),
        ),
        ok(
            "new_is_value",
            Some(Reason::Update),
            Options::new().field("spec.field").new_value("value"),
        ),
        ok(
            "old_is_other",
            Some(Reason::Update),
            Options::new().field("spec.field").old("nope"),
        ),
        ok(
            "value_pred",
            Some(Reason::Update),
            Options::new()
                .field("spec.field")
                .value(FieldFilter::Predicate(std::sync::Arc::new(
                    |v: Option<&Value>| v == Some(&json!("old")),
                ))),
        ),
        ok(
            "absent",
            Some(Reason::Update),
            Options::new().field("spec.missing"),
        ),
    ];
    let out = process(
        EventKind::Modified,
        &body,
        false,
        &handlers,
        &Persistence::default(),
    )
    .await;
    let ran: Vec<&str> = out.ran.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ran,
        vec![
            "on_field_change/spec.field",
            "new_is_value/spec.field",
            "value_pred/spec.field"
        ]
    );
    assert_eq!(
        out.plan.preview(&body)["status"]["on_field_change/spec.field"],
        json!({"old": "old", "new": "value"}),
        "old and new are the field's"
    );
}

#[tokio::test]
async fn one_id_runs_once_per_cause_and_the_finalizer_is_reported() {
    let twice = HandlerSpec::new("same", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(1)))
    });
    let del = HandlerSpec::new("del", Some(Reason::Delete), |_c: Cause| async { Ok(None) });
    let out = process(
        EventKind::Added,
        &kex(),
        false,
        &[twice.clone(), twice, del],
        &Persistence::default(),
    )
    .await;
    assert_eq!(out.finalizer, Some(FinalizerChange::Added));
    assert!(out.ran.is_empty(), "the finalizer comes first, alone");
    let mut body = kex();
    body["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
    let twice = HandlerSpec::new("same", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!(1)))
    });
    let del = HandlerSpec::new("del", Some(Reason::Delete), |_c: Cause| async { Ok(None) });
    let out = process(
        EventKind::Added,
        &body,
        false,
        &[twice.clone(), twice, del],
        &Persistence::default(),
    )
    .await;
    assert_eq!(out.ran.len(), 1);
}

#[tokio::test]
async fn success_events_only_when_enabled() {
    let quiet = Processor::new(vec![create_fn()], Persistence::default());
    let out = quiet
        .process(EventKind::Added, &kex(), false, &Memos::default())
        .await;
    assert!(out.events.is_empty());
    let loud = Processor::with_stack(
        vec![create_fn()],
        Persistence::default(),
        Stack::framework(true),
    );
    let out = loud
        .process(EventKind::Added, &kex(), false, &Memos::default())
        .await;
    assert_eq!(out.events, vec![EventSpec::success("create_fn")]);
}

#[tokio::test]
async fn a_deletion_supersedes_a_creation_in_progress() {
    let flaky = HandlerSpec::new("create_fn", Some(Reason::Create), |_c: Cause| async {
        Err(HandlerError::temporary("not yet", Duration::from_secs(60)))
    });
    let del = HandlerSpec::new("delete_fn", Some(Reason::Delete), |_c: Cause| async {
        Ok(None)
    });
    let handlers = [flaky, del];
    let mut created = kex();
    created["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
    let first = process(
        EventKind::Added,
        &created,
        false,
        &handlers,
        &Persistence::default(),
    )
    .await;
    let mut deleting = first.plan.preview(&created);
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let out = process(
        EventKind::Modified,
        &deleting,
        false,
        &handlers,
        &Persistence::default(),
    )
    .await;
    assert_eq!(
        out.superseded.as_deref(),
        Some("Creation is superseded by deletion: 0 succeeded; 0 failed; 1 left to the moment.")
    );
    assert_eq!(out.counts, (1, 0));
    let patch = out.plan.effective(&deleting);
    assert_eq!(
        patch["metadata"]["annotations"]["kopf.zalando.org/create_fn"],
        Value::Null
    );
}

#[tokio::test]
async fn a_finished_cause_purges_records_of_handlers_not_selected_now() {
    let mut field = HandlerSpec::new("field_fn/spec.field", None, |_c: Cause| async { Ok(None) });
    field.field = Some(vec!["spec".into(), "field".into()]);
    field.field_needs_change = true;
    let other = HandlerSpec::new("update_fn", Some(Reason::Update), |_c: Cause| async {
        Ok(None)
    });
    // A record left by the field handler in an earlier update whose change was reverted.
    let mut body = kex();
    body["metadata"]["annotations"] = json!({
        "kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"field\":\"value\",\"x\":1},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n",
        "kopf.zalando.org/field_fn.spec.field": "{\"purpose\":\"update\",\"retries\":3,\"success\":false,\"failure\":false}"
    });
    let out = process(
        EventKind::Modified,
        &body,
        false,
        &[field, other],
        &Persistence::default(),
    )
    .await;
    let ran: Vec<&str> = out.ran.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ran, vec!["update_fn"], "the field did not change");
    assert!(out.done);
    assert_eq!(
        out.plan.effective(&body)["metadata"]["annotations"]["kopf.zalando.org/field_fn.spec.field"],
        Value::Null,
        "purged with the cause"
    );
}

#[tokio::test]
async fn a_rejected_result_is_the_handlers_failed_attempt_by_its_errors_mode() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let mut create = HandlerSpec::new("create_fn", Some(Reason::Create), move |_c: Cause| {
        c.fetch_add(1, Ordering::SeqCst);
        async { Ok(Some(json!({"message": 42}))) }
    });
    let other = HandlerSpec::new("other_fn", Some(Reason::Create), |_c: Cause| async {
        Ok(Some(json!("fine")))
    });
    let rejected = Arc::new(HashMap::from([(
        "create_fn".to_string(),
        "the API server refused to store the result: status.create_fn.message: must be a string"
            .to_string(),
    )]));
    let processor = Processor::new(vec![create.clone(), other.clone()], Persistence::default());
    let out = processor
        .process_with(
            EventKind::Added,
            &kex(),
            false,
            &Memos::default(),
            rejected.clone(),
        )
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "not called again");
    assert!(!out.done, "retried after its backoff (errors: temporary)");
    assert!(
        matches!(&out.ran[0], (id, HandlerOutcome::Retrying { message }) if id == "create_fn" && message.contains("refused"))
    );
    let rec = record(&out.plan.effective(&kex()), "kopf.zalando.org/create_fn");
    assert_eq!(rec.retries, Some(1));
    assert!(rec.delayed.is_some());
    assert_eq!(out.delay, Some(Duration::from_secs(60)));
    assert_eq!(
        out.plan.preview(&kex())["status"],
        json!({"other_fn": "fine"}),
        "the others' results are delivered"
    );
    // Permanent: failed for good, the cause is done.
    create.errors = ErrorsMode::Permanent;
    let processor = Processor::new(vec![create, other], Persistence::default());
    let out = processor
        .process_with(EventKind::Added, &kex(), false, &Memos::default(), rejected)
        .await;
    assert!(out.done);
    assert_eq!(out.counts, (1, 1));
    assert!(matches!(&out.ran[0], (_, HandlerOutcome::Failed { .. })));
}

#[tokio::test]
async fn unreadable_progress_records_are_reported_and_treated_as_absent() {
    let mut body = kex();
    body["metadata"]["annotations"] = json!({"kopf.zalando.org/create_fn": "{not json"});
    let out = process(
        EventKind::Added,
        &body,
        false,
        &[create_fn()],
        &Persistence::default(),
    )
    .await;
    assert!(out.done, "the handler ran as if it had no record");
    assert_eq!(out.corrupt_records.len(), 1);
    assert!(out.corrupt_records[0].contains("kopf.zalando.org/create_fn"));
    assert_eq!(
        out.plan.effective(&body)["metadata"]["annotations"].get("kopf.zalando.org/create_fn"),
        Some(&Value::Null),
        "purged"
    );
}

#[tokio::test]
async fn conditions_join_the_cycles_status_write() {
    use crate::conditions::{ConditionStatus, Conditions, ConditionsSpec};
    use crate::extract::IntoHandler;
    async fn create(c: Conditions) -> Result<(), HandlerError> {
        assert!(!c.is_true("Provisioned"), "not yet");
        c.set("Provisioned", ConditionStatus::True, "Created", "")?;
        Ok(())
    }
    let declared = ConditionsSpec::new()
        .declare("Ready", ConditionStatus::Unknown, "Pending", "")
        .per_handler(true)
        .summary("Ready")
        .into_spec();
    let processor = Processor::new(
        vec![
            declared,
            HandlerSpec::from_arc("create_fn", Some(Reason::Create), create.into_handler()),
        ],
        Persistence::default(),
    );
    let mut body = kex();
    body["metadata"]["generation"] = json!(3);
    let out = processor
        .process(EventKind::Added, &body, false, &Memos::default())
        .await;
    assert!(out.done);
    let reqs = out.plan.requests(&body, true);
    assert!(matches!(reqs[0], PatchRequest::JsonStatus(_)), "{reqs:?}");
    assert_eq!(reqs.len(), 2, "status, then the diff-base");
    let stored = out.plan.preview(&body);
    let types: Vec<(String, String)> = stored["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or("").into(),
                c["status"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    let pairs = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        types,
        pairs(&[
            ("Ready", "True"),
            ("Provisioned", "True"),
            ("CreateFnSucceeded", "True")
        ])
    );
    assert_eq!(stored["status"]["conditions"][0]["observedGeneration"], 3);
    // The next cycle (nothing changed): nothing is written.
    let again = processor
        .process(EventKind::Modified, &stored, false, &Memos::default())
        .await;
    assert_eq!(again.reason, Reason::Noop);
    assert!(again.plan.is_noop_for(&stored));
}

#[tokio::test]
async fn the_processor_says_which_states_need_a_cycle_and_keeps_the_detected_cause() {
    let del = HandlerSpec::new("del", Some(Reason::Delete), |_c: Cause| async { Ok(None) });
    let processor = Processor::new(vec![create_fn(), del], Persistence::default());
    let memo = Memos::default();
    // A new object: its finalizer first (a cycle of its own), then its creation.
    let check = processor.check(EventKind::Added, &kex(), false);
    let Check::Cycle(Some(detected)) = check else {
        panic!("a creation needs a cycle: {check:?}")
    };
    assert!(detected.is_for(EventKind::Added, false));
    assert!(!detected.is_for(EventKind::Added, true));
    assert_eq!(detected.reason(), Reason::Create);
    let out = processor
        .process_checked(detected, &kex(), &memo, Arc::default(), None)
        .await;
    assert_eq!(out.finalizer, Some(FinalizerChange::Added));
    let mut held = kex();
    held["metadata"]["finalizers"] = json!([crate::finalizers::DEFAULT_FINALIZER]);
    assert!(processor.needs_cycle(EventKind::Modified, &held, false));
    let out = processor
        .process(EventKind::Modified, &held, false, &memo)
        .await;
    assert_eq!(out.reason, Reason::Create);
    assert!(out.done);
    // Its own writes coming back: nothing to do, unless the object is seen in a listing
    // first (resume handlers) or deleted.
    let handled = out.plan.preview(&held);
    assert!(matches!(
        processor.check(EventKind::Modified, &handled, false),
        Check::Settled
    ));
    assert!(!processor.needs_cycle(EventKind::Listed, &handled, false));
    assert!(matches!(
        processor.check(EventKind::Listed, &handled, true),
        Check::Cycle(None)
    ));
    assert!(processor.needs_cycle(EventKind::Deleted, &handled, false));
    // A change of the spec is an update; the finalizer no handler needs any more goes.
    let mut changed = handled.clone();
    changed["spec"]["field"] = json!("other");
    assert!(processor.needs_cycle(EventKind::Modified, &changed, false));
    let unneeded = Processor::new(vec![create_fn()], Persistence::default());
    assert!(unneeded.needs_cycle(EventKind::Modified, &handled, false));
    // With a declared condition, every state has a cycle (it writes the defaults).
    let conditions =
        HandlerSpec::declaration("conditions", crate::conditions::ConditionsSpec::default());
    let declared = Processor::new(vec![create_fn(), conditions], Persistence::default());
    assert!(declared.needs_cycle(EventKind::Modified, &handled, false));
}
