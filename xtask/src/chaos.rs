//! `cargo xtask chaos [--quick] [--objects N] [--kills N] [--seed N] [--faults on|off]
//! [--replicas N] [--keep]`
//!
//! A soak test of Kopf's contract under faults: nothing is left behind, every handler runs at
//! least once per cause, delete handlers run before an object goes, and progress survives
//! crashes and failed writes.
//!
//! 1. Builds the operator under test, `kopf-chaos-operator` (`xtask/chaos-operator`: counting
//!    create/update/delete handlers on `kopfexamples`, each logging one line per call to the
//!    append-only file `KOPF_CHAOS_LOG`, then sleeping 0–300 ms).
//! 2. Starts an in-process [`FakeApiServer`] with `examples/crd.yaml`, writes a kubeconfig,
//!    and runs the operator as a process (`run -A --standalone --qps 0`).
//! 3. The chaos phase, drawn from a seeded RNG ([`plan::Plan`]; `--seed` replays the
//!    schedule): objects created in waves, each updated 1–3 times with unique `spec.value`s,
//!    60 % deleted (a third right after their creation, the rest after their updates); the
//!    operator SIGKILLed every 0.5–4 s and restarted at once or after a short pause; with
//!    `--faults on` (the default), faults every 0.3–2 s: 500/503/409 on the next 1–3 PATCHes
//!    of the objects or their `/status` (now and then 7–9 500s in a row, more than the
//!    operator's client retries, so that the engine itself meets the failure), 429 with `Retry-After: 1`, 100 ms–3 s latency on
//!    PATCHes for a moment, a 410 on the next watch, closed watches. Creations and updates go
//!    through the server's Rust API (no HTTP, so no fault hits the load itself), deletions
//!    over HTTP (faults never target them).
//! 4. The quiet phase: faults cleared, no more kills, until the objects converge (twice in a
//!    row, 2 s apart) or the deadline passes (60 s with `--quick`, 5 min otherwise).
//! 5. The invariants ([`checks`]), as a table; the exit status is non-zero on any FAIL.
//!    Every duplicate handler run is listed with what explains it: a kill between the two
//!    runs, or a failed request of the operator (status ≥ 400, or no answer, from the fake
//!    server's request log by the operator's User-Agent) about that object between them.
//!
//! **Replicas** (`--replicas N`, N > 1): N processes of the operator at once, each with
//! `--leader-election --leader-election-namespace default --lease-duration 2
//! --renew-deadline 1 --retry-period 0.2` (and `--standalone`, which only turns Kopf's
//! peering off), each with its own output. Each kill hits one replica: the leader 2 times
//! in 3 (the running replica whose latest `This replica leads now` is the most recent and not
//! followed by `This replica lost the lead`; any replica when none leads), else one of the
//! others, drawn from an RNG of its own so that a seed keeps the rest of its schedule. The
//! same invariants, with the duplicates explained per process: by a kill of *the replica
//! that ran the first call*, by a change of leader ([`leaders`]: a replica began to lead
//! while the first call's replica did not), or by a failed request when one process ran
//! both; two runs by different replicas both alive with neither is flagged as "two live
//! leaders". Two more rows: *one leader at a time* (leadership intervals from each process's
//! output, from `leads now` to `lost the lead` or to its kill, exit or stop; a killed
//! leader's interval ends at its kill, so no two may overlap), and *handlers run by the
//! leader only*. The summary adds the takeovers: kill of the leader → the next `leads now`,
//! min / median / max. The standbys are stopped before the leader at the end.
//!
//! `--quick` (40 objects, 15 kills, about two minutes once built) runs in CI; its verdict on
//! a correct operator does not depend on timing (the checks run after convergence, with
//! generous bounds). The full run (2000 objects, 150 kills, about 6 minutes) is for
//! measurements. `--keep` keeps the files of the run (the handler log, the request log as
//! JSON lines, the operator's output per process, the timeline, the final objects).

mod checks;
mod converge;
mod drive;
mod evidence;
mod leaders;
mod plan;
mod report;
mod supervisor;
mod table;

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kopf_testing::FakeApiServer;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use converge::{converge, gather};
use drive::{drive_faults, drive_kills, drive_load, record_fault};
use evidence::{Timeline, now_micros};
use plan::{NAMESPACE, Plan, RESOURCE, Shape};
use report::{keep_files, summary};
use supervisor::Supervisor;

/// The operator's package and binary.
const OPERATOR: &str = "kopf-chaos-operator";

/// Faults on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// Inject faults.
    On,
    /// Kills only.
    Off,
}

/// The options of `cargo xtask chaos`.
#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// The CI run: 40 objects, 15 kills, a 60 s deadline (about two minutes once built).
    #[arg(long)]
    quick: bool,
    /// Objects to create [default: 2000, or 40 with --quick].
    #[arg(long, value_name = "N")]
    objects: Option<usize>,
    /// SIGKILLs of the operator, one every 0.5–4 s [default: 150, or 15 with --quick].
    #[arg(long, value_name = "N")]
    kills: Option<usize>,
    /// The seed of the schedule (printed at the start; the same seed replays the same
    /// operations, kills and faults) [default: from the clock].
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Inject API faults (500, 503, 409, 429, latency, 410 and closed watches), or kills only.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    faults: OnOff,
    /// Keep the run's files (handler log, request log, operator output, timeline, objects)
    /// and print where they are.
    #[arg(long)]
    keep: bool,
    /// Build and test the operator in the release profile.
    #[arg(long)]
    release: bool,
    /// Seconds the quiet phase waits for convergence [default: 60, or 300 without --quick].
    #[arg(long, value_name = "SECONDS")]
    deadline: Option<u64>,
    /// Operator processes at once: with more than one, Lease leader election (2 s leases),
    /// the kills aimed at the leader 2 times in 3, and the leadership checked.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=9))]
    replicas: u16,
}

