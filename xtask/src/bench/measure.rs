//! One system measured: its server and operator started, the burst, churn and idle scenarios
//! run, CPU and memory sampled.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::model::{During, Measured, Plan, System};
use super::progress::{Progress, list_fields, watch_progress};
use super::requests::{control, driver_client, kopfexamples, latencies, per_endpoint, requests};
use super::setup::run_text;
use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use kopf_testing::{Cluster, ClusterKind, OperatorRunner};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

/// CPU seconds (user + system) and the peak and current RSS in MB of a process.
pub(super) fn process_usage(pid: u32) -> (f64, f64, f64) {
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

/// One system at one scale: burst, churn and idle on one fresh server, then "churn during
/// burst" on another (it needs objects no operator has seen).
pub(super) async fn measure(
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
    let mut measured = result?;
    let cluster = Cluster::builder(ClusterKind::Fake)
        .kopf_binary(kopf_bin)
        .start()
        .await?;
    println!("   churn during burst (a fresh server)");
    let result = during_burst(system, command, &cluster, root, plan).await;
    cluster.teardown().await?;
    measured.during = Some(result.context("churn during burst")?);
    Ok(measured)
}

/// The server's process (the fake server runs as a process of its own).
pub(super) fn server_pid(cluster: &Cluster) -> Result<u32> {
    cluster
        .fake_server()
        .map(OperatorRunner::pid)
        .context("the fake API server's process")
}

/// The CRD, a history long enough for the whole run, and the N objects (before any
/// operator starts). Returns the driver's client, the objects' API, and the server's RSS
/// growth per created object in bytes.
pub(super) async fn prepare(
    cluster: &Cluster,
    root: &Path,
    n: usize,
) -> Result<(kube::Client, Api<DynamicObject>, f64)> {
    cluster.apply_file(&root.join("examples/crd.yaml")).await?;
    let client = driver_client(cluster.kubeconfig()).await?;
    // Every object is written about three times in the burst, and the watchers must not
    // fall off the history (410) at 100,000 objects.
    let request = http::Request::builder()
        .method("PATCH")
        .uri("/__kopf/settings")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(
            &json!({"historyLimit": n * 4 + 100_000}),
        )?)?;
    client
        .request_text(request)
        .await
        .context("the server's history limit")?;
    let api = kopfexamples(&client);
    let pid = server_pid(cluster)?;
    let before = process_usage(pid).2;
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
                    "metadata": {"name": object_name(i)},
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
    let after = process_usage(pid).2;
    let per_object = (after - before).max(0.0) * 1024.0 * 1024.0 / n.max(1) as f64;
    println!(
        "   {n} objects created in {:.1}s (server RSS +{:.0} bytes per object)",
        started.elapsed().as_secs_f64(),
        per_object
    );
    Ok((client, api, per_object))
}

pub(super) fn object_name(i: usize) -> String {
    format!("bench-{i:05}")
}

/// The system's processes, started now (the clock starts with them).
/// Starts the system's processes; a kopf-rs process serves its metrics on the port at its
/// index in `ports` (see [`metrics_ports`]).
fn start(
    system: System,
    command: &[String],
    cluster: &Cluster,
    ports: &[u16],
) -> Result<Vec<OperatorRunner>> {
    let replicas = system.replicas();
    Ok((0..replicas)
        .map(|i| {
            let name = match replicas {
                1 => system.name().to_string(),
                _ => format!("{}-{i}", system.name()),
            };
            let mut runner = OperatorRunner::command(&command[0]).args(&command[1..]);
            if let Some(port) = ports.get(i) {
                runner = runner.args(["--metrics".to_string(), format!("127.0.0.1:{port}")]);
            }
            runner
                .env("KUBECONFIG", cluster.kubeconfig())
                .name(name)
                .start()
        })
        .collect::<Result<Vec<_>, _>>()?)
}

/// A metrics port per process of a kopf-rs system (none for the others).
fn metrics_ports(system: System) -> Result<Vec<u16>> {
    if !system.is_kopf_rs() {
        return Ok(Vec::new());
    }
    (0..system.replicas())
        .map(|_| super::convergence::free_port())
        .collect()
}

/// Fails if a process of the system has exited.
fn alive(operators: &mut [OperatorRunner], done: usize, n: usize) -> Result<()> {
    if let Some((name, status)) = operators
        .iter_mut()
        .find_map(|o| o.try_status().map(|s| (o.name().to_string(), s)))
    {
        bail!(
            "{name} exited ({status}) with {done} of {n} objects done:\n{}",
            tails(operators)
        );
    }
    Ok(())
}

