//! Project automation.
//!
//! `cargo xtask e2e [--cluster kind|fake|current] [--example NAME]... [--keep-going]` runs
//! every example operator as its own process against a cluster through create, restart,
//! update and delete (see `e2e.rs`).
//!
//! `cargo xtask chaos [--quick] [--objects N] [--kills N] [--seed N] [--faults on|off] [--keep]`
//! is a soak test of Kopf's contract under crashes and API faults: a counting operator
//! (`xtask/chaos-operator`) SIGKILLed at random moments while the fake API server fails its
//! writes, then invariants checked on what it leaves behind (see `chaos.rs`).
//!
//! `cargo xtask conformance [--test NAME]... [--timeout SECONDS] [--update-lock]` runs the
//! `#[ignore]`d cluster tests of kube-rs 5.0's published crates against the fake API server
//! and checks the outcome against the list of expected failures (see `conformance.rs`).
//!
//! `cargo xtask kubectl-matrix [--kubectl PATH]...` runs kopf-testing's kubectl tests once
//! per kubectl binary: those given, or every `kubectl.1.NN` beside the PATH's kubectl (see
//! `kubectl_matrix.rs`).
//!
//! `cargo xtask layout` checks the house rules: no import circle between a crate's modules,
//! no source file over 800 lines of non-test code, no module named in ARCHITECTURE.md that
//! the code lacks (see `layout.rs`), no doc example of `kopf` that names an inner crate or
//! `tracing` directly (see `docpaths.rs`).
//!
//! `cargo xtask image [--example NAME] [--profile P] [--no-testcontainers]` builds the
//! operator image of an example with `deploy/Dockerfile` on a base made here (no registry
//! needed), runs it against the fake API server as a cluster would, stops it with SIGTERM
//! and prints its size; then kopf-testing's testcontainers test (see `image.rs`).
//!
//! `cargo xtask coverage [--html] [--no-install]` runs the README's test command instrumented
//! (cargo-llvm-cov, installed if missing) and prints line coverage per crate (see
//! `coverage.rs`).
//!
//! `cargo xtask bench memory [--objects N] [--release] [--unlimited]` measures the
//! operator's heap in the shape of kube-rs' memory benchmark (see
//! `crates/kopf/benches/memory.rs`); with `--idle [--payload-kb K]`, what an idle object
//! with a K KB payload and a timer costs, with and without trimming.
//!
//! `cargo xtask bench build [--keep]` measures what a production operator costs to build
//! beside a plain kube-rs controller (see `bench/build_cost.rs`).
//!
//! `cargo xtask bench fake-apiserver [--objects N] [--watchers N]` measures the in-memory API
//! server: creates per second over HTTP with a kube client, listing N objects, the fan-out of
//! one write to many watchers, and memory per stored object. Build with `--release` for
//! meaningful numbers (`cargo xtask` runs a debug build unless told otherwise; the report
//! says which).

