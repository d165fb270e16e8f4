//! The level-triggered reconcile against the fake API server: owned objects trigger their
//! owner's reconcile and are restored, errors back off per object and reset after a
//! success, a burst of updates is coalesced (one reconcile in flight, one pending),
//! requeues, related objects through a mapper, the cleanup on deletion, and the order and
//! exclusion with cause handlers of the same resource.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf::{
    Action, HandlerError, Operator, ReconcileContext, Reconciler,
    reconcile::{Backoff, ObjectRef, Trigger},
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;

use common::{Running, eventually, kex_api, obj, owned_configmap, until_object};

/// Makes `<name>-cm` hold `spec.field`, owned by the object.
async fn converge(obj: Arc<Value>, ctx: ReconcileContext) -> Result<Action, HandlerError> {
    let kopf::handler::Client(client) = ctx.extract::<kopf::handler::Client>()?;
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let want = obj["spec"]["field"].as_str().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm = owned_configmap(&obj, want);
    match cms.get_opt(&format!("{name}-cm")).await? {
        None => {
            cms.create(&PostParams::default(), &cm).await?;
        }
        Some(have)
            if have
                .data
                .as_ref()
                .and_then(|d| d.get("field"))
                .map(String::as_str)
                != Some(want) =>
        {
            cms.patch(
                &format!("{name}-cm"),
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"field": want}})),
            )
            .await?;
        }
        Some(_) => {}
    }
    Ok(Action::await_change())
}

fn cm_api(server: &kopf_testing::FakeApiServer) -> Api<ConfigMap> {
    Api::namespaced(server.client(), "default")
}

async fn until_cm(api: &Api<ConfigMap>, name: &str, want: Option<&str>) {
    eventually(&format!("configmap {name} to hold {want:?}"), async || {
        let have = api.get_opt(name).await.expect("get");
        have.and_then(|c| c.data)
            .and_then(|d| d.get("field").cloned())
            .as_deref()
            == want
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_owned_configmap_deleted_or_edited_by_hand_is_restored() {
    let server = common::paused_server().await;
    let triggers = Arc::new(Mutex::new(Vec::<Trigger>::new()));
    let t = triggers.clone();
    let op = Operator::new().reconcile_with(
        Reconciler::new(
            "kopfexamples",
            move |obj: Arc<Value>, ctx: ReconcileContext| {
                t.lock().expect("lock").push(ctx.trigger().clone());
                converge(obj, ctx)
            },
        )
        .owns("configmaps"),
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "one"})))
        .await
        .expect("create");
    let cms = cm_api(&server);
    until_cm(&cms, "k-cm", Some("one")).await;

    // Deleted by hand: the owner's reconcile runs and creates it again.
    cms.delete("k-cm", &DeleteParams::default())
        .await
        .expect("delete");
    until_cm(&cms, "k-cm", Some("one")).await;
    // Edited by hand: restored.
    cms.patch(
        "k-cm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"field": "tampered"}})),
    )
    .await
    .expect("edit");
    until_cm(&cms, "k-cm", Some("one")).await;
    // The owner changes: converged to the new spec.
    api.patch(
        "k",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "two"}})),
    )
    .await
    .expect("patch");
    until_cm(&cms, "k-cm", Some("two")).await;
    running.stop().await;

    let seen = triggers.lock().expect("lock").clone();
    assert_eq!(seen.first(), Some(&Trigger::Listed), "{seen:?}");
    assert!(
        seen.iter()
            .any(|t| matches!(t, Trigger::Owned(what) if what == "ConfigMap/k-cm")),
        "the owned ConfigMap's changes triggered the owner: {seen:?}"
    );
    assert!(seen.contains(&Trigger::ObjectChanged), "{seen:?}");
}

