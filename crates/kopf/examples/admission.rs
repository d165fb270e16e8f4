//! Admission and conversion webhooks: a validating handler that rejects KopfExamples without
//! `spec.field` (and warns about empty `spec.items`), a mutating handler that labels them
//! and defaults `spec.duration`, and a converter between the CRD's v1 (`items: [item1]`)
//! and v2 (`items: [{name: item1}]`). The operator serves them over HTTPS on port 9443 with
//! a generated certificate, and registers them in the cluster (`webhooks_managed`).
//!
//! ```sh
//! cargo run --example admission -- run --fake
//! export KUBECONFIG=<the path in the banner>
//! kubectl apply -f - <<<'{"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "bad"}, "spec": {}}'
//! #  error: ... admission webhook "check-field.kopf.dev" denied the request: spec.field is required
//! kubectl get kopfexamples.v2.kopf.dev kopf-example-1 -o yaml    # items as objects
//! ```
//!
//! On a real cluster, the API server must reach the operator: run it in the cluster behind a
//! Service (`WebhookServer::service`) with a certificate (`run --webhook-cert/--webhook-key`),
//! or give a host name the API server can reach (`run --webhook-host`).

use kopf::prelude::*;
use serde_json::{Value, json};

/// Rejects objects without `spec.field`; warns when `spec.items` is empty.
async fn check_field(
    Spec(spec): Spec,
    Name(name): Name,
    user: UserInfo,
    warnings: Warnings,
) -> Result<(), AdmissionError> {
    let field = spec.get("field").and_then(Value::as_str).unwrap_or("");
    if field.is_empty() {
        return Err(AdmissionError::with_code(
            format!(
                "spec.field is required (object {name:?}, user {:?})",
                user.username()
            ),
            422,
        ));
    }
    let items = spec.get("items").and_then(Value::as_array);
    if items.is_none_or(|i| i.is_empty()) {
        warnings.push(format!("{name}: spec.items is empty; nothing to do"));
    }
    Ok(())
}

/// Labels every new or changed object and defaults `spec.duration`.
async fn defaults(
    Spec(spec): Spec,
    operation: Operation,
    DryRun(dry_run): DryRun,
    patch: Patch,
) -> Result<(), AdmissionError> {
    kopf::tracing::info!("Mutating on {operation} (dry run: {dry_run}).");
    patch.merge(json!({"metadata": {"labels": {"kopf.dev/checked": "yes"}}}));
    if spec.get("duration").is_none() {
        patch.merge(json!({"spec": {"duration": "1m"}}));
    }
    Ok(())
}

/// v1 `spec.items: ["a"]` ⇄ v2 `spec.items: [{"name": "a"}]`.
fn convert(mut obj: Value, to: &str) -> Result<Value, String> {
    let Some(items) = obj.pointer_mut("/spec/items").and_then(Value::as_array_mut) else {
        return Ok(obj);
    };
    for item in items.iter_mut() {
        let converted = match (to, &*item) {
            ("v2", Value::String(s)) => json!({"name": s}),
            ("v1", Value::Object(o)) => o.get("name").cloned().unwrap_or(Value::Null),
            ("v1" | "v2", other) => other.clone(),
            (other, _) => return Err(format!("kopfexamples have no version {other}")),
        };
        *item = converted;
    }
    Ok(obj)
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .on_validate_with(
            "kopfexamples",
            "check_field",
            check_field,
            WebhookOptions::new().operations([Operation::Create, Operation::Update]),
        )
        .on_mutate_with(
            "kopfexamples",
            "defaults",
            defaults,
            WebhookOptions::new().operations([Operation::Create, Operation::Update]),
        )
        .on_convert("kopfexamples.kopf.dev", convert)
        .webhooks_managed("kopf.dev")
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    operator()
        .fake_manifests(vec![dir.join("admission-crd.yaml"), dir.join("obj.yaml")])
        .main()
        .await
}
