//! `cargo xtask bench [--quick] [--n N]`: operator frameworks side by side, each against
//! its own fresh `kopf fake-apiserver` (release builds, same settings), doing one job: a
//! message in `status.create_fn` on creation, the new `spec.field` in `status.update_fn`
//! on update.
//!
//! Systems: `kopf-rs` (the `minimal` example), `kopf-rs-delete` (the same job plus a delete
//! handler: what the finalizer costs), `kopf` (Python Kopf 1.45 from PyPI, in a
//! venv the harness creates), `kube-rs` (a `kube::runtime::Controller`), `limit` (a plain
//! client sending exactly the diff-base and status PATCHes) and `limit-status` (the status
//! PATCH only). Opt-in with `--system`, not in the default list:
//!
//! * `kopf-rs-reconcile`: the kube-rs system's reconcile in kopf-rs's reconcile mode
//!   (`Operator::reconcile`), one status PATCH per object as kube-rs; it would add about 75 s
//!   to the full run (measured at N = 10,000, most of it the fixed 60 s of churn), taking it
//!   past its 8 minutes;
//! * `kopf-rs-sharded-2` and `kopf-rs-sharded-3`: 2 or 3 processes of the `minimal` example
//!   with `--shards 2` or `3` against one server, lease timings 5 s, 4 s, 0.5 s; CPU and RSS
//!   summed over the processes and shown per process, and the start-up sharing timed; they
//!   would add two systems' churn and idle time to every run, and on a 2-core machine they
//!   measure the cores more than the framework.
//!
//! Scenarios, in this order on one server per system:
//!
//! * **burst**: N objects exist before the operator starts; time until all have their
//!   status, requests per object by endpoint, CPU seconds and peak RSS of the operator;
//! * **churn**: a driver patches random objects' spec at a fixed rate; latency from each
//!   driver write to the operator's next status write of that object (from the server's
//!   request log), requests per update;
//! * **idle**: RSS with the N objects watched and nothing happening.
//!
//! A system that misses an object fails the run. Results: a Markdown table on stdout and in
//! `target/bench/results.md`, and `target/bench/results.json`.

mod measure;
mod model;
mod report;
mod requests;
mod setup;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;

use measure::measure;
use model::Plan;
pub use model::System;
use report::report;
use setup::{kopf_venv, machine};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Small sizes (N = 1,000, 20 s of churn): under 15 minutes with the builds.
    #[arg(long)]
    quick: bool,
    /// Objects (default 10,000; 1,000 with --quick).
    #[arg(long)]
    n: Option<usize>,
    /// Only these systems (repeatable). Default: all but kopf-rs-reconcile and the sharded
    /// ones.
    #[arg(long = "system", value_enum)]
    systems: Vec<System>,
    /// Updates per second in the churn scenario (default 50; 20 with --quick).
    #[arg(long)]
    churn_rate: Option<f64>,
    /// Seconds of churn (default 60; 20 with --quick).
    #[arg(long)]
    churn_seconds: Option<u64>,
    /// Use the release binaries as they are (no cargo build).
    #[arg(long)]
    no_build: bool,
}

