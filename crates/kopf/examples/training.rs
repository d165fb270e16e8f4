//! Pod logs: a TrainingJob runs its training in a Pod, and a pod-log handler turns the
//! trainer's lines (`step=2 loss=0.333`, then `done`) into the job's status: `step`, `loss`
//! and `phase` (`Training`, then `Done`), as `kubectl get trainingjobs` shows them.
//!
//! The trainer here only pretends: a busybox shell script that prints the lines a real
//! training would (on the fake API server, its pod simulator prints them).
//!
//! ```sh
//! cargo run --example training -- run --fake --simulate-pods
//! KUBECONFIG=<the path in the banner> kubectl get trainingjobs -w
//! ```
//!
//! `run --fake` applies `examples/trainingjob-crd.yaml` and `examples/trainingjob.yaml` (a
//! job of 3 steps); on a cluster, apply them with kubectl.

use std::path::PathBuf;

use kopf::prelude::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// The label of a job's trainer Pods (its value: the job's name).
const JOB_LABEL: &str = "kopf.dev/training-job";
/// The trainer's container: the one whose logs are read.
const CONTAINER: &str = "trainer";

/// What the pretend training prints: a line per step, a second apart, then `done`.
fn training_script(steps: u64) -> String {
    let mut script = String::new();
    for step in 1..=steps {
        let loss = 1.0 / (step as f64 + 1.0);
        script.push_str(&format!("echo step={step} loss={loss:.3}; sleep 1; "));
    }
    script.push_str("echo done");
    script
}

/// A new TrainingJob: its trainer Pod, owned by the job (deleted with it).
async fn create_fn(
    Body(body): Body,
    Spec(spec): Spec,
    Client(client): Client,
) -> Result<Value, HandlerError> {
    let steps = spec["steps"].as_u64().unwrap_or(3);
    let image = spec["image"].as_str().unwrap_or("busybox");
    let job = body["metadata"]["name"].as_str().unwrap_or_default();
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {JOB_LABEL: job}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": CONTAINER,
                "image": image,
                "command": ["sh", "-c", training_script(steps)],
            }],
        },
    });
    // Owner reference, generateName from the job's name, its namespace and labels.
    kopf::hierarchy::adopt(&mut pod, &body)?;
    let namespace = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, &namespace);
    let pod = serde_json::from_value(pod)?;
    let created = api
        .create(&PostParams::default(), &pod)
        .await
        .map_err(|e| HandlerError::other(format!("cannot create the trainer Pod: {e}")))?;
    Ok(json!({"pod": created.metadata.name}))
}

/// A captured group as a number.
fn parse<T: std::str::FromStr<Err: std::fmt::Display>>(
    caps: &Captures,
    name: &str,
) -> Result<T, HandlerError> {
    let text = caps.name(name).unwrap_or_default();
    text.parse()
        .map_err(|e| HandlerError::permanent(format!("{name} {text:?}: {e}")))
}

/// A line of a trainer: its progress, or its end, into its job's status. The lines of a
/// container come one at a time, in order: `Done` is written after the last step.
async fn progress_fn(
    line: LogLine,
    caps: Captures,
    Owner(job): Owner,
    Client(client): Client,
) -> Result<(), HandlerError> {
    let status = if caps.name("done").is_some() {
        json!({"phase": "Done"})
    } else {
        let step: u64 = parse(&caps, "step")?;
        let loss: f64 = parse(&caps, "loss")?;
        json!({"phase": "Training", "step": step, "loss": loss})
    };
    tracing::info!("{} (Pod {}): {}", job.name, line.pod, line.text);
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "TrainingJob"),
        "trainingjobs",
    );
    let namespace = job.namespace.as_deref().unwrap_or("default");
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
    api.patch_status(
        &job.name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map_err(|e| HandlerError::other(format!("cannot update {}: {e}", job.name)))?;
    Ok(())
}

/// The operator of this example (an error if its regex were invalid).
pub fn operator() -> Result<Operator, Box<dyn std::error::Error>> {
    let lines = LogSpec::new(r"^(?:step=(?P<step>\d+) loss=(?P<loss>[0-9.]+)|(?P<done>done))$")?
        .containers(&[CONTAINER]);
    Ok(Operator::new()
        .on_create("trainingjobs", "create_fn", create_fn)
        .on_log_with(
            "pods",
            "progress_fn",
            lines,
            progress_fn,
            // The trainers only: labelled (which narrows the watch of Pods) and controlled
            // by a TrainingJob (the `Owner` the handler writes to).
            Options::new()
                .label(JOB_LABEL, MetaFilter::Present)
                .controller_owner("kopf.dev/TrainingJob"),
        )
        // For `training rbac`: the trainer Pods, and the jobs' status.
        .rbac_rule("", "pods", &["create"])
        .rbac_rule("kopf.dev", "trainingjobs/status", &["patch"]))
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    operator()?
        .fake_manifests(vec![
            examples.join("trainingjob-crd.yaml"),
            examples.join("trainingjob.yaml"),
        ])
        .main()
        .await?;
    Ok(())
}
