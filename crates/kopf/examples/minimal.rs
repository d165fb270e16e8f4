//! The minimal operator: a creation handler that writes a message into the status, and an
//! update handler that records the new `spec.field` (the job of `cargo xtask bench`).
//!
//! ```sh
//! cargo run --example minimal -- run --fake     # no cluster: an embedded fake API server
//! cargo run --example minimal -- run -A         # the cluster of the current kubeconfig
//! ```
//!
//! With `--fake` and no `--apply`, the example CRD and object (`examples/crd.yaml`,
//! `examples/obj.yaml`) are applied, and a kubeconfig for kubectl is written to
//! `$TMPDIR/kopf-fake-minimal-<pid>/kubeconfig`, printed at start and removed at exit
//! (`--fake-kubeconfig` to choose it).

use std::path::PathBuf;

use kopf::{Cause, HandlerResult, Operator};
use serde_json::json;

async fn create_fn(cause: Cause) -> HandlerResult {
    kopf::tracing::info!(
        "And here we are! Creating {} with spec {}",
        cause.name(),
        cause.spec()
    );
    Ok(Some(json!({"message": "hello world"})))
}

async fn update_fn(cause: Cause) -> HandlerResult {
    Ok(Some(json!({"field": cause.spec()["field"]})))
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
    let cli = kopf::cli::Cli::parse_args();
    if let Some(args) = cli.run_args().filter(|a| a.fake) {
        tokio::spawn(show_status(args.fake_kubeconfig.clone()));
    }
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main_with(cli)
        .await
}

/// In `--fake` mode: log the example object's status once the handler has written it.
#[allow(dead_code)]
async fn show_status(kubeconfig: PathBuf) {
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let Ok(kc) = kube::config::Kubeconfig::read_from(&kubeconfig) else {
            continue;
        };
        let Ok(config) = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await else {
            continue;
        };
        let Ok(client) = kube::Client::try_from(config) else {
            continue;
        };
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
            "kopfexamples",
        );
        let api: kube::Api<kube::core::DynamicObject> = kube::Api::all_with(client, &ar);
        if let Ok(list) = api.list(&Default::default()).await
            && let Some(o) = list.items.iter().find(|o| o.data.get("status").is_some())
        {
            kopf::tracing::info!(
                "status of {}: {}",
                o.metadata.name.clone().unwrap_or_default(),
                o.data["status"]
            );
            kopf::tracing::info!(
                "Serving until Ctrl-C. Try: KUBECONFIG={} kubectl get kopfexamples",
                kubeconfig.display()
            );
            return;
        }
    }
}
