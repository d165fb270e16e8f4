//! Running an operator (or any program) as a child process in a test: its stdout and stderr
//! captured line by line, waited for, signalled, stopped, and its exit status reported.
//!
//! ```no_run
//! use std::time::Duration;
//! use kopf_testing::OperatorRunner;
//! # async fn demo() -> Result<(), kopf_testing::RunnerError> {
//! let mut op = OperatorRunner::command("target/debug/examples/minimal")
//!     .args(["run", "-A", "--standalone"])
//!     .env("KUBECONFIG", "/tmp/kubeconfig")
//!     .start()?;
//! op.wait_for_log("Handler 'create_fn' succeeded", Duration::from_secs(20)).await?;
//! let status = op.stop(Duration::from_secs(10)).await?; // SIGTERM, then SIGKILL
//! assert!(status.success(), "{}", op.logs());
//! # Ok(()) }
//! ```
//!
//! Set `KOPF_E2E_ECHO=1` to also copy every captured line to stderr, prefixed with the
//! runner's name (or call [`RunnerBuilder::echo`]).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The environment variable that turns on echoing of captured lines to stderr.
pub const ECHO_ENV: &str = "KOPF_E2E_ECHO";

/// How many lines of the output the errors quote.
const TAIL_LINES: usize = 40;

/// How long the readers may take to drain the pipes after the process exited.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Signals a runner can send (with the `kill` command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: a graceful stop.
    Term,
    /// SIGINT: as Ctrl-C.
    Int,
    /// SIGKILL: no chance to clean up.
    Kill,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Int => "INT",
            Signal::Kill => "KILL",
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SIG{}", self.name())
    }
}

/// Errors of [`OperatorRunner`]. Those about the output quote its last lines.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program's path.
        program: String,
        /// The cause.
        source: std::io::Error,
    },
    /// No line containing the pattern appeared in time.
    #[error(
        "{name}: no output line containing {pattern:?} within {timeout:?}; the last lines:\n{tail}"
    )]
    LogTimeout {
        /// The runner's name.
        name: String,
        /// What was waited for.
        pattern: String,
        /// How long.
        timeout: Duration,
        /// The last lines of the output.
        tail: String,
    },
    /// The process closed its output (it exited) before printing the pattern.
    #[error("{name} exited ({status}) before printing {pattern:?}; the last lines:\n{tail}")]
    ExitedEarly {
        /// The runner's name.
        name: String,
        /// What was waited for.
        pattern: String,
        /// The exit status, or why it is unknown.
        status: String,
        /// The last lines of the output.
        tail: String,
    },
    /// The process did not exit in time (it is still running).
    #[error("{name} did not exit within {timeout:?}; the last lines:\n{tail}")]
    WaitTimeout {
        /// The runner's name.
        name: String,
        /// How long.
        timeout: Duration,
        /// The last lines of the output.
        tail: String,
    },
    /// The process ignored SIGTERM and was killed.
    #[error(
        "{name} did not exit within {timeout:?} of SIGTERM and was killed ({status}); the last lines:\n{tail}"
    )]
    Killed {
        /// The runner's name.
        name: String,
        /// How long it had after SIGTERM.
        timeout: Duration,
        /// The status after SIGKILL, or why it is unknown.
        status: String,
        /// The last lines of the output.
        tail: String,
    },
    /// Sending a signal failed.
    #[error("cannot send {signal} to {name} (pid {pid}): {reason}")]
    Signal {
        /// The runner's name.
        name: String,
        /// The process id.
        pid: u32,
        /// The signal.
        signal: Signal,
        /// Why.
        reason: String,
    },
    /// Waiting for the process failed.
    #[error("{name}: waiting for the process failed: {source}")]
    Wait {
        /// The runner's name.
        name: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// What to run: program, arguments, environment. Made by [`OperatorRunner::command`].
#[derive(Debug, Clone)]
pub struct RunnerBuilder {
    program: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    env_removes: Vec<OsString>,
    cwd: Option<PathBuf>,
    name: Option<String>,
    echo: Option<bool>,
}

impl RunnerBuilder {
    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable of the process (the rest is inherited).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Removes an inherited environment variable.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env_removes.push(key.as_ref().to_owned());
        self
    }

    /// The working directory of the process.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The name in errors and echoed lines (default: the program's file name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Copy every captured line to stderr, prefixed with `[name]` (default: when
    /// `KOPF_E2E_ECHO` is set to anything but `""` or `0`).
    pub fn echo(mut self, on: bool) -> Self {
        self.echo = Some(on);
        self
    }

    /// Starts the process, with stdin closed and stdout and stderr captured. It is killed
    /// when the runner is dropped. Must be called within a Tokio runtime.
    pub fn start(self) -> Result<OperatorRunner, RunnerError> {
        let name = self.name.clone().unwrap_or_else(|| {
            self.program
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| self.program.display().to_string())
        });
        let echo = self.echo.unwrap_or_else(|| {
            std::env::var_os(ECHO_ENV).is_some_and(|v| !v.is_empty() && v != "0")
        });
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for key in &self.env_removes {
            cmd.env_remove(key);
        }
        cmd.envs(self.envs.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().map_err(|source| RunnerError::Spawn {
            program: self.program.display().to_string(),
            source,
        })?;
        let pid = child.id().unwrap_or_default();
        tracing::debug!(name = %name, pid, program = %self.program.display(), "started");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = watch::channel(0usize);
        let tx = Arc::new(tx);
        let prefix = echo.then(|| format!("[{name}] "));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(read_lines(
                out,
                lines.clone(),
                tx.clone(),
                prefix.clone(),
            )));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(read_lines(err, lines.clone(), tx, prefix)));
        }
        Ok(OperatorRunner {
            name,
            child,
            pid,
            lines,
            changes: rx,
            readers,
            status: None,
        })
    }
}

