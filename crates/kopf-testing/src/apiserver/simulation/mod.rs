//! The pod simulator (off by default): what the scheduler and the kubelets of a cluster write
//! of Pods, in kwok's manner of stages, for operators that wait on pod phases.
//!
//! A task owned by the server follows the store's changes of Pods (no polling) and, after
//! the configured delays, writes the next [`Stage`] of each Pod through the
//! same code as API requests (new resourceVersions, `MODIFIED` watch events, managedFields
//! of the `kubelet` manager on `status`), but not through the HTTP front: the simulator's
//! writes are neither logged nor counted as requests, nor faulted.
//!
//! * Schedule: a Pod without `spec.nodeName` (and the default scheduler) is bound to the
//!   simulated Node [`NODE_NAME`](stages::NODE_NAME) (created at start): `spec.nodeName` and
//!   the `PodScheduled` condition in one write, as the `binding` subresource does.
//! * Start: a scheduled `Pending` Pod becomes `Running` and ready (IPs, start time,
//!   conditions, `containerStatuses` with image and container ids, running since now).
//! * Print: once started, a container whose command the simulator understands (`echo`, or
//!   `sh -c` with a script of `echo` and `sleep`: see [`script`]) writes its lines into its
//!   log, with the script's pauses, as `GET .../log` serves them. Other containers print
//!   nothing (the fake runs no image).
//! * Complete: a Job's Pod (owned by a `batch/v1` Job, or labelled
//!   `batch.kubernetes.io/job-name` / `job-name`) with `restartPolicy` `Never` or
//!   `OnFailure` ends `Succeeded` after its run time, its containers terminated with exit
//!   code 0 (`Completed`). A Pod of such a `restartPolicy` whose containers all run
//!   understood scripts ends so when the last script ends (a Job's or not). A script's
//!   container under `Always` is not restarted: it stays running, silent.
//! * Stop: a deleted Pod (with a `deletionTimestamp`) gets its containers terminated at
//!   once; the removal itself stays with the server's Pod termination (after the Pod's
//!   grace period, capped by the builder's `pod_termination_cap`), as without the simulator.
//!
//! Deployments, ReplicaSets, StatefulSets and Jobs' own status are not simulated: only the
//! Pods that exist are.

pub mod script;
pub mod stages;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::http::Shared;
use crate::apiserver::kubelet::ContainerKey;
use crate::apiserver::semantics::{PatchType, State, WriteOptions, now};
use crate::apiserver::storage::{Change, ChangeType};
use crate::apiserver::sync::lock;

use stages::Stage;

/// The settings of the pod simulator: how long each stage takes.
///
/// ```
/// use std::time::Duration;
/// use kopf_testing::PodSimulation;
///
/// let fast = PodSimulation::default().start_delay(Duration::from_millis(50));
/// assert_eq!(fast.schedule_delay, Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSimulation {
    /// From a Pod's creation to its binding to the simulated Node (default 100 ms).
    pub schedule_delay: Duration,
    /// From the binding to `Running` and ready (default 200 ms).
    pub start_delay: Duration,
    /// How long a Job's Pod runs before it ends `Succeeded` (default 1 s).
    pub job_run_time: Duration,
}

impl Default for PodSimulation {
    fn default() -> Self {
        PodSimulation {
            schedule_delay: Duration::from_millis(100),
            start_delay: Duration::from_millis(200),
            job_run_time: Duration::from_secs(1),
        }
    }
}

impl PodSimulation {
    /// Sets the delay from creation to scheduling.
    pub fn schedule_delay(mut self, d: Duration) -> Self {
        self.schedule_delay = d;
        self
    }

    /// Sets the delay from scheduling to `Running`.
    pub fn start_delay(mut self, d: Duration) -> Self {
        self.start_delay = d;
        self
    }

    /// Sets how long a Job's Pod runs before it succeeds.
    pub fn job_run_time(mut self, d: Duration) -> Self {
        self.job_run_time = d;
        self
    }

    fn delay(&self, stage: Stage) -> Duration {
        match stage {
            Stage::Schedule => self.schedule_delay,
            Stage::Start => self.start_delay,
            Stage::Complete => self.job_run_time,
            Stage::Stop => Duration::ZERO,
        }
    }
}

/// What a stage's write did.
enum Written {
    /// Nothing: the Pod is gone, or has moved on.
    Nothing,
    /// The containers started.
    Started,
    /// The containers of these names ended.
    Ended(Vec<String>),
    /// Something else (the binding).
    Other,
}

/// The simulator's own state, shared by its task and its timers.
struct Simulator {
    /// The server (weak: the simulator ends with it).
    shared: Weak<Shared>,
    config: PodSimulation,
    /// The stages already planned, by Pod uid (each is planned once).
    planned: Mutex<HashSet<(String, Stage)>>,
    /// The last Pod IP given.
    last_ip: AtomicU32,
}

fn pods_key() -> (String, String) {
    (String::new(), "pods".into())
}

