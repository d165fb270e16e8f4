//! `cargo xtask e2e [--cluster kind|fake|current] [--example NAME]... [--keep-going]`
//!
//! Builds the workspace (`cargo test --workspace --no-run --locked`, the build CI already
//! did), starts a cluster (a new kind cluster, `kopf fake-apiserver`, or the current
//! kubeconfig context), applies `examples/crd.yaml`, then runs each example operator of
//! `crates/kopf/examples` as its own process (`run -A --standalone`) through one scenario:
//!
//! 1. create: a copy of `examples/obj.yaml` named `e2e-<example>` in `default`; wait for the
//!    outcome on the object and in the logs;
//! 2. restart: SIGTERM while the operator works (it must exit with status 0), start it
//!    again and check that it resumes without handling the creation a second time;
//! 3. update: a merge patch of the spec, and its outcome;
//! 4. delete: `kubectl delete --wait=false`; the object must go (the finalizer released);
//! 5. stop: SIGTERM again, exit status 0.
//!
//! The expectations per example are the table `SCENARIOS`. `KOPF_E2E_ECHO=1` echoes the
//! operators' output. An example with a resource of its own (the pod-log example
//! `training`: a TrainingJob whose trainer Pod's log lines make its status) goes through the
//! same steps with its own CRD and object (`Setup::object`). The fake API server runs with
//! its pod simulator (`--simulate-pods`): Pods run, and their `echo` scripts print.
//!
//! After the examples, the scenario `replicas` (`replicas.rs`) runs three processes of the
//! minimal example with Lease leader election: one leads, the others stand by; the failover
//! after a SIGKILL of the leader and the hand-over after a SIGTERM are timed against
//! client-go's bounds, and every object must be handled by exactly one replica. It runs
//! unless `--example` names are given and none of them is `replicas`.
//!
//! Then the scenario `shards` (`shards.rs`) runs three processes of the minimal example with
//! `--shards 3`: each serves one hash range; 3,000 objects are shared, each handled by
//! exactly one replica; a replica is SIGKILLed among 1,500 more, its range taken over by a
//! survivor within client-go's bound (timed), and every object handled (at least once around
//! the kill, never by both survivors). Selected like `replicas`, by its name.
//!
//! Some examples need more around them (`Setup`): the admission example gets its two-version
//! CRD (restored to `examples/crd.yaml` afterwards), a free port for its webhook server, and
//! a host the API server reaches: `localhost` for the fake API server, the gateway of kind's
//! container network for kind, `KOPF_E2E_WEBHOOK_HOST` for the current context (or to
//! override the others). Its checks send server-side dry runs, which admission webhooks see
//! but nothing stores.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use kopf_testing::{Cluster, ClusterKind};

mod replicas;
mod scenarios;
mod setup;
mod shards;
mod steps;

use replicas::REPLICAS;
use scenarios::*;
use setup::*;
use shards::SHARDS;
use steps::*;

/// The scenarios of several processes, run after the examples (names for `--example`).
const GROUPS: [&str; 2] = [REPLICAS, SHARDS];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClusterArg {
    /// A new kind cluster (needs kind and Docker or Podman), deleted afterwards.
    Kind,
    /// `kopf fake-apiserver` as a separate process.
    Fake,
    /// The cluster of the current kubeconfig context.
    Current,
}

