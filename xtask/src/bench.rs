//! `cargo xtask bench [--quick] [--n N]`: operator frameworks side by side, each against
//! its own fresh `kopf fake-apiserver` (release builds, same settings), doing one job: a
//! message in `status.create_fn` on creation, the new `spec.field` in `status.update_fn`
//! on update.
//!
//! Systems: `kopf-rs` (the `minimal` example), `kopf-rs-delete` (the same job plus a delete
//! handler: what the finalizer costs), `kopf` (Python Kopf 1.45 from PyPI, in a
//! venv the harness creates), `kube-rs` (a `kube::runtime::Controller`), `limit` (a plain
//! client sending exactly the diff-base and status PATCHes) and `limit-status` (the status
//! PATCH only). Scenarios, in this order on one server per system:
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use kopf_testing::{Cluster, ClusterKind, OperatorRunner};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// The User-Agent of the harness's own requests (left out of the operators' counts).
const DRIVER: &str = "kopf-bench-driver";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum System {
    /// kopf-rs: the `minimal` example.
    KopfRs,
    /// kopf-rs: the `minimal` example's job plus a delete handler (the finalizer's cost).
    KopfRsDelete,
    /// Python Kopf 1.45.
    Kopf,
    /// kube-rs `Controller`.
    KubeRs,
    /// A plain client: diff-base and status PATCHes, high concurrency.
    Limit,
    /// A plain client: the status PATCH only.
    LimitStatus,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::KopfRs => "kopf-rs",
            System::KopfRsDelete => "kopf-rs-delete",
            System::Kopf => "kopf",
            System::KubeRs => "kube-rs",
            System::Limit => "limit",
            System::LimitStatus => "limit-status",
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Small sizes (N = 1,000, 20 s of churn): under 15 minutes with the builds.
    #[arg(long)]
    quick: bool,
    /// Objects (default 10,000; 1,000 with --quick).
    #[arg(long)]
    n: Option<usize>,
    /// Only these systems (repeatable). Default: all.
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

struct Plan {
    n: usize,
    churn_rate: f64,
    churn_seconds: u64,
    /// Longest wait for a burst to complete.
    burst_timeout: Duration,
}

/// What one system did.
#[derive(Debug, Default, serde::Serialize)]
struct Measured {
    system: &'static str,
    n: usize,
    burst_seconds: f64,
    burst_requests_per_object: BTreeMap<String, f64>,
    burst_cpu_seconds: f64,
    peak_rss_mb: f64,
    churn_updates: usize,
    churn_latency_ms: BTreeMap<&'static str, f64>,
    churn_requests_per_update: BTreeMap<String, f64>,
    idle_rss_mb: f64,
    idle_requests: usize,
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
    let root = workspace_root()?;
    let target = target_dir(&root)?;
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
    let mut results = Vec::new();
    for system in systems {
        println!("== {} (N = {})", system.name(), plan.n);
        let command = match system {
            System::KopfRs => vec![
                release.join("examples/minimal").display().to_string(),
                "run".into(),
                "-A".into(),
                "--standalone".into(),
                // Kopf and kube-rs have no client-side rate limit either.
                "--qps".into(),
                "0".into(),
            ],
            System::KopfRsDelete => vec![
                release.join("kopf-rs-delete").display().to_string(),
                "run".into(),
                "-A".into(),
                "--standalone".into(),
                "--qps".into(),
                "0".into(),
            ],
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

fn workspace_root() -> Result<PathBuf> {
    Ok(PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("xtask has a parent directory")?
        .to_path_buf())
}

fn target_dir(root: &Path) -> Result<PathBuf> {
    Ok(match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => root.join("target"),
    })
}

fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    println!("== cargo {}", args.join(" "));
    let status = StdCommand::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(root)
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("cargo {} failed", args.join(" "));
    }
    Ok(())
}

/// Release builds of the fake server, the kopf-rs example and the other Rust systems, in
/// one cargo invocation (one feature resolution: shared dependencies are built once).
fn build(root: &Path) -> Result<()> {
    cargo(
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
    )
}

/// A venv with Kopf 1.45 from PyPI (created once in target/bench/venv).
fn kopf_venv(out_dir: &Path) -> Result<PathBuf> {
    let venv = out_dir.join("venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        println!("== python3 -m venv {}", venv.display());
        let status = StdCommand::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .context("python3 is needed for the Kopf system")?;
        if !status.success() {
            bail!("python3 -m venv failed");
        }
    }
    let ok = StdCommand::new(&python)
        .args(["-c", "import kopf"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("== pip install kopf==1.45.*");
        let status = StdCommand::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "kopf==1.45.*",
            ])
            .status()
            .context("running pip")?;
        if !status.success() {
            bail!("pip install kopf==1.45.* failed (is PyPI reachable?)");
        }
    }
    Ok(python)
}

