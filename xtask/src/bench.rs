//! `cargo xtask bench [--quick] [--n N | --scales N,N,..]`: operator frameworks side by side,
//! at each scale (default 1,000, 10,000 and 100,000 objects), each against
//! its own fresh `kopf fake-apiserver` (release builds, same settings), doing one job: a
//! message in `status.create_fn` on creation, the new `spec.field` in `status.update_fn`
//! on update.
//!
//! Systems: `kopf-rs` (the `minimal` example, built as a production operator: kopf's
//! default features, no fake server in it; bench-systems' `minimal` binary),
//! `kopf-rs-delete` (the same job plus a delete handler: what the finalizer costs), `kopf`
//! (Python Kopf 1.45 from PyPI, in a
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
//!   measure the cores more than the framework;
//! * `kopf-rs-baseline`: the `minimal` example's binary from another commit, named by
//!   `KOPF_BENCH_BASELINE`, with `kopf-rs`'s command line: a change measured side by side
//!   with the code before it, in one run (`--system kopf-rs --system kopf-rs-baseline`).
//!
//! Scenarios, in this order on one server per system:
//!
//! * **burst**: N objects exist before the operator starts; time until all have their
//!   status, requests per object by endpoint, CPU seconds and peak RSS of the operator;
//! * **churn**: a driver patches random objects' spec at a fixed rate; latency from each
//!   driver write to the operator's next status write of that object (from the server's
//!   request log), requests per update;
//! * **idle**: RSS with the N objects watched and nothing happening;
//! * **churn during burst**, on a fresh server: the operator starts on the N objects and the
//!   churn driver at once, patching objects already handled until the burst is done.
//!
//! `kopf-rs-status` (the `minimal` example with `--diff-base-storage status`) is listed as
//! skipped, with the reason, when it fails (the flag is missing). Python Kopf is skipped at
//! a scale where its estimated burst exceeds `--kopf-budget-seconds`. Before the systems, at
//! each scale, the fake API server alone: status writes per second and bytes per object.
//! The fake server's CPU during each burst is measured too. A debug build of the harness
//! re-runs itself as a release build (its progress watch must stay light at 100,000).
//!
//! A system that misses an object fails the run. Results: Markdown tables on stdout and in
//! `target/bench/results.md` (with growth tables across the scales), `target/bench/results.json`
//! and the chart `target/bench/scales.svg`.

pub mod build_cost;
mod chart;
mod convergence;
mod measure;
mod model;
mod progress;
mod report;
mod requests;
mod server;
mod setup;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use measure::measure;
pub use model::System;
use model::{Plan, Scale, Skipped};
use report::report;
use server::server_alone;
use setup::{kopf_venv, machine};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Small sizes (N = 1,000, 20 s of churn): under 15 minutes with the builds.
    #[arg(long)]
    quick: bool,
    /// One scale of N objects (instead of the default scales 1,000, 10,000 and 100,000;
    /// 1,000 with --quick).
    #[arg(long, conflicts_with = "scales")]
    n: Option<usize>,
    /// The scales, a comma list of N, e.g. `1000,10000,100000` (the default without --n and
    /// --quick). Every selected system runs at each scale, smallest first.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    scales: Vec<usize>,
    /// Only these systems (repeatable). Default: all but kopf-rs-reconcile and the sharded
    /// ones.
    #[arg(long = "system", value_enum)]
    systems: Vec<System>,
    /// Updates per second in the churn scenarios (default 50; 20 with --quick).
    #[arg(long)]
    churn_rate: Option<f64>,
    /// Seconds of churn (default 60, 20 at N ≥ 100,000 to keep a full run under about 40
    /// minutes; 20 with --quick). Given, it applies to every scale.
    #[arg(long)]
    churn_seconds: Option<u64>,
    /// Python Kopf is skipped at a scale where its burst, estimated from its throughput
    /// measured at the previous scale, would take longer than this many seconds.
    #[arg(long, default_value_t = 120.0)]
    kopf_budget_seconds: f64,
    /// Leave out the "fake API server" scenario (the server alone).
    #[arg(long)]
    no_server: bool,
    /// Use the release binaries as they are (no cargo build).
    #[arg(long)]
    no_build: bool,
}

/// Where the harness must run from: its watch of every object and the churn driver are
/// measured beside the systems, so a debug build re-runs itself as a release build.
fn release_self(root: &Path, target: &Path, args: &BenchArgs) -> Result<Option<i32>> {
    if !cfg!(debug_assertions) || std::env::var_os("KOPF_BENCH_DEBUG_DRIVER").is_some() {
        return Ok(None);
    }
    if !args.no_build {
        crate::cargo::run(
            root,
            &["build", "--release", "--locked", "-p", "xtask"],
            "bench",
        )?;
    }
    let xtask = target.join("release/xtask");
    if !xtask.exists() {
        bail!(
            "{} is missing: build it (`cargo build --release -p xtask`; without --no-build the harness does)",
            xtask.display()
        );
    }
    println!(
        "== the harness runs as a release build: {}",
        xtask.display()
    );
    let status = std::process::Command::new(&xtask)
        .args(std::env::args_os().skip(1))
        .current_dir(root)
        .status()
        .with_context(|| format!("running {}", xtask.display()))?;
    Ok(Some(status.code().unwrap_or(1)))
}