#[tokio::test(start_paused = true)]
async fn a_hundred_errors_in_a_row_back_off_exponentially_capped_then_reset() {
    let server = common::paused_server().await;
    // (failures in a row before the call, when it started)
    let calls = Arc::new(Mutex::new(Vec::<(u32, tokio::time::Instant)>::new()));
    let c = calls.clone();
    let backoff =
        Backoff::exponential(Duration::from_millis(1), Duration::from_millis(16)).jitter(0.0);
    let op = Operator::new().reconcile_with(
        Reconciler::new(
            "kopfexamples",
            move |_obj: Arc<Value>, ctx: ReconcileContext| {
                let c = c.clone();
                async move {
                    let n = {
                        let mut calls = c.lock().expect("lock");
                        calls.push((ctx.failures(), tokio::time::Instant::now()));
                        calls.len()
                    };
                    // 100 failures, a success, then failures again.
                    if n <= 100 || n > 101 {
                        return Err(HandlerError::other(format!("failure {n}")));
                    }
                    Ok(Action::requeue(Duration::from_millis(1)))
                }
            },
        )
        .backoff(backoff),
    );
    let running = Running::start(&server, op).await;
    kex_api(&server)
        .create(&PostParams::default(), &obj("k", json!({"field": "x"})))
        .await
        .expect("create");
    eventually("104 reconciles", async || {
        calls.lock().expect("lock").len() >= 104
    })
    .await;
    running.stop().await;

    let calls = calls.lock().expect("lock").clone();
    let failures: Vec<u32> = calls.iter().map(|(f, _)| *f).collect();
    let expected: Vec<u32> = (0..=100).collect();
    assert_eq!(&failures[..101], &expected[..], "one more failure per call");
    assert_eq!(
        failures[101],
        0,
        "a success resets the failures: {:?}",
        &failures[99..]
    );
    // After the reset, the next failure counts from one again.
    assert_eq!(failures[102], 1);
    let plain =
        Backoff::exponential(Duration::from_millis(1), Duration::from_millis(16)).jitter(0.0);
    for i in 1..101 {
        let gap = calls[i].1 - calls[i - 1].1;
        let want = plain.delay(calls[i].0);
        assert!(
            gap >= want,
            "call {i}: waited {gap:?}, the backoff says {want:?}"
        );
    }
    // Capped: 100 failures take about 100 × 16 ms, not 2^100 ms.
    let total = calls[100].1 - calls[0].1;
    assert!(total < Duration::from_secs(30), "{total:?}");
}

#[tokio::test(start_paused = true)]
async fn a_thousand_rapid_updates_coalesce_one_in_flight_one_pending() {
    let server = common::paused_server().await;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max_in_flight = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicU32::new(0));
    let last_seen = Arc::new(Mutex::new(Value::Null));
    let (f, m, c, l) = (
        in_flight.clone(),
        max_in_flight.clone(),
        calls.clone(),
        last_seen.clone(),
    );
    let op = Operator::new().reconcile(
        "kopfexamples",
        move |obj: Arc<Value>, _ctx: ReconcileContext| {
            let (f, m, c, l) = (f.clone(), m.clone(), c.clone(), l.clone());
            async move {
                let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                c.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                *l.lock().expect("lock") = obj["spec"]["n"].clone();
                f.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, HandlerError>(Action::await_change())
            }
        },
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"n": 0})))
        .await
        .expect("create");
    let started = tokio::time::Instant::now();
    for n in 1..=1000 {
        api.patch(
            "k",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"n": n}})),
        )
        .await
        .expect("patch");
    }
    let updating = started.elapsed();
    eventually("the last state reconciled", async || {
        *last_seen.lock().expect("lock") == json!(1000)
    })
    .await;
    running.settled().await;
    running.stop().await;
    let calls = calls.load(Ordering::SeqCst);
    assert_eq!(
        max_in_flight.load(Ordering::SeqCst),
        1,
        "one reconcile of the object at a time"
    );
    // Each reconcile takes 20 ms; 1,000 updates coalesce into far fewer calls (at most one
    // pending entry: the updates during a call become one call after it), so there are no
    // more calls than 20 ms slots while updating, plus the creation's and the last one.
    let slots = (updating.as_millis() / 20) as u32 + 3;
    assert!(
        calls <= slots,
        "{calls} reconciles for 1,000 updates in {updating:?}"
    );
    assert!(calls >= 2, "{calls}");
}