fn run_text(program: &str, args: &[&str]) -> String {
    StdCommand::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// CPU, cores, memory, kernel and tool versions.
fn machine(python: Option<&Path>) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut text = format!(
        "{model}, {cores} cores, {mem_gib:.0} GiB; Linux {}; {}",
        run_text("uname", &["-r"]),
        run_text("rustc", &["--version"])
    );
    if let Some(python) = python {
        let py = python.display().to_string();
        text.push_str(&format!(
            "; {}; kopf {}",
            run_text(&py, &["--version"]),
            run_text(
                &py,
                &[
                    "-c",
                    "import importlib.metadata as m; print(m.version('kopf'))"
                ]
            )
        ));
    }
    text
}

fn kopfexamples(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

async fn driver_client(kubeconfig: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(DRIVER),
    ));
    Ok(kube::Client::try_from(config)?)
}

/// One request of the fake server's log.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    seq: u64,
    micros: u64,
    method: String,
    path: String,
    #[serde(default)]
    query: String,
    #[serde(default)]
    user_agent: String,
    status: u16,
}

impl Record {
    fn by_operator(&self) -> bool {
        !self.user_agent.contains(DRIVER)
    }

    /// `verb resource[/subresource]`, e.g. `patch kopfexamples/status`.
    fn endpoint(&self) -> String {
        let parts: Vec<&str> = self.path.split('/').filter(|p| !p.is_empty()).collect();
        let rest: &[&str] = match parts.as_slice() {
            ["api", _, rest @ ..] => rest,
            ["apis", _, _, rest @ ..] => rest,
            _ => return format!("{} {}", self.method.to_lowercase(), self.path),
        };
        let rest = match rest {
            ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
            other => other,
        };
        let watch = self
            .query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        let (verb, what) = match (self.method.as_str(), rest) {
            ("GET", [resource]) if watch => ("watch", resource.to_string()),
            ("GET", [resource]) => ("list", resource.to_string()),
            (m, [resource]) => (verb_of(m), resource.to_string()),
            (m, [resource, _name]) => (verb_of(m), resource.to_string()),
            (m, [resource, _name, sub, ..]) => (verb_of(m), format!("{resource}/{sub}")),
            (m, []) => (verb_of(m), "discovery".into()),
        };
        format!("{verb} {what}")
    }

    /// The object's name for object endpoints of kopfexamples.
    fn object(&self) -> Option<(&str, bool)> {
        let (_, rest) = self.path.split_once("/kopfexamples/")?;
        match rest.split_once('/') {
            Some((name, "status")) => Some((name, true)),
            Some(_) => None,
            None => Some((rest, false)),
        }
    }
}

fn verb_of(method: &str) -> &'static str {
    match method {
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "other",
    }
}

async fn control(client: &kube::Client, method: &str, path: &str) -> Result<String> {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("/__kopf/{path}"))
        .body(Vec::new())?;
    Ok(client.request_text(request).await?)
}

async fn requests(client: &kube::Client) -> Result<Vec<Record>> {
    let text = control(client, "GET", "requests").await?;
    let value: Value = serde_json::from_str(&text).context("the request log")?;
    let items = value.get("items").cloned().unwrap_or(value);
    serde_json::from_value(items).context("request records")
}

/// Requests per `per` (object or update) by endpoint, the operator's only.
fn per_endpoint(records: &[Record], per: usize) -> BTreeMap<String, f64> {
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for r in records.iter().filter(|r| r.by_operator()) {
        *counts.entry(r.endpoint()).or_default() += 1.0;
    }
    for v in counts.values_mut() {
        *v /= per.max(1) as f64;
    }
    counts
}

/// CPU seconds (user + system) and the peak and current RSS in MB of a process.
fn process_usage(pid: u32) -> (f64, f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at field 3.
    let after = stat.rsplit_once(") ").map_or("", |(_, a)| a);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|l| l.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let clk: f64 = run_text("getconf", &["CLK_TCK"]).parse().unwrap_or(100.0);
    (ticks / clk, kb("VmHWM:") / 1024.0, kb("VmRSS:") / 1024.0)
}

/// Watches the objects and reports which are done: `create_fn` set, `update_fn.field` as
/// the driver last wrote.
struct Progress {
    created: HashSet<String>,
    fields: HashMap<String, String>,
}

async fn measure(
    system: System,
    command: &[String],
    kopf_bin: &Path,
    root: &Path,
    plan: &Plan,
) -> Result<Measured> {
    let cluster = Cluster::builder(ClusterKind::Fake)
        .kopf_binary(kopf_bin)
        .start()
        .await?;
    let result = measure_on(system, command, &cluster, root, plan).await;
    cluster.teardown().await?;
    result
}

