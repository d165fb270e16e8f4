//! Reconcile: one level-triggered function converges each KopfExample on its spec, whatever
//! changed. It keeps a ConfigMap `<name>-config` holding `spec.field`, owned by the object;
//! deleting or editing the ConfigMap by hand triggers the owner's reconcile, which puts it
//! back. It also runs every 30 seconds (a drift check), and cleans up on deletion.
//!
//! ```sh
//! cargo run --example reconcile -- run --fake
//! KUBECONFIG=<the path in the banner> kubectl apply -f examples/obj.yaml
//! KUBECONFIG=<the path in the banner> kubectl delete configmap kopf-example-1-config
//! KUBECONFIG=<the path in the banner> kubectl get configmap kopf-example-1-config   # back
//! ```

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf::prelude::*;
use kube::api::{Api, Patch, PatchParams};
use serde::Deserialize;
use serde_json::json;

/// The part of a KopfExample this operator reads.
#[derive(Deserialize)]
struct Example {
    metadata: kube::core::ObjectMeta,
    #[serde(default)]
    spec: ExampleSpec,
}

#[derive(Deserialize, Default)]
struct ExampleSpec {
    #[serde(default)]
    field: String,
}

/// The ConfigMap the object should have: its name, and the object as its owner.
fn desired(obj: &Example) -> Result<(String, ConfigMap), HandlerError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let child = format!("{name}-config");
    let cm = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": child,
            "ownerReferences": [{
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfExample",
                "name": name,
                "uid": obj.metadata.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "data": {"field": obj.spec.field},
    }))?;
    Ok((child, cm))
}

/// Makes the world look like the spec says: the ConfigMap exists and holds `spec.field`.
/// Server-side apply makes it one request whatever the ConfigMap's state (missing, edited
/// by hand, already right).
async fn reconcile(obj: Arc<Example>, ctx: ReconcileContext) -> Result<Action, HandlerError> {
    let Client(client) = ctx.extract::<Client>()?;
    let namespace = obj.metadata.namespace.as_deref().unwrap_or("default");
    let (child, cm) = desired(&obj)?;
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let params = PatchParams::apply("kopf-reconcile-example").force();
    api.patch(&child, &params, &Patch::Apply(&cm)).await?;
    kopf::tracing::info!(
        "Reconciled ({}): {child} holds {:?}.",
        ctx.trigger(),
        obj.spec.field
    );
    ctx.patch()
        .merge(json!({"status": {"child": child, "field": obj.spec.field}}));
    // Level-triggered: also look again every 30 s, in case something drifted unseen.
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// Runs once when the object is deleted (the ConfigMap goes with its owner anyway: this is
/// where external resources would be released).
async fn cleanup(obj: Arc<Example>, _ctx: ReconcileContext) -> Result<(), HandlerError> {
    kopf::tracing::info!(
        "Cleaning up after {}.",
        obj.metadata.name.as_deref().unwrap_or_default()
    );
    Ok(())
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .reconcile_with(
            Reconciler::new("kopfexamples", reconcile)
                .owns("configmaps")
                .cleanup(cleanup)
                .debounce(Duration::from_millis(200)),
        )
        // For `reconcile rbac`: the reconcile applies ConfigMaps.
        .rbac_rule("", "configmaps", &["create", "get", "patch"])
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
