//! The operator under test of `cargo xtask chaos`.
//!
//! It handles `kopfexamples` (all namespaces) with three counting handlers, `create_fn`,
//! `update_fn` and `delete_fn`, on the normal kopf-rs runtime, so a SIGKILL is a real crash.
//! Each call appends one line to the file named by `KOPF_CHAOS_LOG`:
//!
//! ```text
//! <unix-micros> <pid> <cause> <uid> <name> <spec.value>      (cause: create|update|delete)
//! ```
//!
//! and each process, before it runs, appends a start line with the User-Agent of its
//! requests (so the harness can pick them out of the API server's request log):
//!
//! ```text
//! <unix-micros> <pid> start <user-agent>
//! ```
//!
//! Each line goes out in one `write(2)` on a file opened with `O_APPEND`, so a kill never
//! leaves half a line in the middle of another (only the last line of the file may be cut).
//! Then the handler sleeps a random 0–300 ms (so that kills and faults land mid-handler) and
//! returns: `create_fn` → `{"value": <spec.value>}` into `status.create_fn`, `update_fn` →
//! `{"value": <spec.value>}` into `status.update_fn`, `delete_fn` → nothing.
//!
//! ```sh
//! KOPF_CHAOS_LOG=/tmp/chaos.log KUBECONFIG=... kopf-chaos-operator run -A --standalone --qps 0
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use kopf::{
    HandlerError, Operator,
    handler::{Name, Spec, Uid},
};
use rand::Rng as _;
use serde_json::{Value, json};

/// The environment variable naming the append-only log file of handler calls.
const LOG_ENV: &str = "KOPF_CHAOS_LOG";

/// The longest random pause of a handler after its log line.
const MAX_PAUSE_MS: u64 = 300;

/// The log file, opened once per process (in append mode) before the operator starts.
static LOG: OnceLock<File> = OnceLock::new();

/// Microseconds since the Unix epoch.
fn unix_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// Appends one whole line to the log in a single `write` call.
fn append(line: &str) -> anyhow::Result<()> {
    let mut file = LOG
        .get()
        .with_context(|| format!("the log file ({LOG_ENV}) is not open"))?;
    let bytes = format!("{line}\n");
    let written = file
        .write(bytes.as_bytes())
        .context("writing the log line")?;
    if written != bytes.len() {
        bail!(
            "a short write to the log: {written} of {} bytes",
            bytes.len()
        );
    }
    Ok(())
}

/// Logs one handler call, then pauses for a random 0–300 ms; returns `spec.value`.
async fn record(cause: &str, uid: &str, name: &str, spec: &Value) -> Result<Value, HandlerError> {
    let value = spec.get("value").cloned().unwrap_or(Value::Null);
    let shown = match &value {
        Value::Null => "-".to_string(),
        v => v.to_string(),
    };
    let line = format!(
        "{} {} {cause} {uid} {name} {shown}",
        unix_micros(),
        std::process::id()
    );
    // A failed write is retried by the framework (a temporary error), never lost silently.
    append(&line).map_err(|e| HandlerError::temporary(format!("{e:#}"), Duration::from_secs(1)))?;
    let pause = rand::rng().random_range(0..=MAX_PAUSE_MS);
    tokio::time::sleep(Duration::from_millis(pause)).await;
    Ok(value)
}

async fn create_fn(
    Uid(uid): Uid,
    Name(name): Name,
    Spec(spec): Spec,
) -> Result<Value, HandlerError> {
    let value = record("create", &uid, &name, &spec).await?;
    Ok(json!({ "value": value }))
}

async fn update_fn(
    Uid(uid): Uid,
    Name(name): Name,
    Spec(spec): Spec,
) -> Result<Value, HandlerError> {
    let value = record("update", &uid, &name, &spec).await?;
    Ok(json!({ "value": value }))
}

async fn delete_fn(Uid(uid): Uid, Name(name): Name, Spec(spec): Spec) -> Result<(), HandlerError> {
    record("delete", &uid, &name, &spec).await?;
    Ok(())
}

/// The operator: the three counting handlers on `kopfexamples`.
fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "create_fn", create_fn)
        .on_update("kopfexamples", "update_fn", update_fn)
        .on_delete("kopfexamples", "delete_fn", delete_fn)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = kopf::cli::Cli::parse_args();
    if cli.run_args().is_some() {
        let path = std::env::var_os(LOG_ENV)
            .filter(|p| !p.is_empty())
            .with_context(|| format!("set {LOG_ENV} to the file the handlers append to"))?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {LOG_ENV}={}", path.to_string_lossy()))?;
        LOG.set(file)
            .map_err(|_| anyhow::anyhow!("the log file was opened twice"))?;
        append(&format!(
            "{} {} start {}",
            unix_micros(),
            std::process::id(),
            kopf::config::USER_AGENT
        ))?;
    }
    operator().main_with(cli).await?;
    Ok(())
}
