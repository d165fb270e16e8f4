//! The sharding scenario `shards`: three processes of the `minimal` example with
//! `--shards 3`, which share the objects by the hash ranges of their uids (one Lease per
//! range, `minimal-shards-3-I`).
//!
//! 1. start: `run -A --standalone --shards 3` with a 3 s lease, a 2 s renew deadline and a
//!    0.3 s retry period, three times; each replica comes to serve one range, each another;
//! 2. share: 3,000 objects, created through the API by a few concurrent writers; each one is
//!    handled by exactly one replica, and each replica handles at least a fifth of them;
//! 3. sigkill: 1,500 more objects; once the first 500 of them exist, a replica is killed
//!    while it works; a survivor takes its range within the lease duration + 2 × the retry
//!    period (plus [`SLACK`]); every object gets handled, the survivors serve the three
//!    ranges between them, and no object is handled by both survivors (at least once: see
//!    [`Shards::after_kill`]);
//! 4. stop: the survivors stop gracefully (exit status 0) and release their ranges; the
//!    objects (the minimal example puts no finalizer) and the Leases are deleted.
//!
//! Which replica handled an object is read from the replicas' own outputs, as in
//! `replicas`. `cargo xtask e2e` runs it after `replicas`; with `--example` it runs only
//! when one of the names is `shards`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use kopf_testing::{Cluster, OperatorRunner, Signal};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use super::replicas::{EXAMPLE, Replicas, diffbase_spec, handler_line};
use super::scenarios::*;
use super::setup::Paths;
use super::steps::{brief, exited_cleanly, operator_command};

/// The scenario's name for `--example`.
pub(crate) const SHARDS: &str = "shards";
/// The hash ranges, and the replicas.
const COUNT: usize = 3;
/// The Leases' group (their label `kopf.dev/shard-group`): `<operator>-shards`, the
/// operator named after its binary.
const GROUP: &str = "minimal-shards";
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
const RETRY_PERIOD: Duration = Duration::from_millis(300);
/// Process scheduling on a loaded (2-core) machine, beyond client-go's bound of a takeover.
const SLACK: Duration = Duration::from_secs(2);
/// The objects shared by the three replicas.
const FIRST: usize = 3000;
/// The objects created around the kill: the replica is killed once `KILL_AFTER` of them
/// exist, and the rest are created while its range moves.
const SECOND: usize = 1500;
const KILL_AFTER: usize = 500;
/// Concurrent creations.
const WRITERS: usize = 4;
/// All the objects handled, after the kill.
const HANDLED_TIMEOUT: Duration = Duration::from_secs(90);
/// How often the objects are listed while waiting (one LIST of all of them).
const LIST_POLL: Duration = Duration::from_secs(1);
/// How often the replicas' logs are looked at while a takeover is timed.
const TICK: Duration = Duration::from_millis(20);
/// The least share of the first objects per replica.
const MIN_SHARE: f64 = 0.2;
/// The objects' label, to list and delete them all at once.
const LABEL: &str = "kopf.dev/e2e";
const LABEL_VALUE: &str = "shards";
const TOOK: &str = "Took shards ";
const SERVING: &str = "Serving shards ";

/// Runs the scenario; whatever happens, no replica is left running, and the objects and
/// the Leases are removed.
pub(crate) async fn run(cluster: &Cluster, paths: &Paths, template: &str) -> Result<()> {
    let api = kopfexamples(cluster).await?;
    // Leftovers of an interrupted run (on a kind or current cluster).
    cleanup(cluster, &api).await?;
    let mut s = Shards {
        r: Replicas::new(cluster),
        api: api.clone(),
    };
    let result = s
        .scenario(paths, template)
        .await
        .with_context(|| format!("step {}", s.r.step));
    // A failure midway: the replicas still running are killed (and waited for).
    for op in &mut s.r.procs {
        let _ = op.kill().await;
    }
    let cleaned = cleanup(cluster, &api).await;
    result.and(cleaned)
}

struct Shards<'a> {
    /// The replicas `shards#1` to `#3`.
    r: Replicas<'a>,
    api: Api<DynamicObject>,
}

/// Per replica: the objects whose handlers it ran, each with its handler calls (the
/// minimal example's `Creating …` lines) and the index of its first handler line.
type Handled = Vec<BTreeMap<String, Handling>>;

#[derive(Clone, Copy, Default)]
struct Handling {
    calls: usize,
    first: usize,
}