#[tokio::test(start_paused = true)]
async fn requeues_repeat_and_related_objects_trigger_through_a_mapper() {
    let server = common::paused_server().await;
    let triggers = Arc::new(Mutex::new(Vec::<(String, Trigger)>::new()));
    let t = triggers.clone();
    let op = Operator::new().reconcile_with(
        Reconciler::new(
            "kopfexamples",
            move |obj: Arc<Value>, ctx: ReconcileContext| {
                let name = obj["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                t.lock()
                    .expect("lock")
                    .push((name.clone(), ctx.trigger().clone()));
                async move {
                    Ok::<_, HandlerError>(if name == "ticking" {
                        Action::requeue(Duration::from_millis(150))
                    } else {
                        Action::await_change()
                    })
                }
            },
        )
        .watches("configmaps", |cm: &ConfigMap| {
            cm.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("example.com/for"))
                .map(|name| vec![ObjectRef::namespaced("default", name)])
                .unwrap_or_default()
        }),
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    for name in ["ticking", "quiet"] {
        api.create(&PostParams::default(), &obj(name, json!({})))
            .await
            .expect("create");
    }
    let count = |name: &str, trigger: Trigger| {
        triggers
            .lock()
            .expect("lock")
            .iter()
            .filter(|(n, t)| n == name && *t == trigger)
            .count()
    };
    eventually("three requeues", async || {
        count("ticking", Trigger::Requeue) >= 3
    })
    .await;
    eventually("quiet reconciled once", async || {
        count("quiet", Trigger::Listed) == 1
    })
    .await;
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "rel", "annotations": {"example.com/for": "quiet"}}}),
    )
    .expect("cm");
    cm_api(&server)
        .create(&PostParams::default(), &cm)
        .await
        .expect("cm");
    eventually("the related ConfigMap triggered quiet", async || {
        count("quiet", Trigger::Related("ConfigMap/rel".into())) == 1
    })
    .await;
    running.stop().await;
    assert_eq!(
        count("quiet", Trigger::Requeue),
        0,
        "await_change does not requeue"
    );
}

