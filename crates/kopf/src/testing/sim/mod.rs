//! Deterministic simulation: an operator run against a scenario under faults, kills and
//! delays drawn from a seed, on a paused clock, in process — then checked against
//! invariants. One seed is one run; a failure names its seed, and the same seed replays
//! it.
//!
//! ```no_run
//! use kopf::testing::sim::{Invariant, Scenario, Simulation};
//! use serde_json::json;
//!
//! # fn operator() -> kopf::Operator { kopf::Operator::new() }
//! #[test]
//! fn survives_kills_and_faults() {
//!     let scenario = Scenario::new("kopf.dev/v1", "KopfExample", "kopfexamples")
//!         .create(json!({"metadata": {"name": "a"}, "spec": {"field": "x"}}))
//!         .patch("a", json!({"spec": {"field": "y"}}))
//!         .create(json!({"metadata": {"name": "b"}, "spec": {"field": "z"}}))
//!         .delete("b");
//!     Simulation::new(operator, scenario)
//!         .crds("examples/crd.yaml")
//!         .invariant(Invariant::new("my rule", |world| Ok(())))
//!         .check(100); // 100 seeds, or the one in KOPF_SIM_SEED
//! }
//! ```
//!
//! What one run does, all drawn from its seed:
//! - the scenario's steps in an interleaving of its objects, with pauses between them;
//! - each request of the operator served, failed (500, 503, 409, 429 with `Retry-After`),
//!   served with its answer lost, delayed, or its watch expired with 410 ([`FaultPlan`]);
//! - watch events late by a delay chosen for the run;
//! - the operator killed before or after a write (nothing it holds in memory survives, and
//!   nothing it sends afterwards arrives), and a fresh instance started on the same cluster
//!   after a pause;
//! - then the faults end and the operator is left to converge for
//!   [`converge_for`](Simulation::converge_for) of operator time, until it settles;
//! - then every invariant is checked over the final state and the [`History`].
//!
//! The choices for one request are drawn from the seed and what the request does (its
//! verb, resource and object, and how many such requests came before), not from the order
//! in which the objects' work interleaves: a seed gives the same faults to the same
//! requests on any machine. What the seed does not fix is tokio's choice among ready
//! branches of a `select!` and the order of hash maps; a replay can then differ in the
//! order of unrelated work, and replays the same failure in practice.

mod client;
mod dice;
mod history;
mod invariants;
mod plan;
mod scenario;
mod state;

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kopf_core::causes::Reason;
use kopf_testing::FakeApiServer;

pub use history::{Answer, Entry, Event, HandlerRun, History, Request, RunOutcome};
pub use invariants::{Created, FINALIZER, Invariant, World, kopf_contract};
pub use plan::FaultPlan;
pub use scenario::{Scenario, Step};

use super::{OperatorTest, Running};
use crate::logging::LogBuffer;
use crate::operator::Operator;
use dice::Dice;
use scenario::Applied;
use state::{Life, RunState, lock};

/// The environment variable that replays one seed: `KOPF_SIM_SEED=17 cargo test ...`.
pub const SEED_VARIABLE: &str = "KOPF_SIM_SEED";
/// The environment variable that sets the number of seeds of [`Simulation::check`].
pub const SEEDS_VARIABLE: &str = "KOPF_SIM_SEEDS";

/// While the driver pauses between steps, it looks this often (in operator time) whether
/// the operator was killed, to start its fresh instance.
const SLICE: Duration = Duration::from_millis(100);

type MakeOperator = Arc<dyn Fn() -> Operator + Send + Sync>;

/// A simulation of an operator: [`run`](Self::run) one seed, [`run_seeds`](Self::run_seeds)
/// many, or [`check`](Self::check) them in a test. See the [module](self) for what a run
/// does.
#[derive(Clone)]
pub struct Simulation {
    operator: MakeOperator,
    scenario: Scenario,
    crds: Vec<PathBuf>,
    invariants: Vec<Invariant>,
    plan: FaultPlan,
    converge: Duration,
}

