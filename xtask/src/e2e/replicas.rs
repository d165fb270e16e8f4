//! The leader-election scenario `replicas`: three processes of the `minimal` example with
//! `--leader-election` on one Lease, checked by client-go's rules.
//!
//! 1. start: `run -A --standalone --leader-election=e2e-leader` with a 2 s lease, a 1 s
//!    renew deadline and a 0.2 s retry period, three times; exactly one replica leads, the
//!    other two stand by naming it;
//! 2. create: 10 objects, all handled by the leader alone;
//! 3. sigkill: the leader is killed; a standby takes over no sooner than the lease
//!    duration allows (minus the retry period it may have observed the record late) and
//!    within the lease duration + 2 × the retry period (plus [`SLACK`]); 5 more objects,
//!    handled by the new leader, which does not handle the first 10 again;
//! 4. sigterm: the new leader stops gracefully (exit status 0) and releases the lease; the
//!    last replica takes over within [`HANDOVER_LIMIT`] (about one retry period);
//! 5. last: 2 more objects handled by the last replica; all the objects deleted while it
//!    runs; it stops with status 0 and leaves the lease released.
//!
//! Each replica's output is kept apart, so the checks know which replica ran which handler:
//! every object's handlers must have run in exactly one replica.
//!
//! `cargo xtask e2e` runs it after the per-example scenarios; with `--example` it runs only
//! when one of the names is `replicas`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kopf_testing::{Cluster, OperatorRunner, Signal};
use serde_json::Value;

use super::scenarios::*;
use super::setup::Paths;
use super::steps::{brief, exited_cleanly, force_delete, object_yaml, operator_command};

/// The scenario's name for `--example`.
pub(crate) const REPLICAS: &str = "replicas";
/// The example run as the replicas.
pub(crate) const EXAMPLE: &str = "minimal";
const LEASE: &str = "e2e-leader";
const LEASE_DURATION: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_secs(1);
const RETRY_PERIOD: Duration = Duration::from_millis(200);
/// Process scheduling on a loaded (2-core) machine, beyond client-go's bound of a failover.
const SLACK: Duration = Duration::from_secs(1);
/// A graceful hand-over: about one retry period (with jitter), plus the drain and the
/// processes' slack.
const HANDOVER_LIMIT: Duration = Duration::from_millis(1500);
/// How often the replicas' logs are looked at while a takeover is timed.
const TICK: Duration = Duration::from_millis(10);
const LEADS: &str = "This replica leads now";
const LOST: &str = "This replica lost the lead";
/// The objects per step: before the SIGKILL, after it, after the SIGTERM.
const BATCHES: [usize; 3] = [10, 5, 2];

/// Runs the scenario; whatever happens, no replica is left running, and the objects and
/// the lease are removed.
pub(crate) async fn run(cluster: &Cluster, paths: &Paths, template: &str) -> Result<()> {
    let total: usize = BATCHES.iter().sum();
    let names: Vec<String> = (1..=total).map(|i| format!("e2e-replica-{i:02}")).collect();
    // Leftovers of an interrupted run (on a kind or current cluster).
    delete_lease(cluster).await?;
    for name in existing(cluster, &names).await? {
        force_delete(cluster, &name).await;
    }
    let mut r = Replicas::new(cluster);
    let result = r
        .scenario(paths, template, &names)
        .await
        .with_context(|| format!("step {}", r.step));
    // A failure midway: the replicas still running are killed (and waited for).
    for op in &mut r.procs {
        let _ = op.kill().await;
    }
    if result.is_err()
        && let Ok(left) = existing(cluster, &names).await
    {
        for name in left {
            force_delete(cluster, &name).await;
        }
    }
    let cleaned = delete_lease(cluster).await;
    result.and(cleaned)
}

/// The replicas of a scenario and its step (also the `shards` scenario's).
pub(crate) struct Replicas<'a> {
    pub(crate) cluster: &'a Cluster,
    /// The replicas, `replicas#1` to `#3`, in the order they were started.
    pub(crate) procs: Vec<OperatorRunner>,
    /// The step under way (or the last one).
    pub(crate) step: &'static str,
}

