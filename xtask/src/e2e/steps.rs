//! One example's run through its scenario: create, restart, update, delete, stop, each step
//! waited for and checked against the cluster and the operator's logs.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use kopf_testing::{Cluster, OperatorRunner, RunnerBuilder};
use serde_json::Value;

use super::scenarios::Check::*;
use super::scenarios::*;

/// What a scenario did by hand to the child ConfigMap.
#[derive(Debug, Default)]
pub(crate) struct ChildState {
    /// The uid of the child deleted by `ChildDeletedComesBack`.
    pub(crate) deleted_uid: Option<String>,
    /// `ChildEditedComesBack` edited the child.
    pub(crate) edited: bool,
    /// The `kubectl wait` of `KubectlWait`.
    pub(crate) waiter: Option<Waiter>,
}

/// When a `kubectl wait` ended, and its output (or its error).
pub(crate) type WaitEnd =
    std::sync::Arc<std::sync::Mutex<Option<(Instant, Result<String, String>)>>>;

/// A `kubectl wait` under way: when it ended (and how), when the condition was first seen.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) ended: WaitEnd,
    pub(crate) seen: Option<Instant>,
    /// The delay was printed.
    pub(crate) reported: bool,
}

/// Whether `status.conditions` of the object has this type with this status.
fn has_condition(object: Option<&Value>, type_: &str, status: &str) -> bool {
    object
        .and_then(|o| o.pointer("/status/conditions"))
        .and_then(Value::as_array)
        .is_some_and(|list| {
            list.iter()
                .any(|c| c["type"] == type_ && c["status"] == status)
        })
}

/// What a reconcile makes its child hold while it is being tampered with by hand.
const TAMPERED: &str = "tampered-by-hand";

/// One example's run.
pub(crate) struct E2e<'a> {
    pub(crate) cluster: &'a Cluster,
    pub(crate) scenario: &'a Scenario,
    pub(crate) name: String,
    pub(crate) binary: PathBuf,
    /// The ConfigMap found by `OwnedConfigMap`.
    pub(crate) child: Option<String>,
    /// What was done by hand to the child (for the checks that wait for a reconcile).
    pub(crate) child_state: ChildState,
    /// The step under way (or the last one).
    pub(crate) step: &'static str,
    /// More arguments for `run` (the webhook server's port and host).
    pub(crate) run_args: Vec<String>,
}

