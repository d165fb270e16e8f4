//! Pod-log handlers against the fake API server's simulated kubelet: lines of several Pods
//! and containers, a dropped stream and a container restart, each matching line handled
//! once and in order per container.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kopf::{
    HandlerError, Operator, Options,
    handler::{Captures, LogLine, LogSpec},
};
use kopf_testing::FakeApiServer;
use kube::api::{Api, PostParams};
use serde_json::json;

#[path = "../examples/training.rs"]
mod training_example;

mod common;

use common::{Running, eventually};

/// (pod, container) → the (restart, step) of each line handled, in order.
type Handled = Arc<Mutex<BTreeMap<(String, String), Vec<(u32, u32)>>>>;

const PODS: [&str; 3] = ["trainer-0", "trainer-1", "trainer-2"];
const CONTAINERS: [&str; 2] = ["main", "side"];

fn pod(name: &str, app: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": CONTAINERS.map(|c| json!({"name": c, "image": "trainer"}))},
    }))
    .expect("a Pod")
}

fn total(handled: &Handled) -> usize {
    handled.lock().expect("lock").values().map(Vec::len).sum()
}

/// Steps `from..to` to every container of every trainer, with lines that do not match
/// between them (and to the Pod no handler follows).
fn write_steps(server: &FakeApiServer, from: u32, to: u32) {
    for step in from..to {
        for pod in PODS.iter().chain(&["other"]) {
            for container in CONTAINERS {
                let line = format!("step {step} accuracy=0.{step:02}");
                server.append_log("default", pod, container, &["loading...", &line]);
            }
        }
    }
}

fn log_requests(server: &FakeApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/log"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_matching_line_is_handled_once_in_order_across_drops_and_restarts() {
    let server = FakeApiServer::start().await.expect("start");
    let handled: Handled = Arc::default();
    let seen = handled.clone();
    let op = Operator::new().on_log_with(
        "pods",
        "accuracy",
        LogSpec::new(r"^step (\d+) accuracy=(?P<acc>0\.\d+)$").expect("regex"),
        move |line: LogLine, caps: Captures| {
            let seen = seen.clone();
            async move {
                let step: u32 = caps.get(1).unwrap_or_default().parse().map_err(|e| {
                    HandlerError::permanent(format!("not a step in {:?}: {e}", line.text))
                })?;
                assert_eq!(caps.name("acc"), Some(format!("0.{step:02}").as_str()));
                seen.lock()
                    .expect("lock")
                    .entry((line.pod.clone(), line.container.clone()))
                    .or_default()
                    .push((line.restart, step));
                Ok::<_, HandlerError>(())
            }
        },
        Options::new().label("app", "trainer"),
    );
    let running = Running::start(&server, op).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(server.client(), "default");
    for name in PODS {
        pods.create(&PostParams::default(), &pod(name, "trainer"))
            .await
            .expect("create");
    }
    pods.create(&PostParams::default(), &pod("other", "web"))
        .await
        .expect("create");

    write_steps(&server, 0, 10);
    eventually("the first 10 steps of every container", async || {
        total(&handled) >= 60
    })
    .await;
    assert_eq!(
        log_requests(&server),
        6,
        "one stream per container of the trainers"
    );

    // The streams drop while the containers run: the followers reconnect from the second
    // of their last line, and the lines of that second come again (they were written
    // within it): none is handled twice.
    server.drop_log_streams();
    write_steps(&server, 10, 20);
    eventually("the next 10 steps", async || total(&handled) >= 120).await;
    assert_eq!(log_requests(&server), 12, "each stream reconnected once");

    // One container restarts: its new instance is read from its first line.
    assert_eq!(
        server.restart_container("default", "trainer-0", "main"),
        Ok(1)
    );
    write_steps(&server, 20, 25);
    eventually("the last 5 steps", async || total(&handled) >= 150).await;
    common::settle(&server).await;

    let handled = handled.lock().expect("lock").clone();
    assert_eq!(
        handled.len(),
        6,
        "the trainers' containers only: {handled:?}"
    );
    for ((pod, container), lines) in &handled {
        let steps: Vec<u32> = lines.iter().map(|(_, s)| *s).collect();
        assert_eq!(
            steps,
            (0..25).collect::<Vec<_>>(),
            "{pod}/{container}: once, in order"
        );
        let restarted = pod == "trainer-0" && container == "main";
        for (restart, step) in lines {
            let expected = u32::from(restarted && *step >= 20);
            assert_eq!(*restart, expected, "{pod}/{container} step {step}");
        }
    }
    running.stop().await;
}

