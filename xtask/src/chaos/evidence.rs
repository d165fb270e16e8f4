//! What a chaos run leaves to be checked: the recorded timeline (kills, faults, operations),
//! the operator's log file of handler calls, the API server's request log, the objects at
//! the end and the operator's output. Times are Unix microseconds throughout (one clock: the
//! harness, the operator processes and the fake API server all run on this machine).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use anyhow::{Context, Result, bail};
use kopf_testing::RequestRecord;
use serde_json::Value;

/// Microseconds since the Unix epoch.
pub type Micros = i64;

/// The current time in Unix microseconds.
pub fn now_micros() -> Micros {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The cause a handler was called for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// `create_fn`.
    Create,
    /// `update_fn`.
    Update,
    /// `delete_fn`.
    Delete,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cause::Create => "create",
            Cause::Update => "update",
            Cause::Delete => "delete",
        })
    }
}

/// One handler call, as the operator logged it on entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// When the handler began.
    pub micros: Micros,
    /// The operator process.
    pub pid: u32,
    /// Which handler.
    pub cause: Cause,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.value` (None: the object had none).
    pub value: Option<i64>,
}

/// An operator process's first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessStart {
    /// When it started.
    pub micros: Micros,
    /// Its pid.
    pub pid: u32,
    /// The User-Agent of its requests.
    pub user_agent: String,
}

/// The parsed log file of the operator (`KOPF_CHAOS_LOG`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandlerLog {
    /// The handler calls, in file order.
    pub calls: Vec<Call>,
    /// The process starts, in file order.
    pub starts: Vec<ProcessStart>,
    /// A last line without its newline (cut by a kill), left out.
    pub truncated: Option<String>,
}

impl HandlerLog {
    /// Parses the log: `<micros> <pid> <cause> <uid> <name> <value>` per handler call and
    /// `<micros> <pid> start <user-agent>` per process. Every line ends with a newline (each
    /// is one `write`); an unterminated last line may have been cut and is left out. A
    /// malformed complete line is an error (the operator or this parser is wrong).
    pub fn parse(text: &str) -> Result<HandlerLog> {
        let mut log = HandlerLog::default();
        let (complete, rest) = match text.rfind('\n') {
            Some(i) => (&text[..i], &text[i + 1..]),
            None => ("", text),
        };
        if !rest.is_empty() {
            log.truncated = Some(rest.to_string());
        }
        for (i, line) in complete.split('\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            Self::parse_line(line, &mut log)
                .with_context(|| format!("line {} of the handler log: {line:?}", i + 1))?;
        }
        Ok(log)
    }

    fn parse_line(line: &str, log: &mut HandlerLog) -> Result<()> {
        let fields: Vec<&str> = line.split(' ').collect();
        let micros: Micros = fields[0].parse().context("the time")?;
        let pid: u32 = fields
            .get(1)
            .context("no pid")?
            .parse()
            .context("the pid")?;
        let cause = match fields.get(2).copied() {
            Some("start") => {
                let user_agent = fields[3..].join(" ");
                if user_agent.is_empty() {
                    bail!("a start line without the User-Agent");
                }
                log.starts.push(ProcessStart {
                    micros,
                    pid,
                    user_agent,
                });
                return Ok(());
            }
            Some("create") => Cause::Create,
            Some("update") => Cause::Update,
            Some("delete") => Cause::Delete,
            other => bail!("unknown cause {other:?}"),
        };
        if fields.len() != 6 {
            bail!("expected 6 fields, got {}", fields.len());
        }
        let value = match fields[5] {
            "-" => None,
            v => Some(v.parse().context("spec.value")?),
        };
        log.calls.push(Call {
            micros,
            pid,
            cause,
            uid: fields[3].to_string(),
            name: fields[4].to_string(),
            value,
        });
        Ok(())
    }
}

/// A kill of the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillRecord {
    /// Its number, from 1.
    pub n: usize,
    /// When the process was dead (after SIGKILL and the wait for it).
    pub micros: Micros,
    /// The killed process.
    pub pid: u32,
}

/// What the harness did and saw happen, as it happened.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// The start of the chaos phase (times are shown relative to it).
    pub t0: Micros,
    /// The kills.
    pub kills: Vec<KillRecord>,
    /// Operator processes started: (time, pid).
    pub starts: Vec<(Micros, u32)>,
    /// Operator processes that exited without being killed: (time, pid, status).
    pub exits: Vec<(Micros, u32, String)>,
    /// Operator processes stopped (SIGTERM) at the end, once gone: (time, pid).
    pub stops: Vec<(Micros, u32)>,
    /// Faults injected (and cleared): (time, description).
    pub faults: Vec<(Micros, String)>,
    /// Faults injected, by kind.
    pub fault_kinds: BTreeMap<String, usize>,
    /// The objects' uids, by name (from the creations).
    pub uids: BTreeMap<String, String>,
    /// Updates that reached the server: (object index, value).
    pub updated: Vec<(usize, i64)>,
    /// Objects whose deletion the server accepted (by index).
    pub deleted: Vec<usize>,
    /// Operations that failed: (time, text).
    pub failed_ops: Vec<(Micros, String)>,
}

impl Timeline {
    /// Seconds since the start of the chaos phase, for messages.
    pub fn at(&self, micros: Micros) -> String {
        format!("{:.3} s", (micros - self.t0) as f64 / 1e6)
    }
}

/// One request of the operator, from the API server's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// When it arrived.
    pub micros: Micros,
    /// HTTP method.
    pub method: String,
    /// The path (no query).
    pub path: String,
    /// The answer's status; 0: never answered (the process died first, or it is open).
    pub status: u16,
    /// The namespace and name of the object it addressed (empty for collections).
    pub namespace: String,
    /// The object name.
    pub name: String,
    /// The resource plural.
    pub resource: String,
    /// What this request, if it succeeded, stored for good about its object's handling.
    pub completes: Option<Completion>,
}

/// A write that completes the handling of a cause: after it, nothing of that cause is left to
/// do, so neither a kill nor a failure after it explains running its handler again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The diff-base of this `spec.value` was stored: its creation or update is handled.
    Handled(i64),
    /// The operator's finalizer was removed: the deletion is handled.
    Released,
}

/// The completion a PATCH body stands for: a merge patch or a JSON patch that sets the
/// diff-base (its `spec.value`), or a JSON patch that removes the finalizers.
pub fn completion(body: &str) -> Option<Completion> {
    const DIFF_BASE: &str = "kopf.zalando.org/last-handled-configuration";
    let patch: Value = serde_json::from_str(body).ok()?;
    let diff_base = match &patch {
        Value::Object(_) => patch
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(DIFF_BASE))
            .cloned(),
        Value::Array(ops) => {
            if ops.iter().any(|op| {
                op["op"] == "remove"
                    && op["path"]
                        .as_str()
                        .is_some_and(|p| p.starts_with("/metadata/finalizers"))
            }) {
                return Some(Completion::Released);
            }
            ops.iter()
                .find(|op| {
                    op["path"]
                        .as_str()
                        .is_some_and(|p| p.contains("last-handled-configuration"))
                })
                .map(|op| {
                    let v = &op["value"];
                    v.get(DIFF_BASE).cloned().unwrap_or_else(|| v.clone())
                })
        }
        _ => None,
    }?;
    let essence: Value = serde_json::from_str(diff_base.as_str()?.trim_end()).ok()?;
    essence
        .pointer("/spec/value")
        .and_then(Value::as_i64)
        .map(Completion::Handled)
}

impl Request {
    /// From the fake server's record (its time is RFC 3339 with microseconds).
    pub fn from_record(r: &RequestRecord) -> Result<Request> {
        let ts: jiff::Timestamp = r
            .time
            .parse()
            .with_context(|| format!("the time {:?} of request #{}", r.time, r.seq))?;
        Ok(Request {
            micros: ts.as_microsecond(),
            method: r.method.clone(),
            path: r.path.clone(),
            status: r.status,
            namespace: r.target.namespace.clone(),
            name: r.target.name.clone(),
            resource: r.target.resource.clone(),
            completes: (r.method == "PATCH" && r.target.subresource.is_empty())
                .then(|| completion(&r.body))
                .flatten(),
        })
    }

    /// Whether the request failed: an error status, or no answer at all.
    pub fn failed(&self) -> bool {
        self.status >= 400 || self.status == 0
    }

    /// `PATCH /apis/... answered 500`, `... got no answer`.
    pub fn describe(&self) -> String {
        match self.status {
            0 => format!("{} {} got no answer", self.method, self.path),
            s => format!("{} {} answered {s}", self.method, self.path),
        }
    }
}

/// The output of one operator process.
#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    /// `chaos#N`.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// Its stdout and stderr lines.
    pub lines: Vec<String>,
}

