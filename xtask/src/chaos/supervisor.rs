//! The operator under test as processes: one, or several replicas with Lease leader
//! election; started, SIGKILLed, restarted when one exits by itself, stopped at the end;
//! their output kept.

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use kopf_testing::OperatorRunner;

use super::evidence::{KillRecord, RunOutput, Timeline, now_micros};
use super::leaders::{LEADS, LOST, line_time};
use super::plan::Kill;

/// The environment variable naming the operator's handler log.
pub(super) const LOG_ENV: &str = "KOPF_CHAOS_LOG";
/// How long the operator may take to exit on the final SIGTERM.
pub(super) const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Leader election of the replicas: short timings, so that a killed leader is replaced
/// within about 2 s (`--standalone` stays: it turns Kopf's peering off, which is independent
/// of leader election).
const ELECTION: [&str; 9] = [
    "--leader-election",
    "--leader-election-namespace",
    "default",
    "--lease-duration",
    "2",
    "--renew-deadline",
    "1",
    "--retry-period",
    "0.2",
];

/// Runs and restarts the operator processes, and keeps their output.
pub(super) struct Supervisor {
    /// The operator's binary.
    pub(super) binary: PathBuf,
    /// The kubeconfig of the fake server.
    pub(super) kubeconfig: PathBuf,
    /// The handler log the processes append to.
    pub(super) log_path: PathBuf,
    /// How many replicas run (1: one process, without leader election).
    pub(super) replicas: usize,
    /// The running process of each replica slot, if any.
    pub(super) current: Vec<Option<OperatorRunner>>,
    /// The output of the processes that ended.
    pub(super) outputs: Vec<RunOutput>,
}

impl Supervisor {
    /// A supervisor of `replicas` slots, none started.
    pub(super) fn new(
        binary: PathBuf,
        kubeconfig: PathBuf,
        log_path: PathBuf,
        replicas: usize,
    ) -> Self {
        Supervisor {
            binary,
            kubeconfig,
            log_path,
            replicas: replicas.max(1),
            current: (0..replicas.max(1)).map(|_| None).collect(),
            outputs: Vec::new(),
        }
    }

    /// Starts every replica.
    pub(super) fn start_all(&mut self, timeline: &RefCell<Timeline>) -> Result<()> {
        (0..self.replicas).try_for_each(|slot| self.start(slot, timeline))
    }

    /// Starts a new operator process in a replica slot.
    pub(super) fn start(&mut self, slot: usize, timeline: &RefCell<Timeline>) -> Result<()> {
        let n = timeline.borrow().starts.len() + 1;
        let mut command = OperatorRunner::command(&self.binary)
            .args(["run", "-A", "--standalone", "--qps", "0"])
            .env("KUBECONFIG", &self.kubeconfig)
            .env(LOG_ENV, &self.log_path)
            // Settings from the caller's environment that would change the operator.
            .env_remove("KOPF_RUN_NAMESPACE")
            .env_remove("KOPF_RUN_LOG_FORMAT")
            .env_remove("KOPF_RUN_QPS")
            .name(format!("chaos#{n}"));
        if self.replicas > 1 {
            command = command.args(ELECTION);
        }
        let runner = command
            .start()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        timeline
            .borrow_mut()
            .starts
            .push((now_micros(), runner.pid()));
        self.current[slot] = Some(runner);
        Ok(())
    }

    /// Keeps the output of the process that ended.
    pub(super) fn finish(&mut self, runner: &OperatorRunner) {
        self.outputs.push(RunOutput {
            name: runner.name().to_string(),
            pid: runner.pid(),
            lines: runner.lines(),
        });
    }

    /// The slot of the replica that leads now, as its output says: of the running ones, the
    /// one whose latest `leads now` is the most recent and not followed by `lost the lead`.
    pub(super) fn leader(&self) -> Option<usize> {
        self.current
            .iter()
            .enumerate()
            .filter_map(|(slot, runner)| {
                let lines = runner.as_ref()?.lines();
                let last = lines
                    .iter()
                    .rev()
                    .find(|l| l.contains(LEADS) || l.contains(LOST))?;
                last.contains(LEADS)
                    .then(|| line_time(last).map(|t| (t, slot)))
                    .flatten()
            })
            .max()
            .map(|(_, slot)| slot)
    }

    /// The slot a planned kill hits: with one replica, it; with several, the leader (for a
    /// kill aimed at it, when one leads) or one of the others.
    pub(super) fn target(&self, kill: &Kill) -> usize {
        if self.replicas == 1 {
            return 0;
        }
        let leader = self.leader();
        let candidates: Vec<usize> = match leader {
            Some(l) if kill.leader => vec![l],
            Some(l) => (0..self.replicas).filter(|s| *s != l).collect(),
            None => (0..self.replicas).collect(),
        };
        candidates[kill.pick % candidates.len()]
    }

    /// SIGKILL of a replica, then the wait for the process to be gone (the recorded time is
    /// after it).
    pub(super) async fn kill(&mut self, slot: usize, timeline: &RefCell<Timeline>) -> Result<()> {
        let Some(mut runner) = self.current[slot].take() else {
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

    /// If a process exited by itself, records it and starts another in its slot.
    pub(super) async fn check(&mut self, timeline: &RefCell<Timeline>) -> Result<()> {
        for slot in 0..self.replicas {
            let exited = match self.current[slot].as_mut() {
                Some(runner) => runner.try_status().map(|s| (runner.pid(), s.to_string())),
                None => None,
            };
            if let Some((pid, status)) = exited {
                println!(
                    "chaos: the operator (pid {pid}) exited by itself: {status}; restarting it"
                );
                if let Some(mut runner) = self.current[slot].take() {
                    let _ = runner.wait(Duration::from_secs(2)).await;
                    self.finish(&runner);
                }
                timeline
                    .borrow_mut()
                    .exits
                    .push((now_micros(), pid, status));
                self.start(slot, timeline)?;
            }
        }
        Ok(())
    }

    /// SIGTERM at the end, the standbys first (so that no standby takes over from the
    /// leader's release); the exit statuses as text.
    pub(super) async fn stop(&mut self, timeline: &RefCell<Timeline>) -> String {
        let leader = self.leader();
        let mut order: Vec<usize> = (0..self.replicas).filter(|s| Some(*s) != leader).collect();
        order.extend(leader);
        let mut statuses = Vec::new();
        for slot in order {
            let Some(mut runner) = self.current[slot].take() else {
                statuses.push("not running".to_string());
                continue;
            };
            let status = match runner.stop(STOP_TIMEOUT).await {
                Ok(s) => s.to_string(),
                Err(e) => format!("{e}"),
            };
            timeline
                .borrow_mut()
                .stops
                .push((now_micros(), runner.pid()));
            self.finish(&runner);
            statuses.push(if self.replicas == 1 {
                status
            } else {
                format!("{}: {status}", runner.name())
            });
        }
        statuses.join("; ")
    }
}
