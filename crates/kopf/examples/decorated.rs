//! Handlers registered with attribute macros. `kopf::run()` runs them; here
//! `Operator::from_registry()` does, to add the example manifests for `run --fake`.
//!
//! ```sh
//! cargo run --example decorated -- run --fake
//! ```

use kopf::prelude::*;
use serde_json::{Value, json};

#[kopf::on::create("kopfexamples")]
async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
    kopf::tracing::info!("created {name} with field {}", spec["field"]);
    Ok(json!({"message": "hello world"})) // lands in status.create_fn
}

#[kopf::on::field("kopfexamples", field = "spec.field")]
async fn field_fn(Old(old): Old, New(new): New) -> Result<(), HandlerError> {
    kopf::tracing::info!("spec.field changed: {old:?} -> {new:?}");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    // `kopf::run!().await` alone when no development manifests are wanted.
    kopf::Operator::from_registry()
        .about(kopf::about!())
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
