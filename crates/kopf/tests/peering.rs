//! An operator in a peering: it handles nothing while a higher priority is alive, and
//! carries on when that peer goes; its keep-alive is in the peering object while it runs,
//! and gone after.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kopf::{HandlerError, Operator, PeeringSettings};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{Running, eventually, kex_api, obj, until_object};

fn peering_api(server: &kopf::testing::FakeApiServer) -> Api<DynamicObject> {
    let ar = kopf_peering::resource(&PeeringSettings::default());
    Api::all_with(server.client(), &ar)
}

async fn entries(server: &kopf::testing::FakeApiServer) -> Value {
    peering_api(server)
        .get("default")
        .await
        .expect("the peering object")
        .data
        .get("status")
        .cloned()
        .unwrap_or(Value::Null)
}

async fn write_entry(server: &kopf::testing::FakeApiServer, id: &str, entry: Value) {
    peering_api(server)
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {id: entry}})),
        )
        .await
        .expect("the entry is written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_peer_holds_the_operator_until_it_goes() {
    let server = common::server().await;
    server
        .apply_yaml("peering.yaml", kopf_peering::PEERING_YAML)
        .expect("the peering resources");
    let now = kopf_peering::isoformat(jiff::Timestamp::now());
    write_entry(
        &server,
        "python@laptop",
        json!({"priority": 666, "lifetime": 60, "lastseen": now}),
    )
    .await;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let op = Operator::new()
        .peering(
            PeeringSettings::default()
                .identity("kopf-rs-test")
                .priority(10),
        )
        .on_create("kopfexamples", "create_fn", move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(json!({"message": "hello"})) }
        });
    // Paused from its first look at the peers: it never watches before the peer goes.
    let running = Running::start_with(&server, op, Duration::from_secs(70), false).await;
    eventually("the operator's keep-alive", async || {
        entries(&server).await.get("kopf-rs-test").is_some()
    })
    .await;
    eventually("the pause logged", async || {
        running
            .logs()
            .iter()
            .any(|l| l.contains("Pausing operations in favour of python@laptop (priority 666"))
    })
    .await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("p1", json!({"field": "x"})))
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no handler while paused");
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.user_agent.starts_with("kopf") && r.path.contains("/kopfexamples")),
        "no request about the operator's resources while paused"
    );

    // The higher priority goes: the operator resumes and handles the object.
    write_entry(&server, "python@laptop", Value::Null).await;
    until_object(&api, "p1", "the creation handled after the resume", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello")
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        running
            .logs()
            .iter()
            .any(|l| l.contains("Resuming operations after the pause")),
        "{:?}",
        running.logs()
    );
    running.stop().await;
    assert!(
        entries(&server).await.get("kopf-rs-test").is_none(),
        "the entry is removed at exit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_peering_resources_an_operator_runs_alone() {
    let server = common::server().await;
    let op = Operator::new()
        .peering(PeeringSettings::default().identity("kopf-rs-test"))
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>(json!({"message": "hello"}))
        });
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("p2", json!({"field": "x"})))
        .await
        .expect("create");
    until_object(&api, "p2", "the creation handled", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello")
    })
    .await;
    assert!(
        running
            .logs()
            .iter()
            .any(|l| l.contains("running without peering (standalone)")),
        "{:?}",
        running.logs()
    );
    running.stop().await;
}