impl fmt::Debug for Simulation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Simulation")
            .field("scenario", &self.scenario)
            .field("invariants", &self.invariants)
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl Simulation {
    /// A simulation of the operator that `operator` makes (a fresh one per instance: after
    /// a kill, nothing of the old one is kept) against `scenario`, with every fault of
    /// [`FaultPlan::default`] and Kopf's invariants ([`kopf_contract`]).
    pub fn new(
        operator: impl Fn() -> Operator + Send + Sync + 'static,
        scenario: Scenario,
    ) -> Self {
        Simulation {
            operator: Arc::new(operator),
            scenario,
            crds: Vec::new(),
            invariants: kopf_contract(),
            plan: FaultPlan::default(),
            converge: Duration::from_secs(300),
        }
    }

    /// A YAML file of CRDs (or any objects) to apply to the cluster before the operator
    /// starts; a relative path that does not exist from the current directory is taken
    /// relative to the crate's directory (`CARGO_MANIFEST_DIR`).
    pub fn crds(mut self, path: impl Into<PathBuf>) -> Self {
        self.crds.push(path.into());
        self
    }

    /// Adds an invariant.
    pub fn invariant(mut self, invariant: Invariant) -> Self {
        self.invariants.push(invariant);
        self
    }

    /// Drops the invariants of this name (one of [`kopf_contract`]'s, say).
    pub fn without_invariant(mut self, name: &str) -> Self {
        self.invariants.retain(|i| i.name() != name);
        self
    }

    /// The faults (default: [`FaultPlan::default`]).
    pub fn faults(mut self, plan: FaultPlan) -> Self {
        self.plan = plan;
        self
    }

    /// How much operator time the operator has to converge once the scenario is done and
    /// the faults end (default 5 minutes).
    pub fn converge_for(mut self, time: Duration) -> Self {
        self.converge = time;
        self
    }

    /// Runs `seeds` seeds (or the number in `KOPF_SIM_SEEDS`; only the seed in
    /// `KOPF_SIM_SEED` when set) and panics with the first failure: its seed, the broken
    /// invariant and the run's trace. From a plain `#[test]` (each seed makes its runtime).
    pub fn check(&self, seeds: u64) {
        let seeds = match seeds_from(|name| std::env::var(name).ok()) {
            Ok(Some(range)) => range,
            Ok(None) => 0..seeds,
            Err(e) => panic!("{e}"),
        };
        if let Err(failure) = self.run_seeds(seeds) {
            panic!("{failure}");
        }
    }

    /// Runs seeds on every core and returns how many passed, or the failure of the lowest
    /// failing seed. Call it outside of any tokio runtime: each run makes its own.
    pub fn run_seeds(&self, seeds: Range<u64>) -> Result<Summary, Box<Failure>> {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let count = seeds.end.saturating_sub(seeds.start).max(1);
        let next = AtomicU64::new(seeds.start);
        let lowest_failure = AtomicU64::new(u64::MAX);
        let failures = std::sync::Mutex::new(Vec::new());
        let summary = std::sync::Mutex::new(Summary::default());
        std::thread::scope(|scope| {
            for _ in 0..(workers as u64).min(count) {
                scope.spawn(|| {
                    loop {
                        // Seeds go out in order: once one fails, no higher one is started.
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        if seed >= seeds.end || seed > lowest_failure.load(Ordering::Relaxed) {
                            break;
                        }
                        match self.run_caught(seed) {
                            Ok(report) => lock(&summary).add(&report),
                            Err(failure) => {
                                lowest_failure.fetch_min(seed, Ordering::Relaxed);
                                lock(&failures).push(failure);
                            }
                        }
                    }
                });
            }
        });
        let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(first) = failures.into_iter().min_by_key(|f| f.seed) {
            return Err(first);
        }
        Ok(summary.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs one seed; a panic (of an invariant, a handler's test code...) is its failure.
    fn run_caught(&self, seed: u64) -> Result<Report, Box<Failure>> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run(seed))).unwrap_or_else(
            |panic| {
                let message = kopf_core::text::panic_message(panic.as_ref())
                    .unwrap_or("a panic without a message");
                Err(Box::new(Failure {
                    seed,
                    invariant: "the run does not panic".into(),
                    details: vec![message.to_string()],
                    history: History::default(),
                }))
            },
        )
    }

    /// Runs one seed: the scenario under the seed's faults, then the invariants. Call it
    /// outside of any tokio runtime (a plain `#[test]`): each run makes its own.
    pub fn run(&self, seed: u64) -> Result<Report, Box<Failure>> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Failure::setup(
                seed,
                "a simulation makes a runtime of its own for each seed: run it from a plain \
                 #[test], not from inside a tokio runtime (#[tokio::test])"
                    .into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .map_err(|e| Failure::setup(seed, format!("cannot make a runtime: {e}")))?;
        let _seeded = kopf_core::clock::seeded(seed);
        // Every instance of the run logs through one subscriber, the thread's default until
        // the runtime is gone: a killed instance's tasks end with the runtime, and their
        // spans close in the subscriber that made them.
        let logs = OperatorTest::new(Operator::new()).capture();
        let _default = tracing::dispatcher::set_default(&logs.1);
        let result = runtime.block_on(self.run_here(seed, logs));
        drop(runtime);
        result
    }

    async fn run_here(
        &self,
        seed: u64,
        logs: (LogBuffer, tracing::Dispatch),
    ) -> Result<Report, Box<Failure>> {
        let run = RunState::new(seed, self.plan.clone());
        let server = Arc::new(self.server(seed).await?);
        let mut driver = Driver {
            sim: self,
            run: run.clone(),
            server: server.clone(),
            instances: Vec::new(),
            logs,
        };
        let created = driver.play(seed).await?;
        let objects = server.objects();
        let world = World {
            objects,
            history: run.history(),
            created,
            create_handlers: self.has_handlers(|h| h.reason == Some(Reason::Create)),
            delete_handlers: self
                .has_handlers(|h| h.reason == Some(Reason::Delete) && h.requires_finalizer),
            changing_handlers: self
                .has_handlers(|h| matches!(h.kind, kopf_core::handler::HandlerKind::Changing)),
        };
        drop(driver);
        for invariant in &self.invariants {
            if let Err(details) = invariant.check(&world) {
                return Err(Box::new(Failure {
                    seed,
                    invariant: invariant.name().to_string(),
                    details,
                    history: world.history,
                }));
            }
        }
        Ok(Report {
            seed,
            kills: world.history.kills(),
            faults: world.history.faults(),
            requests: world.history.requests().count(),
            handler_runs: world.history.handler_runs().count(),
            history: world.history,
        })
    }

    /// The fake API server of a run, with the CRDs and the run's watch-event delay.
    async fn server(&self, seed: u64) -> Result<FakeApiServer, Box<Failure>> {
        let server = FakeApiServer::in_process()
            .await
            .map_err(|e| Failure::setup(seed, format!("cannot start the fake API server: {e}")))?;
        for path in &self.crds {
            let path = resolve(path);
            server.apply_file(&path).map_err(|e| {
                Failure::setup(seed, format!("cannot apply {}: {e}", path.display()))
            })?;
        }
        server.set_watch_event_delay(self.plan.event_delay(&Dice::new(seed)));
        Ok(server)
    }

    /// Whether the operator has handlers for the scenario's resource that `want`s.
    fn has_handlers(&self, want: impl Fn(&kopf_core::handler::HandlerSpec) -> bool) -> bool {
        let resource = &self.scenario.resource;
        (self.operator)()
            .registrations
            .iter()
            .any(|(selector, spec)| want(spec) && selects(selector, resource))
    }
}

