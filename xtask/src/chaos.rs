//! `cargo xtask chaos [--quick] [--objects N] [--kills N] [--seed N] [--faults on|off] [--keep]`
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
//! `--quick` (40 objects, 15 kills, about two minutes once built) runs in CI; its verdict on
//! a correct operator does not depend on timing (the checks run after convergence, with
//! generous bounds). The full run (2000 objects, 150 kills, about 6 minutes) is for
//! measurements. `--keep` keeps the files of the run (the handler log, the request log as
//! JSON lines, the operator's output per process, the timeline, the final objects).

mod checks;
mod evidence;
mod plan;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kopf_testing::{FakeApiServer, FaultRule, OperatorRunner, RequestPattern};
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use evidence::{
    Evidence, HandlerLog, KillRecord, Micros, ObjectFacts, Request, RunOutput, Timeline, now_micros,
};
use plan::{Action, Endpoint, Fault, NAMESPACE, Plan, Shape};

/// The operator's package and binary.
const OPERATOR: &str = "kopf-chaos-operator";
/// The environment variable naming the operator's handler log.
const LOG_ENV: &str = "KOPF_CHAOS_LOG";
/// The resource of the objects.
const RESOURCE: &str = "kopfexamples";
/// How often the operator's liveness is looked at.
const POLL: Duration = Duration::from_millis(250);
/// How often the objects are looked at for convergence (a snapshot reads the whole log).
const LOOK: Duration = Duration::from_secs(1);
/// Converged twice in a row this far apart.
const SETTLE: Duration = Duration::from_secs(2);
/// How long the operator may take to exit on the final SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// The most requests about one object a run accepts (faults, kills and retries included).
const REQUEST_BOUND: usize = 40;

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
        "chaos: seed {seed} (replay: --seed {seed}); {} objects ({} updates, {} deletes), {} kills, {} faults over {:.0} s",
        plan.objects.len(),
        plan.updates(),
        plan.deletes(),
        plan.kills.len(),
        plan.faults.len(),
        plan.duration.as_secs_f64()
    );

    let root = workspace_root()?;
    let binary = build(&root, args.release)?;
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
    let mut operator = Supervisor {
        binary,
        kubeconfig,
        log_path: log_path.clone(),
        current: None,
        outputs: Vec::new(),
    };
    operator.start(&timeline)?;

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
    let stop_status = operator.stop().await;

    // The evidence and the verdict.
    let ev = gather(
        &plan,
        &server,
        &timeline.borrow(),
        &log_path,
        operator.outputs.clone(),
    )?;
    let rows = checks::check_all(&ev);
    println!();
    print!("{}", checks::render(&rows));
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

/// Runs and restarts the operator processes, and keeps their output.
struct Supervisor {
    binary: PathBuf,
    kubeconfig: PathBuf,
    log_path: PathBuf,
    current: Option<OperatorRunner>,
    outputs: Vec<RunOutput>,
}

impl Supervisor {
    /// Starts a new operator process.
    fn start(&mut self, timeline: &RefCell<Timeline>) -> Result<()> {
        let n = timeline.borrow().starts.len() + 1;
        let runner = OperatorRunner::command(&self.binary)
            .args(["run", "-A", "--standalone", "--qps", "0"])
            .env("KUBECONFIG", &self.kubeconfig)
            .env(LOG_ENV, &self.log_path)
            // Settings from the caller's environment that would change the operator.
            .env_remove("KOPF_RUN_NAMESPACE")
            .env_remove("KOPF_RUN_LOG_FORMAT")
            .env_remove("KOPF_RUN_QPS")
            .name(format!("chaos#{n}"))
            .start()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        timeline
            .borrow_mut()
            .starts
            .push((now_micros(), runner.pid()));
        self.current = Some(runner);
        Ok(())
    }

    /// Keeps the output of the process that ended.
    fn finish(&mut self, runner: &OperatorRunner) {
        self.outputs.push(RunOutput {
            name: runner.name().to_string(),
            pid: runner.pid(),
            lines: runner.lines(),
        });
    }

