//! The fake API server's write rate with no operator: merge PATCHes of `/status` of the
//! objects `bench-00000` .. `bench-{N-1}` (`--n`), `--concurrency` in flight. Prints one JSON
//! line: `{"writes": N, "failed": F, "seconds": S}`.

use std::time::Instant;

use clap::Parser;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

#[derive(Parser)]
#[command(about = "The fake API server alone: N merge PATCHes of /status, timed.")]
struct Args {
    /// Objects to write (named `bench-{i:05}`, in namespace `default`).
    #[arg(long)]
    n: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    bench_systems::init_logging("status_writer");
    let args = Args::parse();
    let client = Client::try_default().await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, "default", &bench_systems::kopfexamples());
    let started = Instant::now();
    let failed = futures::stream::iter(0..args.n)
        .map(|i| {
            let api = api.clone();
            async move {
                let patch = json!({"status": {"writer": {"i": i}}});
                api.patch_status(
                    &format!("bench-{i:05}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .is_err()
            }
        })
        .buffer_unordered(args.concurrency as usize)
        .filter(|failed| std::future::ready(*failed))
        .count()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"writes": args.n, "failed": failed, "seconds": seconds})
    );
    Ok(())
}
