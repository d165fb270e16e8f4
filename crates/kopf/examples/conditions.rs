//! `status.conditions`: declared defaults written on an object's first visit, a long creation
//! handler that publishes its progress in `Progressing` as it goes (each step at once, with
//! `sync`), then sets `Ready`; and the auto condition of each handler's outcome
//! (`CreateFnSucceeded`). Other controllers' conditions on the same objects are kept.
//!
//! ```sh
//! cargo run --example conditions -- run --fake
//! KUBECONFIG=<the path in the banner> kubectl apply -f examples/obj.yaml
//! KUBECONFIG=<the path in the banner> kubectl wait --for=condition=Ready kopfexample/kopf-example-1
//! ```

use std::time::Duration;

use kopf::prelude::*;
use serde_json::{Value, json};

/// The steps of the (pretend) provisioning.
const STEPS: [&str; 3] = ["volumes", "network", "workload"];

async fn create_fn(Name(name): Name, conditions: Conditions) -> Result<Value, HandlerError> {
    for (i, step) in STEPS.iter().enumerate() {
        // The status stays True, so its lastTransitionTime stays that of the first step:
        // only the message moves on.
        conditions.set(
            "Progressing",
            ConditionStatus::True,
            "Provisioning",
            format!("step {}/{}: {step}", i + 1, STEPS.len()),
        )?;
        // Visible at once (`kubectl get -o yaml`), while the long part runs.
        conditions.sync().await?;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    conditions.set(
        "Progressing",
        ConditionStatus::False,
        "Provisioned",
        format!("all {} steps done", STEPS.len()),
    )?;
    // Written with the handler's result, in the cycle's one status PATCH.
    conditions.set(
        "Ready",
        ConditionStatus::True,
        "Provisioned",
        format!("{name} is ready"),
    )?;
    kopf::tracing::info!("{name} is provisioned.");
    Ok(json!({"message": format!("{name} is provisioned")}))
}

/// The operator of this example.
pub fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .conditions(
            "kopfexamples",
            // On the first visit, in the first status write: "not known yet".
            ConditionsSpec::new()
                .declare("Ready", ConditionStatus::Unknown, "Pending", "")
                .declare("Progressing", ConditionStatus::Unknown, "Pending", "")
                // CreateFnSucceeded: True, Unknown while retrying, False on failure.
                .per_handler(true),
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
