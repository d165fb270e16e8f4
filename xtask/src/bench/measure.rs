//! One system measured: its server and operator started, the burst, churn and idle scenarios
//! run, CPU and memory sampled.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use super::model::{Measured, Plan, System};
use super::requests::{control, driver_client, kopfexamples, latencies, per_endpoint, requests};
use super::setup::run_text;
use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use kopf_testing::{Cluster, ClusterKind, OperatorRunner};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
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

/// Watches the objects and reports which are done: `create_fn` set, `update_fn.field` as
/// the driver last wrote.
pub(super) struct Progress {
    created: HashSet<String>,
    fields: HashMap<String, String>,
}

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
    result
}

pub(super) async fn measure_on(
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

    // Burst: the clock starts with the processes, as for every system (start-up included).
    let replicas = system.replicas();
    let mut operators = (0..replicas)
        .map(|i| {
            let name = match replicas {
                1 => system.name().to_string(),
                _ => format!("{}-{i}", system.name()),
            };
            OperatorRunner::command(&command[0])
                .args(&command[1..])
                .env("KUBECONFIG", cluster.kubeconfig())
                .name(name)
                .start()
        })
        .collect::<Result<Vec<_>, _>>()?;
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
        if let Some((name, status)) = operators
            .iter_mut()
            .find_map(|o| o.try_status().map(|s| (o.name().to_string(), s)))
        {
            bail!(
                "{name} exited ({status}) with {done} of {} objects done:\n{}",
                plan.n,
                tails(&operators)
            );
        }
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
    let burst = requests(&client).await?;
    let mut measured = Measured {
        system: system.name(),
        n: plan.n,
        burst_seconds,
        burst_requests_per_object: per_endpoint(&burst, plan.n),
        burst_cpu_seconds: cpu.iter().sum(),
        replicas,
        burst_cpu_per_replica: if replicas > 1 { cpu } else { Vec::new() },
        sharing_seconds: sharing.map(|(s, _)| s),
        done_at_sharing: sharing.map_or(0, |(_, d)| d),
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
    // Two writes to one object can land in the other order than they were issued (each is
    // its own task): what must be handled is each object's spec as it ended up.
    let listed = api
        .list(&Default::default())
        .await
        .context("listing the objects after the churn")?;
    for o in listed.items {
        if let (Some(name), Some(field)) =
            (o.metadata.name.as_ref(), o.data["spec"]["field"].as_str())
            && let Some(expected) = last.get_mut(name)
        {
            *expected = field.to_string();
        }
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
    for operator in &mut operators {
        let status = operator.stop(Duration::from_secs(30)).await?;
        if !status.success() {
            println!("   note: {} exited with {status}", operator.name());
        }
    }
    Ok(measured)
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

pub(super) async fn watch_progress(
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
