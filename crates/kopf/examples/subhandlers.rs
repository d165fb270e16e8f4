//! Sub-handlers: a handler registers one sub-handler per item of `spec.items`; each has its
//! own progress record (`create_fn/item1`...), retries on its own, and its result lands in
//! `status.<parent>/<item>`. The parent finishes when all of its sub-handlers have.
//!
//! ```sh
//! cargo run --example subhandlers -- run --fake
//! KUBECONFIG=<the path in the banner> kubectl patch kex kopf-example-1 --type=merge -p '{"spec":{"items":["item1","item2","item3"]}}'
//! KUBECONFIG=<the path in the banner> kubectl get kex kopf-example-1 -o jsonpath='{.status}'
//! ```

use std::time::Duration;

use kopf::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct ExampleSpec {
    #[serde(default)]
    items: Vec<String>,
}

/// One sub-handler per item; `item2` needs a second attempt, to show that its siblings are
/// not run again meanwhile.
async fn create_fn(
    Spec(spec): Spec<ExampleSpec>,
    subhandlers: SubHandlers,
) -> Result<Value, HandlerError> {
    for item in &spec.items {
        let item = item.clone();
        subhandlers.register(&item.clone(), move |Retry(retry): Retry| {
            let item = item.clone();
            async move {
                if item == "item2" && retry == 0 {
                    return Err(TemporaryError {
                        message: format!("{item} is not ready yet"),
                        delay: Some(Duration::from_millis(200)),
                    });
                }
                kopf::tracing::info!("=== Handling creation for {item} (attempt {retry}). ===");
                Ok(json!({"created": item}))
            }
        });
    }
    Ok(json!({"items": spec.items.len()}))
}

/// Updates of `spec.items` (not its creation): one sub-handler per added item.
async fn items_fn(
    Old(old): Old<Vec<String>>,
    New(new): New<Vec<String>>,
    subhandlers: SubHandlers,
) -> Result<(), HandlerError> {
    let old = old.unwrap_or_default();
    for item in new.unwrap_or_default() {
        if !old.contains(&item) {
            subhandlers.register(&item.clone(), move || {
                let item = item.clone();
                async move { Ok::<_, HandlerError>(json!({"added": item})) }
            });
        }
    }
    Ok(())
}

/// Deletion: one cleanup sub-handler per item (sync functions work as well).
async fn delete_fn(
    Name(name): Name,
    Spec(spec): Spec<ExampleSpec>,
    subhandlers: SubHandlers,
) -> Result<(), HandlerError> {
    for item in spec.items {
        let name = name.clone();
        subhandlers.register(&item.clone(), move || -> Result<(), HandlerError> {
            kopf::tracing::info!("=== Cleaning up {item} of {name}. ===");
            Ok(())
        });
    }
    Ok(())
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .on_with(
            Reason::Update,
            "kopfexamples",
            "items_fn",
            items_fn,
            Options::new().field("spec.items"),
        )
        .on_delete("kopfexamples", "delete_fn", delete_fn)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