impl Shards<'_> {
    async fn scenario(&mut self, paths: &Paths, template: &str) -> Result<()> {
        let object = object_json(self.r.cluster, template).await?;
        let names: Vec<String> = (0..FIRST + SECOND)
            .map(|i| format!("shard-{i:04}"))
            .collect();
        let (first, second) = names.split_at(FIRST);
        let (before_kill, after_kill) = second.split_at(KILL_AFTER);

        let t = self.r.begin("start");
        let binary = paths.examples.join(EXAMPLE);
        for n in 1..=COUNT {
            let op = operator_command(self.r.cluster, &binary, format!("{SHARDS}#{n}"))
                .args(shard_args())
                .start()
                .with_context(|| format!("starting {}", binary.display()))?;
            self.r.procs.push(op);
        }
        self.wait_serving_one().await?;
        self.r.done(t);

        let t = self.r.begin("share");
        let created = Instant::now();
        create(self.api.clone(), object.clone(), first.to_vec()).await?;
        println!(
            "   created {FIRST} objects in {:.1} s",
            created.elapsed().as_secs_f64()
        );
        self.wait_handled(&names[..FIRST], None).await?;
        let handled = self.handled();
        self.exactly_once(&handled, first)?;
        let shares: Vec<usize> = (0..COUNT)
            .map(|i| first.iter().filter(|n| handled[i].contains_key(*n)).count())
            .collect();
        println!("   handled: {}", self.shares(&shares, FIRST));
        for (i, &share) in shares.iter().enumerate() {
            ensure!(
                share as f64 >= MIN_SHARE * FIRST as f64,
                "{} handled only {share} of the {FIRST} objects (at least {:.0} % expected): {}",
                self.r.name(i),
                MIN_SHARE * 100.0,
                self.shares(&shares, FIRST)
            );
        }
        self.r.done(t);

        let t = self.r.begin("sigkill");
        create(self.api.clone(), object.clone(), before_kill.to_vec()).await?;
        // The second replica, killed while it works on its share of the objects just created.
        let victim = 1;
        let killed = Instant::now();
        self.r.procs[victim]
            .kill()
            .await
            .context("killing a replica")?;
        let at_kill: Vec<usize> = self.r.procs.iter().map(|op| op.lines().len()).collect();
        let survivors: Vec<usize> = (0..COUNT).filter(|&i| i != victim).collect();
        // The rest are created while the takeover is timed.
        let creating = tokio::spawn(create(self.api.clone(), object, after_kill.to_vec()));
        let taken = self.wait_took(&survivors, &at_kill, killed).await;
        creating.await.context("the creating task")??;
        let (taker, took) = taken?;
        let bound = LEASE_DURATION + 2 * RETRY_PERIOD;
        println!(
            "   takeover after SIGKILL: {:.2} s by {} (lease {} s + 2 × retry {} s = {} s bound)",
            took.as_secs_f64(),
            self.r.name(taker),
            LEASE_DURATION.as_secs_f64(),
            RETRY_PERIOD.as_secs_f64(),
            bound.as_secs_f64()
        );
        ensure!(
            took < bound + SLACK,
            "{} took shards only {:.2} s after the SIGKILL (client-go's bound: {:.2} s, with the slack {:.2} s); its last lines:\n{}",
            self.r.name(taker),
            took.as_secs_f64(),
            bound.as_secs_f64(),
            (bound + SLACK).as_secs_f64(),
            self.r.procs[taker].tail(30)
        );
        self.wait_handled(&names, Some(victim)).await?;
        self.survivors_serve_all(&survivors).await?;
        let handled = self.handled();
        self.exactly_once(&handled, first)?;
        self.after_kill(&handled, second, victim, &at_kill)?;
        self.r.done(t);

        let t = self.r.begin("stop");
        // One SIGTERM each, together: a second one makes the operator exit at once.
        for &i in &survivors {
            self.r.procs[i].signal(Signal::Term).await?;
        }
        for &i in &survivors {
            let op = &mut self.r.procs[i];
            let status = op.wait(STOP_TIMEOUT).await?;
            exited_cleanly(op, status, "a surviving replica")?;
            ensure!(
                op.has_logged("Released shard "),
                "{} did not say it released a shard; its last lines:\n{}",
                op.name(),
                op.tail(30)
            );
        }
        // The group's name is right (or the Leases would be left behind).
        let leases = leases(self.r.cluster).await?;
        ensure!(
            leases.lines().count() >= COUNT,
            "the Leases of the group {GROUP}: {leases:?}, expected at least {COUNT}"
        );
        cleanup(self.r.cluster, &self.api).await?;
        self.r.done(t);
        Ok(())
    }

    /// Waits until each replica says it serves exactly one range, each another one.
    async fn wait_serving_one(&mut self) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            self.none_exited(None)?;
            let serving: Vec<Option<BTreeSet<u32>>> = self.r.procs.iter().map(serving).collect();
            let ones: BTreeSet<u32> = serving
                .iter()
                .filter_map(|s| s.as_ref().filter(|s| s.len() == 1)?.first().copied())
                .collect();
            if ones.len() == COUNT {
                println!("   serving: {}", self.serving_text(&serving));
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "after {STEP_TIMEOUT:?}, the replicas do not serve one range each: {}; the last lines:\n{}",
                    self.serving_text(&serving),
                    self.r.tails(&(0..COUNT).collect::<Vec<_>>())
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn serving_text(&self, serving: &[Option<BTreeSet<u32>>]) -> String {
        serving
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{} {s:?}", self.r.name(i)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Waits until a survivor logs `Took shards` after the kill (its lines from `at_kill`
    /// on): which one, and how long after `killed`.
    async fn wait_took(
        &mut self,
        survivors: &[usize],
        at_kill: &[usize],
        killed: Instant,
    ) -> Result<(usize, Duration)> {
        let timeout = STEP_TIMEOUT;
        loop {
            for &i in survivors {
                if self.r.procs[i].lines()[at_kill[i]..]
                    .iter()
                    .any(|l| l.contains(TOOK))
                {
                    return Ok((i, killed.elapsed()));
                }
            }
            self.none_exited(Some(survivors))?;
            if killed.elapsed() >= timeout {
                bail!(
                    "no survivor logged {TOOK:?} within {timeout:?} of the SIGKILL; the last lines:\n{}",
                    self.r.tails(survivors)
                );
            }
            tokio::time::sleep(TICK).await;
        }
    }

    /// An error if a replica has exited that should not have: any but `victim`.
    fn none_exited(&mut self, running: Option<&[usize]>) -> Result<()> {
        for (i, op) in self.r.procs.iter_mut().enumerate() {
            if running.is_none_or(|r| r.contains(&i))
                && let Some(status) = op.try_status()
            {
                bail!(
                    "{} exited unexpectedly ({status}); the last lines:\n{}",
                    op.name(),
                    op.tail(30)
                );
            }
        }
        Ok(())
    }

    /// Waits until the minimal example's creation handler has handled every object: its
    /// result in the status and the diff-base written. One LIST per poll. Fails when a
    /// replica exits (but `victim`), or when an object has a finalizer (the objects are
    /// deleted after the replicas have stopped).
    async fn wait_handled(&mut self, names: &[String], victim: Option<usize>) -> Result<()> {
        let timeout = HANDLED_TIMEOUT;
        let deadline = Instant::now() + timeout;
        let want: Value = serde_json::json!({"message": "hello world"});
        let running: Vec<usize> = (0..COUNT).filter(|&i| Some(i) != victim).collect();
        loop {
            self.none_exited(Some(&running))?;
            let list = self.api.list(&labelled()).await.context("listing")?;
            let mut objects = BTreeMap::new();
            for o in &list.items {
                let o = serde_json::to_value(o)?;
                let name = o.pointer("/metadata/name").and_then(Value::as_str);
                if let Some(name) = name {
                    objects.insert(name.to_string(), o);
                }
            }
            if let Some(o) = objects.values().find(|o| {
                o.pointer("/metadata/finalizers")
                    .is_some_and(|f| f != &Value::Null)
            }) {
                bail!(
                    "an object has a finalizer (the minimal example puts none; the objects would have to be deleted while a replica runs): {}",
                    brief(o.clone())
                );
            }
            let missing: Vec<&String> = names
                .iter()
                .filter(|n| {
                    !objects.get(*n).is_some_and(|o| {
                        o.pointer("/status/create_fn") == Some(&want)
                            && diffbase_spec(o).as_ref() == o.get("spec")
                    })
                })
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let example = objects.get(missing[0]).cloned();
                bail!(
                    "after {timeout:?}, {} of {} objects are not handled, e.g. {:?}; the first of them: {}; the replicas' last lines:\n{}",
                    missing.len(),
                    names.len(),
                    &missing[..missing.len().min(10)],
                    example.map_or("(none)".into(), brief),
                    self.r.tails(&running)
                );
            }
            tokio::time::sleep(LIST_POLL).await;
        }
    }

    /// What each replica's output says it handled.
    fn handled(&self) -> Handled {
        self.r
            .procs
            .iter()
            .map(|op| {
                let mut by: BTreeMap<String, Handling> = BTreeMap::new();
                for (at, line) in op.lines().iter().enumerate() {
                    if let Some((name, call)) = handler_line(line) {
                        let h = by.entry(name.to_string()).or_insert(Handling {
                            calls: 0,
                            first: at,
                        });
                        h.calls += usize::from(call);
                    }
                }
                by
            })
            .collect()
    }

    /// Each of these objects was handled by exactly one replica, with one handler call.
    fn exactly_once(&self, handled: &Handled, names: &[String]) -> Result<()> {
        let wrong: Vec<&String> = names
            .iter()
            .filter(|n| {
                let by: Vec<&Handling> = handled.iter().filter_map(|h| h.get(*n)).collect();
                !matches!(by.as_slice(), [h] if h.calls == 1)
            })
            .collect();
        if let Some(name) = wrong.first() {
            bail!(
                "{} of {} objects were not handled exactly once (by one replica, one call), e.g. {:?}; the handler lines of {name}:\n{}",
                wrong.len(),
                names.len(),
                &wrong[..wrong.len().min(10)],
                self.object_lines(name)
            );
        }
        Ok(())
    }

    /// The objects created around the kill, by the at-least-once rule of a takeover: an
    /// object the killed replica was handling when it died (its outcome not yet written)
    /// is handled again by the survivor that takes its range. So an object may have been
    /// handled by two replicas only if one of them is the killed one, whose handling was
    /// necessarily before the kill, and the survivor's came after the kill; never by both
    /// survivors, and never twice by one replica.
    fn after_kill(
        &self,
        handled: &Handled,
        names: &[String],
        victim: usize,
        at_kill: &[usize],
    ) -> Result<()> {
        let mut again = 0;
        // The objects handled against the rule, with who handled them.
        let mut wrong: Vec<(&String, String)> = Vec::new();
        for name in names {
            let by: Vec<(usize, &Handling)> = (0..COUNT)
                .filter_map(|i| Some((i, handled[i].get(name)?)))
                .collect();
            let fine = match by.as_slice() {
                [(_, h)] => h.calls == 1,
                [(a, ha), (b, hb)] if *a == victim || *b == victim => {
                    let (s, hs) = if *a == victim { (*b, hb) } else { (*a, ha) };
                    again += 1;
                    ha.calls == 1 && hb.calls == 1 && hs.first >= at_kill[s]
                }
                _ => false,
            };
            if !fine {
                let who: Vec<String> = by
                    .iter()
                    .map(|(i, h)| format!("{} ({} call(s))", self.r.name(*i), h.calls))
                    .collect();
                wrong.push((name, who.join(", ")));
            }
        }
        if let Some((name, _)) = wrong.first() {
            let some: Vec<String> = wrong
                .iter()
                .take(10)
                .map(|(n, who)| format!("{n} by [{who}]"))
                .collect();
            bail!(
                "{} of the {} objects created around the kill were handled against the at-least-once rule ({} was killed; a second handling is allowed only by a survivor after the kill), e.g. {}; the handler lines of {name}:\n{}",
                wrong.len(),
                names.len(),
                self.r.name(victim),
                some.join(", "),
                self.object_lines(name)
            );
        }
        let shares: Vec<usize> = (0..COUNT)
            .map(|i| names.iter().filter(|n| handled[i].contains_key(*n)).count())
            .collect();
        println!(
            "   handled around the kill: {}; handled again after the kill: {again}",
            self.shares(&shares, names.len())
        );
        Ok(())
    }

    /// The survivors' last `Serving shards` lines name all the ranges, each once, within
    /// three lease durations: on a loaded machine a survivor may miss a renewal deadline and
    /// give a range up, which the group then takes again after the lease.
    async fn survivors_serve_all(&self, survivors: &[usize]) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (all, _) = self.served_by(survivors);
            if all == (0..COUNT as u32).collect::<Vec<_>>()
                || tokio::time::Instant::now() >= deadline
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (all, text) = self.served_by(survivors);
        ensure!(
            all == (0..COUNT as u32).collect::<Vec<_>>(),
            "the survivors do not serve every range once between them: {}; the last lines:\n{}",
            text.join(", "),
            self.r.tails(survivors)
        );
        println!("   survivors serve: {}", text.join(", "));
        Ok(())
    }

    /// The ranges the survivors' last `Serving shards` lines name (sorted, repeats kept), and
    /// each survivor's set for the report.
    fn served_by(&self, survivors: &[usize]) -> (Vec<u32>, Vec<String>) {
        let serving: Vec<Option<BTreeSet<u32>>> = survivors
            .iter()
            .map(|&i| serving(&self.r.procs[i]))
            .collect();
        let mut all: Vec<u32> = serving.iter().flatten().flatten().copied().collect();
        all.sort_unstable();
        let text = survivors
            .iter()
            .zip(&serving)
            .map(|(&i, s)| format!("{} {s:?}", self.r.name(i)))
            .collect();
        (all, text)
    }

    fn shares(&self, shares: &[usize], total: usize) -> String {
        shares
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!(
                    "{} {n} ({:.0} %)",
                    self.r.name(i),
                    100.0 * *n as f64 / total as f64
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The handler lines of one object, in every replica's output.
    fn object_lines(&self, name: &str) -> String {
        self.r
            .procs
            .iter()
            .flat_map(|op| {
                op.lines()
                    .into_iter()
                    .filter(|l| handler_line(l).is_some_and(|(n, _)| n == name))
                    .map(|l| format!("[{}] {l}", op.name()))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `run`'s sharding options.
fn shard_args() -> Vec<String> {
    let mut args = vec!["--shards".into(), COUNT.to_string()];
    args.extend(super::replicas::lease_args(
        LEASE_DURATION,
        RENEW_DEADLINE,
        RETRY_PERIOD,
    ));
    args
}

/// The ranges in a replica's last `Serving shards {0, 2} of 3.` line.
fn serving(op: &OperatorRunner) -> Option<BTreeSet<u32>> {
    let lines = op.lines();
    let line = lines.iter().rev().find(|l| l.contains(SERVING))?;
    let rest = &line[line.find(SERVING)? + SERVING.len()..];
    let set = rest[..rest.find(" of ")?].trim_matches(['{', '}']);
    Some(set.split(", ").filter_map(|n| n.parse().ok()).collect())
}

/// The KopfExamples of the namespace, through a client of the cluster's kubeconfig.
async fn kopfexamples(cluster: &Cluster) -> Result<Api<DynamicObject>> {
    let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Ok(Api::namespaced_with(client, NAMESPACE, &ar))
}

fn labelled() -> ListParams {
    ListParams::default().labels(&format!("{LABEL}={LABEL_VALUE}"))
}

/// `examples/obj.yaml` as JSON (kubectl reads the YAML), with the scenario's label.
async fn object_json(cluster: &Cluster, template: &str) -> Result<Value> {
    let out = cluster
        .kubectl_with_input(
            ["create", "--dry-run=client", "-o", "json", "-f", "-"],
            template,
        )
        .await?;
    let mut object: Value = serde_json::from_str(&out).context("parsing examples/obj.yaml")?;
    object["metadata"]["namespace"] = NAMESPACE.into();
    object["metadata"]["labels"][LABEL] = LABEL_VALUE.into();
    Ok(object)
}

/// Creates copies of `object` with these names, [`WRITERS`] at a time.
async fn create(api: Api<DynamicObject>, object: Value, names: Vec<String>) -> Result<()> {
    futures::stream::iter(names)
        .map(|name| {
            let (api, mut object) = (api.clone(), object.clone());
            async move {
                object["metadata"]["name"] = name.clone().into();
                let object: DynamicObject = serde_json::from_value(object)?;
                api.create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("creating {name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(WRITERS)
        .try_collect()
        .await
}

/// The Leases of the group, one name a line.
async fn leases(cluster: &Cluster) -> Result<String> {
    let selector = format!("kopf.dev/shard-group={GROUP}");
    Ok(cluster
        .kubectl([
            "get", "leases", "-n", NAMESPACE, "-l", &selector, "-o", "name",
        ])
        .await?)
}

/// Deletes the scenario's objects (waiting until they are gone) and the group's Leases.
async fn cleanup(cluster: &Cluster, api: &Api<DynamicObject>) -> Result<()> {
    api.delete_collection(&DeleteParams::default(), &labelled())
        .await
        .context("deleting the objects")?;
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let left = api.list(&labelled()).await.context("listing")?.items.len();
        if left == 0 {
            break;
        }
        if Instant::now() >= deadline {
            bail!("after {STEP_TIMEOUT:?}, {left} objects are still there");
        }
        tokio::time::sleep(POLL).await;
    }
    let selector = format!("kopf.dev/shard-group={GROUP}");
    cluster
        .kubectl([
            "delete",
            "leases",
            "-n",
            NAMESPACE,
            "-l",
            &selector,
            "--ignore-not-found",
        ])
        .await?;
    Ok(())
}
