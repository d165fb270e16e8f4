//! Filters: handlers run only for objects whose labels, annotations, field values or whole
//! body pass; the filters are checked before any work, and a handler that does not match
//! costs nothing (no call, no record, no finalizer).
//!
//! ```sh
//! cargo run --example filters -- run --fake
//! KUBECONFIG=<the path in the banner> kubectl patch kex kopf-example-1 --type=merge -p '{"spec":{"field":"changed"}}'
//! ```

use std::sync::Arc;

use kopf::prelude::*;
use serde_json::{Value, json};

async fn matched(Name(name): Name) -> Result<Value, HandlerError> {
    kopf::tracing::info!("{name} matched");
    Ok(json!("matched"))
}

async fn never_fn() -> Result<Value, HandlerError> {
    Ok(json!("never: the object has no `skip` label"))
}

/// Runs only when `spec.field` goes from "value" to "changed".
async fn field_changed_fn(Old(old): Old, New(new): New) -> Result<Value, HandlerError> {
    Ok(json!({"from": old, "to": new}))
}

fn starts_with_some(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.starts_with("some"))
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    let create = |op: Operator, id: &str, options: Options| {
        op.on_with(Reason::Create, "kopfexamples", id, matched, options)
    };
    let op = Operator::new();
    // Labels and annotations: an exact value, present, absent, or a predicate.
    let op = create(
        op,
        "label_value_fn",
        Options::new().label("somelabel", "somevalue"),
    );
    let op = create(
        op,
        "annotation_present_fn",
        Options::new().annotation("someannotation", MetaFilter::Present),
    );
    let op = create(
        op,
        "annotation_absent_fn",
        Options::new().annotation("otherannotation", MetaFilter::Absent),
    );
    let op = create(
        op,
        "label_predicate_fn",
        Options::new().label(
            "somelabel",
            MetaFilter::Predicate(Arc::new(starts_with_some)),
        ),
    );
    // The whole object, and one field's value (the id gets the field as a suffix).
    let op = create(
        op,
        "when_fn",
        Options::new().when(|body: &Value| {
            body["spec"]["items"]
                .as_array()
                .is_some_and(|i| i.len() == 2)
        }),
    );
    let op = create(
        op,
        "field_value_fn",
        Options::new().field("spec.field").value("value"),
    );
    op.on_with(
        Reason::Create,
        "kopfexamples",
        "never_fn",
        never_fn,
        Options::new().label("skip", MetaFilter::Present),
    )
    .on_with(
        Reason::Update,
        "kopfexamples",
        "field_changed_fn",
        field_changed_fn,
        Options::new()
            .field("spec.field")
            .old("value")
            .new_value("changed"),
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