    /// SIGKILL, then the wait for the process to be gone (the recorded time is after it).
    async fn kill(&mut self, timeline: &RefCell<Timeline>) -> Result<()> {
        let Some(mut runner) = self.current.take() else {
            return Ok(());
        };
        if let Some(status) = runner.try_status() {
            timeline
                .borrow_mut()
                .exits
                .push((now_micros(), runner.pid(), status.to_string()));
        } else {
            runner.kill().await.context("killing the operator")?;
            let mut t = timeline.borrow_mut();
            let n = t.kills.len() + 1;
            t.kills.push(KillRecord {
                n,
                micros: now_micros(),
                pid: runner.pid(),
            });
        }
        self.finish(&runner);
        Ok(())
    }

    /// If the process exited by itself, records it and starts another.
    async fn check(&mut self, timeline: &RefCell<Timeline>) -> Result<()> {
        let exited = match self.current.as_mut() {
            Some(runner) => runner.try_status().map(|s| (runner.pid(), s.to_string())),
            None => None,
        };
        if let Some((pid, status)) = exited {
            println!("chaos: the operator (pid {pid}) exited by itself: {status}; restarting it");
            if let Some(mut runner) = self.current.take() {
                let _ = runner.wait(Duration::from_secs(2)).await;
                self.finish(&runner);
            }
            timeline
                .borrow_mut()
                .exits
                .push((now_micros(), pid, status));
            self.start(timeline)?;
        }
        Ok(())
    }

    /// SIGTERM at the end; the exit status as text.
    async fn stop(&mut self) -> String {
        let Some(mut runner) = self.current.take() else {
            return "not running".into();
        };
        let status = match runner.stop(STOP_TIMEOUT).await {
            Ok(s) => s.to_string(),
            Err(e) => format!("{e}"),
        };
        self.finish(&runner);
        status
    }
}

/// Sleeps until `at` after `started`.
async fn sleep_until(started: Instant, at: Duration) {
    tokio::time::sleep_until((started + at).into()).await;
}

/// The objects' creations, updates and deletions, at their planned moments.
async fn drive_load(
    plan: &Plan,
    server: &FakeApiServer,
    api: &Api<DynamicObject>,
    timeline: &RefCell<Timeline>,
    started: Instant,
) -> Result<()> {
    let mut last_report = Instant::now();
    for (done, op) in plan.ops.iter().enumerate() {
        sleep_until(started, op.at).await;
        let object = &plan.objects[op.object];
        let body = |value: i64| {
            json!({
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfExample",
                "metadata": {"name": object.name, "namespace": NAMESPACE},
                "spec": {"value": value},
            })
        };
        match op.action {
            Action::Create(value) => match server.apply_object(body(value)) {
                Ok(stored) => {
                    let uid = stored
                        .pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .context("a created object without a uid")?;
                    timeline
                        .borrow_mut()
                        .uids
                        .insert(object.name.clone(), uid.to_string());
                }
                Err(e) => fail_op(timeline, format!("creating {}: {e}", object.name)),
            },
            Action::Update(value) => {
                let Some(uid) = timeline.borrow().uids.get(&object.name).cloned() else {
                    continue; // its creation failed (recorded)
                };
                match server.apply_object(body(value)) {
                    Ok(stored)
                        if stored.pointer("/metadata/uid").and_then(Value::as_str)
                            == Some(&uid) =>
                    {
                        timeline.borrow_mut().updated.push((op.object, value));
                    }
                    Ok(_) => bail!(
                        "updating {} re-created it: the plan deleted it too early",
                        object.name
                    ),
                    Err(e) => fail_op(
                        timeline,
                        format!("updating {} to {value}: {e}", object.name),
                    ),
                }
            }
            Action::Delete => {
                if !timeline.borrow().uids.contains_key(&object.name) {
                    continue;
                }
                match delete(api, &object.name).await {
                    Ok(()) => timeline.borrow_mut().deleted.push(op.object),
                    Err(e) => fail_op(timeline, format!("deleting {}: {e:#}", object.name)),
                }
            }
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            let t = timeline.borrow();
            println!(
                "chaos: {:>5.1} s: {}/{} operations, {} kills, {} faults",
                started.elapsed().as_secs_f64(),
                done + 1,
                plan.ops.len(),
                t.kills.len(),
                t.fault_kinds.values().sum::<usize>()
            );
        }
    }
    Ok(())
}