async fn measure_on(
    system: System,
    command: &[String],
    cluster: &Cluster,
    root: &Path,
    plan: &Plan,
) -> Result<Measured> {
    cluster.apply_file(&root.join("examples/crd.yaml")).await?;
    let client = driver_client(cluster.kubeconfig()).await?;
    let api = kopfexamples(&client);
    // The objects, before the operator starts.
    let started = Instant::now();
    futures::stream::iter(0..plan.n)
        .map(|i| {
            let api = api.clone();
            async move {
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
                    "metadata": {"name": format!("bench-{i:05}")},
                    "spec": {"field": "value", "duration": "1m"},
                }))?;
                api.create(&PostParams::default(), &obj).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .context("creating the objects")?;
    println!(
        "   {} objects created in {:.1}s",
        plan.n,
        started.elapsed().as_secs_f64()
    );
    let rv = api
        .list_metadata(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    control(&client, "DELETE", "requests").await?;
    let (tx, mut progress) = tokio::sync::watch::channel(Progress {
        created: HashSet::new(),
        fields: HashMap::new(),
    });
    let watcher = tokio::spawn(watch_progress(api.clone(), rv, tx));

    // Burst.
    let mut operator = OperatorRunner::command(&command[0])
        .args(&command[1..])
        .env("KUBECONFIG", cluster.kubeconfig())
        .name(system.name())
        .start()?;
    let t0 = Instant::now();
    let deadline = t0 + plan.burst_timeout;
    loop {
        let done = progress.borrow_and_update().created.len();
        if done >= plan.n {
            break;
        }
        if let Some(status) = operator.try_status() {
            bail!(
                "the operator exited ({status}) with {done} of {} objects done:\n{}",
                plan.n,
                operator.tail(20)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{done} of {} objects done after {:?}: the system misses objects\n{}",
                plan.n,
                plan.burst_timeout,
                operator.tail(20)
            );
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), progress.changed()).await;
    }
    let burst_seconds = t0.elapsed().as_secs_f64();
    // Writes still in flight for the last objects (e.g. a diff-base after the status).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (cpu, _, _) = process_usage(operator.pid());
    let burst = requests(&client).await?;
    let mut measured = Measured {
        system: system.name(),
        n: plan.n,
        burst_seconds,
        burst_requests_per_object: per_endpoint(&burst, plan.n),
        burst_cpu_seconds: cpu,
        ..Default::default()
    };

    // Churn.
    control(&client, "DELETE", "requests").await?;
    let total = (plan.churn_rate * plan.churn_seconds as f64) as usize;
    let interval = Duration::from_secs_f64(1.0 / plan.churn_rate.max(0.001));
    let mut last: HashMap<String, String> = HashMap::new();
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut ticker = tokio::time::interval(interval);
    let mut writes = Vec::new();
    for k in 0..total {
        ticker.tick().await;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let name = format!("bench-{:05}", rng as usize % plan.n);
        let field = format!("churn-{k}");
        last.insert(name.clone(), field.clone());
        let api = api.clone();
        writes.push(tokio::spawn(async move {
            let patch = json!({"spec": {"field": field}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        }));
    }
    for w in writes {
        w.await?.context("a churn write")?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let missing = last
            .iter()
            .filter(|(name, field)| progress.borrow().fields.get(*name) != Some(*field))
            .count();
        if missing == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{missing} updated objects never got their update handled");
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), progress.changed()).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let churn = requests(&client).await?;
    measured.churn_updates = total;
    measured.churn_requests_per_update = per_endpoint(&churn, total);
    measured.churn_latency_ms = latencies(&churn);

    // Idle.
    control(&client, "DELETE", "requests").await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The peak over the whole run (the churn may need more than the burst did).
    let (_, peak, rss) = process_usage(operator.pid());
    measured.peak_rss_mb = peak;
    measured.idle_rss_mb = rss;
    measured.idle_requests = requests(&client)
        .await?
        .iter()
        .filter(|r| r.by_operator())
        .count();
    watcher.abort();
    let status = operator.stop(Duration::from_secs(30)).await?;
    if !status.success() {
        println!("   note: {} exited with {status}", system.name());
    }
    Ok(measured)
}

/// Latency percentiles (ms): each driver write of an object's spec to the operator's next
/// status write of that object.
fn latencies(records: &[Record]) -> BTreeMap<&'static str, f64> {
    let mut pending: HashMap<String, Vec<u64>> = HashMap::new();
    let mut samples: Vec<f64> = Vec::new();
    let mut sorted: Vec<&Record> = records.iter().collect();
    sorted.sort_by_key(|r| r.seq);
    for r in sorted {
        if r.method != "PATCH" || !(200..300).contains(&r.status) {
            continue;
        }
        let Some((name, status)) = r.object() else {
            continue;
        };
        if !r.by_operator() && !status {
            pending.entry(name.to_string()).or_default().push(r.micros);
        } else if r.by_operator()
            && status
            && let Some(writes) = pending.remove(name)
        {
            samples.extend(
                writes
                    .iter()
                    .map(|w| r.micros.saturating_sub(*w) as f64 / 1000.0),
            );
        }
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        samples
            .get(((samples.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    BTreeMap::from([
        ("p50", at(0.5)),
        ("p99", at(0.99)),
        ("max", samples.last().copied().unwrap_or(f64::NAN)),
        ("samples", samples.len() as f64),
    ])
}

async fn watch_progress(
    api: Api<DynamicObject>,
    mut rv: String,
    tx: tokio::sync::watch::Sender<Progress>,
) -> Result<()> {
    loop {
        let mut stream = api
            .watch(&WatchParams::default().timeout(290), &rv)
            .await?
            .boxed();
        while let Some(event) = stream.try_next().await? {
            let obj = match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => o,
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Deleted(_) => continue,
                WatchEvent::Error(e) => bail!("the progress watch failed: {e:?}"),
            };
            if let Some(v) = obj.metadata.resource_version.clone() {
                rv = v;
            }
            let Some(name) = obj.metadata.name.clone() else {
                continue;
            };
            let status = &obj.data["status"];
            tx.send_if_modified(|p| {
                let mut changed = false;
                if status["create_fn"]["message"].is_string() {
                    changed |= p.created.insert(name.clone());
                }
                if let Some(field) = status["update_fn"]["field"].as_str()
                    && p.fields.get(&name).map(String::as_str) != Some(field)
                {
                    p.fields.insert(name.clone(), field.to_string());
                    changed = true;
                }
                changed
            });
        }
    }
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "n/a".into()
    }
}

fn requests_text(per: &BTreeMap<String, f64>) -> String {
    let writes: Vec<String> = per
        .iter()
        .filter(|(_, v)| **v >= 0.005)
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect();
    writes.join("<br>")
}

/// The Markdown report: one table per scenario, then the ratios.
fn report(results: &[Measured], machine: &str, plan: &Plan) -> String {
    let mut md = format!(
        "Machine: {machine}\n\nN = {} objects; churn: {} updates/s for {} s.\n\n",
        plan.n, plan.churn_rate, plan.churn_seconds
    );
    md.push_str("### burst\n\n| system | seconds | objects/s | requests per object | CPU s | peak RSS MB (whole run) |\n|---|---|---|---|---|---|\n");
    for m in results {
        md.push_str(&format!(
            "| {} | {:.2} | {:.0} | {} | {:.2} | {:.1} |\n",
            m.system,
            m.burst_seconds,
            m.n as f64 / m.burst_seconds,
            requests_text(&m.burst_requests_per_object),
            m.burst_cpu_seconds,
            m.peak_rss_mb
        ));
    }
    md.push_str("\n### churn\n\n| system | updates | p50 ms | p99 ms | max ms | requests per update |\n|---|---|---|---|---|---|\n");
    for m in results {
        let l = |k: &str| m.churn_latency_ms.get(k).copied().unwrap_or(f64::NAN);
        md.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {} |\n",
            m.system,
            m.churn_updates,
            l("p50"),
            l("p99"),
            l("max"),
            requests_text(&m.churn_requests_per_update)
        ));
    }
    md.push_str("\n### idle\n\n| system | RSS MB | requests in 5 s |\n|---|---|---|\n");
    for m in results {
        md.push_str(&format!(
            "| {} | {:.1} | {} |\n",
            m.system, m.idle_rss_mb, m.idle_requests
        ));
    }
    let find = |name: &str| results.iter().find(|m| m.system == name);
    if let Some(ours) = find("kopf-rs") {
        md.push_str("\n### kopf-rs against the others\n\n| vs | burst throughput (×) | peak RSS (×) | churn p99 (×) |\n|---|---|---|---|\n");
        for other in results.iter().filter(|m| m.system != "kopf-rs") {
            let p99 = |m: &Measured| m.churn_latency_ms.get("p99").copied().unwrap_or(f64::NAN);
            md.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                other.system,
                ratio(other.burst_seconds, ours.burst_seconds),
                ratio(ours.peak_rss_mb, other.peak_rss_mb),
                ratio(p99(ours), p99(other)),
            ));
        }
        md.push_str("\nThroughput ×: kopf-rs objects/s divided by theirs (above 1: kopf-rs is faster). RSS × and p99 ×: kopf-rs divided by theirs (below 1: kopf-rs uses less, waits less).\n");
    }
    md
}