impl From<ClusterArg> for ClusterKind {
    fn from(c: ClusterArg) -> Self {
        match c {
            ClusterArg::Kind => ClusterKind::Kind,
            ClusterArg::Fake => ClusterKind::Fake,
            ClusterArg::Current => ClusterKind::Current,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct E2eArgs {
    /// The cluster to run against.
    #[arg(long, value_enum, default_value_t = ClusterArg::Fake)]
    cluster: ClusterArg,
    /// Run only this example (repeatable). Default: all of crates/kopf/examples, then the
    /// leader-election scenario `replicas` and the sharding scenario `shards` (names for
    /// this option too).
    #[arg(long = "example", value_name = "NAME")]
    examples: Vec<String>,
    /// Go on with the next example after a failure (default: stop at the first).
    #[arg(long)]
    keep_going: bool,
    /// Do not build; use the binaries in the target directory as they are.
    #[arg(long)]
    no_build: bool,
}

pub async fn run(args: E2eArgs) -> Result<()> {
    let kind = ClusterKind::from(args.cluster);
    // Missing tools, or an unreachable current context, fail now, not after a long build.
    Cluster::builder(kind).check_tools().await?;
    let mut current = None;
    if kind == ClusterKind::Current {
        current = Some(Cluster::start(kind).await?);
    }
    let paths = locate()?;
    let available = example_names(&paths.root)?;
    for name in &args.examples {
        if !available.contains(name) && !GROUPS.contains(&name.as_str()) {
            bail!(
                "no example {name:?} in crates/kopf/examples (there are: {}; and the scenarios {})",
                available.join(", "),
                GROUPS.join(", ")
            );
        }
    }
    let groups: Vec<&str> = GROUPS
        .into_iter()
        .filter(|g| args.examples.is_empty() || args.examples.iter().any(|e| e == g))
        .collect();
    let selected: Vec<String> = if args.examples.is_empty() {
        available
    } else {
        args.examples
            .iter()
            .filter(|e| !GROUPS.contains(&e.as_str()))
            .cloned()
            .collect()
    };
    if !args.no_build {
        build(&paths.root)?;
    }
    // Both group scenarios run the minimal example.
    let group_bin = (!groups.is_empty()).then(|| paths.examples.join(replicas::EXAMPLE));
    for bin in std::iter::once(paths.kopf.clone())
        .chain(selected.iter().map(|e| paths.examples.join(e)))
        .chain(group_bin)
    {
        if !bin.is_file() {
            bail!(
                "{} is missing: build with `cargo test --workspace --no-run --locked` and `cargo build --locked -p kopf-cli` (or drop --no-build)",
                bin.display()
            );
        }
    }
    let started = Instant::now();
    let cluster = match current {
        Some(cluster) => cluster,
        None => {
            println!("e2e: starting the {kind} cluster");
            Cluster::builder(kind)
                .kopf_binary(&paths.kopf)
                // Pods run, and print (the pod-log example's trainer).
                .simulate_pods()
                .start()
                .await?
        }
    };
    println!(
        "e2e: {} (kubeconfig {})",
        cluster.description(),
        cluster.kubeconfig().display()
    );
    // On Ctrl-C, the operators are killed and the cluster is still torn down.
    let outcome = tokio::select! {
        outcome = run_all(&cluster, &paths, &selected, &groups, args.keep_going) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    if let Err(e) = cluster.teardown().await {
        println!("e2e: warning: the teardown failed: {e}");
    }
    let (passed, failed, not_run) = outcome?;
    let mut summary = format!("e2e: {passed} passed, {failed} failed");
    if not_run > 0 {
        let _ = write!(summary, ", {not_run} not run");
    }
    println!(
        "{summary} ({:.1} s on the {kind} cluster)",
        started.elapsed().as_secs_f64()
    );
    if failed > 0 {
        bail!("{failed} end-to-end scenario(s) failed");
    }
    Ok(())
}

async fn run_all(
    cluster: &Cluster,
    paths: &Paths,
    selected: &[String],
    groups: &[&str],
    keep_going: bool,
) -> Result<(usize, usize, usize)> {
    cluster
        .apply_file(paths.root.join("examples/crd.yaml"))
        .await?;
    cluster
        .kubectl([
            "wait",
            "--for=condition=Established",
            "crd/kopfexamples.kopf.dev",
            "--timeout=60s",
        ])
        .await?;
    let template = std::fs::read_to_string(paths.root.join("examples/obj.yaml"))
        .context("reading examples/obj.yaml")?;
    let (mut passed, mut failed) = (0, 0);
    for (i, example) in selected.iter().enumerate() {
        let t0 = Instant::now();
        println!("== {example}");
        let result = match SCENARIOS.iter().find(|s| s.example == example) {
            Some(scenario) => {
                let name = format!("e2e-{example}");
                let mut e2e = E2e {
                    cluster,
                    scenario,
                    name: name.clone(),
                    binary: paths.examples.join(example),
                    child: None,
                    child_state: Default::default(),
                    step: "setup",
                    run_args: Vec::new(),
                };
                // The operators are killed when `run` returns.
                let mut r = match prepare(cluster, paths, &scenario.setup).await {
                    Ok(run_args) => {
                        e2e.run_args = run_args;
                        let own = scenario.setup.object.map(|o| {
                            let path = paths.root.join(o.file.0);
                            std::fs::read_to_string(&path)
                                .with_context(|| format!("reading {}", path.display()))
                        });
                        match own.transpose() {
                            Ok(own) => e2e
                                .run(own.as_deref().unwrap_or(&template))
                                .await
                                .with_context(|| format!("step {}", e2e.step)),
                            Err(e) => Err(e.context("step setup")),
                        }
                    }
                    Err(e) => Err(e.context("step setup")),
                };
                // Leave nothing behind for the next example, even after a failure.
                if r.is_err() {
                    force_delete_of(cluster, e2e.resource(), &name).await;
                }
                if let Err(e) = restore(cluster, paths, &scenario.setup).await
                    && r.is_ok()
                {
                    r = Err(e.context("restoring the cluster"));
                }
                r
            }
            None => Err(anyhow!(
                "no scenario for the example {example}: add one to SCENARIOS in xtask/src/e2e.rs"
            )),
        };
        if !report(example, t0, result, &mut passed, &mut failed) && !keep_going {
            return Ok((passed, failed, selected.len() - i - 1 + groups.len()));
        }
    }
    for (i, &group) in groups.iter().enumerate() {
        let t0 = Instant::now();
        println!("== {group}");
        let result = if group == SHARDS {
            shards::run(cluster, paths, &template).await
        } else {
            replicas::run(cluster, paths, &template).await
        };
        if !report(group, t0, result, &mut passed, &mut failed) && !keep_going {
            return Ok((passed, failed, groups.len() - i - 1));
        }
    }
    Ok((passed, failed, 0))
}

/// Prints a scenario's outcome and counts it; whether it passed.
fn report(
    name: &str,
    t0: Instant,
    result: Result<()>,
    passed: &mut usize,
    failed: &mut usize,
) -> bool {
    let secs = t0.elapsed().as_secs_f64();
    match result {
        Ok(()) => {
            *passed += 1;
            println!("   {name}: passed ({secs:.1} s)");
            true
        }
        Err(e) => {
            *failed += 1;
            println!("   {name}: FAILED ({secs:.1} s): {e:#}");
            false
        }
    }
}

/// The workspace root and the binaries' paths, from `cargo metadata`.
fn locate() -> Result<Paths> {
    let crate::cargo::Workspace { root, target } = crate::cargo::Workspace::locate()?;
    let debug = target.join("debug");
    Ok(Paths {
        root,
        kopf: debug.join("kopf"),
        examples: debug.join("examples"),
    })
}

/// The example operators: crates/kopf/examples/*.rs.
fn example_names(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("crates/kopf/examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    // The table's order first (simple to complex), then any others.
    names.sort_by_key(|n| {
        (
            SCENARIOS
                .iter()
                .position(|s| s.example == n)
                .unwrap_or(usize::MAX),
            n.clone(),
        )
    });
    Ok(names)
}

/// The build CI already did (a no-op there), plus the `kopf` binary.
fn build(root: &Path) -> Result<()> {
    crate::cargo::run(
        root,
        &["test", "--workspace", "--no-run", "--locked"],
        "e2e",
    )?;
    crate::cargo::run(root, &["build", "--locked", "-p", "kopf-cli"], "e2e")
}
