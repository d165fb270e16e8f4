//! The pod simulator (`FakeApiServerBuilder::simulate_pods`): off by default; on, Pods go
//! through the stages a scheduler and a kubelet write, seen by watchers as MODIFIED events.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kopf_testing::{FakeApiServer, PodSimulation};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn pod(name: &str, extra: serde_json::Value) -> Pod {
    let mut body = json!({"metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}});
    kopf_diff::apply_merge_patch(&mut body, &extra);
    serde_json::from_value(body).expect("pod")
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn condition(p: &Pod, kind: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.clone())
}

fn fast() -> PodSimulation {
    PodSimulation::default()
        .schedule_delay(Duration::from_millis(50))
        .start_delay(Duration::from_millis(100))
        .job_run_time(Duration::from_millis(200))
}

async fn simulated() -> FakeApiServer {
    FakeApiServer::builder()
        .simulate_pods(fast())
        // Deleted Pods stay 1 s: time for the containers to stop, on a loaded machine too.
        .pod_termination_cap(Duration::from_secs(1))
        .start()
        .await
        .expect("start")
}

/// Waits until the Pod satisfies `done` (or panics after 5 s with its last state).
async fn wait_for(pods: &Api<Pod>, name: &str, done: impl Fn(&Pod) -> bool) -> Pod {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let p = pods.get(name).await.expect("get");
        if done(&p) {
            return p;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {p:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn without_the_simulator_a_pod_stays_pending_and_there_is_no_node() {
    let server = FakeApiServer::start().await.expect("start");
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let p = pods.get("p").await.expect("get");
    assert_eq!(phase(&p), "Pending");
    assert!(p.spec.and_then(|s| s.node_name).is_none());
    let nodes: Api<Node> = Api::all(server.client());
    let list = nodes.list(&Default::default()).await.expect("list");
    assert!(list.items.is_empty());
}

#[tokio::test]
async fn a_watcher_sees_a_pod_scheduled_then_running_and_ready() {
    let server = simulated().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let nodes: Api<Node> = Api::all(server.client());
    let node = nodes
        .get("kopf-fake-node")
        .await
        .expect("the simulated node");
    let node_ip = node.status.and_then(|s| s.addresses).expect("addresses")[0]
        .address
        .clone();
    let params = WatchParams::default().fields("metadata.name=p").timeout(10);
    let mut stream = pods.watch(&params, "0").await.expect("watch").boxed();
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .expect("create");
    let mut seen: Vec<Pod> = Vec::new();
    while seen.last().is_none_or(|p| phase(p) != "Running") {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .expect("an event in time")
            .expect("watch")
            .expect("open");
        match event {
            WatchEvent::Added(p) | WatchEvent::Modified(p) => seen.push(p),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen.len(), 3, "created, scheduled, running: {seen:#?}");
    // Created: Pending, unscheduled.
    assert_eq!(phase(&seen[0]), "Pending");
    assert!(
        seen[0]
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .is_none()
    );
    // Scheduled: bound to the simulated node, still Pending.
    let bound = &seen[1];
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("kopf-fake-node")
    );
    assert_eq!(phase(bound), "Pending");
    assert_eq!(condition(bound, "PodScheduled").as_deref(), Some("True"));
    // Running and ready.
    let running = &seen[2];
    for kind in [
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodReadyToStartContainers",
    ] {
        assert_eq!(condition(running, kind).as_deref(), Some("True"), "{kind}");
    }
    let status = running.status.clone().expect("status");
    assert!(status.pod_ip.is_some_and(|ip| ip.starts_with("10.244.")));
    assert_eq!(status.host_ip, Some(node_ip));
    assert!(status.start_time.is_some());
    let c = &status.container_statuses.expect("container statuses")[0];
    assert!(c.ready && c.started == Some(true));
    assert_eq!(c.restart_count, 0);
    assert_eq!(c.image, "docker.io/library/busybox:latest");
    assert!(c.image_id.starts_with("docker.io/library/busybox@sha256:"));
    assert!(
        c.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("containerd://"))
    );
    assert!(c.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
    // Each stage is a write with its own resourceVersion; the kubelet's is on `status`.
    let rvs: Vec<u64> = seen
        .iter()
        .map(|p| {
            p.metadata
                .resource_version
                .clone()
                .expect("rv")
                .parse()
                .expect("rv")
        })
        .collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
    let fields = running.metadata.managed_fields.clone().unwrap_or_default();
    assert!(
        fields
            .iter()
            .any(|f| f.manager.as_deref() == Some("kubelet")
                && f.subresource.as_deref() == Some("status")),
        "{fields:?}"
    );
    // Nothing more happens to a running Pod of a service.
    let more = tokio::time::timeout(Duration::from_millis(500), stream.try_next()).await;
    assert!(more.is_err(), "no further event: {more:?}");
}

#[tokio::test]
async fn a_jobs_pod_succeeds_and_a_service_pod_keeps_running() {
    let server = simulated().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let job = json!({"metadata": {"labels": {"batch.kubernetes.io/job-name": "j"}},
        "spec": {"restartPolicy": "Never"}});
    pods.create(&PostParams::default(), &pod("job", job))
        .await
        .expect("create");
    // Labelled as a Job's, but restarted always: runs on.
    let always = json!({"metadata": {"labels": {"job-name": "j"}}});
    pods.create(&PostParams::default(), &pod("always", always))
        .await
        .expect("create");
    let done = wait_for(&pods, "job", |p| phase(p) == "Succeeded").await;
    assert_eq!(condition(&done, "Ready").as_deref(), Some("False"));
    assert_eq!(
        condition(&done, "ContainersReady").as_deref(),
        Some("False")
    );
    let c = &done
        .status
        .clone()
        .and_then(|s| s.container_statuses)
        .expect("statuses")[0];
    let ended = c
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!(ended.exit_code, 0);
    assert_eq!(ended.reason.as_deref(), Some("Completed"));
    assert!(!c.ready);
    let other = pods.get("always").await.expect("get");
    assert_eq!(phase(&other), "Running");
}

#[tokio::test]
async fn a_deleted_pods_containers_stop_then_it_is_gone_after_its_grace() {
    let server = simulated().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .expect("create");
    let running = wait_for(&pods, "p", |p| phase(p) == "Running").await;
    let rv = running.metadata.resource_version.clone().expect("rv");
    let params = WatchParams::default().fields("metadata.name=p").timeout(10);
    let mut stream = pods.watch(&params, &rv).await.expect("watch").boxed();
    pods.delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    let mut events = Vec::new();
    while !matches!(events.last(), Some(WatchEvent::Deleted(_))) {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .expect("an event in time")
            .expect("watch")
            .expect("open");
        events.push(event);
    }
    let states: Vec<(bool, String)> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Modified(p) | WatchEvent::Deleted(p) => {
                (p.metadata.deletion_timestamp.is_some(), phase(p))
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        states,
        [
            (true, "Running".to_string()),
            (true, "Succeeded".to_string()),
            (true, "Succeeded".to_string()),
        ],
        "terminating, containers stopped, deleted once: {events:#?}"
    );
    let WatchEvent::Modified(stopped) = &events[1] else {
        panic!("{events:?}")
    };
    let c = &stopped
        .status
        .clone()
        .and_then(|s| s.container_statuses)
        .expect("statuses")[0];
    assert!(
        c.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some()
    );
    assert_eq!(condition(stopped, "Ready").as_deref(), Some("False"));
    assert!(pods.get_opt("p").await.expect("get").is_none());
}

#[tokio::test]
async fn the_simulators_writes_are_not_counted_as_requests() {
    let server = simulated().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .expect("create");
    wait_for(&pods, "p", |p| phase(p) == "Running").await;
    let counters = server.counters();
    assert_eq!(counters.get("create", "pods", ""), 1);
    assert_eq!(counters.get("patch", "pods", "status"), 0);
    assert_eq!(counters.get("update", "pods", "status"), 0);
    assert_eq!(counters.get("patch", "pods", ""), 0);
    assert_eq!(counters.get("create", "nodes", ""), 0);
    assert_eq!(counters.verb("patch") + counters.verb("update"), 0);
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.target.verb == "get" || r.target.verb == "create"),
        "only the test's requests are logged"
    );
}

#[tokio::test]
async fn a_pod_in_its_grace_period_is_written_to_and_stays() {
    // Without the simulator: the grace period alone keeps an updated Pod.
    let server = FakeApiServer::builder()
        .pod_termination_cap(Duration::from_millis(400))
        .start()
        .await
        .expect("start");
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let scheduled = json!({"spec": {"nodeName": "node-1"}});
    pods.create(&PostParams::default(), &pod("p", scheduled.clone()))
        .await
        .expect("create");
    pods.delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    let label = Patch::Merge(json!({"metadata": {"labels": {"seen": "yes"}}}));
    let patched = pods
        .patch("p", &PatchParams::default(), &label)
        .await
        .expect("patch");
    assert!(patched.metadata.deletion_timestamp.is_some());
    assert!(
        pods.get_opt("p").await.expect("get").is_some(),
        "still terminating"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        pods.get_opt("p").await.expect("get").is_none(),
        "gone after the grace"
    );

    // A finalizer holds it past the grace period; its removal removes the Pod.
    let held =
        json!({"metadata": {"finalizers": ["example.com/hold"]}, "spec": {"nodeName": "node-1"}});
    pods.create(&PostParams::default(), &pod("q", held))
        .await
        .expect("create");
    pods.delete("q", &DeleteParams::default())
        .await
        .expect("delete");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let q = pods.get("q").await.expect("held by its finalizer");
    assert_eq!(q.metadata.deletion_grace_period_seconds, Some(0));
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    pods.patch("q", &PatchParams::default(), &release)
        .await
        .expect("patch");
    assert!(pods.get_opt("q").await.expect("get").is_none());
}

#[tokio::test]
async fn a_restarted_container_of_a_simulated_pod_gets_a_new_id_and_count() {
    let server = simulated().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({})))
        .await
        .expect("create");
    let running = wait_for(&pods, "p", |p| phase(p) == "Running").await;
    let before = running
        .status
        .and_then(|s| s.container_statuses)
        .expect("statuses")[0]
        .clone();
    assert_eq!(server.restart_container("default", "p", "main"), Ok(1));
    let after = pods.get("p").await.expect("get");
    let now = after
        .status
        .and_then(|s| s.container_statuses)
        .expect("statuses")[0]
        .clone();
    assert_eq!(now.restart_count, 1);
    assert!(now.ready);
    assert_eq!(now.image_id, before.image_id);
    assert_ne!(now.container_id, before.container_id);
    let last = now
        .last_state
        .and_then(|s| s.terminated)
        .expect("last state");
    assert_eq!(last.container_id, before.container_id);
}

