//! The "fake API server" scenario: the server alone, no operator. The harness creates the N
//! objects (the server's RSS growth per object), then the release-built `status-writer`
//! sends N merge PATCHes of `/status`, 64 in flight (writes per second, the server's CPU).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use kopf_testing::{Cluster, ClusterKind};
use serde_json::Value;

use super::measure::{prepare, process_usage, server_pid};
use super::model::ServerAlone;

pub(super) const CONCURRENCY: usize = 64;

pub(super) async fn server_alone(
    writer: &Path,
    kopf_bin: &Path,
    root: &Path,
    n: usize,
) -> Result<ServerAlone> {
    let cluster = Cluster::builder(ClusterKind::Fake)
        .kopf_binary(kopf_bin)
        .start()
        .await?;
    let result = measure(&cluster, writer, root, n).await;
    cluster.teardown().await?;
    result
}

async fn measure(cluster: &Cluster, writer: &Path, root: &Path, n: usize) -> Result<ServerAlone> {
    let started = Instant::now();
    let (_, _, bytes_per_object) = prepare(cluster, root, n).await?;
    let creates_per_second = n as f64 / started.elapsed().as_secs_f64();
    let pid = server_pid(cluster)?;
    let cpu_before = process_usage(pid).0;
    let output = tokio::process::Command::new(writer)
        .args([
            "--n",
            &n.to_string(),
            "--concurrency",
            &CONCURRENCY.to_string(),
        ])
        .env("KUBECONFIG", cluster.kubeconfig())
        .output()
        .await
        .with_context(|| format!("running {}", writer.display()))?;
    let server_cpu_seconds = process_usage(pid).0 - cpu_before;
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            writer.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let line: Value = serde_json::from_slice(&output.stdout).context("status-writer's output")?;
    let failed = line["failed"].as_u64().unwrap_or(u64::MAX);
    let seconds = line["seconds"].as_f64().unwrap_or(f64::NAN);
    if failed != 0 {
        bail!("{failed} of {n} status PATCHes failed");
    }
    let measured = ServerAlone {
        n,
        status_writes_per_second: n as f64 / seconds,
        concurrency: CONCURRENCY,
        server_cpu_seconds,
        bytes_per_object,
        creates_per_second,
    };
    println!(
        "   {:.0} status writes/s ({} in flight), server CPU {:.2}s, {:.0} bytes per stored object",
        measured.status_writes_per_second, CONCURRENCY, server_cpu_seconds, bytes_per_object
    );
    Ok(measured)
}
