//! Handlers registered with attribute macros, run by `kopf::run()`.
//!
//! ```sh
//! cargo run --example decorated -- run --fake --apply examples/crd.yaml --apply examples/obj.yaml
//! ```

use kopf::{HandlerError, Name, New, Old, Spec};
use serde_json::{Value, json};

#[kopf::on::create("kopfexamples")]
async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
    tracing::info!("created {name} with field {}", spec["field"]);
    Ok(json!({"message": "hello world"})) // lands in status.create_fn
}

#[kopf::on::field("kopfexamples", field = "spec.field")]
async fn field_fn(Old(old): Old, New(new): New) -> Result<(), HandlerError> {
    tracing::info!("spec.field changed: {old:?} -> {new:?}");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    kopf::run().await
}
