//! The stages of the pod simulator, as pure functions of a Pod: which stage comes next, and
//! what the scheduler and the kubelet write at each (the status bodies, the simulated Node).

use serde_json::{Value, json};

/// The name of the simulated Node the scheduler binds Pods to.
pub const NODE_NAME: &str = "kopf-fake-node";
/// The simulated Node's InternalIP (every Pod's `hostIP`).
pub const NODE_IP: &str = "10.89.0.2";

/// A step of a Pod's simulated life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The scheduler binds the Pod to the simulated Node (`spec.nodeName`, `PodScheduled`).
    Schedule,
    /// The kubelet starts its containers: `Running`, ready.
    Start,
    /// A Job's Pod, or one of scripted containers (restartPolicy `Never`/`OnFailure`),
    /// ends: `Succeeded`.
    Complete,
    /// A deleted Pod's containers stop (the removal itself follows the grace period).
    Stop,
}

fn str_at<'a>(pod: &'a Value, pointer: &str) -> Option<&'a str> {
    pod.pointer(pointer).and_then(Value::as_str)
}

/// Whether the Pod belongs to a Job: owned by one, or labelled with its name.
pub fn is_job_pod(pod: &Value) -> bool {
    let owned = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter().any(|r| {
                r.get("kind").and_then(Value::as_str) == Some("Job")
                    && r.get("apiVersion")
                        .and_then(Value::as_str)
                        .is_some_and(|v| v.starts_with("batch/"))
            })
        });
    let labelled = pod
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| {
            l.contains_key("batch.kubernetes.io/job-name") || l.contains_key("job-name")
        });
    owned || labelled
}

/// Whether every container of the Pod runs a command the simulator understands (see
/// [`script`](super::script)): the Pod then ends when their scripts do, not after a set time.
pub fn scripted(pod: &Value) -> bool {
    let mut all = containers(pod, "containers").peekable();
    all.peek().is_some() && all.all(|c| super::script::steps(c).is_some())
}

/// Whether the Pod's containers end by themselves: a Job's Pod, or one whose containers all
/// run scripts, that is not restarted.
pub fn completes(pod: &Value) -> bool {
    matches!(
        str_at(pod, "/spec/restartPolicy"),
        Some("Never" | "OnFailure")
    ) && (is_job_pod(pod) || scripted(pod))
}

fn any_container_running(pod: &Value) -> bool {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c.pointer("/state/running").is_some()))
}

/// Whether a kubelet could read the Pod: `spec` and `status` are objects (kube decodes Pods
/// into typed structs; the fake checks only their metadata, so the simulator leaves a Pod of
/// another shape alone rather than writing into it).
fn well_formed(pod: &Value) -> bool {
    let object_or_absent = |p: &str| pod.pointer(p).is_none_or(|v| v.is_object() || v.is_null());
    object_or_absent("/spec") && object_or_absent("/status")
}

/// The stage that comes next for a Pod as it is now, if any.
pub fn next_stage(pod: &Value) -> Option<Stage> {
    if !well_formed(pod) {
        return None;
    }
    let phase = str_at(pod, "/status/phase").unwrap_or("Pending");
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return any_container_running(pod).then_some(Stage::Stop);
    }
    if matches!(phase, "Succeeded" | "Failed") {
        return None;
    }
    let node = str_at(pod, "/spec/nodeName").unwrap_or("");
    if node.is_empty() {
        let scheduler = str_at(pod, "/spec/schedulerName").unwrap_or("default-scheduler");
        return (scheduler == "default-scheduler").then_some(Stage::Schedule);
    }
    if phase == "Pending" {
        return Some(Stage::Start);
    }
    (phase == "Running" && completes(pod)).then_some(Stage::Complete)
}

fn condition(kind: &str, status: bool, now: &str, reason: Option<&str>) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": now,
    });
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    c
}

/// The `PodScheduled` condition the scheduler's binding sets.
pub fn scheduled_condition(now: &str) -> Value {
    condition("PodScheduled", true, now, None)
}

/// The image as the container runtime reports it (`busybox` → `docker.io/library/busybox:latest`).
pub fn normalised_image(image: &str) -> String {
    let (name, suffix) = match image.find('@') {
        Some(at) => (&image[..at], &image[at..]),
        None => (image, ""),
    };
    let first = name.split('/').next().unwrap_or("");
    let has_domain =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_domain {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    let last = full.rsplit('/').next().unwrap_or("");
    if suffix.is_empty() && !last.contains(':') {
        full.push_str(":latest");
    }
    full.push_str(suffix);
    full
}

fn hex_digest(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What the kubelet says of one container: its image, ids, and a state.
fn container_status(pod_uid: &str, container: &Value, restarts: u64, state: Value) -> Value {
    let name = container.get("name").and_then(Value::as_str).unwrap_or("");
    let image = normalised_image(container.get("image").and_then(Value::as_str).unwrap_or(""));
    let repo = image.split([':', '@']).next().unwrap_or("").to_string();
    let running = state.get("running").is_some();
    json!({
        "name": name,
        "image": image,
        "imageID": format!("{repo}@sha256:{}", hex_digest(&image)),
        "containerID": format!("containerd://{}", hex_digest(&format!("{pod_uid}/{name}/{restarts}"))),
        "ready": running,
        "started": running,
        "restartCount": restarts,
        "state": state,
    })
}

fn containers<'a>(pod: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn uid(pod: &Value) -> &str {
    str_at(pod, "/metadata/uid").unwrap_or("")
}

/// The restart count and start time a container's current status carries, if any.
fn current<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
}

