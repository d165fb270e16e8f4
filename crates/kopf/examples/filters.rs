//! Filters: handlers run only for objects whose labels, annotations or whole body pass.
//!
//! ```sh
//! cargo run --example filters -- run --fake
//! KUBECONFIG=/tmp/kopf-fake/kubeconfig kubectl label kex kopf-example-1 tier=gold
//! ```

use std::sync::Arc;

use clap::Parser;
use kopf::{HandlerError, MetaFilter, Name, Operator, Options, Reason};
use serde_json::{Value, json};

async fn labelled_fn(Name(name): Name) -> Result<Value, HandlerError> {
    tracing::info!("{name} has somelabel=somevalue");
    Ok(json!("matched by label"))
}

async fn annotated_fn(Name(name): Name) -> Result<Value, HandlerError> {
    tracing::info!("{name} has any `someannotation`");
    Ok(json!("matched by annotation"))
}

async fn when_fn(Name(name): Name) -> Result<Value, HandlerError> {
    tracing::info!("{name} has spec.field == 'value'");
    Ok(json!("matched by when"))
}

async fn never_fn() -> Result<Value, HandlerError> {
    Ok(json!("never: the object has no `skip` label"))
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    let by_label = Options {
        labels: vec![("somelabel".into(), MetaFilter::Value("somevalue".into()))],
        ..Default::default()
    };
    let by_annotation = Options {
        annotations: vec![("someannotation".into(), MetaFilter::Present)],
        ..Default::default()
    };
    let by_when = Options {
        when: Some(Arc::new(|body: &Value| body["spec"]["field"] == "value")),
        ..Default::default()
    };
    let never = Options {
        labels: vec![("skip".into(), MetaFilter::Present)],
        ..Default::default()
    };
    Operator::new()
        .on_with(
            Reason::Create,
            "kopfexamples",
            "labelled_fn",
            labelled_fn,
            by_label,
        )
        .on_with(
            Reason::Create,
            "kopfexamples",
            "annotated_fn",
            annotated_fn,
            by_annotation,
        )
        .on_with(Reason::Create, "kopfexamples", "when_fn", when_fn, by_when)
        .on_with(Reason::Create, "kopfexamples", "never_fn", never_fn, never)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let kopf::cli::Command::Run(args) = kopf::cli::Cli::parse().command;
    let args = args.with_default_manifests(&kopf::cli::example_manifests());
    operator().run_with_args(args).await?;
    Ok(())
}