mod api_surface;
mod bench;
mod cargo;
mod chaos;
mod conformance;
mod coverage;
mod docpaths;
mod e2e;
mod fnlen;
mod image;
mod kubectl_matrix;
mod layout;

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_testing::FakeApiServer;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Benchmarks: operator frameworks side by side (`bench [--quick]`), or the fake API
    /// server alone (`bench fake-apiserver`).
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        what: Option<Bench>,
        #[command(flatten)]
        args: bench::BenchArgs,
    },
    /// End-to-end: the example operators as processes against a cluster.
    E2e(e2e::E2eArgs),
    /// Soak test: a counting operator SIGKILLed at random moments while the fake API
    /// server injects faults; then Kopf's invariants (status written, nothing left behind,
    /// delete handlers run, duplicates only after a crash or a failed write), as a table.
    /// Exits non-zero on any FAIL.
    Chaos(chaos::ChaosArgs),
    /// A client suite nobody here wrote, against the fake API server: the `#[ignore]`d
    /// cluster tests of kube-rs 5.0 (the published crates kube, kube-client, kube-runtime).
    ///
    /// Copies the crates' sources cargo downloaded into target/conformance (a workspace with
    /// the lock xtask/conformance/Cargo.lock), builds their unit tests
    /// (`cargo test --locked --lib --no-run`), then runs each ignored test alone with
    /// KUBECONFIG at a fresh in-process fake API server. Prints a table (crate, test,
    /// outcome, reason) and the line "kube-rs 5.0 cluster tests: N passed, M expected
    /// failures (...), of T". Exits non-zero when a test fails that is not on the list of
    /// expected failures (xtask/src/conformance/expected.rs: the tests that need a kubelet,
    /// each with its reason), or when a listed test passes or no longer exists. About 80 s
    /// of tests, plus the first build of kube-rs' tests (about 3 minutes on 2 cores).
    Conformance(conformance::ConformanceArgs),
    /// Line coverage per crate of `cargo test --workspace`, measured with cargo-llvm-cov.
    ///
    /// Runs the README's test command instrumented (in target/llvm-cov-target, so
    /// target/debug stays as it is) and prints lines covered / lines per crate of crates/
    /// (kopf-diff, kopf-core, kopf-watch, kopf-admission, kopf, kopf-macros, kopf-testing,
    /// kopf-cli) and the total; the table is also written to target/coverage/summary.md, the
    /// per-file JSON to target/coverage/coverage.json.
    ///
    /// Counted: the lines of `crates/<name>/src` run by the unit and integration tests and by
    /// the example operator binaries that tests start as processes (built instrumented by
    /// the same run; a process killed with SIGKILL writes no profile), and kopf-macros'
    /// expansions inside rustc (while the run compiles, and in trybuild's UI tests). Not
    /// counted: doctests (need nightly).
    ///
    /// Installs cargo-llvm-cov (`cargo install cargo-llvm-cov --locked`) and the llvm-tools
    /// rustup component if missing, unless --no-install. Takes about 5 minutes on a 2-core
    /// machine (about 10 the first time). Exits non-zero if a test fails (the report is
    /// still made).
    Coverage(coverage::CoverageArgs),
    /// The operator image: `deploy/Dockerfile` built and run against the fake API server.
    ///
    /// Needs a Docker engine (says how to install and start one when it is missing); no
    /// registry: the runtime base is made from the binary's shared libraries. Builds the
    /// example's binary (`--profile`, `release` by default; CI uses `dev`), the base (once)
    /// and the image; runs it on the host network with the fake API server's kubeconfig
    /// mounted, applies examples/crd.yaml and examples/obj.yaml, waits for the handler's
    /// `status.create_fn`, stops it with SIGTERM (exit status 0 expected) and prints the
    /// image's size. Then runs kopf-testing's testcontainers test (`--no-testcontainers` to
    /// leave it out). Exits non-zero on any failure.
    Image(image::ImageArgs),
    /// kopf-testing's kubectl tests (crates/kopf-testing/tests/kubectl.rs) once per kubectl
    /// binary, each given to the tests as KOPF_TEST_KUBECTL.
    ///
    /// The binaries: those given with --kubectl, or else every `kubectl.1.NN` in the PATH's
    /// directories and beside the kubectl on the PATH (symbolic links resolved; the Google
    /// Cloud SDK installs kubectl.1.27 to kubectl.1.33 there). Fails, saying so, when it finds
    /// none. kubectl 1.28 and older are listed as unsupported and not run (their `apply`
    /// needs /openapi/v2, which the fake API server does not serve). Prints a table (version,
    /// binary, test result, time) and exits non-zero when a run fails. About 12 s per binary
    /// once the test is built.
    KubectlMatrix(kubectl_matrix::MatrixArgs),
    /// The house rules of the source tree: no import circle between the modules of a crate,
    /// no source file over 800 lines of non-test code (unless it says why with a
    /// `// layout: ...` comment), every module and file ARCHITECTURE.md names exists, the
    /// facade's doc examples use `kopf::` paths only. Exits non-zero on any problem.
    Layout,
}