impl E2e<'_> {
    pub(crate) async fn run(&mut self, template: &str) -> Result<()> {
        let sc = self.scenario;
        let named = sc.setup.object.map_or(TEMPLATE_NAME, |o| o.file.1);
        let object = object_yaml_from(template, named, &self.name, sc.edits)?;
        force_delete_of(self.cluster, self.resource(), &self.name).await;

        let t = self.begin("create");
        let mut first = self.start_operator(1)?;
        self.wait_ready(&mut first).await?;
        self.cluster
            .kubectl_with_input(["apply", "-n", NAMESPACE, "-f", "-"], &object)
            .await?;
        self.wait(&mut first, sc.created, true).await?;
        self.done(t);

        let t = self.begin("restart");
        stop_cleanly(&mut first, "the operator").await?;
        self.wait(&mut first, sc.stopped, false).await?;
        // A line that the first process never logged proves nothing by its absence later.
        let never: Vec<String> = sc
            .never_after_restart
            .iter()
            .map(|l| l.replace("{name}", &self.name))
            .collect();
        for line in &never {
            if !first.has_logged(line) {
                bail!(
                    "the scenario expects {line:?} in the first process's logs (and not in the second's), but it is not there; the logs:\n{}",
                    first.logs()
                );
            }
        }
        let mut second = self.start_operator(2)?;
        self.wait_ready(&mut second).await?;
        self.wait(&mut second, sc.resumed, true).await?;
        self.done(t);

        let t = self.begin("update");
        self.kubectl_object(&["patch", "--type", "merge", "-p", sc.update])
            .await?;
        self.wait(&mut second, sc.updated, true).await?;
        self.done(t);

        let t = self.begin("delete");
        self.kubectl_object(&["delete", "--wait=false"]).await?;
        let mut checks = vec![Gone];
        checks.extend_from_slice(sc.deleted);
        self.wait(&mut second, &checks, true).await?;
        self.done(t);

        let t = self.begin("stop");
        stop_cleanly(&mut second, "the restarted operator").await?;
        let logs = second.logs();
        for line in &never {
            if logs.contains(line.as_str()) {
                bail!(
                    "after the restart, the operator logged {line:?} (what the first process did was done again); its logs:\n{logs}"
                );
            }
        }
        self.done(t);
        Ok(())
    }

    /// Waits for the scenario's readiness line, if it has one.
    async fn wait_ready(&mut self, op: &mut OperatorRunner) -> Result<()> {
        match self.scenario.setup.ready {
            Some(line) => self.wait(op, &[Log(line)], true).await,
            None => Ok(()),
        }
    }

    fn begin(&mut self, step: &'static str) -> Instant {
        self.step = step;
        Instant::now()
    }

    fn done(&self, started: Instant) {
        println!(
            "   {:<8} ok ({:.1} s)",
            self.step,
            started.elapsed().as_secs_f64()
        );
    }

    fn start_operator(&self, run: u32) -> Result<OperatorRunner> {
        let name = format!("{}#{run}", self.scenario.example);
        operator_command(self.cluster, &self.binary, name)
            .args(&self.run_args)
            .start()
            .with_context(|| format!("starting the operator {}", self.binary.display()))
    }

    /// The resource of the scenario's object, for kubectl.
    pub(crate) fn resource(&self) -> &'static str {
        self.scenario.setup.object.map_or(RESOURCE, |o| o.resource)
    }

    async fn kubectl_object(&self, args: &[&str]) -> Result<String> {
        let mut all = vec![args[0], self.resource(), &self.name, "-n", NAMESPACE];
        all.extend_from_slice(&args[1..]);
        Ok(self.cluster.kubectl(all).await?)
    }

    /// The child found by `OwnedConfigMap`, as JSON (an error if there is none).
    async fn child_configmap(&self) -> Result<(String, Value), String> {
        let child = self.child.clone().ok_or("no child ConfigMap was seen")?;
        let out = self.configmap(&child, "json").await?;
        let cm = serde_json::from_str(&out)
            .map_err(|_| format!("the ConfigMap {child} does not exist"))?;
        Ok((child, cm))
    }

    /// `kubectl get configmap NAME -o OUTPUT` in the namespace (empty if it is not there).
    async fn configmap(&self, name: &str, output: &str) -> Result<String, String> {
        self.cluster
            .kubectl([
                "get",
                "configmap",
                name,
                "-n",
                NAMESPACE,
                "--ignore-not-found",
                "-o",
                output,
            ])
            .await
            .map_err(|e| e.to_string())
    }

    async fn get_object(&self) -> Result<Option<Value>> {
        let out = self
            .kubectl_object(&["get", "--ignore-not-found", "-o", "json"])
            .await?;
        if out.trim().is_empty() {
            return Ok(None);
        }
        Ok(Some(
            serde_json::from_str(&out).context("parsing the object")?,
        ))
    }

    /// Polls until every check passes; fails after [`STEP_TIMEOUT`] with what is still
    /// missing, or at once if the operator (expected to run) exits.
    async fn wait(
        &mut self,
        op: &mut OperatorRunner,
        checks: &[Check],
        running: bool,
    ) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let baseline = self.get_object().await?;
        loop {
            if running && let Some(status) = op.try_status() {
                bail!(
                    "the operator exited unexpectedly ({status}); the last lines:\n{}",
                    op.tail(30)
                );
            }
            let object = self.get_object().await?;
            let mut missing = Vec::new();
            for check in checks {
                if let Err(why) = self
                    .check(*check, op, object.as_ref(), baseline.as_ref())
                    .await
                {
                    missing.push(why);
                }
            }
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "after {STEP_TIMEOUT:?}:\n  - {}\nthe object: {}\nthe operator's last lines:\n{}",
                    missing.join("\n  - "),
                    object.map_or("(none)".into(), brief),
                    op.tail(30)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Ok, or what is wrong.
    async fn check(
        &mut self,
        check: Check,
        op: &OperatorRunner,
        object: Option<&Value>,
        baseline: Option<&Value>,
    ) -> Result<(), String> {
        let at = |pointer: &str| object.and_then(|o| o.pointer(pointer)).cloned();
        match check {
            Eq(pointer, json) => {
                let want: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
                let got = at(pointer).unwrap_or(Value::Null);
                (got == want)
                    .then_some(())
                    .ok_or_else(|| format!("{pointer} is {got}, expected {want}"))
            }
            AtLeast(pointer, n) => {
                let got = at(pointer);
                (got.as_ref().and_then(Value::as_u64) >= Some(n))
                    .then_some(())
                    .ok_or_else(|| format!("{pointer} is {got:?}, expected at least {n}"))
            }
            Changes(pointer) => {
                let before = baseline.and_then(|o| o.pointer(pointer)).cloned();
                let got = at(pointer);
                (got.is_some() && got != before)
                    .then_some(())
                    .ok_or_else(|| format!("{pointer} stays {got:?}"))
            }
            Finalizer(want) => {
                let has = object
                    .and_then(|o| o.pointer("/metadata/finalizers"))
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
                (has == want).then_some(()).ok_or_else(|| {
                    format!("the finalizer is {}", if has { "there" } else { "missing" })
                })
            }
            Handled => {
                let diffbase = object
                    .and_then(|o| o.pointer("/metadata/annotations"))
                    .and_then(|a| a.get(DIFFBASE))
                    .and_then(Value::as_str)
                    .and_then(|t| serde_json::from_str::<Value>(t).ok());
                let spec = at("/spec");
                (diffbase.as_ref().and_then(|d| d.get("spec")) == spec.as_ref())
                    .then_some(())
                    .ok_or_else(|| {
                        format!("the last handled spec is {diffbase:?}, not the current {spec:?}")
                    })
            }
            Log(text) => {
                let text = text.replace("{name}", &self.name);
                op.has_logged(&text)
                    .then_some(())
                    .ok_or_else(|| format!("no log line with {text:?}"))
            }
            Event(reason) => {
                let out = self
                    .cluster
                    .kubectl(["get", "events", "-n", NAMESPACE, "-o", "json"])
                    .await
                    .map_err(|e| e.to_string())?;
                let events: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
                let found = events["items"].as_array().is_some_and(|items| {
                    items.iter().any(|e| {
                        e["involvedObject"]["name"] == self.name.as_str() && e["reason"] == reason
                    })
                });
                found
                    .then_some(())
                    .ok_or_else(|| format!("no Event {reason:?} about the object"))
            }
            OwnedConfigMap(pointer) => {
                let child = at(pointer)
                    .and_then(|v| v.as_str().map(str::to_string))
                    .ok_or_else(|| format!("{pointer} has no ConfigMap name"))?;
                let out = self.configmap(&child, "json").await?;
                let cm: Value = serde_json::from_str(&out)
                    .map_err(|_| format!("the ConfigMap {child} does not exist"))?;
                let uid = at("/metadata/uid");
                let owned = cm["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| Some(&r["uid"]) == uid.as_ref()));
                self.child = Some(child.clone());
                owned
                    .then_some(())
                    .ok_or_else(|| format!("the ConfigMap {child} is not owned by the object"))
            }
            ChildGone => {
                let child = self.child.clone().ok_or("no child ConfigMap was seen")?;
                let out = self.configmap(&child, "name").await?;
                out.trim()
                    .is_empty()
                    .then_some(())
                    .ok_or_else(|| format!("the ConfigMap {child} is still there"))
            }
            Condition(type_, status) => has_condition(object, type_, status)
                .then_some(())
                .ok_or_else(|| {
                    format!(
                        "no condition {type_}={status} in {}",
                        at("/status/conditions").unwrap_or(Value::Null)
                    )
                }),
            KubectlWait(type_) => {
                let Some(waiter) = self.child_state.waiter.as_mut() else {
                    if has_condition(object, type_, "True") {
                        return Err(format!(
                            "{type_} was already True before `kubectl wait` could start"
                        ));
                    }
                    let mut command = self.cluster.kubectl_command([
                        "wait".to_string(),
                        format!("--for=condition={type_}"),
                        format!("{}/{}", self.resource(), self.name),
                        "-n".into(),
                        NAMESPACE.into(),
                        "--timeout=60s".into(),
                    ]);
                    command
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .kill_on_drop(true);
                    let child = command.spawn().map_err(|e| format!("kubectl wait: {e}"))?;
                    let ended = std::sync::Arc::new(std::sync::Mutex::new(None));
                    let e = ended.clone();
                    tokio::spawn(async move {
                        let out = child.wait_with_output().await;
                        let at = Instant::now();
                        let result = match out {
                            Ok(o) if o.status.success() => {
                                Ok(String::from_utf8_lossy(&o.stdout).into_owned())
                            }
                            Ok(o) => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
                            Err(e) => Err(e.to_string()),
                        };
                        *e.lock().unwrap_or_else(|p| p.into_inner()) = Some((at, result));
                    });
                    self.child_state.waiter = Some(Waiter {
                        ended,
                        seen: None,
                        reported: false,
                    });
                    return Err(format!("`kubectl wait --for=condition={type_}` started"));
                };
                if waiter.seen.is_none() && has_condition(object, type_, "True") {
                    waiter.seen = Some(Instant::now());
                }
                let ended = waiter
                    .ended
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                match (ended, waiter.seen) {
                    (None, _) => Err(format!(
                        "`kubectl wait --for=condition={type_}` has not returned"
                    )),
                    (Some((_, Err(e))), _) => Err(format!(
                        "`kubectl wait --for=condition={type_}` failed: {e}"
                    )),
                    (Some((_, Ok(_))), None) => Err(format!(
                        "`kubectl wait` returned, but {type_} is not seen True yet"
                    )),
                    (Some((at, Ok(_))), Some(seen)) => {
                        let late = at.saturating_duration_since(seen);
                        if !std::mem::replace(&mut waiter.reported, true) {
                            println!(
                                "   kubectl wait --for=condition={type_} returned {:.2} s after the condition was seen",
                                late.as_secs_f64()
                            );
                        }
                        (late <= std::time::Duration::from_secs(1))
                            .then_some(())
                            .ok_or_else(|| format!("`kubectl wait` returned {late:?} after {type_} was seen True (more than 1 s)"))
                    }
                }
            }
            ChildMatchesSpec => {
                let (child, cm) = self.child_configmap().await?;
                let want = at("/spec/field").unwrap_or(Value::Null);
                (cm["data"]["field"] == want).then_some(()).ok_or_else(|| {
                    format!(
                        "the ConfigMap {child} holds {}, the object's spec.field is {want}",
                        cm["data"]["field"]
                    )
                })
            }
            ChildDeletedComesBack => {
                let Some(old) = self.child_state.deleted_uid.clone() else {
                    // Deleted once this process has reconciled (its watches are up).
                    if !op.has_logged("Reconciled (") {
                        return Err("the operator has not reconciled yet".into());
                    }
                    let (child, cm) = self.child_configmap().await?;
                    let uid = cm["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    self.cluster
                        .kubectl(["delete", "configmap", &child, "-n", NAMESPACE])
                        .await
                        .map_err(|e| e.to_string())?;
                    self.child_state.deleted_uid = Some(uid);
                    return Err(format!("the ConfigMap {child} was just deleted by hand"));
                };
                let child = self.child.clone().unwrap_or_default();
                let (_, cm) = self.child_configmap().await.unwrap_or_default();
                let want = at("/spec/field").unwrap_or(Value::Null);
                let uid = cm["metadata"]["uid"].as_str().unwrap_or_default();
                (!uid.is_empty() && uid != old && cm["data"]["field"] == want)
                    .then_some(())
                    .ok_or_else(|| {
                        format!(
                            "the ConfigMap {child} deleted by hand has not come back holding {want}"
                        )
                    })
            }
            ChildEditedComesBack => {
                let (child, cm) = self.child_configmap().await?;
                if !self.child_state.edited {
                    let patch = format!(r#"{{"data":{{"field":"{TAMPERED}"}}}}"#);
                    self.cluster
                        .kubectl([
                            "patch",
                            "configmap",
                            &child,
                            "-n",
                            NAMESPACE,
                            "--type",
                            "merge",
                            "-p",
                            &patch,
                        ])
                        .await
                        .map_err(|e| e.to_string())?;
                    self.child_state.edited = true;
                    return Err(format!("the ConfigMap {child} was just edited by hand"));
                }
                let want = at("/spec/field").unwrap_or(Value::Null);
                (cm["data"]["field"] == want).then_some(()).ok_or_else(|| {
                    format!(
                        "the ConfigMap {child} edited by hand holds {}, not {want} again",
                        cm["data"]["field"]
                    )
                })
            }
            Gone => object
                .is_none()
                .then_some(())
                .ok_or_else(|| "the object is still there".to_string()),
            Denied(patch, text) => match self.dry_run_patch(patch).await? {
                (false, stderr) if stderr.contains(text) => Ok(()),
                (false, stderr) => Err(format!(
                    "the dry-run patch {patch} was refused, but not with {text:?}: {stderr}"
                )),
                (true, _) => Err(format!(
                    "the dry-run patch {patch} was admitted (expected a denial with {text:?})"
                )),
            },
            Warned(patch, text) => match self.dry_run_patch(patch).await? {
                (true, stderr) if stderr.contains("Warning:") && stderr.contains(text) => Ok(()),
                (true, stderr) => Err(format!(
                    "the dry-run patch {patch} was admitted without a warning with {text:?} (kubectl printed {stderr:?})"
                )),
                (false, stderr) => Err(format!("the dry-run patch {patch} was refused: {stderr}")),
            },
            Served(version, pointer, json) => {
                let want: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
                let resource = format!("kopfexamples.{version}.kopf.dev");
                let out = self
                    .cluster
                    .kubectl(["get", &resource, &self.name, "-n", NAMESPACE, "-o", "json"])
                    .await
                    .map_err(|e| e.to_string())?;
                let served: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
                let got = served.pointer(pointer).cloned().unwrap_or(Value::Null);
                (got == want)
                    .then_some(())
                    .ok_or_else(|| format!("in {version}, {pointer} is {got}, expected {want}"))
            }
        }
    }

    /// `kubectl patch --dry-run=server` of the object with a merge patch: admitted or not,
    /// and what kubectl printed on stderr (denials, warnings).
    async fn dry_run_patch(&self, patch: &str) -> Result<(bool, String), String> {
        let args = [
            "patch",
            self.resource(),
            &self.name,
            "-n",
            NAMESPACE,
            "--type",
            "merge",
            "--dry-run=server",
            "-p",
            patch,
        ];
        let mut cmd = self.cluster.kubectl_command(args);
        cmd.kill_on_drop(true);
        let out = tokio::time::timeout(STEP_TIMEOUT, cmd.output())
            .await
            .map_err(|_| format!("kubectl patch --dry-run=server took over {STEP_TIMEOUT:?}"))?
            .map_err(|e| format!("running kubectl: {e}"))?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// The object for messages, without the bulky managedFields and last-applied annotation.
pub(crate) fn brief(mut object: Value) -> String {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    object.to_string()
}

/// The name of the object in `examples/obj.yaml`.
const TEMPLATE_NAME: &str = "kopf-example-1";

/// `examples/obj.yaml` renamed, with the scenario's edits.
pub(crate) fn object_yaml(template: &str, name: &str, edits: &[(&str, &str)]) -> Result<String> {
    object_yaml_from(template, TEMPLATE_NAME, name, edits)
}

/// An object's YAML (named `named`) renamed, with the scenario's edits.
fn object_yaml_from(
    template: &str,
    named: &str,
    name: &str,
    edits: &[(&str, &str)],
) -> Result<String> {
    let (named, rename) = (format!("name: {named}"), format!("name: {name}"));
    let mut text = template.to_string();
    for (from, to) in
        std::iter::once((named.as_str(), rename.as_str())).chain(edits.iter().copied())
    {
        if text.matches(from).count() != 1 {
            bail!("the object's YAML no longer has exactly one `{from}` to replace");
        }
        text = text.replace(from, to);
    }
    Ok(text)
}

/// Removes the object even if no operator releases its finalizer (after a failure).
pub(crate) async fn force_delete(cluster: &Cluster, name: &str) {
    force_delete_of(cluster, RESOURCE, name).await;
}

/// Removes an object of this resource even if no operator releases its finalizer.
pub(crate) async fn force_delete_of(cluster: &Cluster, resource: &str, name: &str) {
    let object = [resource, name, "-n", NAMESPACE];
    let _ = cluster
        .kubectl(
            ["delete"]
                .iter()
                .chain(&object)
                .chain(&["--ignore-not-found", "--wait=false"]),
        )
        .await;
    let _ = cluster
        .kubectl(["patch"].iter().chain(&object).chain(&[
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]))
        .await;
}

/// An example operator's process against the cluster: `run -A --standalone` (more
/// arguments may follow), named `name` in errors and echoed lines.
pub(crate) fn operator_command(cluster: &Cluster, binary: &Path, name: String) -> RunnerBuilder {
    OperatorRunner::command(binary)
        .args(["run", "-A", "--standalone"])
        .env("KUBECONFIG", cluster.kubeconfig())
        // Settings from the caller's environment that would change what is checked.
        .env_remove("KOPF_RUN_NAMESPACE")
        .env_remove("KOPF_RUN_LOG_FORMAT")
        .name(name)
}

/// SIGTERM, and an error unless the operator exits with 0 in time (with its last lines).
async fn stop_cleanly(op: &mut OperatorRunner, which: &str) -> Result<()> {
    let status = op.stop(STOP_TIMEOUT).await?;
    exited_cleanly(op, status, which)
}

/// An error unless the operator exited with 0 after SIGTERM (with its last lines).
pub(crate) fn exited_cleanly(op: &OperatorRunner, status: ExitStatus, which: &str) -> Result<()> {
    if !status.success() {
        bail!(
            "{which} exited with {status} on SIGTERM (expected 0); the last lines:\n{}",
            op.tail(30)
        );
    }
    Ok(())
}