/// Init containers as they are once they all ran: terminated, `Completed`.
fn init_statuses(pod: &Value, now: &str) -> Vec<Value> {
    containers(pod, "initContainers")
        .map(|c| {
            let state = json!({"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": now, "finishedAt": now}});
            let mut s = container_status(uid(pod), c, 0, state);
            if let Some(id) = s.get("containerID").cloned() {
                s["state"]["terminated"]["containerID"] = id;
            }
            s
        })
        .collect()
}

/// The status the kubelet writes when the Pod's containers started (`restarts` gives the
/// restart count of a container by name).
pub fn running_status(
    pod: &Value,
    pod_ip: &str,
    now: &str,
    restarts: &dyn Fn(&str) -> u64,
) -> Value {
    let statuses: Vec<Value> = containers(pod, "containers")
        .map(|c| {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            container_status(
                uid(pod),
                c,
                restarts(name),
                json!({"running": {"startedAt": now}}),
            )
        })
        .collect();
    let mut status = json!({
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers", true, now, None),
            condition("Initialized", true, now, None),
            condition("Ready", true, now, None),
            condition("ContainersReady", true, now, None),
            scheduled_condition(now),
        ],
        "hostIP": NODE_IP,
        "hostIPs": [{"ip": NODE_IP}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "containerStatuses": statuses,
    });
    let inits = init_statuses(pod, now);
    if !inits.is_empty() {
        status["initContainerStatuses"] = json!(inits);
    }
    status
}

/// The container statuses after `container` restarted (its new instance, number `restart`,
/// running since `now`, the old one in `lastState`); the others as they are, or running
/// with `restarts` of them when they have no status yet.
pub fn restarted_statuses(
    pod: &Value,
    container: &str,
    restart: u64,
    now: &str,
    restarts: &dyn Fn(&str) -> u64,
) -> Vec<Value> {
    containers(pod, "containers")
        .map(|c| {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            let was = current(pod, name);
            if name != container
                && let Some(was) = was
            {
                return was.clone();
            }
            let count = if name == container {
                restart
            } else {
                restarts(name)
            };
            let running = json!({"running": {"startedAt": now}});
            let mut s = container_status(uid(pod), c, count, running);
            if name == container {
                let started = was
                    .and_then(|w| w.pointer("/state/running/startedAt"))
                    .and_then(Value::as_str)
                    .unwrap_or(now);
                let old_id = was.and_then(|w| w.get("containerID")).cloned();
                let mut ended = json!({"exitCode": 0, "reason": "Completed",
                    "startedAt": started, "finishedAt": now});
                if let Some(id) = old_id {
                    ended["containerID"] = id;
                }
                s["lastState"] = json!({"terminated": ended});
            }
            s
        })
        .collect()
}

/// The status once every container ended with exit code 0 (a Job's Pod completing, or a
/// deleted Pod's containers stopping): `Succeeded`, not ready.
pub fn terminated_status(pod: &Value, now: &str) -> Value {
    let statuses: Vec<Value> = containers(pod, "containers")
        .map(|c| {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            let was = current(pod, name);
            let restarts = was
                .and_then(|s| s.get("restartCount"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let started = was
                .and_then(|s| s.pointer("/state/running/startedAt"))
                .and_then(Value::as_str)
                .unwrap_or(now);
            let state = json!({"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": started, "finishedAt": now}});
            let mut s = container_status(uid(pod), c, restarts, state);
            if let Some(id) = s.get("containerID").cloned() {
                s["state"]["terminated"]["containerID"] = id;
            }
            s
        })
        .collect();
    let since = |kind: &str| {
        pod.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
            })
            .and_then(|c| c.get("lastTransitionTime"))
            .and_then(Value::as_str)
            .unwrap_or(now)
            .to_string()
    };
    let completed = Some("PodCompleted");
    json!({
        "phase": "Succeeded",
        "conditions": [
            condition("PodReadyToStartContainers", false, now, None),
            condition("Initialized", true, &since("Initialized"), completed),
            condition("Ready", false, now, completed),
            condition("ContainersReady", false, now, completed),
            condition("PodScheduled", true, &since("PodScheduled"), None),
        ],
        "containerStatuses": statuses,
    })
}