#[tokio::test(start_paused = true)]
async fn cause_handlers_run_first_never_beside_the_reconcile_and_cleanup_releases() {
    let server = common::paused_server().await;
    let busy = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let enter = {
        let (busy, overlaps, order) = (busy.clone(), overlaps.clone(), order.clone());
        move |what: &'static str| {
            if busy.fetch_add(1, Ordering::SeqCst) > 0 {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            order.lock().expect("lock").push(what);
        }
    };
    let leave = {
        let busy = busy.clone();
        move || {
            busy.fetch_sub(1, Ordering::SeqCst);
        }
    };
    let (e1, l1, e2, l2, e3, l3) = (
        enter.clone(),
        leave.clone(),
        enter.clone(),
        leave.clone(),
        enter,
        leave,
    );
    let op = Operator::new()
        .on_create("kopfexamples", "create_fn", move || {
            let (e, l) = (e1.clone(), l1.clone());
            async move {
                e("create");
                tokio::time::sleep(Duration::from_millis(100)).await;
                l();
                Ok::<_, HandlerError>("created")
            }
        })
        .reconcile_with(
            Reconciler::new(
                "kopfexamples",
                move |_obj: Arc<Value>, ctx: ReconcileContext| {
                    let (e, l) = (e2.clone(), l2.clone());
                    async move {
                        e("reconcile");
                        ctx.patch().merge(json!({"status": {"reconciled": true}}));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        l();
                        Ok::<_, HandlerError>(Action::await_change())
                    }
                },
            )
            .cleanup(move |_obj: Arc<Value>, _ctx: ReconcileContext| {
                let (e, l) = (e3.clone(), l3.clone());
                async move {
                    e("cleanup");
                    l();
                    Ok::<_, HandlerError>(())
                }
            }),
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(&api, "k", "reconciled and created", |o| {
        o.is_some_and(|o| {
            o.data["status"]["reconciled"] == json!(true)
                && o.data["status"]["create_fn"] == json!("created")
        })
    })
    .await;
    let finalizers = api
        .get("k")
        .await
        .expect("get")
        .metadata
        .finalizers
        .unwrap_or_default();
    assert_eq!(
        finalizers,
        vec!["kopf.zalando.org/KopfFinalizerMarker".to_string()],
        "one finalizer for both models"
    );
    api.delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    until_object(&api, "k", "gone", |o| o.is_none()).await;
    running.stop().await;
    let order = order.lock().expect("lock").clone();
    assert_eq!(
        order.first(),
        Some(&"create"),
        "cause handlers first: {order:?}"
    );
    assert_eq!(
        order.iter().filter(|w| **w == "cleanup").count(),
        1,
        "{order:?}"
    );
    assert_eq!(order.last(), Some(&"cleanup"), "{order:?}");
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "never at the same time: {order:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_concurrency_limit_holds_across_objects() {
    let server = common::paused_server().await;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max_in_flight = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let (f, m, d) = (in_flight.clone(), max_in_flight.clone(), done.clone());
    let op = Operator::new().reconcile_with(
        Reconciler::new(
            "kopfexamples",
            move |_obj: Arc<Value>, _ctx: ReconcileContext| {
                let (f, m, d) = (f.clone(), m.clone(), d.clone());
                async move {
                    let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    f.fetch_sub(1, Ordering::SeqCst);
                    d.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, HandlerError>(Action::await_change())
                }
            },
        )
        .concurrency(2),
    );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    for i in 0..6 {
        api.create(&PostParams::default(), &obj(&format!("k{i}"), json!({})))
            .await
            .expect("create");
    }
    eventually("six reconciles", async || done.load(Ordering::SeqCst) >= 6).await;
    running.stop().await;
    assert_eq!(
        max_in_flight.load(Ordering::SeqCst),
        2,
        "at most two at once, and two did run at once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_of_a_reconcile_is_retried_not_lost() {
    let server = common::paused_server().await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let op = Operator::new().reconcile_with(
        Reconciler::new(
            "kopfexamples",
            move |obj: Arc<Value>, ctx: ReconcileContext| {
                c.fetch_add(1, Ordering::SeqCst);
                ctx.patch()
                    .merge(json!({"status": {"seen": obj["spec"]["field"]}}));
                async { Ok::<_, HandlerError>(Action::await_change()) }
            },
        )
        .backoff(Backoff::exponential(
            Duration::from_millis(10),
            Duration::from_millis(50),
        )),
    );
    // The status PATCHes fail three times (the API server, not the reconcile).
    server.inject_fault(kopf_testing::FaultRule::new(
        kopf_testing::RequestPattern::any()
            .verb("patch")
            .resource("kopfexamples")
            .subresource("status"),
        503,
        3,
    ));
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    until_object(
        &api,
        "k",
        "the reconcile's status despite three 503s",
        |o| o.is_some_and(|o| o.data["status"]["seen"] == json!("a")),
    )
    .await;
    running.stop().await;
    assert!(
        calls.load(Ordering::SeqCst) >= 4,
        "the reconcile ran again after each failed write: {}",
        calls.load(Ordering::SeqCst)
    );
}

#[tokio::test(start_paused = true)]
async fn a_pause_drops_pending_requeues_and_the_resume_reconciles_each_object_once() {
    let server = common::paused_server().await;
    let (control, gate) = kopf::peering::Gate::channel();
    let triggers = Arc::new(Mutex::new(Vec::<Trigger>::new()));
    let t = triggers.clone();
    let op = Operator::new().gate(gate).reconcile(
        "kopfexamples",
        move |_obj: Arc<Value>, ctx: ReconcileContext| {
            t.lock().expect("lock").push(ctx.trigger().clone());
            async { Ok::<_, HandlerError>(Action::requeue(Duration::from_millis(100))) }
        },
    );
    let running = Running::start(&server, op).await;
    kex_api(&server)
        .create(&PostParams::default(), &obj("k", json!({})))
        .await
        .expect("create");
    let requeues = |t: &Mutex<Vec<Trigger>>| {
        t.lock()
            .expect("lock")
            .iter()
            .filter(|t| **t == Trigger::Requeue)
            .count()
    };
    eventually("requeues", async || requeues(&triggers) >= 2).await;
    control.pause("in favour of other@host (priority 100)");
    running.settled().await;
    let at_pause = triggers.lock().expect("lock").len();
    // Five of the requeue's delays.
    running.advance(Duration::from_millis(500)).await;
    assert_eq!(
        triggers.lock().expect("lock").len(),
        at_pause,
        "no reconcile while paused (its requeues are dropped)"
    );
    control.resume();
    eventually("reconciled again after the pause", async || {
        triggers.lock().expect("lock")[at_pause..].contains(&Trigger::Listed)
    })
    .await;
    running.stop().await;
    let after: Vec<Trigger> = triggers.lock().expect("lock")[at_pause..].to_vec();
    assert_eq!(after[0], Trigger::Listed, "{after:?}");
    assert_eq!(
        after.iter().filter(|t| **t == Trigger::Listed).count(),
        1,
        "once per object when the operator acts again: {after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn two_reconciles_of_one_resource_stop_the_operator_with_a_clear_error() {
    let server = common::paused_server().await;
    let noop = |_obj: Arc<Value>, _ctx: ReconcileContext| async {
        Ok::<_, HandlerError>(Action::await_change())
    };
    let op = Operator::new()
        .reconcile_with(Reconciler::new("kopfexamples", noop).id("first"))
        .reconcile_with(Reconciler::new("kopfexamples", noop).id("second"));
    let running = Running::start_with(&server, op, Duration::from_secs(70), false).await;
    let error = running
        .result()
        .await
        .expect_err("two reconciles are refused");
    let text = error.to_string();
    assert!(
        text.contains("kopfexamples.kopf.dev has 2 reconciles ('first', 'second')"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reconciles_conditions_and_the_declared_defaults_share_its_one_status_write() {
    use kopf::conditions::{ConditionStatus, Conditions, ConditionsSpec};
    let server = common::paused_server().await;
    let op = Operator::new()
        .conditions(
            "kopfexamples",
            ConditionsSpec::new()
                .declare("Ready", ConditionStatus::Unknown, "Pending", "")
                .declare("Synced", ConditionStatus::Unknown, "Pending", "")
                .summary("Ready"),
        )
        .reconcile(
            "kopfexamples",
            |obj: Arc<Value>, ctx: ReconcileContext| async move {
                let conditions = ctx.extract::<Conditions>()?;
                if obj["spec"]["fail"] == json!(true) {
                    conditions.set("Synced", ConditionStatus::False, "CopyFailed", "boom")?;
                    return Err(HandlerError::other("boom"));
                }
                conditions.set("Synced", ConditionStatus::True, "Copied", "all good")?;
                Ok(Action::await_change())
            },
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({})))
        .await
        .expect("create");
    let condition = |o: Option<&kube::api::DynamicObject>, t: &str| -> Value {
        o.and_then(|o| o.data["status"]["conditions"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .find(|c| c["type"] == t)
            .unwrap_or(Value::Null)
    };
    until_object(&api, "k", "Ready and Synced", |o| {
        condition(o, "Ready")["status"] == "True" && condition(o, "Synced")["status"] == "True"
    })
    .await;
    running.settled().await;
    assert_eq!(
        common::count(&server, "PATCH", "/kopfexamples/k/status"),
        1,
        "the defaults, the reconcile's condition and the summary in one write"
    );
    assert_eq!(common::count(&server, "PATCH", "/kopfexamples/k"), 0);

    api.patch(
        "k",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"fail": true}})),
    )
    .await
    .expect("patch");
    until_object(&api, "k", "Ready unknown, Synced false", |o| {
        let ready = condition(o, "Ready");
        ready["status"] == "Unknown"
            && ready["message"]
                .as_str()
                .is_some_and(|m| m.contains("boom"))
            && condition(o, "Synced")["reason"] == "CopyFailed"
    })
    .await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn owns_controlled_ignores_co_owners_and_a_handle_asks_from_anywhere() {
    let server = common::paused_server().await;
    let triggers = Arc::new(Mutex::new(Vec::<Trigger>::new()));
    let t = triggers.clone();
    let reconciler = Reconciler::new(
        "kopfexamples",
        move |_obj: Arc<Value>, ctx: ReconcileContext| {
            t.lock().expect("lock").push(ctx.trigger().clone());
            async { Ok::<_, HandlerError>(Action::await_change()) }
        },
    )
    .owns_controlled("configmaps");
    let handle = reconciler.handle();
    let running = Running::start(&server, Operator::new().reconcile_with(reconciler)).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({})))
        .await
        .expect("create");
    eventually("listed", async || {
        triggers.lock().expect("lock").contains(&Trigger::Listed)
    })
    .await;
    let uid = api.get("k").await.expect("get").metadata.uid.expect("uid");
    let child = |name: &str, controller: bool| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "kopf.dev/v1", "kind": "KopfExample", "name": "k", "uid": uid,
            "controller": controller,
        }]}}))
        .expect("cm")
    };
    let cms = cm_api(&server);
    cms.create(&PostParams::default(), &child("co-owned", false))
        .await
        .expect("cm");
    cms.create(&PostParams::default(), &child("controlled", true))
        .await
        .expect("cm");
    eventually("the controlled child triggered", async || {
        triggers
            .lock()
            .expect("lock")
            .contains(&Trigger::Owned("ConfigMap/controlled".into()))
    })
    .await;
    handle.reconcile(ObjectRef::namespaced("default", "k"));
    eventually("the handle triggered", async || {
        triggers.lock().expect("lock").contains(&Trigger::Requested)
    })
    .await;
    running.stop().await;
    let seen = triggers.lock().expect("lock").clone();
    assert!(
        !seen.contains(&Trigger::Owned("ConfigMap/co-owned".into())),
        "a co-owner's child triggers nothing: {seen:?}"
    );
}