impl<'a> Replicas<'a> {
    /// No replica yet; the step `start`.
    pub(crate) fn new(cluster: &'a Cluster) -> Self {
        Replicas {
            cluster,
            procs: Vec::new(),
            step: "start",
        }
    }

    async fn scenario(&mut self, paths: &Paths, template: &str, names: &[String]) -> Result<()> {
        let (first, rest) = names.split_at(BATCHES[0]);
        let (second, third) = rest.split_at(BATCHES[1]);

        let t = self.begin("start");
        let binary = paths.examples.join(EXAMPLE);
        for n in 1..=3 {
            let op = operator_command(self.cluster, &binary, format!("{REPLICAS}#{n}"))
                .args(election_args())
                .start()
                .with_context(|| format!("starting {}", binary.display()))?;
            self.procs.push(op);
        }
        let (leader, id) = self.wait_leader(&[0, 1, 2], STEP_TIMEOUT).await?;
        let standbys: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
        self.wait_standing_by(&standbys, &id).await?;
        self.only_leader(leader)?;
        println!("   {} leads ({id})", self.name(leader));
        self.done(t);

        let t = self.begin("create");
        self.create(template, first).await?;
        self.wait_handled(first).await?;
        self.handled_by(&[(first, leader)])?;
        self.done(t);

        let t = self.begin("sigkill");
        let killed = Instant::now();
        self.procs[leader]
            .kill()
            .await
            .context("killing the leader")?;
        let (new, _) = self.wait_leader(&standbys, STEP_TIMEOUT).await?;
        let took = killed.elapsed();
        let bound = LEASE_DURATION + 2 * RETRY_PERIOD;
        println!(
            "   failover after SIGKILL: {:.2} s (lease {} s + 2 × retry {} s = {} s bound)",
            took.as_secs_f64(),
            LEASE_DURATION.as_secs_f64(),
            RETRY_PERIOD.as_secs_f64(),
            bound.as_secs_f64()
        );
        // The standby takes the lease once the record has not changed for the lease
        // duration since it saw it change: the last renewal was at most one retry period
        // before the kill, and it was seen at most one (jittered) retry period after.
        let earliest = LEASE_DURATION.saturating_sub(RETRY_PERIOD.mul_f64(1.3));
        ensure!(
            took >= earliest,
            "{} took over {:.2} s after the leader's SIGKILL: sooner than the lease allows ({:.2} s)",
            self.name(new),
            took.as_secs_f64(),
            earliest.as_secs_f64()
        );
        ensure!(
            took < bound + SLACK,
            "{} took over only {:.2} s after the leader's SIGKILL (client-go's bound: {:.2} s, with the slack {:.2} s); its last lines:\n{}",
            self.name(new),
            took.as_secs_f64(),
            bound.as_secs_f64(),
            (bound + SLACK).as_secs_f64(),
            self.procs[new].tail(30)
        );
        let last = standbys.iter().copied().find(|&i| i != new).unwrap_or(new);
        let new_id = identity(&self.procs[new]).unwrap_or_default();
        self.wait_standing_by(&[last], &new_id).await?;
        self.create(template, second).await?;
        self.wait_handled(second).await?;
        // The first batch was handled completely (diff-base written) before the kill: the
        // new leader must not handle any of it again.
        self.handled_by(&[(first, leader), (second, new)])?;
        self.done(t);

        let t = self.begin("sigterm");
        let stopped = Instant::now();
        // One SIGTERM only: a second one makes the operator exit at once.
        self.procs[new].signal(Signal::Term).await?;
        self.wait_leader(&[last], STOP_TIMEOUT).await?;
        let took = stopped.elapsed();
        println!(
            "   hand-over after SIGTERM: {:.2} s (retry {} s; limit {} s)",
            took.as_secs_f64(),
            RETRY_PERIOD.as_secs_f64(),
            HANDOVER_LIMIT.as_secs_f64()
        );
        let status = self.procs[new].wait(STOP_TIMEOUT).await?;
        exited_cleanly(&self.procs[new], status, "the second leader")?;
        ensure!(
            self.procs[new].has_logged(&format!("Released the lease {NAMESPACE}/{LEASE}")),
            "the second leader did not say it released the lease; its last lines:\n{}",
            self.procs[new].tail(30)
        );
        ensure!(
            took < HANDOVER_LIMIT,
            "{} took over only {:.2} s after the leader's SIGTERM (limit {:.2} s); its last lines:\n{}",
            self.name(last),
            took.as_secs_f64(),
            HANDOVER_LIMIT.as_secs_f64(),
            self.procs[last].tail(30)
        );
        self.done(t);

        let t = self.begin("last");
        self.create(template, third).await?;
        self.wait_handled(third).await?;
        self.handled_by(&[(first, leader), (second, new), (third, last)])?;
        self.delete(names).await?;
        let op = &mut self.procs[last];
        let status = op.stop(STOP_TIMEOUT).await?;
        exited_cleanly(op, status, "the last leader")?;
        let holder = self
            .cluster
            .kubectl([
                "get",
                "lease",
                LEASE,
                "-n",
                NAMESPACE,
                "-o",
                "jsonpath={.spec.holderIdentity}/{.spec.leaseDurationSeconds}",
            ])
            .await?;
        ensure!(
            holder.trim() == "/1",
            "after the last graceful stop, the lease is {holder:?} (holder/duration), expected released: \"/1\""
        );
        // Each replica led once, and none lost the lead (that would be a renewal that failed
        // its 1 s deadline, or two replicas fighting over the lease).
        for (i, op) in self.procs.iter().enumerate() {
            let leads = op.lines().iter().filter(|l| l.contains(LEADS)).count();
            ensure!(
                leads == 1 && !op.has_logged(LOST),
                "{} logged {LEADS:?} {leads} time(s) (expected once){}; its logs:\n{}",
                self.name(i),
                if op.has_logged(LOST) {
                    format!(" and {LOST:?}")
                } else {
                    String::new()
                },
                op.logs()
            );
        }
        self.done(t);
        Ok(())
    }