/// Records a failed operation of the load.
fn fail_op(timeline: &RefCell<Timeline>, text: String) {
    println!("chaos: warning: {text}");
    timeline.borrow_mut().failed_ops.push((now_micros(), text));
}

/// Deletes an object over HTTP, retrying transient failures a few times.
async fn delete(api: &Api<DynamicObject>, name: &str) -> Result<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => bail!("it is already gone"),
            Err(e) if attempt < 5 => {
                println!("chaos: deleting {name} failed ({e}); again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The kills at their planned moments (the operator restarted after each, at once or after
/// its pause); between them, and until the load and the faults are done, a process that
/// exited by itself is recorded and restarted.
async fn drive_kills(
    plan: &Plan,
    operator: &mut Supervisor,
    timeline: &RefCell<Timeline>,
    started: Instant,
    finished: &Cell<usize>,
) -> Result<()> {
    for kill in &plan.kills {
        while started.elapsed() < kill.at {
            operator.check(timeline).await?;
            tokio::time::sleep(POLL.min(kill.at.saturating_sub(started.elapsed()))).await;
        }
        operator.kill(timeline).await?;
        if !kill.pause.is_zero() {
            tokio::time::sleep(kill.pause).await;
        }
        operator.start(timeline)?;
    }
    while finished.get() < 2 || started.elapsed() < plan.duration {
        operator.check(timeline).await?;
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Records an injected fault.
fn record_fault(timeline: &RefCell<Timeline>, text: String) {
    timeline.borrow_mut().faults.push((now_micros(), text));
}

/// The faults at their planned moments.
async fn drive_faults(
    plan: &Plan,
    server: &FakeApiServer,
    timeline: &RefCell<Timeline>,
    started: Instant,
) {
    let patches = || RequestPattern::any().verb("patch").resource(RESOURCE);
    for f in &plan.faults {
        sleep_until(started, f.at).await;
        record_fault(timeline, f.fault.to_string());
        *timeline
            .borrow_mut()
            .fault_kinds
            .entry(f.fault.kind())
            .or_default() += 1;
        match f.fault {
            Fault::Error {
                code,
                endpoint,
                count,
            } => {
                let pattern = match endpoint {
                    Endpoint::Object => patches().subresource(""),
                    Endpoint::Status => patches().subresource("status"),
                };
                server.inject_fault(FaultRule::new(pattern, code, count));
            }
            Fault::Throttle { count } => {
                server.inject_fault(FaultRule::new(patches(), 429, count).retry_after(1));
            }
            Fault::Latency { millis, window } => {
                server.add_latency(patches(), Duration::from_millis(millis));
                tokio::time::sleep(window).await;
                // The fake server removes delays only all together, with the other faults.
                server.clear_faults();
                record_fault(timeline, "latency over (all faults cleared)".into());
            }
            Fault::ExpireWatch => server.expire_next_watch(Some(RESOURCE)),
            Fault::CloseWatches => server.close_watches(Some(RESOURCE)),
        }
    }
}

/// The `kopfexamples` stored now.
fn stored_objects(server: &FakeApiServer) -> Vec<Value> {
    server
        .objects()
        .into_iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("KopfExample"))
        .collect()
}

/// What became of each planned object, from the recorded operations.
fn object_facts(plan: &Plan, timeline: &Timeline) -> Vec<ObjectFacts> {
    let mut updated: HashMap<usize, Vec<i64>> = HashMap::new();
    for (i, value) in &timeline.updated {
        updated.entry(*i).or_default().push(*value);
    }
    let deleted: HashSet<usize> = timeline.deleted.iter().copied().collect();
    plan.objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut values = vec![o.values[0]];
            values.extend(updated.get(&i).into_iter().flatten());
            ObjectFacts {
                name: o.name.clone(),
                uid: timeline.uids.get(&o.name).cloned(),
                values,
                deleted: deleted.contains(&i),
            }
        })
        .collect()
}

/// The state-based invariants on a snapshot (no request log: that is for the end).
fn snapshot_converged(
    plan: &Plan,
    server: &FakeApiServer,
    timeline: &Timeline,
    log_path: &Path,
) -> Result<bool> {
    let text = std::fs::read_to_string(log_path).unwrap_or_default();
    let ev = Evidence {
        timeline: timeline.clone(),
        objects: object_facts(plan, timeline),
        log: HandlerLog::parse(&text)?,
        final_objects: stored_objects(server),
        ..Default::default()
    };
    Ok([
        checks::status_written(&ev),
        checks::handled(&ev),
        checks::finalizer_kept(&ev),
        checks::deleted_gone(&ev),
        checks::no_stuck_finalizer(&ev),
    ]
    .iter()
    .all(|r| r.ok))
}

/// Waits until the state invariants hold twice in a row [`SETTLE`] apart, or the deadline;
/// restarts the operator if it exits by itself meanwhile.
async fn converge(
    plan: &Plan,
    server: &FakeApiServer,
    operator: &mut Supervisor,
    timeline: &RefCell<Timeline>,
    deadline: Duration,
) -> Result<bool> {
    let started = Instant::now();
    let mut since: Option<Instant> = None;
    let mut last_look: Option<Instant> = None;
    let mut last_report = Instant::now();
    while started.elapsed() < deadline {
        operator.check(timeline).await?;
        tokio::time::sleep(POLL).await;
        if last_look.is_some_and(|t| t.elapsed() < LOOK) {
            continue;
        }
        last_look = Some(Instant::now());
        let now = snapshot_converged(plan, server, &timeline.borrow(), &operator.log_path)?;
        match (now, since) {
            (true, Some(t)) if t.elapsed() >= SETTLE => return Ok(true),
            (true, None) => since = Some(Instant::now()),
            (true, Some(_)) => {}
            (false, _) => since = None,
        }
        if last_report.elapsed() >= Duration::from_secs(15) {
            last_report = Instant::now();
            println!(
                "chaos: quiet for {:.0} s, not converged yet",
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(false)
}

/// Everything the checks need, at the end.
fn gather(
    plan: &Plan,
    server: &FakeApiServer,
    timeline: &Timeline,
    log_path: &Path,
    outputs: Vec<RunOutput>,
) -> Result<Evidence> {
    let text = std::fs::read_to_string(log_path)
        .with_context(|| format!("reading the handler log {}", log_path.display()))?;
    let log = HandlerLog::parse(&text)?;
    let user_agent = log
        .starts
        .first()
        .map(|s| s.user_agent.clone())
        .context("the handler log has no start line: the operator never ran")?;
    let requests = server
        .requests()
        .iter()
        .filter(|r| r.user_agent == user_agent)
        .map(Request::from_record)
        .collect::<Result<Vec<_>>>()?;
    Ok(Evidence {
        timeline: timeline.clone(),
        objects: object_facts(plan, timeline),
        log,
        requests,
        final_objects: stored_objects(server),
        outputs,
        request_bound: REQUEST_BOUND,
    })
}

/// The figures of the run, after the table.
fn summary(
    plan: &Plan,
    ev: &Evidence,
    stop_status: &str,
    converged: bool,
    wall: Duration,
) -> String {
    let t = &ev.timeline;
    let mut out = String::new();
    let created = ev.objects.iter().filter(|o| o.uid.is_some()).count();
    let mut calls: BTreeMap<String, usize> = BTreeMap::new();
    for c in &ev.log.calls {
        *calls.entry(format!("{}_fn", c.cause)).or_default() += 1;
    }
    let dups = checks::find_duplicates(ev);
    let unexplained = dups.iter().filter(|d| d.explanation.is_none()).count();
    let failed_requests = ev.requests.iter().filter(|r| r.failed()).count();
    let kinds: Vec<String> = t
        .fault_kinds
        .iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect();
    let line = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "{k:<22} {v}");
    };
    line(&mut out, "seed", plan.seed.to_string());
    line(
        &mut out,
        "objects",
        format!("{created} created of {}", plan.objects.len()),
    );
    line(
        &mut out,
        "updates",
        format!("{} of {} planned", t.updated.len(), plan.updates()),
    );
    line(
        &mut out,
        "deletes",
        format!("{} of {} planned", t.deleted.len(), plan.deletes()),
    );
    line(
        &mut out,
        "failed operations",
        t.failed_ops.len().to_string(),
    );
    line(
        &mut out,
        "kills",
        format!("{} (processes: {})", t.kills.len(), t.starts.len()),
    );
    line(
        &mut out,
        "faults injected",
        format!(
            "{}{}",
            t.fault_kinds.values().sum::<usize>(),
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        ),
    );
    line(
        &mut out,
        "handler calls",
        format!("{calls:?}").replace('"', ""),
    );
    line(
        &mut out,
        "duplicates",
        format!(
            "{} ({} explained, {unexplained} unexplained)",
            dups.len(),
            dups.len() - unexplained
        ),
    );
    line(
        &mut out,
        "operator requests",
        format!(
            "{} ({failed_requests} failed or unanswered)",
            ev.requests.len()
        ),
    );
    if let Some(cut) = &ev.log.truncated {
        line(&mut out, "cut last log line", format!("{cut:?} (left out)"));
    }
    line(
        &mut out,
        "converged",
        if converged {
            "yes".into()
        } else {
            "no (deadline)".into()
        },
    );
    line(&mut out, "final stop (SIGTERM)", stop_status.to_string());
    line(
        &mut out,
        "wall time",
        format!("{:.1} s", wall.as_secs_f64()),
    );
    out
}

/// Writes the run's files next to the handler log and the kubeconfig.
fn keep_files(
    dir: &Path,
    server: &FakeApiServer,
    timeline: &Timeline,
    ev: &Evidence,
) -> Result<()> {
    let write = |name: &str, text: String| {
        std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))
    };
    let mut requests = String::new();
    for r in server.requests() {
        requests += &serde_json::to_string(&r)?;
        requests.push('\n');
    }
    write("requests.jsonl", requests)?;
    write(
        "objects.json",
        serde_json::to_string_pretty(&ev.final_objects)?,
    )?;
    for run in &ev.outputs {
        write(
            &format!("output-{}.txt", run.name.replace('#', "-")),
            run.lines.join("\n") + "\n",
        )?;
    }
    let mut text = format!("t0 {} (unix micros)\n", timeline.t0);
    let mut events: Vec<(Micros, String)> = Vec::new();
    events.extend(
        timeline
            .starts
            .iter()
            .map(|(t, pid)| (*t, format!("operator started, pid {pid}"))),
    );
    events.extend(
        timeline
            .kills
            .iter()
            .map(|k| (k.micros, format!("kill #{} of pid {}", k.n, k.pid))),
    );
    events.extend(
        timeline
            .exits
            .iter()
            .map(|(t, pid, s)| (*t, format!("pid {pid} exited by itself: {s}"))),
    );
    events.extend(
        timeline
            .faults
            .iter()
            .map(|(t, f)| (*t, format!("fault: {f}"))),
    );
    events.extend(
        timeline
            .failed_ops
            .iter()
            .map(|(t, f)| (*t, format!("failed operation: {f}"))),
    );
    events.sort_by_key(|(t, _)| *t);
    for (t, e) in events {
        let _ = writeln!(text, "{:>9} {}  {e}", timeline.at(t), t);
    }
    write("timeline.txt", text)
}

