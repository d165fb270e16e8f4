//! Kubernetes Events about the handled object, posted by handlers with Kopf's helpers:
//! `info` (Normal), `warn` (Warning) and `exception` (Error, named after the error type).
//! They go out after the cycle, rate-limited per object.
//!
//! ```sh
//! cargo run --example events -- run --fake
//! KUBECONFIG=<the path in the banner> kubectl patch kex kopf-example-1 --type=merge -p '{"spec":{"duration":"soon"}}'
//! KUBECONFIG=<the path in the banner> kubectl get events
//! ```

use kopf::prelude::*;

async fn create_fn(Name(name): Name, events: Events) -> Result<(), HandlerError> {
    events.info("Greeting", format!("Hello, {name}!"));
    Ok(())
}

/// Reports a spec it cannot use, without failing the handler.
async fn update_fn(Spec(spec): Spec, events: Events) -> Result<(), HandlerError> {
    let duration = spec["duration"].as_str().unwrap_or("");
    match duration.trim_end_matches('m').parse::<u32>() {
        Ok(minutes) if minutes > 60 => {
            events.warn("LongDuration", format!("{minutes} minutes is long"))
        }
        Ok(_) => {}
        Err(e) => events.exception(&format!("Cannot read spec.duration {duration:?}"), &e),
    }
    Ok(())
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .on_update("kopfexamples", "update_fn", update_fn)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
