//! The `kopf-rs-delete` system of `cargo xtask bench`: the `minimal` example's job (a message
//! in `status.create_fn` on creation, the new `spec.field` in `status.update_fn`) plus a
//! delete handler, so every object carries the operator's finalizer. It measures what the
//! finalizer costs: one PATCH on an object's first cycle, put on before any handler runs.

use kopf::{Cause, HandlerResult, Operator};
use serde_json::json;

async fn create_fn(_cause: Cause) -> HandlerResult {
    Ok(Some(json!({"message": "hello world"})))
}

async fn update_fn(cause: Cause) -> HandlerResult {
    Ok(Some(json!({"field": cause.spec()["field"]})))
}

async fn delete_fn(_cause: Cause) -> HandlerResult {
    Ok(None)
}

#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .on_update("kopfexamples", "update_fn", update_fn)
        .on_delete("kopfexamples", "delete_fn", delete_fn)
        .main()
        .await
}