fn pods_def(state: &State) -> ApiResult<ResourceDef> {
    state
        .find("", "v1", "pods")
        .ok_or_else(|| ApiError::not_found("", "pods", ""))
}

fn kubelet_options() -> WriteOptions {
    WriteOptions {
        field_manager: Some("kubelet".into()),
        user_agent: "kubelet/v1.31.0 (linux/amd64) kubernetes/fake".into(),
        ..WriteOptions::default()
    }
}

/// Starts the simulator for a server: creates the simulated Node, then follows the Pods.
/// Must be called inside a Tokio runtime.
pub(crate) fn spawn(shared: &Arc<Shared>, config: PodSimulation) {
    let (rx, existing) = {
        let mut state = lock(&shared.state);
        if let Some(def) = state.find("", "v1", "nodes")
            && state.get(&def, None, stages::NODE_NAME).is_err()
            && let Err(e) = state.create(&def, None, stages::node(&now()), &WriteOptions::default())
        {
            tracing::error!(error = %e, "the pod simulator cannot create its Node");
        }
        let rx = state.store.subscribe();
        let existing: Vec<Value> = state
            .store
            .list(&pods_key(), None)
            .into_iter()
            .map(|(_, pod)| (*pod).clone())
            .collect();
        (rx, existing)
    };
    let sim = Arc::new(Simulator {
        shared: Arc::downgrade(shared),
        config,
        planned: Mutex::default(),
        last_ip: AtomicU32::new(0),
    });
    for pod in &existing {
        sim.consider(pod);
    }
    tokio::spawn(follow(sim, rx));
}