#[derive(Subcommand)]
enum Bench {
    /// Deterministic simulation: the `children` example through N seeds of kills, API
    /// faults, latency and late watch events (`crates/kopf/benches/simulation.rs`, on every
    /// core). Prints the wall time, seeds per second and what the runs did; exits non-zero
    /// if a seed fails. Built in the dev profile (the build `cargo test` leaves) unless
    /// --release (the release profile's fat LTO links for several minutes on 2 cores).
    Simulation {
        /// Seeds to run.
        #[arg(long, default_value_t = 500)]
        seeds: u64,
        /// Build and run the release profile.
        #[arg(long)]
        release: bool,
    },
    /// What a production operator costs to build: the first debug build of
    /// `examples/my-operator` and of a plain kube-rs Controller (the `kube-rs` system as a
    /// crate of its own, with this workspace's lock), each from an empty target directory,
    /// one after the other; wall times, crates of the normal dependency tree, target sizes
    /// and the ratios. About 10 minutes on 2 cores; the target directories (under
    /// target/build-cost) are removed afterwards unless --keep.
    Build {
        /// Keep the two target directories.
        #[arg(long)]
        keep: bool,
    },
    /// The operator's heap in the shape of kube-rs' memory benchmark: N ConfigMaps (default
    /// 10,000), the initial list, 5,000 updates and 1,000 deletes, a relist; the peak and
    /// settled live bytes of the operator alone, its allocations and requests per phase
    /// (`crates/kopf/benches/memory.rs`). Built in the dev profile unless --release.
    Memory {
        /// ConfigMaps (the updates are half of them, the deletes a tenth).
        #[arg(long, default_value_t = 10_000)]
        objects: u64,
        /// Build and run the release profile.
        #[arg(long)]
        release: bool,
        /// The client's rate limit off (as `cargo xtask bench` runs operators); by default
        /// kopf's, 100 requests per second after a burst of 1,000.
        #[arg(long)]
        unlimited: bool,
        /// Instead: idle objects with a large payload and a timer each, the timer declaring
        /// what it reads (the engine keeps only that) and not, side by side: resident
        /// memory and heap per object.
        #[arg(long)]
        idle: bool,
        /// With --idle: the payload of each ConfigMap, in KB.
        #[arg(long, default_value_t = 10, requires = "idle")]
        payload_kb: u64,
    },
    /// The fake API server: creates/s, a large list, watch fan-out, bytes per object.
    FakeApiserver {
        /// Objects to create and list.
        #[arg(long, default_value_t = 10_000)]
        objects: usize,
        /// Watchers for the fan-out measurement.
        #[arg(long, default_value_t = 100)]
        watchers: usize,
        /// Concurrent creating clients.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
}

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn config_map(i: usize) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(format!("bench-{i:06}"));
    cm.metadata.labels = Some([("bench".to_string(), "yes".to_string())].into());
    cm.data = Some([("key".to_string(), format!("value-{i}"))].into());
    cm
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Bench {
            what:
                Some(Bench::FakeApiserver {
                    objects,
                    watchers,
                    concurrency,
                }),
            ..
        } => bench_fake_apiserver(objects, watchers, concurrency).await,
        Cmd::Bench {
            what: Some(Bench::Simulation { seeds, release }),
            ..
        } => kopf_bench("simulation", &[seeds.to_string()], release),
        Cmd::Bench {
            what:
                Some(Bench::Memory {
                    objects,
                    release,
                    unlimited,
                    idle,
                    payload_kb,
                }),
            ..
        } => {
            let mut arguments = vec![objects.to_string()];
            arguments.extend(unlimited.then(|| "unlimited".to_string()));
            if idle {
                arguments.extend(["idle".to_string(), format!("kb={payload_kb}")]);
            }
            kopf_bench("memory", &arguments, release)
        }
        Cmd::Bench {
            what: Some(Bench::Build { keep }),
            ..
        } => bench::build_cost::run(&cargo::Workspace::locate()?.root, keep),
        Cmd::Bench { what: None, args } => {
            if let Err(e) = bench::run(args).await {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Chaos(args) => {
            if let Err(e) = chaos::run(args).await {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Conformance(args) => {
            if let Err(e) = conformance::run(args).await {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Layout => layout::run(),
        Cmd::KubectlMatrix(args) => {
            if let Err(e) = kubectl_matrix::run(args) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Image(args) => {
            if let Err(e) = image::run(args).await {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::Coverage(args) => {
            if let Err(e) = coverage::run(args) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Cmd::E2e(args) => {
            // The message alone (no backtrace, even with RUST_BACKTRACE set): the causes
            // are spelled out, e.g. which tool is missing.
            if let Err(e) = e2e::run(args).await {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// `cargo xtask bench simulation` and `memory`: `cargo bench -p kopf --bench NAME --
/// ARGUMENTS`, in the dev profile unless `release`, its output as it comes.
fn kopf_bench(name: &str, arguments: &[String], release: bool) -> anyhow::Result<()> {
    let root = cargo::Workspace::locate()?.root;
    let mut command = cargo::command(&root, &["bench", "-p", "kopf", "--bench", name]);
    if !release {
        command.args(["--profile", "dev"]);
    }
    command.arg("--").args(arguments);
    let status = command
        .status()
        .with_context(|| format!("running `cargo bench -p kopf --bench {name}`"))?;
    if !status.success() {
        bail!("the {name} bench failed ({status})");
    }
    Ok(())
}

async fn bench_fake_apiserver(
    objects: usize,
    watchers: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    if objects == 0 || watchers == 0 || concurrency == 0 {
        bail!("--objects, --watchers and --concurrency must be positive");
    }
    let profile = if cfg!(debug_assertions) {
        "debug (use `cargo run -p xtask --release -- bench ...`)"
    } else {
        "release"
    };
    println!("fake API server benchmark ({profile} build), {objects} objects, {watchers} watchers");
    let server = FakeApiServer::builder()
        .history_limit(objects * 2 + 1000)
        .start()
        .await?;
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");

    // 1. Creates per second through HTTP with `concurrency` clients in flight.
    let started = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..objects)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &config_map(i)).await }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let create_secs = started.elapsed().as_secs_f64();
    let failed = results.iter().filter(|r| r.is_err()).count();
    drop(results);
    if failed > 0 {
        bail!("{failed} creates failed");
    }
    println!("| measurement | result |");
    println!("|---|---|");
    println!(
        "| creates per second ({concurrency} in flight) | {:.0} |",
        objects as f64 / create_secs
    );

    // 2. One full list of all objects, and the same in pages of 500.
    let started = Instant::now();
    let list = api.list(&ListParams::default()).await?;
    let list_secs = started.elapsed().as_secs_f64();
    if list.items.len() != objects {
        bail!("listed {} objects, expected {objects}", list.items.len());
    }
    println!(
        "| list of {objects} objects | {:.1} ms |",
        list_secs * 1000.0
    );
    let started = Instant::now();
    let mut seen = 0;
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(500);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await?;
        seen += page.items.len();
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    if seen != objects {
        bail!("paged list saw {seen} objects, expected {objects}");
    }
    println!(
        "| paged list (500 per page) of {objects} objects | {:.1} ms |",
        started.elapsed().as_secs_f64() * 1000.0
    );

    // 3. Fan-out: one write delivered to `watchers` watch streams.
    let rv = list
        .metadata
        .resource_version
        .clone()
        .context("list resourceVersion")?;
    let mut streams = Vec::new();
    for _ in 0..watchers {
        let s = api
            .watch(&WatchParams::default().timeout(60), &rv)
            .await?
            .boxed();
        streams.push(s);
    }
    // Wait until all watches are registered on the server.
    for _ in 0..200 {
        if server.watches().len() >= watchers {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    api.patch(
        "bench-000000",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"key": "changed"}})),
    )
    .await?;
    let mut delivered = 0;
    let mut last = Duration::ZERO;
    let waits = streams.into_iter().map(|mut s| async move {
        while let Some(ev) = s.next().await {
            if let Ok(WatchEvent::Modified(_)) = ev {
                return true;
            }
        }
        false
    });
    for ok in futures::future::join_all(waits.map(|w| async {
        let r = tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .unwrap_or(false);
        (r, started.elapsed())
    }))
    .await
    {
        if ok.0 {
            delivered += 1;
            last = last.max(ok.1);
        }
    }
    if delivered != watchers {
        bail!("only {delivered} of {watchers} watchers got the event");
    }
    println!(
        "| one write delivered to {watchers} watchers (until the last got it) | {:.1} ms |",
        last.as_secs_f64() * 1000.0
    );

    let counters = server.counters();
    println!(
        "\nrequests served: {} (create {}, list {}, watch {}, patch {})",
        counters.total(),
        counters.verb("create"),
        counters.verb("list"),
        counters.verb("watch"),
        counters.verb("patch")
    );
    server.shutdown().await;

    // 4. Memory per stored object: a fresh server, objects stored through the Rust API (no
    // HTTP, no request log, no client), resident set growth divided by the count.
    let store = FakeApiServer::builder()
        .history_limit(objects * 2 + 1000)
        .start()
        .await?;
    let before = rss_bytes();
    for i in 0..objects {
        let mut cm = serde_json::to_value(config_map(i))?;
        cm["apiVersion"] = "v1".into();
        cm["kind"] = "ConfigMap".into();
        cm["metadata"]["namespace"] = "default".into();
        store
            .apply_object(cm)
            .map_err(|e| anyhow::anyhow!("storing object {i}: {e}"))?;
    }
    let after = rss_bytes();
    match (before, after) {
        (Some(b), Some(a)) if a > b => println!(
            "| resident memory per stored ConfigMap (store, history and managedFields) | {} bytes |",
            (a - b) / objects as u64
        ),
        _ => println!("| resident memory per stored object | not measurable here |"),
    }
    store.shutdown().await;
    Ok(())
}
