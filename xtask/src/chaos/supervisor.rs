//! The operator under test as processes: started, SIGKILLed, restarted when it exits by
//! itself, stopped at the end; their output kept.

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use kopf_testing::OperatorRunner;

use super::evidence::{KillRecord, RunOutput, Timeline, now_micros};

/// The environment variable naming the operator's handler log.
pub(super) const LOG_ENV: &str = "KOPF_CHAOS_LOG";
/// How long the operator may take to exit on the final SIGTERM.
pub(super) const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs and restarts the operator processes, and keeps their output.
pub(super) struct Supervisor {
    /// The operator's binary.
    pub(super) binary: PathBuf,
    /// The kubeconfig of the fake server.
    pub(super) kubeconfig: PathBuf,
    /// The handler log the processes append to.
    pub(super) log_path: PathBuf,
    /// The running process, if any.
    pub(super) current: Option<OperatorRunner>,
    /// The output of the processes that ended.
    pub(super) outputs: Vec<RunOutput>,
}

impl Supervisor {
    /// Starts a new operator process.
    pub(super) fn start(&mut self, timeline: &RefCell<Timeline>) -> Result<()> {
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
    pub(super) fn finish(&mut self, runner: &OperatorRunner) {
        self.outputs.push(RunOutput {
            name: runner.name().to_string(),
            pid: runner.pid(),
            lines: runner.lines(),
        });
    }

    /// SIGKILL, then the wait for the process to be gone (the recorded time is after it).
    pub(super) async fn kill(&mut self, timeline: &RefCell<Timeline>) -> Result<()> {
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
    pub(super) async fn check(&mut self, timeline: &RefCell<Timeline>) -> Result<()> {
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
    pub(super) async fn stop(&mut self) -> String {
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
