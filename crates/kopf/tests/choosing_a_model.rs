//! docs/choosing-a-model.md, as tests: one small operator (a KopfExample's `spec.replicas`
//! kept on a child Deployment `<name>-web`) written with cause handlers and with a
//! reconcile, against the fake API server. Both follow changes of the spec; when someone
//! scales the Deployment by hand, the reconcile puts it back and the cause handlers do not
//! (nothing of the object changed). The doc shows the code of the two modules below, and a
//! test checks that it still does.

mod common;

use k8s_openapi::api::apps::v1::Deployment;
use kopf::Operator;
use kopf_testing::FakeApiServer;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{Running, eventually, kex_api, obj, settle, until_object};

/// The Deployment an object should have: `<name>-web`, `spec.replicas` replicas, owned by
/// the object (shared by both versions).
fn desired(owner: &Value) -> Result<Value, kopf::HandlerError> {
    let name = format!(
        "{}-web",
        owner["metadata"]["name"].as_str().unwrap_or_default()
    );
    let replicas = owner["spec"]["replicas"].as_i64().unwrap_or(1);
    let labels = json!({"app": name});
    let mut deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    });
    kopf::hierarchy::adopt(&mut deployment, owner)?; // owner reference, namespace
    Ok(deployment)
}

/// The cause-handler version.
mod with_handlers {
    use super::desired;
    use k8s_openapi::api::apps::v1::Deployment;
    use kopf::prelude::*;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use serde_json::{Value, json};

    /// Once, when the object is created: create its Deployment.
    async fn create_fn(Body(body): Body, Client(client): Client) -> Result<(), HandlerError> {
        let deployment: Deployment = serde_json::from_value(desired(&body)?)?;
        let namespace = deployment.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(client, &namespace);
        api.create(&PostParams::default(), &deployment).await?;
        Ok(())
    }

    /// When `spec.replicas` changes: scale the Deployment to it.
    async fn replicas_fn(
        Name(name): Name,
        Namespace(namespace): Namespace,
        New(replicas): New,
        Client(client): Client,
    ) -> Result<(), HandlerError> {
        let api: Api<Deployment> =
            Api::namespaced(client, namespace.as_deref().unwrap_or("default"));
        let patch = json!({"spec": {"replicas": replicas.unwrap_or(Value::from(1))}});
        api.patch(
            &format!("{name}-web"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        Ok(())
    }

    pub fn operator() -> Operator {
        let replicas = Options::new().field("spec.replicas"); // id: replicas_fn/spec.replicas
        Operator::new()
            .on_create("kopfexamples", "create_fn", create_fn)
            .on_with(
                Reason::Update,
                "kopfexamples",
                "replicas_fn",
                replicas_fn,
                replicas,
            )
    }
}

/// The reconcile version.
mod with_reconcile {
    use super::desired;
    use k8s_openapi::api::apps::v1::Deployment;
    use kopf::prelude::*;
    use kube::api::{Api, Patch, PatchParams};
    use serde_json::Value;
    use std::sync::Arc;

    /// Whatever happened: make the Deployment what the object says (one server-side apply,
    /// whether it is missing, scaled by hand, or right already).
    async fn reconcile(obj: Arc<Value>, ctx: ReconcileContext) -> Result<Action, HandlerError> {
        let Client(client) = ctx.extract::<Client>()?;
        let deployment = desired(&obj)?;
        let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = deployment["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let api: Api<Deployment> = Api::namespaced(client, namespace);
        let params = PatchParams::apply("replicas-operator").force();
        api.patch(name, &params, &Patch::Apply(&deployment)).await?;
        Ok(Action::await_change())
    }

    pub fn operator() -> Operator {
        Operator::new().reconcile_with(
            // A change of an owned Deployment (a scale by hand) reconciles its owner.
            Reconciler::new("kopfexamples", reconcile).owns("deployments"),
        )
    }
}

fn deployments(server: &FakeApiServer) -> Api<Deployment> {
    Api::namespaced(server.client(), "default")
}

async fn replicas(api: &Api<Deployment>, name: &str) -> Option<i32> {
    let deployment = api.get_opt(name).await.expect("get")?;
    deployment.spec?.replicas
}

async fn until_replicas(api: &Api<Deployment>, want: i32) {
    eventually(&format!("web-web to have {want} replicas"), async || {
        replicas(api, "web-web").await == Some(want)
    })
    .await;
}

/// Starts the operator, creates `web` with 2 replicas and waits for its Deployment, then
/// scales the Deployment to 5 by hand (as `kubectl scale` does, on the scale subresource).
async fn created_then_scaled_by_hand(op: Operator) -> (FakeApiServer, Running) {
    let server = common::paused_server().await;
    let running = Running::start(&server, op).await;
    kex_api(&server)
        .create(&PostParams::default(), &obj("web", json!({"replicas": 2})))
        .await
        .expect("create");
    let deployments = deployments(&server);
    until_replicas(&deployments, 2).await;
    let scale = json!({"spec": {"replicas": 5}});
    let scaled = deployments
        .patch_scale("web-web", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .expect("scale by hand");
    // What the API server stored (a reconcile may have put it back since).
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(5));
    (server, running)
}

/// The object's spec changes: both versions follow it.
async fn spec_changes_to_3(server: &FakeApiServer) {
    kex_api(server)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("patch");
    until_replicas(&deployments(server), 3).await;
}

#[tokio::test(start_paused = true)]
async fn reconcile_puts_a_deployment_scaled_by_hand_back() {
    let (server, running) = created_then_scaled_by_hand(with_reconcile::operator()).await;
    until_replicas(&deployments(&server), 2).await;
    spec_changes_to_3(&server).await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cause_handlers_leave_a_deployment_scaled_by_hand_as_it_is() {
    let (server, running) = created_then_scaled_by_hand(with_handlers::operator()).await;
    // The operator handles a later change of the object (one that is not `spec.replicas`):
    // it is up and watching, and still no handler has a cause to touch the Deployment.
    let api = kex_api(&server);
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"note": "later"}})),
    )
    .await
    .expect("patch");
    until_object(&api, "web", "the later change to be handled", |o| {
        let handled = o
            .and_then(|o| o.metadata.annotations.as_ref())
            .and_then(|a| a.get("kopf.zalando.org/last-handled-configuration"));
        handled.is_some_and(|h| h.contains("later"))
    })
    .await;
    settle(&server).await;
    assert_eq!(replicas(&deployments(&server), "web-web").await, Some(5));
    spec_changes_to_3(&server).await;
    running.stop().await;
}

/// Every line of the code in docs/choosing-a-model.md is in this file.
#[test]
fn the_doc_shows_this_code() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/choosing-a-model.md"
    ))
    .expect("the doc");
    let this = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/choosing_a_model.rs"
    ))
    .expect("this file");
    let mut in_code = false;
    let mut lines = 0;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_code = line.starts_with("```rust");
            continue;
        }
        let line = line.trim();
        if in_code && !line.is_empty() && line != "..." {
            lines += 1;
            assert!(
                this.contains(line),
                "the doc's code has {line:?}, this file has not"
            );
        }
    }
    assert!(lines > 40, "the doc shows {lines} lines of code");
}