/// Whether a selector names a resource (by plural or kind, with or without its group;
/// predicates and `EVERYTHING` select it).
fn selects(selector: &kopf_watch::Selector, resource: &kube::core::ApiResource) -> bool {
    use kopf_watch::Selector as S;
    let name_is = |n: &str| {
        let n = n.split('.').next().unwrap_or(n).to_lowercase();
        n == resource.plural || n == resource.kind.to_lowercase()
    };
    match selector {
        S::Name(n) => name_is(n),
        S::GroupPlural(g, p) | S::Gvp(g, _, p) => *g == resource.group && *p == resource.plural,
        S::Everything | S::Predicate(_) => true,
    }
}

/// A path relative to the crate's directory (where `cargo test` runs) unless absolute.
fn resolve(path: &std::path::Path) -> PathBuf {
    if path.is_absolute() || path.exists() {
        return path.to_path_buf();
    }
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(|d| PathBuf::from(d).join(path))
        .unwrap_or_else(|| path.to_path_buf())
}

/// The seeds the environment (`var`) asks for: one in `KOPF_SIM_SEED`, or a count in
/// `KOPF_SIM_SEEDS`.
fn seeds_from(var: impl Fn(&str) -> Option<String>) -> Result<Option<Range<u64>>, String> {
    let number = |name: &str| -> Result<Option<u64>, String> {
        match var(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("{name}={v:?} is not a number: give a seed like 17")),
        }
    };
    if let Some(seed) = number(SEED_VARIABLE)? {
        return Ok(Some(seed..seed.saturating_add(1)));
    }
    Ok(number(SEEDS_VARIABLE)?.map(|n| 0..n))
}

