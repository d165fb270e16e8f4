//! An operator in a peering: it handles nothing while a higher priority is alive, and
//! carries on when that peer goes; its keep-alive is in the peering object while it runs,
//! and gone after.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kopf::{HandlerError, Operator, peering::PeeringSettings};
use kube::api::PostParams;
use serde_json::json;

use common::{Running, eventually, kex_api, obj, until_object};

/// The identities in the peering `default`.
async fn peers(server: &kopf::testing::FakeApiServer) -> Vec<String> {
    kopf::peering::peers(&server.client(), &PeeringSettings::default())
        .await
        .expect("the peering object")
        .into_iter()
        .map(|l| l.identity)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_higher_priority_peer_holds_the_operator_until_it_goes() {
    let server = common::paused_server().await;
    server
        .apply_yaml("peering.yaml", kopf_peering::PEERING_YAML)
        .expect("the peering resources");
    // A development copy at priority 666 (as `kopf freeze` or `--dev` would write it).
    let dev = PeeringSettings::default()
        .identity("python@laptop")
        .priority(666);
    kopf::peering::freeze(&server.client(), &dev, Duration::from_secs(60))
        .await
        .expect("the entry is written");
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
        peers(&server).await.contains(&"kopf-rs-test".to_string())
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
    running.settled().await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no handler while paused");
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.user_agent.starts_with("kopf") && r.path.contains("/kopfexamples")),
        "no request about the operator's resources while paused"
    );

    // The higher priority goes: the operator resumes and handles the object.
    kopf::peering::resume(&server.client(), &dev)
        .await
        .expect("the entry is removed");
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
        peers(&server).await.is_empty(),
        "the entry is removed at exit"
    );
}

#[tokio::test(start_paused = true)]
async fn without_the_peering_resources_an_operator_runs_alone() {
    let server = common::paused_server().await;
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
