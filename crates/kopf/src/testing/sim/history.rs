//! What happened in a simulated run, in order: the scenario's steps, the operator's
//! requests and what answered them, its handler attempts, its kills and restarts. The
//! invariants read it; a failure prints it as the run's trace.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use kopf_core::causes::Reason;

/// The record of a run, in the order things happened.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Every entry, oldest first.
    pub entries: Vec<Entry>,
}

/// One thing that happened, with the operator time since the run began.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Operator time since the start of the run.
    pub at: Duration,
    /// What happened.
    pub event: Event,
}

/// What happened.
#[derive(Debug, Clone)]
pub enum Event {
    /// An operator instance started (the first is 1).
    Started {
        /// The instance.
        instance: u32,
    },
    /// An instance was killed: nothing it had in memory survives, nothing it sends arrives.
    Killed {
        /// The instance.
        instance: u32,
        /// Where: `before` or `after` a request.
        at: String,
    },
    /// A step of the scenario, done by the test (not faulted).
    Step {
        /// What was done (`create default/a`).
        what: String,
        /// The object's uid after a create, else the uid it had.
        uid: Option<String>,
        /// An error, if the step failed (a patch of an object already gone...).
        error: Option<String>,
    },
    /// The faults end: the operator is left to converge.
    Calm,
    /// A request of the operator.
    Request(Request),
    /// A handler attempt of the operator.
    Handler(HandlerRun),
}

/// A request of the operator and how it was answered.
#[derive(Debug, Clone)]
pub struct Request {
    /// The instance that sent it.
    pub instance: u32,
    /// The verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`).
    pub verb: String,
    /// The plural resource (with `/subresource` when there is one).
    pub resource: String,
    /// The namespace, empty for none.
    pub namespace: String,
    /// The object's name, empty for none.
    pub name: String,
    /// How it was answered.
    pub outcome: Answer,
}

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Served, with this status code.
    Served(u16),
    /// An injected failure with this code, not served (for a watch, 410: the watch was
    /// served and told at once that its resourceVersion expired).
    Injected(u16),
    /// Served, but the answer was replaced by this failure (a lost answer: the change is
    /// stored, the operator does not know it).
    Lost(u16),
    /// Served after an injected latency of this many milliseconds, with this code.
    Delayed(u64, u16),
    /// Never answered: its instance was killed.
    Killed,
}

impl Answer {
    /// Whether the operator saw a failure where a request may or may not have had effect.
    pub fn failed(self) -> bool {
        match self {
            Answer::Served(code) | Answer::Delayed(_, code) => code >= 400,
            Answer::Injected(_) | Answer::Lost(_) | Answer::Killed => true,
        }
    }
}

/// One handler attempt.
#[derive(Debug, Clone)]
pub struct HandlerRun {
    /// The instance that ran it.
    pub instance: u32,
    /// The handler's id.
    pub handler: String,
    /// Why it ran (create, update, delete, resume; noop for timers, daemons and
    /// activities).
    pub reason: Reason,
    /// The object's uid.
    pub uid: String,
    /// `namespace/name` of the object.
    pub object: String,
    /// The object's spec as the handler saw it.
    pub spec: Value,
    /// Earlier attempts of the same handler for the same cause.
    pub retry: u32,
    /// Whether the object carried Kopf's finalizer when the handler ran.
    pub finalized: bool,
    /// How it ended.
    pub outcome: RunOutcome,
}

/// How a handler attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// It succeeded with this result (stored in `status.<handler id>` unless null).
    Succeeded(Option<Value>),
    /// It failed (the message); the framework retries it or gives up as the error says.
    Failed(String),
    /// Its instance was killed while it ran, and it returned afterwards: its outcome
    /// never left the process. (An attempt still waiting for the API server when its
    /// instance died never returns, and is not in the history.)
    Interrupted,
}

impl History {
    /// The handler attempts, oldest first.
    pub fn handler_runs(&self) -> impl Iterator<Item = &HandlerRun> {
        self.entries.iter().filter_map(|e| match &e.event {
            Event::Handler(run) => Some(run),
            _ => None,
        })
    }

    /// The operator's requests, oldest first.
    pub fn requests(&self) -> impl Iterator<Item = &Request> {
        self.entries.iter().filter_map(|e| match &e.event {
            Event::Request(r) => Some(r),
            _ => None,
        })
    }

    /// How many instances were killed.
    pub fn kills(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e.event, Event::Killed { .. }))
            .count()
    }

    /// How many answers were faults (injected, lost).
    pub fn faults(&self) -> usize {
        self.requests()
            .filter(|r| matches!(r.outcome, Answer::Injected(_) | Answer::Lost(_)))
            .count()
    }

    /// The trace: one line per entry.
    pub fn trace(&self) -> Vec<String> {
        self.entries.iter().map(ToString::to_string).collect()
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>9.3}s  ", self.at.as_secs_f64())?;
        match &self.event {
            Event::Started { instance } => write!(f, "#{instance} starts"),
            Event::Killed { instance, at } => write!(f, "#{instance} KILLED {at}"),
            Event::Step { what, error, .. } => match error {
                None => write!(f, "test: {what}"),
                Some(e) => write!(f, "test: {what} failed: {e}"),
            },
            Event::Calm => write!(f, "test: faults end; the operator converges"),
            Event::Request(r) => write!(f, "{r}"),
            Event::Handler(run) => write!(f, "{run}"),
        }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let object = match (self.namespace.as_str(), self.name.as_str()) {
            ("", "") => String::new(),
            ("", name) => format!(" {name}"),
            (ns, name) => format!(" {ns}/{name}"),
        };
        let answer = match self.outcome {
            Answer::Served(code) => format!("{code}"),
            Answer::Injected(code) => format!("{code} INJECTED"),
            Answer::Lost(code) => format!("served, answer LOST as {code}"),
            Answer::Delayed(ms, code) => format!("{code} after {ms} ms"),
            Answer::Killed => "never answered (killed)".into(),
        };
        write!(
            f,
            "#{} {} {}{object} -> {answer}",
            self.instance, self.verb, self.resource
        )
    }
}

impl fmt::Display for HandlerRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outcome = match &self.outcome {
            RunOutcome::Succeeded(None) => "succeeded".to_string(),
            RunOutcome::Succeeded(Some(v)) => format!("succeeded: {v}"),
            RunOutcome::Failed(e) => format!("failed: {e}"),
            RunOutcome::Interrupted => "INTERRUPTED by the kill".into(),
        };
        write!(
            f,
            "#{} handler '{}' ({}, retry {}) on {}: {outcome}",
            self.instance,
            self.handler,
            self.reason.purpose(),
            self.retry,
            self.object
        )
    }
}