pub(super) async fn measure_on(
    system: System,
    command: &[String],
    cluster: &Cluster,
    root: &Path,
    plan: &Plan,
) -> Result<Measured> {
    let (client, api, server_bytes_per_object) = prepare(cluster, root, plan.n).await?;
    let (_, rv) = list_fields(&api).await?;
    control(&client, "DELETE", "requests").await?;
    let (tx, mut progress) = tokio::sync::watch::channel(Progress::default());
    let watcher = tokio::spawn(watch_progress(api.clone(), rv, tx));

    // Burst: the clock starts with the processes, as for every system (start-up included).
    let replicas = system.replicas();
    let server = server_pid(cluster)?;
    let server_cpu_before = process_usage(server).0;
    let ports = metrics_ports(system)?;
    let mut operators = start(system, command, cluster, &ports)?;
    let t0 = Instant::now();
    let deadline = t0 + plan.burst_timeout;
    let mut burst_seconds = None;
    let mut sharing = None;
    loop {
        let done = progress.borrow_and_update().created.len();
        if replicas > 1 && sharing.is_none() && operators.iter().all(serves_one) {
            sharing = Some((t0.elapsed().as_secs_f64(), done));
            println!(
                "   every replica serves one range after {:.2}s, {done} objects done by then",
                t0.elapsed().as_secs_f64()
            );
        }
        if done >= plan.n && burst_seconds.is_none() {
            burst_seconds = Some(t0.elapsed().as_secs_f64());
        }
        if burst_seconds.is_some() && (replicas == 1 || sharing.is_some()) {
            break;
        }
        alive(&mut operators, done, plan.n)?;
        if Instant::now() > deadline {
            bail!(
                "{done} of {} objects done after {:?}{}: the system misses objects\n{}",
                plan.n,
                plan.burst_timeout,
                if replicas > 1 && sharing.is_none() {
                    " (the replicas never served one range each)"
                } else {
                    ""
                },
                tails(&operators)
            );
        }
        // Finer while the replicas' sharing is awaited: it is timed from their logs.
        let tick = if sharing.is_none() && replicas > 1 {
            20
        } else {
            200
        };
        let _ = tokio::time::timeout(Duration::from_millis(tick), progress.changed()).await;
    }
    let burst_seconds = burst_seconds.unwrap_or_default();
    // Writes still in flight for the last objects (e.g. a diff-base after the status).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu: Vec<f64> = operators.iter().map(|o| process_usage(o.pid()).0).collect();
    let server_cpu = process_usage(server).0 - server_cpu_before;
    let burst = requests(&client).await?;
    let operators_cpu: f64 = cpu.iter().sum();
    let mut measured = Measured {
        system: system.name(),
        n: plan.n,
        burst_seconds,
        burst_requests_per_object: per_endpoint(&burst, plan.n),
        burst_cpu_seconds: operators_cpu,
        replicas,
        burst_cpu_per_replica: if replicas > 1 { cpu } else { Vec::new() },
        sharing_seconds: sharing.map(|(s, _)| s),
        done_at_sharing: sharing.map_or(0, |(_, d)| d),
        server_burst_cpu_seconds: server_cpu,
        server_cpu_share: server_cpu / (server_cpu + operators_cpu).max(1e-9),
        server_bytes_per_object,
        ..Default::default()
    };
    drop(burst);

    // Churn: random objects at a fixed rate.
    control(&client, "DELETE", "requests").await?;
    let total = (plan.churn_rate * plan.churn_seconds as f64) as usize;
    let mut churn = Churn::new(plan.churn_rate);
    for _ in 0..total {
        churn.tick().await;
        let name = object_name(churn.pick(plan.n));
        churn.send(&api, name);
    }
    churn.finish(&api, &mut progress).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let records = requests(&client).await?;
    measured.churn_updates = total;
    measured.churn_requests_per_update = per_endpoint(&records, total);
    measured.churn_latency_ms = latencies(&records);
    drop(records);
    if !ports.is_empty() {
        measured.convergence = super::convergence::figures(&ports)
            .await
            .context("kopf-rs' convergence metrics")?;
    }

    // Idle.
    control(&client, "DELETE", "requests").await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The peak over the whole run (the churn may need more than the burst did).
    let usage: Vec<(f64, f64, f64)> = operators.iter().map(|o| process_usage(o.pid())).collect();
    measured.peak_rss_mb = usage.iter().map(|u| u.1).sum();
    measured.idle_rss_mb = usage.iter().map(|u| u.2).sum();
    if replicas > 1 {
        measured.peak_rss_per_replica_mb = usage.iter().map(|u| u.1).collect();
    }
    measured.idle_requests = requests(&client)
        .await?
        .iter()
        .filter(|r| r.by_operator())
        .count();
    watcher.abort();
    stop(&mut operators).await?;
    Ok(measured)
}

async fn stop(operators: &mut [OperatorRunner]) -> Result<()> {
    for operator in operators {
        let status = operator.stop(Duration::from_secs(30)).await?;
        if !status.success() {
            println!("   note: {} exited with {status}", operator.name());
        }
    }
    Ok(())
}

