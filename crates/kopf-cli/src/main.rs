//! The `kopf` command of kopf-rs.
//!
//! `kopf fake-apiserver` runs the in-memory Kubernetes API server of `kopf-testing`
//! standalone, so kubectl, Python clients or any operator can talk to it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kopf_testing::FakeApiServer;

/// kopf-rs: Kubernetes operators in a few lines of Rust.
#[derive(Debug, Parser)]
#[command(name = "kopf", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the in-memory Kubernetes API server until SIGINT/SIGTERM.
    FakeApiserver(FakeApiserverArgs),
}

#[derive(Debug, clap::Args)]
struct FakeApiserverArgs {
    /// TCP port on 127.0.0.1 (0 picks a free port).
    #[arg(long, env = "KOPF_FAKE_PORT", default_value_t = 0)]
    port: u16,
    /// Where to write a kubeconfig pointing at the server.
    #[arg(long, env = "KOPF_FAKE_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// YAML manifests to store at start (multi-document; CRDs are applied first). Repeatable.
    #[arg(long = "apply", value_name = "FILE")]
    apply: Vec<PathBuf>,
    /// The Kubernetes version reported by /version, as MAJOR.MINOR. The minor selects the
    /// kubectl the dispatcher runs; 1.31 talks JSON for every command.
    #[arg(long, env = "KOPF_FAKE_VERSION", default_value = "1.31", value_parser = parse_version)]
    kube_version: (String, String),
    /// Changes retained for watches and consistent lists (older resourceVersions get 410).
    #[arg(long, default_value_t = 100_000)]
    history_limit: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    bookmark_interval: u64,
    /// Milliseconds between CRD creation and its Established condition.
    #[arg(long, default_value_t = 0)]
    crd_establish_delay_ms: u64,
}

fn parse_version(s: &str) -> Result<(String, String), String> {
    let (major, minor) = s
        .split_once('.')
        .ok_or_else(|| format!("expected MAJOR.MINOR such as 1.31, got {s:?}"))?;
    if major.parse::<u32>().is_err() || minor.parse::<u32>().is_err() {
        return Err(format!(
            "expected numbers in MAJOR.MINOR such as 1.31, got {s:?}"
        ));
    }
    Ok((major.to_string(), minor.to_string()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::FakeApiserver(args) => fake_apiserver(args).await,
    }
}

async fn fake_apiserver(args: FakeApiserverArgs) -> anyhow::Result<()> {
    let (major, minor) = &args.kube_version;
    let server = FakeApiServer::builder()
        .port(args.port)
        .version(major, minor)
        .history_limit(args.history_limit)
        .bookmark_interval(Duration::from_secs(args.bookmark_interval.max(1)))
        .crd_establish_delay(Duration::from_millis(args.crd_establish_delay_ms))
        .start()
        .await
        .context("starting the fake API server")?;
    if let Some(path) = &args.kubeconfig {
        server
            .write_kubeconfig(path)
            .with_context(|| format!("writing the kubeconfig to {}", path.display()))?;
    }
    for file in &args.apply {
        let n = server
            .apply_file(file)
            .with_context(|| format!("applying {}", file.display()))?;
        eprintln!("applied {n} object(s) from {}", file.display());
    }
    println!("listening on {}", server.url());
    if let Some(path) = &args.kubeconfig {
        println!(
            "kubeconfig written to {p}; try: KUBECONFIG={p} kubectl get namespaces",
            p = path.display()
        );
    }
    wait_for_signal().await?;
    eprintln!("stopping the fake API server");
    server.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
