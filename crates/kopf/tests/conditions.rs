//! `status.conditions` on the in-process fake API server: the guarded write keeps another
//! writer's types, transitions keep their time, conditions ride in the cycle's one status
//! PATCH, declared defaults and auto conditions, and `Conditions::sync` mid-handler.

mod common;

use std::sync::Arc;
use std::time::Duration;

use kopf::{
    HandlerError, Operator, PermanentError, TimerOptions,
    conditions::{ConditionStatus, Conditions, ConditionsSpec},
    handler::Name,
};
use kopf_testing::FakeApiServer;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{Running, eventually, kex_api, obj, operator_requests, writes};

const DIFF_BASE: &str = "kopf.zalando.org/last-handled-configuration";

/// The object's conditions (empty when absent).
async fn conditions(api: &Api<DynamicObject>, name: &str) -> Vec<Value> {
    api.get_opt(name)
        .await
        .expect("get")
        .and_then(|o| o.data.pointer("/status/conditions").cloned())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn find<'a>(list: &'a [Value], type_: &str) -> Option<&'a Value> {
    list.iter().find(|c| c["type"] == type_)
}

async fn until_condition(api: &Api<DynamicObject>, name: &str, type_: &str, status: &str) {
    eventually(&format!("{type_}={status} on {name}"), async || {
        find(&conditions(api, name).await, type_).is_some_and(|c| c["status"] == status)
    })
    .await;
}

async fn handled(api: &Api<DynamicObject>, name: &str) -> bool {
    api.get_opt(name)
        .await
        .expect("get")
        .and_then(|o| o.metadata.annotations)
        .is_some_and(|a| a.contains_key(DIFF_BASE))
}

