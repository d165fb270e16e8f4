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
    let owner = body["metadata"]["name"].as_str().unwrap_or_default();
    // One name per owner, not a generated one: the handler runs again when the operator
    // dies between creating the child and storing the result, and the second run must
    // find the first run's child instead of creating another (see tests/simulation.rs).
    let name = format!("{owner}-child");
    let mut child = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"field": spec["field"].as_str().unwrap_or_default()},
    });
    // Owner reference, the owner's namespace and labels.
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
    match api.create(&PostParams::default(), &child).await {
        Ok(_) => Ok(json!({"child": name})),
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            adopted_already(&api, &name, &body).await?;
            Ok(json!({"child": name}))
        }
        Err(e) => Err(HandlerError::other(format!(
            "cannot create the ConfigMap {name}: {e}"
        ))),
    }
}

/// Checks that an existing child is this owner's (made by an earlier run of the handler),
/// not someone else's ConfigMap of the same name.
async fn adopted_already(
    api: &Api<DynamicObject>,
    name: &str,
    owner: &Value,
) -> Result<(), HandlerError> {
    let existing = api
        .get(name)
        .await
        .map_err(|e| HandlerError::other(format!("cannot read the ConfigMap {name}: {e}")))?;
    let ours = existing
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| Some(r.uid.as_str()) == owner["metadata"]["uid"].as_str());
    if ours {
        Ok(())
    } else {
        Err(HandlerError::permanent(format!(
            "the ConfigMap {name} exists and is not this object's: rename or delete it"
        )))
    }
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