/// Reads lines (lossily decoded) into the shared buffer until the stream ends.
async fn read_lines(
    stream: impl AsyncRead + Unpin,
    lines: Arc<Mutex<Vec<String>>>,
    changes: Arc<watch::Sender<usize>>,
    echo: Option<String>,
) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&buf);
                let line = text.trim_end_matches(['\n', '\r']).to_string();
                if let Some(prefix) = &echo {
                    let _ = writeln!(std::io::stderr().lock(), "{prefix}{line}");
                }
                lock(&lines).push(line);
                changes.send_modify(|n| *n = n.wrapping_add(1));
            }
            Err(e) => {
                tracing::debug!(error = %e, "reading the output of a child process failed");
                return;
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running program (typically an operator binary) with its output captured. Killed on drop.
pub struct OperatorRunner {
    name: String,
    child: Child,
    pid: u32,
    lines: Arc<Mutex<Vec<String>>>,
    changes: watch::Receiver<usize>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl fmt::Debug for OperatorRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorRunner")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl OperatorRunner {
    /// What to run; `.start()` runs it.
    pub fn command(program: impl AsRef<Path>) -> RunnerBuilder {
        RunnerBuilder {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            envs: Vec::new(),
            env_removes: Vec::new(),
            cwd: None,
            name: None,
            echo: None,
        }
    }

    /// Starts `program` with `args` (see [`command`](Self::command) for more options).
    pub fn start<I, S>(program: impl AsRef<Path>, args: I) -> Result<Self, RunnerError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::command(program).args(args).start()
    }

    /// The name used in errors and echoed lines.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// All output so far (stdout and stderr interleaved as read), one line per line.
    pub fn logs(&self) -> String {
        lock(&self.lines).join("\n")
    }

    /// The output lines so far.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.lines).clone()
    }

    /// The last `n` lines of the output.
    pub fn tail(&self, n: usize) -> String {
        let lines = lock(&self.lines);
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Whether a line so far contains `pattern`.
    pub fn has_logged(&self, pattern: &str) -> bool {
        lock(&self.lines).iter().any(|l| l.contains(pattern))
    }

    /// Waits until an output line contains `pattern`. Fails (quoting the last lines) on
    /// timeout or when the process exits first.
    pub async fn wait_for_log(
        &mut self,
        pattern: &str,
        timeout: Duration,
    ) -> Result<(), RunnerError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.changes.clone();
        loop {
            changes.borrow_and_update();
            if self.has_logged(pattern) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    // Both pipes are closed: the process is exiting or has exited.
                    if self.has_logged(pattern) {
                        return Ok(());
                    }
                    let status = match self.wait(Duration::from_secs(5)).await {
                        Ok(s) => s.to_string(),
                        Err(e) => format!("its status is unknown: {e}"),
                    };
                    return Err(RunnerError::ExitedEarly {
                        name: self.name.clone(),
                        pattern: pattern.into(),
                        status,
                        tail: self.tail(TAIL_LINES),
                    });
                }
                Err(_) => {
                    return Err(RunnerError::LogTimeout {
                        name: self.name.clone(),
                        pattern: pattern.into(),
                        timeout,
                        tail: self.tail(TAIL_LINES),
                    });
                }
            }
        }
    }

    /// The exit status if the process has exited (without waiting).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.status = Some(status);
        }
        self.status
    }

    /// Sends a signal with `kill -SIG PID`. Fails if the process has already exited.
    pub async fn signal(&mut self, signal: Signal) -> Result<(), RunnerError> {
        let (name, pid) = (self.name.clone(), self.pid);
        let failed = move |reason: String| RunnerError::Signal {
            name: name.clone(),
            pid,
            signal,
            reason,
        };
        if let Some(status) = self.try_status() {
            return Err(failed(format!("it has already exited ({status})")));
        }
        let out = Command::new("kill")
            .arg(format!("-{}", signal.name()))
            .arg(self.pid.to_string())
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| failed(format!("cannot run `kill`: {e}")))?;
        if !out.status.success() {
            return Err(failed(format!(
                "`kill` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        tracing::debug!(name = %self.name, pid = self.pid, %signal, "signalled");
        Ok(())
    }

    /// Waits for the process to exit by itself, for at most `timeout` (it keeps running
    /// after a timeout). Once it has exited, the output is read to its end.
    pub async fn wait(&mut self, timeout: Duration) -> Result<ExitStatus, RunnerError> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(Ok(status)) => {
                self.status = Some(status);
                self.drain().await;
                tracing::debug!(name = %self.name, pid = self.pid, %status, "exited");
                Ok(status)
            }
            Ok(Err(source)) => Err(RunnerError::Wait {
                name: self.name.clone(),
                source,
            }),
            Err(_) => Err(RunnerError::WaitTimeout {
                name: self.name.clone(),
                timeout,
                tail: self.tail(TAIL_LINES),
            }),
        }
    }

    /// Stops the process: SIGTERM, then up to `timeout` for it to exit; after that SIGKILL,
    /// reported as [`RunnerError::Killed`]. Returns the exit status (which tells whether
    /// the program exited cleanly: `status.success()`, or by the signal: `status.signal()`).
    pub async fn stop(&mut self, timeout: Duration) -> Result<ExitStatus, RunnerError> {
        if let Some(status) = self.try_status() {
            return Ok(status);
        }
        if let Err(e) = self.signal(Signal::Term).await {
            // It may have exited in the meantime.
            return match self.try_status() {
                Some(status) => {
                    self.drain().await;
                    Ok(status)
                }
                None => Err(e),
            };
        }
        match self.wait(timeout).await {
            Err(RunnerError::WaitTimeout { .. }) => {
                tracing::warn!(name = %self.name, pid = self.pid, ?timeout, "no exit after SIGTERM; killing");
                let _ = self.child.start_kill();
                let status = match self.wait(Duration::from_secs(10)).await {
                    Ok(s) => s.to_string(),
                    Err(e) => format!("its status is unknown: {e}"),
                };
                Err(RunnerError::Killed {
                    name: self.name.clone(),
                    timeout,
                    status,
                    tail: self.tail(TAIL_LINES),
                })
            }
            other => other,
        }
    }

    /// Kills the process at once (SIGKILL) and waits for it.
    pub async fn kill(&mut self) -> Result<ExitStatus, RunnerError> {
        if let Some(status) = self.try_status() {
            return Ok(status);
        }
        let _ = self.child.start_kill();
        self.wait(Duration::from_secs(10)).await
    }

    /// Lets the readers finish the output after the exit (bounded: a grandchild may hold
    /// the pipes open).
    async fn drain(&mut self) {
        for reader in self.readers.drain(..) {
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, reader).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn sh(script: &str) -> RunnerBuilder {
        OperatorRunner::command("sh")
            .args(["-c", script])
            .echo(false)
    }

    #[tokio::test]
    async fn captures_both_streams_and_stops_with_sigterm() {
        let mut r = sh("echo hi; echo oops >&2; exec sleep 30")
            .start()
            .expect("starts");
        r.wait_for_log("hi", Duration::from_secs(10))
            .await
            .expect("hi");
        r.wait_for_log("oops", Duration::from_secs(10))
            .await
            .expect("oops");
        assert!(r.pid() > 0);
        let status = r.stop(Duration::from_secs(10)).await.expect("stops");
        assert_eq!(status.signal(), Some(15), "{status}");
        assert_eq!(r.logs().lines().count(), 2);
    }

    #[tokio::test]
    async fn a_clean_exit_on_sigterm_is_a_success() {
        let mut r = sh("trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.1; done")
            .start()
            .expect("starts");
        r.wait_for_log("ready", Duration::from_secs(10))
            .await
            .expect("ready");
        let status = r.stop(Duration::from_secs(10)).await.expect("stops");
        assert!(status.success(), "{status}");
        assert!(r.has_logged("bye"), "{}", r.logs());
    }

    #[tokio::test]
    async fn waiting_for_a_line_fails_with_the_tail_when_the_process_exits() {
        let mut r = sh("echo one; echo two; exit 3").start().expect("starts");
        let err = r
            .wait_for_log("three", Duration::from_secs(10))
            .await
            .expect_err("never printed");
        let text = err.to_string();
        assert!(text.contains("exit status: 3"), "{text}");
        assert!(text.contains("one\ntwo"), "{text}");
        assert_eq!(
            r.wait(Duration::from_secs(1)).await.expect("exited").code(),
            Some(3)
        );
    }

    #[tokio::test]
    async fn waiting_for_a_line_times_out_while_it_runs() {
        let mut r = sh("echo started; exec sleep 30").start().expect("starts");
        let err = r
            .wait_for_log("never", Duration::from_millis(300))
            .await
            .expect_err("times out");
        assert!(matches!(err, RunnerError::LogTimeout { .. }), "{err}");
        assert!(err.to_string().contains("started"), "{err}");
        assert!(r.wait(Duration::from_millis(100)).await.is_err());
        r.kill().await.expect("killed");
    }

    #[tokio::test]
    async fn a_process_ignoring_sigterm_is_killed_and_reported() {
        let mut r = sh("trap '' TERM; echo ready; while :; do sleep 0.1; done")
            .start()
            .expect("starts");
        r.wait_for_log("ready", Duration::from_secs(10))
            .await
            .expect("ready");
        let err = r
            .stop(Duration::from_millis(300))
            .await
            .expect_err("killed");
        assert!(matches!(err, RunnerError::Killed { .. }), "{err}");
        assert!(r.try_status().is_some());
        assert!(r.signal(Signal::Int).await.is_err(), "no longer running");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_clear_error() {
        let err = OperatorRunner::start("/nonexistent/operator", ["run"]).expect_err("fails");
        assert!(
            err.to_string()
                .starts_with("cannot start /nonexistent/operator:"),
            "{err}"
        );
    }
}
