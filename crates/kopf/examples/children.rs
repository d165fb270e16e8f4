//! Children: a creation handler creates a ConfigMap and adopts it, so that it carries the
//! object's namespace, labels and an owner reference (Kubernetes deletes it with its owner).
//!
//! ```sh
//! cargo run --example children -- run --fake
//! KUBECONFIG=<the path in the banner> kubectl get configmaps
//! ```

use kopf::prelude::*;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

async fn create_fn(
    Body(body): Body,
    Spec(spec): Spec,
    Client(client): Client,
) -> Result<Value, HandlerError> {
    let mut child = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": {"field": spec["field"].as_str().unwrap_or_default()},
    });
    // Owner reference, generateName from the owner's name, its namespace and labels.
    kopf::hierarchy::adopt(&mut child, &body)?;
    let namespace = child["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ConfigMap"),
        "configmaps",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &ar);
    let child: DynamicObject = serde_json::from_value(child)?;
    let created = api
        .create(&PostParams::default(), &child)
        .await
        .map_err(|e| HandlerError::other(format!("cannot create the ConfigMap: {e}")))?;
    Ok(json!({"child": created.metadata.name}))
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        // For `children rbac`: the handler creates ConfigMaps.
        .rbac_rule("", "configmaps", &["create"])
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
