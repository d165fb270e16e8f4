//! Indexes: in-memory key/value pairs per object, readable by every handler.
//!
//! ```sh
//! cargo run --example indexes -- run --fake
//! ```
//!
//! `by_field` maps each object's `spec.field` to its name. The creation handler reports the
//! other objects with the same field (`status.create_fn.peers`); the probe `fields` reports
//! how many objects use each field (the liveness endpoint serves it).

use std::collections::BTreeMap;

use kopf::prelude::*;
use serde_json::{Value, json};

/// `spec.field` → the object's name (objects without a field are not indexed).
async fn by_field(
    Spec(spec): Spec,
    Name(name): Name,
) -> Result<Option<(String, String)>, HandlerError> {
    Ok(spec["field"]
        .as_str()
        .map(|field| (field.to_string(), name)))
}

async fn create_fn(
    Spec(spec): Spec,
    Name(name): Name,
    index: Index<String, String>,
) -> Result<Value, HandlerError> {
    let field = spec["field"].as_str().unwrap_or_default().to_string();
    let mut peers: Vec<String> = index
        .get(&field)
        .into_iter()
        .filter(|n| *n != name)
        .collect();
    peers.sort();
    Ok(json!({"peers": peers}))
}

async fn fields(index: Index<String, String>) -> Result<BTreeMap<String, usize>, HandlerError> {
    Ok(index
        .to_map()
        .into_iter()
        .map(|(field, names)| (field, names.len()))
        .collect())
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .index("kopfexamples", "by_field", by_field)
        .on_create("kopfexamples", "create_fn", create_fn)
        .on_probe("fields", fields)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
