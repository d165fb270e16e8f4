//! `status.conditions`: a declared default, a condition set by a handler (published at once
//! with `sync`, before the long part), and the auto conditions of the handlers' outcomes
//! (`CreateFnSucceeded`, the summary `Ready`, kstatus's `Reconciling`/`Stalled`).
//!
//! ```sh
//! cargo run --example conditions -- run --fake
//! kubectl wait --for=condition=Ready kopfexample/kopf-example-1
//! ```

use std::time::Duration;

use kopf::{ConditionStatus, Conditions, ConditionsSpec, HandlerError, Name, Operator};
use serde_json::{Value, json};

async fn create_fn(Name(name): Name, conditions: Conditions) -> Result<Value, HandlerError> {
    conditions.set(
        "Provisioned",
        ConditionStatus::False,
        "Provisioning",
        "creating the resources",
    )?;
    // Visible at once (kubectl get -o yaml), while the long part runs.
    conditions.sync().await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    conditions.set("Provisioned", ConditionStatus::True, "Provisioned", "")?;
    Ok(json!({"message": format!("{name} is provisioned")}))
}

/// The operator of this example.
pub fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .conditions(
            "kopfexamples",
            ConditionsSpec::new()
                .declare("Provisioned", ConditionStatus::Unknown, "Pending", "")
                .per_handler(true)
                .summary("Ready")
                .kstatus(true),
        )
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