    pub(crate) fn begin(&mut self, step: &'static str) -> Instant {
        self.step = step;
        Instant::now()
    }

    pub(crate) fn done(&self, started: Instant) {
        println!(
            "   {:<8} ok ({:.1} s)",
            self.step,
            started.elapsed().as_secs_f64()
        );
    }

    pub(crate) fn name(&self, i: usize) -> &str {
        self.procs[i].name()
    }

    /// Waits until one of `candidates` logs that it leads: that one and its identity. Fails
    /// on a timeout, or when a candidate exits.
    async fn wait_leader(
        &mut self,
        candidates: &[usize],
        timeout: Duration,
    ) -> Result<(usize, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            for &i in candidates {
                if self.procs[i].has_logged(LEADS) {
                    let id = identity(&self.procs[i])
                        .with_context(|| format!("{} names no identity", self.name(i)))?;
                    return Ok((i, id));
                }
                if let Some(status) = self.procs[i].try_status() {
                    bail!(
                        "{} exited unexpectedly ({status}); the last lines:\n{}",
                        self.name(i),
                        self.procs[i].tail(30)
                    );
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "no replica logged {LEADS:?} within {timeout:?}; the last lines:\n{}",
                    self.tails(candidates)
                );
            }
            tokio::time::sleep(TICK).await;
        }
    }

    /// Waits until each of `standbys` logs that the replica `id` leads.
    async fn wait_standing_by(&mut self, standbys: &[usize], id: &str) -> Result<()> {
        let line = format!("Standing by: {id} leads (lease {NAMESPACE}/{LEASE})");
        for &i in standbys {
            self.procs[i]
                .wait_for_log(&line, STEP_TIMEOUT)
                .await
                .with_context(|| format!("{} does not stand by", self.name(i)))?;
        }
        Ok(())
    }

    /// Only `leader` has said that it leads.
    fn only_leader(&self, leader: usize) -> Result<()> {
        for (i, op) in self.procs.iter().enumerate() {
            ensure!(
                i == leader || !op.has_logged(LEADS),
                "two replicas lead: {} and {}; the logs of the second:\n{}",
                self.name(leader),
                self.name(i),
                op.logs()
            );
        }
        Ok(())
    }

    pub(crate) fn tails(&self, which: &[usize]) -> String {
        which
            .iter()
            .map(|&i| format!("[{}]\n{}", self.name(i), self.procs[i].tail(20)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Creates copies of `examples/obj.yaml` with these names, in one `kubectl apply`.
    async fn create(&self, template: &str, names: &[String]) -> Result<()> {
        let docs = names
            .iter()
            .map(|n| object_yaml(template, n, &[]))
            .collect::<Result<Vec<_>>>()?;
        self.cluster
            .kubectl_with_input(["apply", "-n", NAMESPACE, "-f", "-"], &docs.join("\n---\n"))
            .await?;
        Ok(())
    }

    /// Waits until the minimal example's creation handler has handled every object: its
    /// result in the status and the diff-base written (so that no later leader handles it
    /// again). Fails when a running replica exits.
    async fn wait_handled(&mut self, names: &[String]) -> Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let want: Value = serde_json::json!({"message": "hello world"});
        loop {
            self.none_exited()?;
            let objects = objects(self.cluster).await?;
            let missing: Vec<String> = names
                .iter()
                .filter(|n| {
                    !objects.get(*n).is_some_and(|o| {
                        o.pointer("/status/create_fn") == Some(&want)
                            && diffbase_spec(o).as_ref() == o.get("spec")
                    })
                })
                .cloned()
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let example = objects.get(&missing[0]).cloned();
                bail!(
                    "after {STEP_TIMEOUT:?}, not handled: {}; the first of them: {}; the replicas' last lines:\n{}",
                    missing.join(", "),
                    example.map_or("(none)".into(), brief),
                    self.tails(&(0..self.procs.len()).collect::<Vec<_>>())
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// An error if a replica that was not stopped by the scenario has exited.
    fn none_exited(&mut self) -> Result<()> {
        for op in &mut self.procs {
            if op.try_status().is_none() {
                continue;
            }
            // Killed or stopped on purpose: the ones with the lease line are the past
            // leaders; the scenario only ever stops a leader.
            if !op.has_logged(LEADS) {
                bail!(
                    "{} exited unexpectedly; the last lines:\n{}",
                    op.name(),
                    op.tail(30)
                );
            }
        }
        Ok(())
    }

    /// No two replicas ran handlers for one object: each object's handler lines are in
    /// exactly one replica's log, the one that led when it was created.
    ///
    /// By client-go's rules, one object may legitimately be handled twice: the one whose
    /// handler was in flight when its leader was killed (its outcome unwritten), once by
    /// the killed leader and again by the next. Here, every object of a batch is handled
    /// completely (diff-base included) before its leader is killed or stopped, so not even
    /// that one object may be handled twice.
    fn handled_by(&self, batches: &[(&[String], usize)]) -> Result<()> {
        for (names, by) in batches {
            for name in *names {
                let ran: Vec<usize> = (0..self.procs.len())
                    .filter(|&i| ran_handler(&self.procs[i], name))
                    .collect();
                if ran != [*by] {
                    let who: Vec<&str> = ran.iter().map(|&i| self.name(i)).collect();
                    let lines: Vec<String> = ran
                        .iter()
                        .flat_map(|&i| {
                            handler_lines(&self.procs[i], name)
                                .into_iter()
                                .map(move |l| format!("[{}] {l}", self.name(i)))
                        })
                        .collect();
                    bail!(
                        "the handlers of {name} ran in [{}], expected only in {}; their lines:\n{}",
                        who.join(", "),
                        self.name(*by),
                        lines.join("\n")
                    );
                }
            }
        }
        Ok(())
    }

    /// Deletes the objects (the minimal example puts no finalizer) and waits until they
    /// are gone.
    async fn delete(&mut self, names: &[String]) -> Result<()> {
        let mut args = vec!["delete", RESOURCE, "-n", NAMESPACE, "--wait=false"];
        args.extend(names.iter().map(String::as_str));
        self.cluster.kubectl(args).await?;
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            self.none_exited()?;
            let left = existing(self.cluster, names).await?;
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("after {STEP_TIMEOUT:?}, still there: {}", left.join(", "));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// `run`'s leader-election options.
fn election_args() -> Vec<String> {
    let mut args = vec![format!("--leader-election={LEASE}")];
    args.extend(lease_args(LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD));
    args
}

/// `run`'s Lease options (leader election and sharding): the namespace and the timings.
pub(crate) fn lease_args(lease: Duration, renew: Duration, retry: Duration) -> Vec<String> {
    vec![
        "--leader-election-namespace".into(),
        NAMESPACE.into(),
        "--lease-duration".into(),
        lease.as_secs().to_string(),
        "--renew-deadline".into(),
        renew.as_secs().to_string(),
        "--retry-period".into(),
        retry.as_secs_f64().to_string(),
    ]
}

/// The identity in a replica's line `This replica leads now (lease NS/NAME, identity ID).`
fn identity(op: &OperatorRunner) -> Option<String> {
    let lines = op.lines();
    let line = lines.iter().find(|l| l.contains(LEADS))?;
    let rest = &line[line.find(", identity ")? + ", identity ".len()..];
    Some(rest[..rest.find(").")?].to_string())
}

/// The lines that show a handler call of the object (see [`handler_line`]).
fn handler_lines(op: &OperatorRunner, name: &str) -> Vec<String> {
    op.lines()
        .into_iter()
        .filter(|l| handler_line(l).is_some_and(|(n, _)| n == name))
        .collect()
}

/// The object of a line that shows a handler call, and whether it is the call itself: the
/// minimal example's `Creating NAME with spec …` (true), or Kopf's `[NS/NAME] Handler '…'
/// succeeded.` (or failed, or retried; false).
pub(crate) fn handler_line(line: &str) -> Option<(&str, bool)> {
    if let Some(at) = line.find("Creating ") {
        let rest = &line[at + "Creating ".len()..];
        if let Some(end) = rest.find(" with spec") {
            return Some((&rest[..end], true));
        }
    }
    if !line.contains("Handler '") {
        return None;
    }
    let prefix = format!("[{NAMESPACE}/");
    let rest = &line[line.find(&prefix)? + prefix.len()..];
    Some((&rest[..rest.find("] ")?], false))
}

fn ran_handler(op: &OperatorRunner, name: &str) -> bool {
    !handler_lines(op, name).is_empty()
}

/// The spec in the object's diff-base annotation.
pub(crate) fn diffbase_spec(object: &Value) -> Option<Value> {
    let text = object.pointer("/metadata/annotations")?.get(DIFFBASE)?;
    let diffbase: Value = serde_json::from_str(text.as_str()?).ok()?;
    diffbase.get("spec").cloned()
}

/// The KopfExamples of the namespace, by name.
async fn objects(cluster: &Cluster) -> Result<BTreeMap<String, Value>> {
    let out = cluster
        .kubectl(["get", RESOURCE, "-n", NAMESPACE, "-o", "json"])
        .await?;
    let list: Value = serde_json::from_str(&out).context("parsing the list")?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some((
                o.pointer("/metadata/name")?.as_str()?.to_string(),
                o.clone(),
            ))
        })
        .collect())
}

/// Which of these objects exist.
async fn existing(cluster: &Cluster, names: &[String]) -> Result<Vec<String>> {
    let objects = objects(cluster).await?;
    Ok(names
        .iter()
        .filter(|n| objects.contains_key(*n))
        .cloned()
        .collect())
}

async fn delete_lease(cluster: &Cluster) -> Result<()> {
    cluster
        .kubectl([
            "delete",
            "lease",
            LEASE,
            "-n",
            NAMESPACE,
            "--ignore-not-found",
        ])
        .await?;
    Ok(())
}
