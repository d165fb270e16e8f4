//! All kinds of changing handlers on one resource: create, update, delete, resume, field.
//!
//! ```sh
//! cargo run --example handlers -- run --fake
//! KUBECONFIG=<the path in the banner> kubectl patch kex kopf-example-1 --type=merge -p '{"spec":{"field":"changed"}}'
//! KUBECONFIG=<the path in the banner> kubectl delete kex kopf-example-1
//! ```

use kopf::prelude::*;
use serde_json::{Value, json};

async fn create_fn(Name(name): Name, Spec(spec): Spec) -> Result<Value, HandlerError> {
    kopf::tracing::info!("creating {name} with spec {spec}");
    Ok(json!({"message": "created"}))
}

async fn update_fn(Diff(diff): Diff) -> Result<Value, HandlerError> {
    kopf::tracing::info!("updating: {}", diff.to_kopf_json());
    Ok(json!({"message": "updated"}))
}

async fn delete_fn(Name(name): Name) -> Result<(), HandlerError> {
    kopf::tracing::info!("deleting {name}");
    Ok(())
}

async fn resume_fn(reason: Reason) -> Result<(), HandlerError> {
    kopf::tracing::info!("resuming ({reason:?}) after an operator restart");
    Ok(())
}

async fn field_fn(Old(old): Old<String>, New(new): New<String>) -> Result<Value, HandlerError> {
    kopf::tracing::info!("spec.field: {old:?} -> {new:?}");
    Ok(json!({"old": old, "new": new}))
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .on_update("kopfexamples", "update_fn", update_fn)
        .on_delete("kopfexamples", "delete_fn", delete_fn)
        .on_resume("kopfexamples", "resume_fn", resume_fn)
        .on_field("kopfexamples", "field_fn", "spec.field", field_fn)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