/// The workspace root, from `cargo metadata`.
fn workspace_root() -> Result<PathBuf> {
    let meta = crate::cargo_metadata()?;
    meta["workspace_root"]
        .as_str()
        .map(PathBuf::from)
        .context("`cargo metadata` has no workspace_root")
}

/// Builds the operator (so that a stale binary is never tested); its path.
fn build(root: &Path, release: bool) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut args = vec!["build", "--locked", "-p", OPERATOR];
    if release {
        args.push("--release");
    }
    println!("chaos: cargo {}", args.join(" "));
    let mut command = StdCommand::new(&cargo);
    command.args(&args).current_dir(root);
    // `cargo run` gave this process the package variables of xtask (CARGO_MANIFEST_DIR,
    // CARGO_PKG_NAME...). Build scripts that rerun when those change (ring's) would be
    // rebuilt here, and again by the next `cargo xtask`, at every run.
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|prefix| key_text.starts_with(prefix))
            || key_text == "OUT_DIR"
        {
            command.env_remove(&key);
        }
    }
    let status = command
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t),
        None => crate::cargo_metadata()?["target_directory"]
            .as_str()
            .map(PathBuf::from)
            .context("`cargo metadata` has no target_directory")?,
    };
    let binary = target
        .join(if release { "release" } else { "debug" })
        .join(OPERATOR);
    if !binary.is_file() {
        bail!("{} is missing after the build", binary.display());
    }
    Ok(binary)
}