/// A container that has exited: its follow stream ends at once, every time. The follower
/// waits longer between the attempts (1 s, 2 s, 4 s...) instead of looping.
#[tokio::test(start_paused = true)]
async fn a_terminated_container_is_not_asked_in_a_loop() {
    let server = FakeApiServer::in_process().await.expect("start");
    let handled: Handled = Arc::default();
    let seen = handled.clone();
    let op = Operator::new().on_log("pods", "done", r"^done$", move |line: LogLine| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .expect("lock")
                .entry((line.pod.clone(), line.container.clone()))
                .or_default()
                .push((line.restart, 0));
            Ok::<_, HandlerError>(())
        }
    });
    let running = Running::start(&server, op).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(server.client(), "default");
    let one: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "job"},
        "spec": {"containers": [{"name": "main", "image": "job"}]},
    }))
    .expect("a Pod");
    pods.create(&PostParams::default(), &one)
        .await
        .expect("create");
    server.append_log("default", "job", "main", &["working", "done"]);
    eventually("the last line", async || total(&handled) == 1).await;
    server.terminate_container("default", "job", "main");
    running.advance(std::time::Duration::from_secs(4)).await;
    let requests = log_requests(&server);
    assert!(
        (2..=5).contains(&requests),
        "a few attempts in 4 s (after 1, 2 and 4 s), not a loop: {requests}"
    );
    assert_eq!(total(&handled), 1, "nothing handled twice");
    running.stop().await;
}

/// The pod-log example: a TrainingJob's trainer Pod (run by the pod simulator, its `echo`
/// script printing) reports its steps, then `done`; the job's status follows, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_training_example_writes_its_trainers_lines_into_the_jobs_status() {
    let server = FakeApiServer::builder()
        .simulate_pods(kopf_testing::PodSimulation::default())
        .start()
        .await
        .expect("start");
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    server
        .apply_file(examples.join("trainingjob-crd.yaml"))
        .expect("the CRD");
    let running = Running::start(&server, training_example::operator().expect("regex")).await;
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kopf.dev", "v1", "TrainingJob"),
        "trainingjobs",
    );
    let jobs: Api<kube::api::DynamicObject> =
        Api::namespaced_with(server.client(), "default", &resource);
    let job: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kopf.dev/v1", "kind": "TrainingJob",
        "metadata": {"name": "job"}, "spec": {"steps": 2},
    }))
    .expect("a TrainingJob");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create");

    // Each patch of the status is kept: the steps in order, then Done.
    let mut seen: Vec<serde_json::Value> = Vec::new();
    eventually("the job done", async || {
        let status = jobs.get("job").await.expect("get").data["status"].clone();
        let now = json!([status["phase"], status["step"], status["loss"]]);
        if status["phase"].is_string() && seen.last() != Some(&now) {
            seen.push(now);
        }
        status["phase"] == "Done"
    })
    .await;
    let (first, last) = (seen.first().cloned(), seen.last().cloned());
    assert_eq!(first, Some(json!(["Training", 1, 0.5])), "{seen:?}");
    assert_eq!(last, Some(json!(["Done", 2, 0.333])), "{seen:?}");

    // The trainer: owned by the job, its log as the example's script printed it.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(server.client(), "default");
    let trainers = pods
        .list(&kube::api::ListParams::default().labels("kopf.dev/training-job=job"))
        .await
        .expect("list");
    assert_eq!(trainers.items.len(), 1);
    let trainer = &trainers.items[0];
    let owners = trainer
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "TrainingJob" && o.name == "job"),
        "{owners:?}"
    );
    let log = pods
        .logs(
            trainer.metadata.name.as_deref().unwrap_or_default(),
            &kube::api::LogParams::default(),
        )
        .await
        .expect("logs");
    assert_eq!(log, "step=1 loss=0.500\nstep=2 loss=0.333\ndone\n");
    running.stop().await;
}