/// Runs the chaos test; an error when an invariant fails.
pub async fn run(args: ChaosArgs) -> Result<()> {
    let wall = Instant::now();
    let shape = Shape {
        objects: args.objects.unwrap_or(if args.quick { 40 } else { 2000 }),
        kills: args.kills.unwrap_or(if args.quick { 15 } else { 150 }),
        faults: args.faults == OnOff::On,
    };
    let deadline = Duration::from_secs(args.deadline.unwrap_or(if args.quick { 60 } else { 300 }));
    let seed = args.seed.unwrap_or_else(|| now_micros().unsigned_abs());
    let plan = Plan::generate(shape, seed);
    println!(
        "chaos: seed {seed} (replay: --seed {seed}); {} replica(s); {} objects ({} updates, {} deletes), {} kills, {} faults over {:.0} s",
        args.replicas,
        plan.objects.len(),
        plan.updates(),
        plan.deletes(),
        plan.kills.len(),
        plan.faults.len(),
        plan.duration.as_secs_f64()
    );

    let workspace = crate::cargo::Workspace::locate()?;
    let root = workspace.root.clone();
    let binary = build(&workspace, args.release)?;
    let dir = tempfile::Builder::new()
        .prefix("kopf-chaos-")
        .tempdir()
        .context("creating a temporary directory")?;
    let server = FakeApiServer::start().await?;
    server
        .apply_file(root.join("examples/crd.yaml"))
        .map_err(|e| anyhow!("applying examples/crd.yaml: {e}"))?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    let log_path = dir.path().join("chaos.log");
    // A copy of the binary: a build in the meantime (another terminal, an editor) must not
    // swap the operator between two restarts.
    let binary = {
        let copy = dir.path().join(OPERATOR);
        std::fs::copy(&binary, &copy)
            .with_context(|| format!("copying {} to {}", binary.display(), copy.display()))?;
        copy
    };
    println!(
        "chaos: fake API server at {}, files in {} ({})",
        server.url(),
        dir.path().display(),
        if args.keep {
            "kept"
        } else {
            "removed at the end; --keep keeps them"
        }
    );

    let timeline = RefCell::new(Timeline {
        t0: now_micros(),
        ..Default::default()
    });
    let replicas = usize::from(args.replicas);
    let mut operator = Supervisor::new(binary, kubeconfig, log_path.clone(), replicas);
    operator.start_all(&timeline)?;

    // The chaos phase: load, kills and faults at once.
    let started = Instant::now();
    let finished = Cell::new(0);
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        RESOURCE,
    );
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), NAMESPACE, &ar);
    let outcome = tokio::select! {
        r = async {
            let (load, kills, faults) = tokio::join!(
                async {
                    let r = drive_load(&plan, &server, &api, &timeline, started).await;
                    finished.set(finished.get() + 1);
                    r
                },
                drive_kills(&plan, &mut operator, &timeline, started, &finished),
                async {
                    drive_faults(&plan, &server, &timeline, started).await;
                    finished.set(finished.get() + 1);
                },
            );
            load.and(kills).map(|()| faults)
        } => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    outcome?;
    println!(
        "chaos: chaos phase over after {:.1} s ({} kills); quiet phase (deadline {} s)",
        started.elapsed().as_secs_f64(),
        timeline.borrow().kills.len(),
        deadline.as_secs()
    );

    // The quiet phase: no faults, no kills, until everything converges.
    server.clear_faults();
    record_fault(&timeline, "all faults cleared (quiet phase)".into());
    let quiet = Instant::now();
    let converged = tokio::select! {
        r = converge(&plan, &server, &mut operator, &timeline, deadline) => r?,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    };
    match converged {
        true => println!(
            "chaos: converged after {:.1} s of quiet",
            quiet.elapsed().as_secs_f64()
        ),
        false => println!(
            "chaos: NOT converged after {} s of quiet; checking anyway",
            deadline.as_secs()
        ),
    }
    let stop_status = operator.stop(&timeline).await;

    // The evidence and the verdict.
    let ev = gather(
        &plan,
        &server,
        &timeline.borrow(),
        &log_path,
        operator.outputs.clone(),
        replicas,
    )?;
    let rows = checks::check_all(&ev);
    println!();
    print!("{}", table::render(&rows));
    println!();
    print!(
        "{}",
        summary(&plan, &ev, &stop_status, converged, wall.elapsed())
    );
    if args.keep {
        keep_files(dir.path(), &server, &timeline.borrow(), &ev)?;
        // The copy of the binary is big and rebuilt by the next run anyway.
        let _ = std::fs::remove_file(dir.path().join(OPERATOR));
        let kept = dir.keep();
        println!("chaos: the run's files are kept in {}", kept.display());
    }
    let failed: Vec<&str> = rows.iter().filter(|r| !r.ok).map(|r| r.name).collect();
    if !failed.is_empty() {
        bail!(
            "{} invariant(s) failed: {} (seed {seed}; --keep keeps the files)",
            failed.len(),
            failed.join(", ")
        );
    }
    println!("chaos: all invariants hold (seed {seed})");
    Ok(())
}

/// Builds the operator (so that a stale binary is never tested); its path.
fn build(workspace: &crate::cargo::Workspace, release: bool) -> Result<PathBuf> {
    let mut args = vec!["build", "--locked", "-p", OPERATOR];
    if release {
        args.push("--release");
    }
    crate::cargo::run(&workspace.root, &args, "chaos")?;
    let binary = workspace
        .target
        .join(if release { "release" } else { "debug" })
        .join(OPERATOR);
    if !binary.is_file() {
        bail!("{} is missing after the build", binary.display());
    }
    Ok(binary)
}