/// A container whose command is `echo`, or `sh -c` with `echo` and `sleep`, writes those
/// lines into its log, with the pauses; its Pod (restartPolicy Never) ends Succeeded when
/// the script does, the log complete. Under Always, the container stays running.
#[tokio::test]
async fn a_containers_echo_script_is_its_log_and_its_pod_ends_with_it() {
    let server = simulated().await;
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let script = "echo step=1 'loss=0.5'; sleep 1; echo \"step=2 loss=0.25\"; echo done";
    let scripted = |policy: &str| {
        json!({"spec": {"restartPolicy": policy, "containers": [
            {"name": "main", "image": "busybox", "command": ["sh", "-c", script]},
            {"name": "side", "image": "busybox", "command": ["echo", "side", "car"]},
        ]}})
    };
    pods.create(&PostParams::default(), &pod("trainer", scripted("Never")))
        .await
        .expect("create");
    pods.create(&PostParams::default(), &pod("service", scripted("Always")))
        .await
        .expect("create");
    let log = |name: &'static str, container: &'static str| {
        let pods = pods.clone();
        async move {
            let params = kube::api::LogParams {
                container: Some(container.into()),
                ..Default::default()
            };
            pods.logs(name, &params).await.expect("logs")
        }
    };

    // Running, with the first line only: the script pauses.
    wait_for(&pods, "trainer", |p| phase(p) == "Running").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while log("trainer", "main").await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no line printed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(log("trainer", "main").await, "step=1 loss=0.5\n");
    assert_eq!(phase(&pods.get("trainer").await.expect("get")), "Running");

    let done = wait_for(&pods, "trainer", |p| phase(p) == "Succeeded").await;
    assert_eq!(
        log("trainer", "main").await,
        "step=1 loss=0.5\nstep=2 loss=0.25\ndone\n"
    );
    assert_eq!(log("trainer", "side").await, "side car\n");
    let statuses = done.status.and_then(|s| s.container_statuses);
    assert!(
        statuses.iter().flatten().all(|c| c
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)),
        "every container ended with 0: {statuses:?}"
    );

    // The same script under Always: printed, and the Pod keeps running.
    assert_eq!(
        log("service", "main").await,
        "step=1 loss=0.5\nstep=2 loss=0.25\ndone\n"
    );
    assert_eq!(phase(&pods.get("service").await.expect("get")), "Running");
}