pub async fn run(args: BenchArgs) -> Result<()> {
    let plan = Plan {
        n: args.n.unwrap_or(if args.quick { 1_000 } else { 10_000 }),
        churn_rate: args
            .churn_rate
            .unwrap_or(if args.quick { 20.0 } else { 50.0 }),
        churn_seconds: args
            .churn_seconds
            .unwrap_or(if args.quick { 20 } else { 60 }),
        burst_timeout: Duration::from_secs(if args.quick { 600 } else { 1800 }),
    };
    let systems = if args.systems.is_empty() {
        vec![
            System::KopfRs,
            System::KopfRsDelete,
            System::Kopf,
            System::KubeRs,
            System::Limit,
            System::LimitStatus,
        ]
    } else {
        args.systems.clone()
    };
    let crate::cargo::Workspace { root, target } = crate::cargo::Workspace::locate()?;
    let out_dir = target.join("bench");
    std::fs::create_dir_all(&out_dir).context("creating target/bench")?;
    if !args.no_build {
        build(&root)?;
    }
    let release = target.join("release");
    let kopf_bin = release.join("kopf");
    let python = if systems.contains(&System::Kopf) {
        Some(kopf_venv(&out_dir)?)
    } else {
        None
    };
    let machine = machine(python.as_deref());
    println!("== machine\n{machine}");
    let kopf_rs: Vec<String> = vec![
        release.join("examples/minimal").display().to_string(),
        "run".into(),
        "-A".into(),
        "--standalone".into(),
        // Kopf and kube-rs have no client-side rate limit either.
        "--qps".into(),
        "0".into(),
    ];
    let mut results = Vec::new();
    for system in systems {
        println!("== {} (N = {})", system.name(), plan.n);
        let command = match system {
            System::KopfRs => kopf_rs.clone(),
            System::KopfRsSharded2 | System::KopfRsSharded3 => {
                let shards = system.replicas().to_string();
                let mut command = kopf_rs.clone();
                // Scaled-down lease timings (defaults: 15, 10, 2): the ranges are taken in
                // the second round, one retry period after the start.
                command.extend(
                    [
                        "--shards",
                        &shards,
                        "--lease-duration",
                        "5",
                        "--renew-deadline",
                        "4",
                        "--retry-period",
                        "0.5",
                    ]
                    .map(String::from),
                );
                command
            }
            System::KopfRsDelete | System::KopfRsReconcile => {
                let binary = match system {
                    System::KopfRsDelete => "kopf-rs-delete",
                    _ => "kopf-rs-reconcile",
                };
                let mut command = kopf_rs.clone();
                command[0] = release.join(binary).display().to_string();
                command
            }
            System::Kopf => {
                let venv = out_dir.join("venv/bin");
                vec![
                    venv.join("kopf").display().to_string(),
                    "run".into(),
                    "--standalone".into(),
                    "-A".into(),
                    root.join("bench/kopf_operator.py").display().to_string(),
                ]
            }
            System::KubeRs => vec![release.join("kube-rs-operator").display().to_string()],
            System::Limit => vec![release.join("limit-operator").display().to_string()],
            System::LimitStatus => vec![
                release.join("limit-operator").display().to_string(),
                "--status-only".into(),
            ],
        };
        for binary in [&command[0], &kopf_bin.display().to_string()] {
            if !Path::new(binary).exists() {
                bail!("{binary} is missing: build it (without --no-build the harness does)");
            }
        }
        let measured = measure(system, &command, &kopf_bin, &root, &plan)
            .await
            .with_context(|| format!("the {} system", system.name()))?;
        println!(
            "   burst {:.2}s, churn p99 {:.1} ms, peak RSS {:.1} MB",
            measured.burst_seconds,
            measured
                .churn_latency_ms
                .get("p99")
                .copied()
                .unwrap_or(f64::NAN),
            measured.peak_rss_mb
        );
        results.push(measured);
    }
    let table = report(&results, &machine, &plan);
    println!("\n{table}");
    std::fs::write(out_dir.join("results.md"), &table).context("writing results.md")?;
    let json = json!({"machine": machine, "n": plan.n, "churn_rate": plan.churn_rate,
        "churn_seconds": plan.churn_seconds, "results": results});
    std::fs::write(
        out_dir.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )
    .context("writing results.json")?;
    println!(
        "results: {} and results.md",
        out_dir.join("results.json").display()
    );
    Ok(())
}

/// Release builds of the fake server, the kopf-rs example and the other Rust systems, in
/// one cargo invocation (one feature resolution: shared dependencies are built once).
fn build(root: &Path) -> Result<()> {
    crate::cargo::run(
        root,
        &[
            "build",
            "--release",
            "--locked",
            "-p",
            "kopf-cli",
            "-p",
            "bench-systems",
            "-p",
            "kopf",
            "--bins",
            "--example",
            "minimal",
        ],
        "bench",
    )
}
