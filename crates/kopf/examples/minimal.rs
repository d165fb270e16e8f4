//! The minimal operator: one creation handler that writes a message into the status.
//!
//! ```sh
//! cargo run --example minimal -- run --fake        # no cluster: an in-process fake API server
//! cargo run --example minimal -- run               # the current kubeconfig context
//! ```
//!
//! With `--fake`, the example CRD and object (`examples/crd.yaml`, `examples/obj.yaml`) are
//! applied, a kubeconfig is written (`--fake-kubeconfig`, default
//! `/tmp/kopf-fake/kubeconfig`) so that kubectl can look at and change the objects.

use std::path::PathBuf;

use kopf::{Cause, HandlerResult, Operator};
use serde_json::json;

async fn create_fn(cause: Cause) -> HandlerResult {
    tracing::info!(
        "And here we are! Creating {} with spec {}",
        cause.name(),
        cause.spec()
    );
    Ok(Some(json!({"message": "hello world"})))
}

fn operator() -> Operator {
    Operator::new().on_create("kopfexamples", "create_fn", create_fn)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("run") {
        anyhow::bail!("usage: minimal run [--fake] [--fake-kubeconfig PATH] [--apply FILE]...");
    }
    let mut fake = false;
    let mut kubeconfig = PathBuf::from("/tmp/kopf-fake/kubeconfig");
    let mut manifests: Vec<PathBuf> = Vec::new();
    let mut it = args.iter().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--fake" => fake = true,
            "--fake-kubeconfig" => {
                kubeconfig = it
                    .next()
                    .map(PathBuf::from)
                    .ok_or_else(|| anyhow::anyhow!("--fake-kubeconfig needs a path"))?
            }
            "--apply" => manifests.push(
                it.next()
                    .map(PathBuf::from)
                    .ok_or_else(|| anyhow::anyhow!("--apply needs a file"))?,
            ),
            "-A" | "--all-namespaces" | "--standalone" => {}
            other => anyhow::bail!(
                "unknown option {other:?}; usage: minimal run [--fake] [--fake-kubeconfig PATH] [--apply FILE]..."
            ),
        }
    }
    if !fake {
        let client = kube::Client::try_default().await?;
        operator().run(client).await?;
        return Ok(());
    }
    let server = kopf_testing::FakeApiServer::start().await?;
    if manifests.is_empty() {
        let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        manifests = vec![examples.join("crd.yaml"), examples.join("obj.yaml")];
    }
    for m in &manifests {
        server.apply_file(m)?;
    }
    server.write_kubeconfig(&kubeconfig)?;
    tracing::info!(
        "Fake API server at {}; look at it with: KUBECONFIG={} kubectl get kopfexamples -o yaml",
        server.url(),
        kubeconfig.display()
    );
    let client = server.client();
    let watch_client = client.clone();
    tokio::spawn(async move {
        // Show the outcome once the handler has written the status.
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
            "kopfexamples",
        );
        let api: kube::Api<kube::core::DynamicObject> = kube::Api::all_with(watch_client, &ar);
        for _ in 0..100 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            if let Ok(list) = api.list(&Default::default()).await
                && let Some(o) = list.items.iter().find(|o| o.data.get("status").is_some())
            {
                tracing::info!(
                    "status of {}: {}",
                    o.metadata.name.clone().unwrap_or_default(),
                    o.data["status"]
                );
                break;
            }
        }
    });
    operator().run(client).await?;
    server.shutdown().await;
    Ok(())
}