/// What plays a run: the scenario's steps, kills and restarts, then convergence.
struct Driver<'a> {
    sim: &'a Simulation,
    run: Arc<RunState>,
    server: Arc<FakeApiServer>,
    /// Every instance started, the killed ones too (they wait forever until the run ends).
    instances: Vec<(Life, Running)>,
    /// The log capture of the run's instances, and its subscriber.
    logs: (LogBuffer, tracing::Dispatch),
}

impl Driver<'_> {
    /// Plays the scenario, lets the operator converge, and returns the created objects.
    async fn play(&mut self, seed: u64) -> Result<Vec<Created>, Box<Failure>> {
        self.start_instance(seed).await?;
        let client = self.server.client_in_process();
        let mut created: Vec<Created> = Vec::new();
        for (pause, step) in self.sim.scenario.ordered(&self.run.dice) {
            self.pause(seed, pause).await?;
            let (what, result) = self.sim.scenario.apply(&client, &step).await;
            let object = format!("{}/{}", self.sim.scenario.namespace, step.object());
            let (applied, error) = match result {
                Ok(applied) => (applied, None),
                Err(e) => (Default::default(), Some(e.to_string())),
            };
            if error.is_none() {
                note_step(&mut created, &step, object, &applied);
            }
            let uid = applied.uid;
            self.run.record(Event::Step { what, uid, error });
        }
        self.converge(seed).await?;
        Ok(created)
    }

    /// Lets operator time pass, restarting a killed operator after its downtime.
    async fn pause(&mut self, seed: u64, time: Duration) -> Result<(), Box<Failure>> {
        let until = tokio::time::Instant::now() + time;
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(SLICE.min(until - tokio::time::Instant::now())).await;
            self.restart_if_killed(seed).await?;
        }
        Ok(())
    }

    /// Starts a fresh instance if the current one was killed, after a downtime drawn from
    /// the seed.
    async fn restart_if_killed(&mut self, seed: u64) -> Result<(), Box<Failure>> {
        if self
            .instances
            .last()
            .is_some_and(|(life, _)| life.is_alive())
        {
            return Ok(());
        }
        let most = self.run.plan.max_downtime.as_millis() as u64;
        let n = self.instances.len() as u64;
        let down = self.run.dice.below("downtime", n, most + 1);
        tokio::time::sleep(Duration::from_millis(down)).await;
        self.start_instance(seed).await
    }

    async fn start_instance(&mut self, seed: u64) -> Result<(), Box<Failure>> {
        let life = Life::new(self.instances.len() as u32 + 1);
        let operator =
            (self.sim.operator)().layer(client::recorder(self.run.clone(), life.clone()));
        let wrap = {
            let (run, life, server) = (self.run.clone(), life.clone(), self.server.clone());
            Arc::new(move |inner| client::faulty(inner, run.clone(), life.clone(), server.clone()))
        };
        self.run.record(Event::Started {
            instance: life.instance,
        });
        let running = OperatorTest::new(operator)
            .on_current_runtime(true)
            .wait_for_watch(false)
            .wrap_client(wrap)
            .logs_into(self.logs.0.clone(), self.logs.1.clone())
            .start(&self.server)
            .await
            .map_err(|e| Failure::setup(seed, format!("cannot start the operator: {e}")))?;
        self.instances.push((life, running));
        Ok(())
    }

    /// Ends the faults, restarts a killed operator, and lets it converge until it settles.
    async fn converge(&mut self, seed: u64) -> Result<(), Box<Failure>> {
        self.run.calm_down();
        self.restart_if_killed(seed).await?;
        let Some((_, running)) = self.instances.last_mut() else {
            return Ok(());
        };
        let settled = tokio::time::timeout(
            self.sim.converge.saturating_mul(2),
            running.advance(self.sim.converge),
        )
        .await;
        if running.has_stopped() {
            return Err(Box::new(Failure {
                seed,
                invariant: "the operator keeps running".into(),
                details: vec![format!(
                    "it stopped by itself; its last log lines: {:?}",
                    running
                        .logs()
                        .iter()
                        .rev()
                        .take(5)
                        .rev()
                        .collect::<Vec<_>>()
                )],
                history: self.run.history(),
            }));
        }
        match settled {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Failure::setup(seed, format!("cannot settle: {e}"))),
            Err(_) => Err(Box::new(Failure {
                seed,
                invariant: "the operator settles".into(),
                details: vec![format!(
                    "it kept sending requests or logging for {:?} of operator time after the \
                     faults ended",
                    self.sim.converge.saturating_mul(2)
                )],
                history: self.run.history(),
            })),
        }
    }
}