/// The operator's PATCHes of the object's status: (response code, patch type, content type).
fn status_patches(server: &FakeApiServer, name: &str) -> Vec<(u16, String, String)> {
    operator_requests(server)
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/{name}/status")))
        .map(|r| (r.status, r.patch_type, r.content_type))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_concurrent_writers_condition_is_kept() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let theirs = api.clone();
    // The handler sets Ready, and meanwhile another controller (the test's own client, its
    // own field manager) writes its condition `Other` into the list.
    let op = Operator::new().on_create(
        "kopfexamples",
        "create_fn",
        move |Name(name): Name, c: Conditions| {
            let theirs = theirs.clone();
            async move {
                c.set("Ready", ConditionStatus::True, "Created", "")?;
                let other = json!({"status": {"conditions": [{"type": "Other", "status": "True",
                    "reason": "Theirs", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
                theirs
                    .patch_status(&name, &PatchParams::apply("other-controller"), &Patch::Merge(&other))
                    .await
                    .map_err(HandlerError::other)?;
                Ok::<_, HandlerError>(json!({"message": "hello"}))
            }
        },
    );
    let running = Running::start(&server, op).await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_condition(&api, "k", "Ready", "True").await;
    running.settled().await;
    let list = conditions(&api, "k").await;
    let types: Vec<&str> = list.iter().filter_map(|c| c["type"].as_str()).collect();
    assert_eq!(
        types,
        vec!["Other", "Ready"],
        "theirs kept, in place, ours added"
    );
    assert_eq!(
        find(&list, "Other").map(|c| &c["lastTransitionTime"]),
        Some(&json!("2020-01-01T00:00:00Z"))
    );
    let object = api.get("k").await.expect("get");
    assert_eq!(object.data["status"]["create_fn"]["message"], "hello");
    // Our guarded write met the change (422), then was sent again on the fresh object.
    let patches = status_patches(&server, "k");
    let codes: Vec<u16> = patches.iter().map(|p| p.0).collect();
    assert_eq!(codes, vec![422, 200], "{patches:?}");
    assert!(patches.iter().all(|p| p.1 == "json"), "{patches:?}");
    assert!(handled(&api, "k").await);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_transition_time_stays_when_only_the_message_changes() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", |c: Conditions| async move {
            c.set("Ready", ConditionStatus::True, "Created", "one")?;
            Ok::<_, HandlerError>(())
        })
        .on_update("kopfexamples", "update_fn", |c: Conditions| async move {
            c.set("Ready", ConditionStatus::True, "Updated", "two")?;
            Ok::<_, HandlerError>(())
        });
    let running = Running::start(&server, op).await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_condition(&api, "k", "Ready", "True").await;
    eventually("the creation handled", async || handled(&api, "k").await).await;
    let first = find(&conditions(&api, "k").await, "Ready")
        .cloned()
        .expect("Ready");
    // A later second: a new time would differ.
    running.advance(Duration::from_millis(1100)).await;
    api.patch(
        "k",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "b"}})),
    )
    .await
    .expect("update");
    eventually("the update's message", async || {
        find(&conditions(&api, "k").await, "Ready").is_some_and(|c| c["message"] == "two")
    })
    .await;
    let second = find(&conditions(&api, "k").await, "Ready")
        .cloned()
        .expect("Ready");
    assert_eq!(second["reason"], "Updated");
    assert_eq!(first["lastTransitionTime"], second["lastTransitionTime"]);
    assert_eq!(
        second["observedGeneration"], 2,
        "the generation the handler saw"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_creation_with_a_result_and_a_condition_is_one_status_patch() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let op = Operator::new().on_create("kopfexamples", "create_fn", |c: Conditions| async move {
        c.set("Provisioned", ConditionStatus::True, "Created", "done")?;
        Ok::<_, HandlerError>(json!({"message": "hello"}))
    });
    let running = Running::start(&server, op).await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the creation handled", async || handled(&api, "k").await).await;
    running.settled().await;
    let patches = status_patches(&server, "k");
    assert_eq!(patches.len(), 1, "{patches:?}");
    // The whole exchange: the result and the condition in one guarded status write, then
    // the diff-base.
    insta::assert_json_snapshot!("result_and_condition", writes(&server));
    assert_eq!(patches[0].0, 200);
    assert_eq!(patches[0].1, "json");
    assert!(
        patches[0].2.starts_with("application/json-patch+json"),
        "{patches:?}"
    );
    let object = api.get("k").await.expect("get");
    assert_eq!(object.data["status"]["create_fn"]["message"], "hello");
    let list = conditions(&api, "k").await;
    assert_eq!(
        find(&list, "Provisioned").map(|c| &c["status"]),
        Some(&json!("True"))
    );
    // Nothing changes afterwards: no more writes (no hot loop).
    let before = operator_requests(&server)
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    // A change outside the essence (another controller's status field): a noop cause.
    api.patch_status(
        "k",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"x": 1}})),
    )
    .await
    .expect("a status field");
    running.settled().await;
    let after = operator_requests(&server)
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(before, after, "a noop cycle writes nothing");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn declared_defaults_ride_in_the_first_status_write() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>(json!({"message": "hello"}))
        })
        .conditions(
            "kopfexamples",
            ConditionsSpec::new()
                .declare("Ready", ConditionStatus::Unknown, "Pending", "")
                .declare("Degraded", ConditionStatus::False, "Fine", ""),
        );
    let running = Running::start(&server, op).await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the creation handled", async || handled(&api, "k").await).await;
    running.settled().await;
    let list = conditions(&api, "k").await;
    assert_eq!(
        find(&list, "Ready").map(|c| &c["status"]),
        Some(&json!("Unknown"))
    );
    assert_eq!(
        find(&list, "Ready").map(|c| &c["reason"]),
        Some(&json!("Pending"))
    );
    assert_eq!(
        find(&list, "Degraded").map(|c| &c["status"]),
        Some(&json!("False"))
    );
    let patches = status_patches(&server, "k");
    assert_eq!(
        patches.len(),
        1,
        "with the result, no extra request: {patches:?}"
    );
    let writes = operator_requests(&server)
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(writes, 2, "the status, then the diff-base");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn auto_conditions_follow_the_handlers_outcomes() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", |Name(name): Name| async move {
            match name.as_str() {
                "temp" => Err(HandlerError::temporary("not yet", Duration::from_secs(600))),
                "perm" => Err(PermanentError("never".into()).into()),
                _ => Ok(()),
            }
        })
        .conditions(
            "kopfexamples",
            ConditionsSpec::new()
                .per_handler(true)
                .summary("Ready")
                .kstatus(true),
        );
    let running = Running::start(&server, op).await;
    for name in ["ok", "temp", "perm"] {
        api.create(&PostParams::default(), &obj(name, json!({"field": "a"})))
            .await
            .expect("create");
    }
    until_condition(&api, "ok", "Ready", "True").await;
    let ok = conditions(&api, "ok").await;
    assert_eq!(
        find(&ok, "CreateFnSucceeded").map(|c| &c["status"]),
        Some(&json!("True"))
    );
    assert_eq!(
        find(&ok, "CreateFnSucceeded").map(|c| &c["reason"]),
        Some(&json!("Succeeded"))
    );
    assert_eq!(
        find(&ok, "Stalled").map(|c| &c["status"]),
        Some(&json!("False"))
    );
    assert_eq!(
        find(&ok, "Reconciling").map(|c| &c["status"]),
        Some(&json!("False"))
    );

    until_condition(&api, "temp", "CreateFnSucceeded", "Unknown").await;
    let temp = conditions(&api, "temp").await;
    let c = find(&temp, "CreateFnSucceeded").expect("the handler's condition");
    assert_eq!(c["reason"], "Retrying");
    assert_eq!(c["message"], "not yet");
    assert_eq!(
        find(&temp, "Ready").map(|c| &c["status"]),
        Some(&json!("Unknown"))
    );
    assert_eq!(
        find(&temp, "Reconciling").map(|c| &c["status"]),
        Some(&json!("True"))
    );

    until_condition(&api, "perm", "CreateFnSucceeded", "False").await;
    let perm = conditions(&api, "perm").await;
    assert_eq!(
        find(&perm, "CreateFnSucceeded").map(|c| &c["reason"]),
        Some(&json!("Failed"))
    );
    assert_eq!(
        find(&perm, "Ready").map(|c| &c["status"]),
        Some(&json!("False"))
    );
    assert_eq!(
        find(&perm, "Stalled").map(|c| &c["status"]),
        Some(&json!("True"))
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn sync_publishes_conditions_while_the_handler_runs() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let go_on = Arc::new(tokio::sync::Notify::new());
    let gate = go_on.clone();
    let op = Operator::new().on_create("kopfexamples", "create_fn", move |c: Conditions| {
        let gate = gate.clone();
        async move {
            c.set(
                "Provisioned",
                ConditionStatus::False,
                "Creating",
                "in progress",
            )?;
            c.sync().await?;
            // The long part: until the test has seen the condition.
            gate.notified().await;
            c.set("Provisioned", ConditionStatus::True, "Created", "")?;
            Ok::<_, HandlerError>(json!({"message": "done"}))
        }
    });
    let running = Running::start(&server, op).await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    // Observed by another client while the handler still waits.
    until_condition(&api, "k", "Provisioned", "False").await;
    assert!(
        !handled(&api, "k").await,
        "the handler has not returned yet"
    );
    go_on.notify_one();
    until_condition(&api, "k", "Provisioned", "True").await;
    eventually("the creation handled", async || handled(&api, "k").await).await;
    running.settled().await;
    let list = conditions(&api, "k").await;
    assert_eq!(list.len(), 1, "one entry per type: {list:?}");
    assert_eq!(list[0]["reason"], "Created");
    // The sync, then the cycle's own write, guarded by the synced list: no conflict.
    let codes: Vec<u16> = status_patches(&server, "k").iter().map(|p| p.0).collect();
    assert_eq!(codes, vec![200, 200]);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn timers_set_conditions_with_their_delivery() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let op = Operator::new().timer(
        "kopfexamples",
        "check",
        TimerOptions::every(Duration::from_millis(200)),
        |c: Conditions| async move {
            c.set("Checked", ConditionStatus::True, "Ticked", "")?;
            Ok::<_, HandlerError>(())
        },
    );
    let running = Running::start(&server, op).await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_condition(&api, "k", "Checked", "True").await;
    // Later ticks set the same: nothing more is written.
    running.settled().await;
    let first = status_patches(&server, "k").len();
    // Three more ticks.
    running.advance(Duration::from_millis(700)).await;
    assert_eq!(status_patches(&server, "k").len(), first);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_condition_fails_the_handler_before_any_request() {
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let op = Operator::new().on_create("kopfexamples", "create_fn", |c: Conditions| async move {
        c.set("Ready", ConditionStatus::True, "not a reason", "")?;
        Ok::<_, HandlerError>(json!({"message": "never"}))
    });
    let running = Running::start(&server, op).await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the creation handled (failed)", async || {
        handled(&api, "k").await
    })
    .await;
    running.settled().await;
    assert!(conditions(&api, "k").await.is_empty());
    let sent_conditions = operator_requests(&server)
        .iter()
        .any(|r| r.method == "PATCH" && r.body.contains("conditions"));
    assert!(!sent_conditions, "nothing of it was sent");
    assert!(
        !running
            .logged_at("ERROR", "invalid condition reason")
            .is_empty(),
        "the handler's failure says why: {:?}",
        running.logs()
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_a_status_subresource_conditions_go_with_the_objects_patch() {
    let server = common::paused_server().await;
    let mut crd = common::crd();
    crd["metadata"]["name"] = json!("kopfplains.kopf.dev");
    crd["spec"]["names"] =
        json!({"kind": "KopfPlain", "plural": "kopfplains", "singular": "kopfplain"});
    if let Some(versions) = crd["spec"]["versions"].as_array_mut() {
        for v in versions {
            if let Some(m) = v.as_object_mut() {
                m.remove("subresources");
                m.remove("additionalPrinterColumns");
            }
        }
    }
    server.apply_object(crd).expect("crd");
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kopf.dev", "v1", "KopfPlain"),
        "kopfplains",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    let op = Operator::new().on_create("kopfplains", "create_fn", |c: Conditions| async move {
        c.set("Ready", ConditionStatus::True, "Created", "")?;
        Ok::<_, HandlerError>(json!({"message": "hello"}))
    });
    let running = Running::start(&server, op).await;
    let object: DynamicObject = serde_json::from_value(json!({"apiVersion": "kopf.dev/v1",
        "kind": "KopfPlain", "metadata": {"name": "p"}, "spec": {"field": "a"}}))
    .expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");
    until_condition(&api, "p", "Ready", "True").await;
    eventually("the creation handled", async || handled(&api, "p").await).await;
    running.settled().await;
    let stored = api.get("p").await.expect("get");
    assert_eq!(stored.data["status"]["create_fn"]["message"], "hello");
    let patches: Vec<(u16, String)> = operator_requests(&server)
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/kopfplains/p"))
        .map(|r| (r.status, r.patch_type))
        .collect();
    assert_eq!(
        patches,
        vec![(200, "json".to_string())],
        "one guarded JSON patch"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_422_on_an_unchanged_list_is_a_failure_of_the_handler_not_a_race() {
    use kopf_testing::{FaultRule, RequestPattern};
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let op = Operator::new().on_create("kopfexamples", "create_fn", |c: Conditions| async move {
        c.set("Ready", ConditionStatus::True, "Created", "")?;
        Ok::<_, HandlerError>(json!({"message": "hello"}))
    });
    let running = Running::start(&server, op).await;
    // As kube-apiserver words a schema violation of the result.
    let patches = RequestPattern::any()
        .verb("patch")
        .resource("kopfexamples")
        .subresource("status");
    let mut rule = FaultRule::new(patches, 422, 1);
    rule.message = Some(
        r#"KopfExample.kopf.dev "k" is invalid: status.create_fn: Invalid value: "object": status.create_fn in body must be of type string: "object""#
            .into(),
    );
    server.inject_fault(rule);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    eventually("the refusal reported", async || {
        !running
            .logged_at("ERROR", "Handler 'create_fn' returned a result")
            .is_empty()
    })
    .await;
    running.settled().await;
    // One send, one read of the object (the list is as it was), no resend of the same.
    let codes: Vec<u16> = status_patches(&server, "k").iter().map(|p| p.0).collect();
    assert_eq!(codes, vec![422]);
    assert!(
        !handled(&api, "k").await,
        "never a diff-base without the result"
    );
    assert!(conditions(&api, "k").await.is_empty());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_sets_conditions_with_its_status_write() {
    use kopf::{Action, ReconcileContext};
    let server = common::paused_server().await;
    let api = kex_api(&server);
    let op = Operator::new().reconcile(
        "kopfexamples",
        |_obj: Arc<Value>, ctx: ReconcileContext| async move {
            let conditions = ctx.extract::<Conditions>()?;
            conditions.set("Ready", ConditionStatus::True, "Reconciled", "")?;
            Ok::<_, HandlerError>(Action::await_change())
        },
    );
    let running = Running::start(&server, op).await;
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_condition(&api, "k", "Ready", "True").await;
    running.settled().await;
    let patches = status_patches(&server, "k");
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert_eq!(patches[0].1, "json");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_declaration_stops_the_operator_at_start_naming_it() {
    let server = common::paused_server().await;
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>("created")
        })
        .conditions(
            "kopfexamples",
            ConditionsSpec::new().declare("Ready", ConditionStatus::Unknown, "not a reason!", ""),
        );
    let running = Running::start_with(&server, op, Duration::from_secs(70), false).await;
    let text = running
        .result()
        .await
        .expect_err("an invalid declaration is refused")
        .to_string();
    assert!(
        text.contains("the conditions declared for kopfexamples.kopf.dev are invalid")
            && text.contains("not a reason!"),
        "{text}"
    );
}