/// The simulated Node: Ready, schedulable, with an address and some capacity.
pub fn node(now: &str) -> Value {
    let capacity =
        json!({"cpu": "32", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"});
    let ready = json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kopf-fake",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.244.0.0/16", "podCIDRs": ["10.244.0.0/16"]},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [ready],
            "addresses": [
                {"type": "InternalIP", "address": NODE_IP},
                {"type": "Hostname", "address": NODE_NAME},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "kopf-rs fake kubelet",
                "kernelVersion": "",
                "containerRuntimeVersion": "containerd://simulated",
                "kubeletVersion": "v1.31.0",
                "kubeProxyVersion": "v1.31.0",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(extra: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p", "uid": "u1"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Always",
                     "schedulerName": "default-scheduler"},
            "status": {"phase": "Pending"}});
        kopf_diff::apply_merge_patch(&mut p, &extra);
        p
    }

    #[test]
    fn a_pod_of_another_shape_is_left_alone() {
        assert_eq!(next_stage(&json!({"spec": []})), None);
        assert_eq!(next_stage(&json!({"spec": {}, "status": "x"})), None);
        assert_eq!(next_stage(&json!({"spec": {}})), Some(Stage::Schedule));
    }

    #[test]
    fn stages_follow_one_another() {
        assert_eq!(next_stage(&pod(json!({}))), Some(Stage::Schedule));
        let other = pod(json!({"spec": {"schedulerName": "custom"}}));
        assert_eq!(next_stage(&other), None, "another scheduler's pod");
        let bound = pod(json!({"spec": {"nodeName": NODE_NAME}}));
        assert_eq!(next_stage(&bound), Some(Stage::Start));
        let running = pod(json!({"spec": {"nodeName": NODE_NAME}, "status": {"phase": "Running"}}));
        assert_eq!(next_stage(&running), None, "a service runs until deleted");
        let job = pod(json!({"metadata": {"labels": {"job-name": "j"}},
            "spec": {"nodeName": NODE_NAME, "restartPolicy": "Never"}, "status": {"phase": "Running"}}));
        assert_eq!(next_stage(&job), Some(Stage::Complete));
        let restarted = pod(json!({"metadata": {"labels": {"job-name": "j"}},
            "spec": {"nodeName": NODE_NAME}, "status": {"phase": "Running"}}));
        assert_eq!(
            next_stage(&restarted),
            None,
            "restartPolicy Always never completes"
        );
        let mut deleted = running.clone();
        deleted["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(next_stage(&deleted), None, "nothing runs: nothing to stop");
        deleted["status"] = running_status(&deleted, "10.244.0.5", "t", &|_| 0);
        assert_eq!(next_stage(&deleted), Some(Stage::Stop));
        deleted["status"] = terminated_status(&deleted, "t");
        assert_eq!(next_stage(&deleted), None);
    }

    #[test]
    fn a_restart_gives_a_new_container_and_keeps_the_old_one_in_last_state() {
        let mut p = pod(json!({"spec": {"containers": [
            {"name": "main", "image": "busybox"}, {"name": "side", "image": "busybox"}]}}));
        p["status"] = running_status(&p, "10.244.0.9", "t0", &|_| 0);
        let statuses = restarted_statuses(&p, "main", 1, "t1", &|_| 0);
        let main = &statuses[0];
        assert_eq!(main["restartCount"], 1);
        assert_eq!(main["state"]["running"]["startedAt"], "t1");
        assert_eq!(main["lastState"]["terminated"]["startedAt"], "t0");
        let old_id = &p["status"]["containerStatuses"][0]["containerID"];
        assert_eq!(&main["lastState"]["terminated"]["containerID"], old_id);
        assert_ne!(&main["containerID"], old_id, "a new container");
        assert_eq!(
            statuses[1], p["status"]["containerStatuses"][1],
            "untouched"
        );
    }

    #[test]
    fn images_are_reported_as_the_runtime_names_them() {
        assert_eq!(
            normalised_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalised_image("nginx:1.27"),
            "docker.io/library/nginx:1.27"
        );
        assert_eq!(normalised_image("org/app"), "docker.io/org/app:latest");
        assert_eq!(normalised_image("ghcr.io/a/b:v1"), "ghcr.io/a/b:v1");
        assert_eq!(
            normalised_image("localhost:5000/x"),
            "localhost:5000/x:latest"
        );
    }

    #[test]
    fn a_running_status_has_ready_containers_and_a_terminated_one_does_not() {
        let p = pod(json!({"spec": {"initContainers": [{"name": "init", "image": "alpine:3"}]}}));
        let s = running_status(&p, "10.244.0.7", "2026-01-01T00:00:00Z", &|_| 2);
        assert_eq!(s["podIP"], "10.244.0.7");
        assert_eq!(s["containerStatuses"][0]["ready"], true);
        assert_eq!(s["containerStatuses"][0]["restartCount"], 2);
        assert_eq!(
            s["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        let mut running = p.clone();
        running["status"] = s;
        let t = terminated_status(&running, "2026-01-01T00:01:00Z");
        let c = &t["containerStatuses"][0];
        assert_eq!(c["ready"], false);
        assert_eq!(c["restartCount"], 2);
        assert_eq!(
            c["state"]["terminated"]["startedAt"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(c["state"]["terminated"]["containerID"], c["containerID"]);
        assert_eq!(t["phase"], "Succeeded");
    }
}