/// The environment variable naming the `kopf-rs-baseline` system's binary.
const BASELINE: &str = "KOPF_BENCH_BASELINE";

/// The scales of the run, smallest first.
fn scales(args: &BenchArgs) -> Vec<usize> {
    let mut scales = match (args.n, args.scales.is_empty(), args.quick) {
        (Some(n), _, _) => vec![n],
        (None, false, _) => args.scales.clone(),
        (None, true, true) => vec![1_000],
        (None, true, false) => vec![1_000, 10_000, 100_000],
    };
    scales.sort_unstable();
    scales.dedup();
    scales
}

/// The plan at one scale: at 100,000 objects and more, a shorter churn (unless given).
fn plan(args: &BenchArgs, n: usize) -> Plan {
    let default_seconds = if args.quick || n >= 100_000 { 20 } else { 60 };
    Plan {
        n,
        churn_rate: args
            .churn_rate
            .unwrap_or(if args.quick { 20.0 } else { 50.0 }),
        churn_seconds: args.churn_seconds.unwrap_or(default_seconds),
        burst_timeout: Duration::from_secs(if args.quick { 600 } else { 1800 }),
    }
}

pub async fn run(args: BenchArgs) -> Result<()> {
    let crate::cargo::Workspace { root, target } = crate::cargo::Workspace::locate()?;
    if let Some(code) = release_self(&root, &target, &args)? {
        std::process::exit(code);
    }
    let run_started = Instant::now();
    let systems = if args.systems.is_empty() {
        vec![
            System::KopfRs,
            System::KopfRsStatus,
            System::KopfRsDelete,
            System::Kopf,
            System::KubeRs,
            System::Limit,
            System::LimitStatus,
        ]
    } else {
        args.systems.clone()
    };
    if systems.contains(&System::KopfRsBaseline) {
        let baseline = std::env::var_os(BASELINE).map(PathBuf::from);
        if !baseline.as_deref().is_some_and(Path::is_file) {
            anyhow::bail!(
                "the kopf-rs-baseline system runs the binary named by {BASELINE}: build the \
                 `minimal` example at the commit to compare with \
                 (`cargo build --release -p bench-systems --bin minimal`, or before it had \
                 that binary `cargo build --release -p kopf --example minimal`), copy the \
                 binary out of the tree and set {BASELINE} to it"
            );
        }
    }
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
    let mut done: Vec<Scale> = Vec::new();
    for n in scales(&args) {
        let plan = plan(&args, n);
        println!(
            "== N = {n}: churn {} updates/s for {} s{}",
            plan.churn_rate,
            plan.churn_seconds,
            if args.churn_seconds.is_none() && n >= 100_000 && !args.quick {
                " (shorter at this scale)"
            } else {
                ""
            }
        );
        let mut scale = Scale {
            n,
            churn_rate: plan.churn_rate,
            churn_seconds: plan.churn_seconds,
            results: Vec::new(),
            skipped: Vec::new(),
            server: None,
        };
        if !args.no_server {
            println!("== fake API server alone (N = {n})");
            let writer = release.join("status-writer");
            scale.server = Some(
                server_alone(&writer, &kopf_bin, &root, n)
                    .await
                    .context("the fake API server scenario")?,
            );
        }
        for &system in &systems {
            if let Some(reason) = skip_reason(system, n, &done, args.kopf_budget_seconds) {
                println!("== {} (N = {n}): skipped: {reason}", system.name());
                scale.skipped.push(Skipped {
                    system: system.name(),
                    n,
                    reason,
                });
                continue;
            }
            println!("== {} (N = {n})", system.name());
            let command = command(system, &release, &root, &out_dir);
            for binary in [&command[0], &kopf_bin.display().to_string()] {
                if !Path::new(binary).exists() {
                    bail!("{binary} is missing: build it (without --no-build the harness does)");
                }
            }
            let measured = match measure(system, &command, &kopf_bin, &root, &plan).await {
                Ok(m) => m,
                Err(e) if system == System::KopfRsStatus => {
                    let reason = format!(
                        "failed: the `minimal` example needs `--diff-base-storage status` \
                         (not merged yet?): {}",
                        first_error(&format!("{e:#}"))
                    );
                    println!("   {reason}");
                    scale.skipped.push(Skipped {
                        system: system.name(),
                        n,
                        reason,
                    });
                    continue;
                }
                Err(e) => return Err(e.context(format!("the {} system", system.name()))),
            };
            println!(
                "   burst {:.2}s, churn p99 {:.1} ms, under burst p99 {:.1} ms, peak RSS {:.1} MB, server CPU {:.0}%",
                measured.burst_seconds,
                measured
                    .churn_latency_ms
                    .get("p99")
                    .copied()
                    .unwrap_or(f64::NAN),
                measured
                    .during
                    .as_ref()
                    .and_then(|d| d.latency_ms.get("p99").copied())
                    .unwrap_or(f64::NAN),
                measured.peak_rss_mb,
                measured.server_cpu_share * 100.0
            );
            scale.results.push(measured);
        }
        done.push(scale);
        // Written after each scale: a long run leaves what it measured so far.
        write_results(&out_dir, &machine, &done)?;
    }
    let table = report(&done, &machine);
    println!("\n{table}");
    write_results(&out_dir, &machine, &done)?;
    println!(
        "results: {}, results.md and scales.svg; the run took {:.1} minutes",
        out_dir.join("results.json").display(),
        run_started.elapsed().as_secs_f64() / 60.0
    );
    Ok(())
}

