//! Kubernetes Events about the handled object, posted by a handler (rate-limited per object).
//!
//! ```sh
//! cargo run --example events -- run --fake
//! KUBECONFIG=/tmp/kopf-fake/kubeconfig kubectl get events
//! ```

use clap::Parser;
use kopf::{EventsHandle, HandlerError, Name, Operator};

async fn create_fn(Name(name): Name, events: EventsHandle) -> Result<(), HandlerError> {
    events.info("Greeting", format!("Hello, {name}!"));
    Ok(())
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new().on_create("kopfexamples", "create_fn", create_fn)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let kopf::cli::Command::Run(args) = kopf::cli::Cli::parse().command;
    let args = args.with_default_manifests(&kopf::cli::example_manifests());
    operator().run_with_args(args).await?;
    Ok(())
}