/// Follows the store's changes until the server is gone.
async fn follow(sim: Arc<Simulator>, mut rx: broadcast::Receiver<Arc<Change>>) {
    loop {
        match rx.recv().await {
            Ok(change) if change.res == pods_key() => sim.changed(&change),
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(missed, "the pod simulator lagged: looking at every Pod");
                let Some(shared) = sim.shared.upgrade() else {
                    return;
                };
                let pods: Vec<Value> = lock(&shared.state)
                    .store
                    .list(&pods_key(), None)
                    .into_iter()
                    .map(|(_, pod)| (*pod).clone())
                    .collect();
                for pod in &pods {
                    sim.consider(pod);
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

fn uid_of(pod: &Value) -> String {
    pod.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

impl Simulator {
    fn changed(self: &Arc<Self>, change: &Change) {
        let pod = change.object.value();
        if change.kind == ChangeType::Deleted {
            let uid = uid_of(&pod);
            lock(&self.planned).retain(|(u, _)| *u != uid);
            if let Some(shared) = self.shared.upgrade() {
                shared.kubelet.forget_pod(&change.key.0, &change.key.1);
            }
            return;
        }
        self.consider(&pod);
    }

    /// Plans the Pod's next stage, unless it is planned already.
    fn consider(self: &Arc<Self>, pod: &Value) {
        let Some(stage) = stages::next_stage(pod) else {
            return;
        };
        if stage == Stage::Complete && stages::scripted(pod) {
            // Fired when the scripts end (see `print`).
            return;
        }
        let uid = uid_of(pod);
        if !lock(&self.planned).insert((uid.clone(), stage)) {
            return;
        }
        let namespace = pod
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = pod
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let delay = self.config.delay(stage);
        let sim = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            sim.fire(&namespace, &name, &uid, stage);
        });
    }

    /// Writes a planned stage, if the Pod is still there and still at that stage.
    fn fire(self: &Arc<Self>, namespace: &str, name: &str, uid: &str, stage: Stage) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let written = {
            let mut state = lock(&shared.state);
            self.write(&mut state, namespace, name, uid, stage)
        };
        match written {
            Ok(Written::Ended(containers)) => {
                for container in containers {
                    let key = (namespace.to_string(), name.to_string(), container);
                    shared.kubelet.terminate(&key);
                }
            }
            Ok(Written::Started) => self.print(&shared, namespace, name, uid),
            Ok(Written::Other | Written::Nothing) => {}
            Err(e) => {
                tracing::debug!(namespace, name, ?stage, error = %e.message, "the pod simulator's write failed");
                // Planned again at the Pod's next change.
                lock(&self.planned).remove(&(uid.to_string(), stage));
            }
        }
    }

    /// The write of a stage, and what it did.
    fn write(
        &self,
        state: &mut State,
        namespace: &str,
        name: &str,
        uid: &str,
        stage: Stage,
    ) -> ApiResult<Written> {
        let def = pods_def(state)?;
        let Ok(pod) = state.get_stored(&def, Some(namespace), name) else {
            return Ok(Written::Nothing);
        };
        if uid_of(&pod) != uid || stages::next_stage(&pod) != Some(stage) {
            return Ok(Written::Nothing);
        }
        let at = now();
        let status = match stage {
            Stage::Schedule => {
                bind(state, &def, &pod, stages::NODE_NAME, &at)?;
                return Ok(Written::Other);
            }
            Stage::Start => {
                let ip = self.pod_ip();
                let shared = self.shared.upgrade();
                let restarts = |container: &str| {
                    let key = (
                        namespace.to_string(),
                        name.to_string(),
                        container.to_string(),
                    );
                    shared
                        .as_ref()
                        .map_or(0, |s| u64::from(s.kubelet.restart_count(&key)))
                };
                stages::running_status(&pod, &ip, &at, &restarts)
            }
            Stage::Complete | Stage::Stop => stages::terminated_status(&pod, &at),
        };
        let patch = json!({"status": status});
        state.patch(
            &def,
            Some(namespace),
            name,
            Some("status"),
            PatchType::Merge,
            patch.to_string().as_bytes(),
            &kubelet_options(),
        )?;
        if stage == Stage::Start {
            return Ok(Written::Started);
        }
        Ok(Written::Ended(
            pod.pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect(),
        ))
    }

    /// Runs the scripts of the started Pod's containers (those the simulator understands),
    /// each writing its lines into its container's log; then, if the Pod ends with them,
    /// its `Complete` stage.
    fn print(self: &Arc<Self>, shared: &Arc<Shared>, namespace: &str, name: &str, uid: &str) {
        let pod = {
            let state = lock(&shared.state);
            let Ok(def) = pods_def(&state) else { return };
            match state.get_stored(&def, Some(namespace), name) {
                Ok(pod) if uid_of(&pod) == uid => pod,
                _ => return,
            }
        };
        let scripts: Vec<(String, Vec<script::Step>)> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let container = c.get("name").and_then(Value::as_str)?;
                Some((container.to_string(), script::steps(c)?))
            })
            .collect();
        if scripts.is_empty() {
            return;
        }
        let completes = stages::completes(&pod) && stages::scripted(&pod);
        let (sim, namespace, name, uid) = (
            self.clone(),
            namespace.to_string(),
            name.to_string(),
            uid.to_string(),
        );
        tokio::spawn(async move {
            let runs: Vec<_> = scripts
                .into_iter()
                .map(|(container, steps)| {
                    let key = (namespace.clone(), name.clone(), container);
                    tokio::spawn(sim.clone().run_script(key, uid.clone(), steps))
                })
                .collect();
            for run in runs {
                let _ = run.await;
            }
            if completes && lock(&sim.planned).insert((uid.clone(), Stage::Complete)) {
                sim.fire(&namespace, &name, &uid, Stage::Complete);
            }
        });
    }

    /// One container's script: its lines into its log, while its Pod runs.
    async fn run_script(self: Arc<Self>, key: ContainerKey, uid: String, steps: Vec<script::Step>) {
        for step in steps {
            match step {
                script::Step::Sleep(d) => tokio::time::sleep(d).await,
                script::Step::Line(line) => {
                    let Some(shared) = self.shared.upgrade() else {
                        return;
                    };
                    // A deleted (or replaced) Pod's containers print no more.
                    let running = {
                        let state = lock(&shared.state);
                        pods_def(&state)
                            .and_then(|def| state.get_stored(&def, Some(&key.0), &key.1))
                            .is_ok_and(|pod| {
                                uid_of(&pod) == uid
                                    && pod.pointer("/metadata/deletionTimestamp").is_none()
                            })
                    };
                    if !running {
                        return;
                    }
                    shared.kubelet.append(&key, &[&line]);
                }
            }
        }
    }

    fn pod_ip(&self) -> String {
        let n = self.last_ip.fetch_add(1, Ordering::Relaxed);
        format!("10.244.{}.{}", (n / 250) % 256, n % 250 + 2)
    }
}

/// The scheduler's binding: `spec.nodeName` and the `PodScheduled` condition in one write
/// (as `POST pods/{name}/binding` makes it: no managedFields entry of its own).
fn bind(state: &mut State, def: &ResourceDef, pod: &Value, node: &str, at: &str) -> ApiResult<()> {
    let mut bound = pod.clone();
    match bound.get_mut("spec") {
        Some(Value::Object(spec)) => {
            spec.insert("nodeName".into(), json!(node));
        }
        // Not a Pod a scheduler could bind (see `stages::next_stage`).
        Some(other) if !other.is_null() => return Ok(()),
        _ => bound["spec"] = json!({"nodeName": node}),
    }
    let mut status = match pod.get("status") {
        Some(Value::Object(s)) => Value::Object(s.clone()),
        Some(other) if !other.is_null() => return Ok(()),
        _ => json!({}),
    };
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
    conditions.push(stages::scheduled_condition(at));
    status["conditions"] = json!(conditions);
    let mut new = state.over_prepare(def, pod, bound, None)?;
    new["status"] = status;
    let mut warnings = Vec::new();
    let new = state.over_finish(
        def,
        pod,
        new,
        None,
        &WriteOptions::default(),
        &mut warnings,
        false,
    )?;
    state.over_commit(def, pod, new, warnings, false)?;
    Ok(())
}