/// "Churn during burst": N objects exist, the operator starts, and at once the driver
/// patches random objects among those already handled, at the churn rate, until every
/// object has its status. Latency as in the churn scenario.
async fn during_burst(
    system: System,
    command: &[String],
    cluster: &Cluster,
    root: &Path,
    plan: &Plan,
) -> Result<During> {
    let (client, api, _) = prepare(cluster, root, plan.n).await?;
    let (_, rv) = list_fields(&api).await?;
    control(&client, "DELETE", "requests").await?;
    let (tx, mut progress) = tokio::sync::watch::channel(Progress::default());
    let watcher = tokio::spawn(watch_progress(api.clone(), rv, tx));
    let mut operators = start(system, command, cluster, &[])?;
    let t0 = Instant::now();
    let deadline = t0 + plan.burst_timeout;
    let mut churn = Churn::new(plan.churn_rate);
    let mut updates = 0;
    let burst_seconds = loop {
        churn.tick().await;
        let (done, picked) = {
            let p = progress.borrow_and_update();
            let picked = (!p.order.is_empty()).then(|| p.order[churn.pick(p.order.len())].clone());
            (p.created.len(), picked)
        };
        if done >= plan.n {
            break t0.elapsed().as_secs_f64();
        }
        if let Some(name) = picked {
            churn.send(&api, name);
            updates += 1;
        }
        alive(&mut operators, done, plan.n)?;
        if Instant::now() > deadline {
            bail!(
                "{done} of {} objects done after {:?} under churn\n{}",
                plan.n,
                plan.burst_timeout,
                tails(&operators)
            );
        }
    };
    churn.finish(&api, &mut progress).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let records = requests(&client).await?;
    watcher.abort();
    stop(&mut operators).await?;
    Ok(During {
        burst_seconds,
        updates,
        latency_ms: latencies(&records),
        requests_per_object: per_endpoint(&records, plan.n),
    })
}

/// The churn driver: spec PATCHes at a fixed rate, each its own task.
struct Churn {
    ticker: tokio::time::Interval,
    rng: u64,
    sent: usize,
    last: HashMap<String, String>,
    writes: Vec<tokio::task::JoinHandle<kube::Result<()>>>,
}

impl Churn {
    fn new(rate: f64) -> Churn {
        let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
        Churn {
            ticker: tokio::time::interval(interval),
            rng: 0x9e37_79b9_7f4a_7c15,
            sent: 0,
            last: HashMap::new(),
            writes: Vec::new(),
        }
    }

    async fn tick(&mut self) {
        self.ticker.tick().await;
    }

    /// A pseudo-random index below `len` (xorshift; the same sequence every run).
    fn pick(&mut self, len: usize) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng as usize % len.max(1)
    }

    fn send(&mut self, api: &Api<DynamicObject>, name: String) {
        let field = format!("churn-{}", self.sent);
        self.sent += 1;
        self.last.insert(name.clone(), field.clone());
        let api = api.clone();
        self.writes.push(tokio::spawn(async move {
            let patch = json!({"spec": {"field": field}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        }));
    }

    /// Waits for the writes, then until each updated object's final spec is handled.
    async fn finish(
        mut self,
        api: &Api<DynamicObject>,
        progress: &mut tokio::sync::watch::Receiver<Progress>,
    ) -> Result<()> {
        for w in self.writes.drain(..) {
            w.await?.context("a churn write")?;
        }
        // Two writes to one object can land in the other order than they were issued (each
        // is its own task): what must be handled is each object's spec as it ended up.
        let (listed, _) = list_fields(api)
            .await
            .context("listing the objects after the churn")?;
        for (name, field) in listed {
            if let (Some(field), Some(expected)) = (field, self.last.get_mut(&name)) {
                *expected = field;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let missing = self
                .last
                .iter()
                .filter(|(name, field)| progress.borrow().fields.get(*name) != Some(*field))
                .count();
            if missing == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{missing} updated objects never got their update handled");
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), progress.changed()).await;
        }
    }
}

/// Whether a sharded replica's last `Serving shards {..} of N.` line names exactly one range.
fn serves_one(operator: &OperatorRunner) -> bool {
    operator
        .lines()
        .iter()
        .rev()
        .find_map(|l| {
            let rest = &l[l.find("Serving shards ")? + "Serving shards ".len()..];
            Some(rest[..rest.find(" of ")?].to_string())
        })
        .is_some_and(|s| s != "{}" && !s.contains(','))
}

/// The last lines of each process's output.
fn tails(operators: &[OperatorRunner]) -> String {
    operators
        .iter()
        .map(|o| format!("-- {}:\n{}", o.name(), o.tail(20)))
        .collect::<Vec<_>>()
        .join("\n")
}