/// Keeps the scenario's objects up to date with a step that was done.
fn note_step(created: &mut Vec<Created>, step: &Step, object: String, applied: &Applied) {
    match (step, &applied.uid) {
        (Step::Create(_), Some(uid)) => created.push(Created {
            object,
            uid: uid.clone(),
            deleted: false,
            finalized: false,
        }),
        (Step::Delete(_), _) => {
            for c in created
                .iter_mut()
                .filter(|c| c.object == object && !c.deleted)
            {
                c.deleted = true;
                c.finalized = applied.finalized;
            }
        }
        _ => {}
    }
}

/// What a passing run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// Its seed.
    pub seed: u64,
    /// The instances killed.
    pub kills: usize,
    /// The faults injected (failed or lost answers, watches started with 410; delays
    /// aside).
    pub faults: usize,
    /// The operator's requests about objects.
    pub requests: usize,
    /// The handler attempts.
    pub handler_runs: usize,
    /// What happened.
    pub history: History,
}

/// What passing runs did, in total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// The runs.
    pub runs: usize,
    /// The instances killed.
    pub kills: usize,
    /// The faults injected.
    pub faults: usize,
    /// The operator's requests about objects.
    pub requests: usize,
    /// The handler attempts.
    pub handler_runs: usize,
}

impl Summary {
    fn add(&mut self, report: &Report) {
        self.runs += 1;
        self.kills += report.kills;
        self.faults += report.faults;
        self.requests += report.requests;
        self.handler_runs += report.handler_runs;
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs passed: {} kills, {} faults, {} requests, {} handler attempts",
            self.runs, self.kills, self.faults, self.requests, self.handler_runs
        )
    }
}

/// A failed run: its seed, the invariant it broke and what happened.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed: `KOPF_SIM_SEED=<seed>` replays it.
    pub seed: u64,
    /// The invariant broken (or why the run could not be made).
    pub invariant: String,
    /// What is wrong, one line per object.
    pub details: Vec<String>,
    /// What happened.
    pub history: History,
}

impl Failure {
    fn setup(seed: u64, why: String) -> Box<Self> {
        Box::new(Failure {
            seed,
            invariant: "the run can be made".into(),
            details: vec![why],
            history: History::default(),
        })
    }
}

/// How many lines of the trace a failure prints.
const TRACE_LINES: usize = 120;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} broke the invariant \"{}\":",
            self.seed, self.invariant
        )?;
        for d in &self.details {
            writeln!(f, "  - {d}")?;
        }
        writeln!(
            f,
            "replay this seed alone: {SEED_VARIABLE}={} cargo test <this test>",
            self.seed
        )?;
        let trace = self.history.trace();
        let skip = trace.len().saturating_sub(TRACE_LINES);
        writeln!(
            f,
            "the run (operator time, #instance, what){}:",
            if skip > 0 {
                format!("; the last {TRACE_LINES} of {} lines", trace.len())
            } else {
                String::new()
            }
        )?;
        for line in &trace[skip..] {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_come_from_the_environment_or_the_call() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(seeds_from(env(&[])), Ok(None));
        assert_eq!(seeds_from(env(&[(SEED_VARIABLE, "17")])), Ok(Some(17..18)));
        assert_eq!(
            seeds_from(env(&[(SEEDS_VARIABLE, "500")])),
            Ok(Some(0..500))
        );
        const BOTH: &[(&str, &str)] = &[(SEEDS_VARIABLE, "500"), (SEED_VARIABLE, " 3 ")];
        assert_eq!(seeds_from(env(BOTH)), Ok(Some(3..4)), "one seed wins");
        let bad = seeds_from(env(&[(SEED_VARIABLE, "x1")])).expect_err("not a number");
        assert!(
            bad.contains("KOPF_SIM_SEED=\"x1\" is not a number"),
            "{bad}"
        );
    }
}