/// What one object was meant to become, from the plan and the operations that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFacts {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (None: its creation failed).
    pub uid: Option<String>,
    /// `spec.value` as created, then after each update that reached the server.
    pub values: Vec<i64>,
    /// Its deletion was accepted by the server.
    pub deleted: bool,
}

/// Everything the invariants are checked on.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// The recorded timeline.
    pub timeline: Timeline,
    /// The objects as planned and operated.
    pub objects: Vec<ObjectFacts>,
    /// The handler calls.
    pub log: HandlerLog,
    /// The operator's requests (by its User-Agent), in arrival order.
    pub requests: Vec<Request>,
    /// The `kopfexamples` stored at the end.
    pub final_objects: Vec<Value>,
    /// The output of every operator process.
    pub outputs: Vec<RunOutput>,
    /// The highest acceptable count of requests about one object.
    pub request_bound: usize,
    /// How many replicas ran at once (1: one process, no leader election).
    pub replicas: usize,
}

impl Evidence {
    /// The stored objects by name.
    pub fn stored_by_name(&self) -> HashMap<&str, &Value> {
        self.final_objects
            .iter()
            .filter_map(|o| Some((o.pointer("/metadata/name")?.as_str()?, o)))
            .collect()
    }

    /// The handler calls by uid, each in time order.
    pub fn calls_by_uid(&self) -> HashMap<&str, Vec<&Call>> {
        let mut map: HashMap<&str, Vec<&Call>> = HashMap::new();
        for c in &self.log.calls {
            map.entry(c.uid.as_str()).or_default().push(c);
        }
        for calls in map.values_mut() {
            calls.sort_by_key(|c| c.micros);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_calls_and_starts() {
        let text = "100 7 start kopf-rs/0.1.0\n\
                    200 7 create u-1 chaos-00000 10\n\
                    300 7 update u-1 chaos-00000 11\n\
                    400 8 delete u-1 chaos-00000 -\n";
        let log = HandlerLog::parse(text).expect("parses");
        assert_eq!(
            log.starts,
            vec![ProcessStart {
                micros: 100,
                pid: 7,
                user_agent: "kopf-rs/0.1.0".into()
            }]
        );
        assert_eq!(log.calls.len(), 3);
        assert_eq!(
            log.calls[1],
            Call {
                micros: 300,
                pid: 7,
                cause: Cause::Update,
                uid: "u-1".into(),
                name: "chaos-00000".into(),
                value: Some(11)
            }
        );
        assert_eq!(log.calls[2].value, None);
        assert_eq!(log.truncated, None);
    }

    #[test]
    fn a_cut_last_line_is_left_out_even_when_it_parses() {
        // "...chaos-00001 20" cut to "...chaos-00001 2" would parse with a wrong value.
        let text = "200 7 create u-1 chaos-00000 10\n300 7 create u-2 chaos-00001 2";
        let log = HandlerLog::parse(text).expect("parses");
        assert_eq!(log.calls.len(), 1);
        assert_eq!(
            log.truncated.as_deref(),
            Some("300 7 create u-2 chaos-00001 2")
        );
        let log = HandlerLog::parse("300 7 upd").expect("parses");
        assert!(log.calls.is_empty());
        assert_eq!(HandlerLog::parse("").expect("empty"), HandlerLog::default());
    }

    #[test]
    fn a_malformed_complete_line_is_an_error() {
        let err = HandlerLog::parse("200 7 create u-1 chaos-00000 10\n300 7 resume u-1 x 1\n")
            .expect_err("unknown cause");
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
        assert!(HandlerLog::parse("200 7 create u-1 10\n").is_err());
        assert!(HandlerLog::parse("x 7 create u-1 chaos 10\n").is_err());
    }

    #[test]
    fn request_times_are_unix_micros() {
        let record = RequestRecord {
            seq: 1,
            time: "2026-01-01T00:00:01.000002Z".into(),
            micros: 5,
            method: "PATCH".into(),
            path: "/apis/kopf.dev/v1/namespaces/default/kopfexamples/a/status".into(),
            query: String::new(),
            user_agent: "kopf-rs/0.1.0".into(),
            accept: String::new(),
            content_type: String::new(),
            body: String::new(),
            status: 500,
            patch_type: "merge".into(),
            target: Default::default(),
        };
        let r = Request::from_record(&record).expect("converts");
        assert_eq!(r.micros, 1_767_225_601_000_002);
        assert!(r.failed());
        assert!(
            r.describe().ends_with("/status answered 500"),
            "{}",
            r.describe()
        );
    }
}