/// results.md, results.json and scales.svg from the scales measured so far.
fn write_results(out_dir: &Path, machine: &str, scales: &[Scale]) -> Result<()> {
    std::fs::write(out_dir.join("results.md"), report(scales, machine))
        .context("writing results.md")?;
    let flat: Vec<&model::Measured> = scales.iter().flat_map(|s| &s.results).collect();
    let json = json!({"machine": machine, "scales": scales, "results": flat,
        "bytes_per_idle_object": chart::bytes_per_idle_object(scales)});
    std::fs::write(
        out_dir.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )
    .context("writing results.json")?;
    std::fs::write(out_dir.join("scales.svg"), chart::svg(scales)).context("writing scales.svg")
}

/// Why a system is left out at scale `n`, if it is: Python Kopf when its burst, estimated
/// from its throughput at the previous scale measured, exceeds the budget.
fn skip_reason(system: System, n: usize, done: &[Scale], budget: f64) -> Option<String> {
    if system != System::Kopf {
        return None;
    }
    let (at, measured) = done.iter().rev().find_map(|s| {
        s.results
            .iter()
            .find(|m| m.system == system.name())
            .map(|m| (s.n, m))
    })?;
    let throughput = measured.n as f64 / measured.burst_seconds;
    let estimate = n as f64 / throughput;
    println!(
        "   kopf at N = {n}: estimated burst {estimate:.0} s (from {throughput:.0} objects/s at N = {at}); budget {budget:.0} s"
    );
    (estimate > budget).then(|| {
        format!(
            "its burst would take about {estimate:.0} s (from {throughput:.0} objects/s measured at N = {at}), over the {budget:.0} s budget (--kopf-budget-seconds)"
        )
    })
}

/// The first line of a failure and, if the process's output has one, its `error:` line.
fn first_error(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default().to_string();
    match text.lines().find(|l| l.trim_start().starts_with("error")) {
        Some(e) if e != first => format!("{first}; {}", e.trim()),
        _ => first,
    }
}

/// The command line of a system.
fn command(system: System, release: &Path, root: &Path, out_dir: &Path) -> Vec<String> {
    let kopf_rs: Vec<String> = vec![
        release.join("minimal").display().to_string(),
        "run".into(),
        "-A".into(),
        "--standalone".into(),
        // Kopf and kube-rs have no client-side rate limit either.
        "--qps".into(),
        "0".into(),
    ];
    match system {
        System::KopfRs => kopf_rs,
        System::KopfRsBaseline => {
            let mut command = kopf_rs;
            command[0] = std::env::var(BASELINE).unwrap_or_default();
            command
        }
        System::KopfRsStatus => {
            let mut command = kopf_rs;
            command.extend(["--diff-base-storage", "status"].map(String::from));
            command
        }
        System::KopfRsSharded2 | System::KopfRsSharded3 => {
            let shards = system.replicas().to_string();
            let mut command = kopf_rs;
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
            let mut command = kopf_rs;
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
    }
}

/// Release builds of the fake server (the `kopf` command, in dev mode) and of the Rust
/// systems (bench-systems: kopf's `minimal` example among them, as a production operator
/// builds it). Two cargo invocations: in one, cargo would unify kopf's features, and the
/// operators would carry the fake server the `kopf` command needs.
fn build(root: &Path) -> Result<()> {
    let release = ["build", "--release", "--locked", "-p"];
    crate::cargo::run(root, &[&release[..], &["kopf-cli"]].concat(), "bench")?;
    crate::cargo::run(root, &[&release[..], &["bench-systems"]].concat(), "bench")
}

#[cfg(test)]
mod tests {
    use super::first_error;

    #[test]
    fn a_failure_shows_its_first_line_and_the_error_line() {
        let text = "kopf-rs-status exited (exit status: 2) with 0 of 10 objects done:\n-- kopf-rs-status:\nerror: unexpected argument '--diff-base-storage' found\n\nUsage: minimal";
        assert_eq!(
            first_error(text),
            "kopf-rs-status exited (exit status: 2) with 0 of 10 objects done:; error: unexpected argument '--diff-base-storage' found"
        );
        assert_eq!(first_error("no such file"), "no such file");
    }
}
