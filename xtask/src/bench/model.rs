//! The vocabulary of the benchmark: the systems, the plan of a run, and what one system did.

use std::collections::BTreeMap;
use std::time::Duration;

/// The User-Agent of the harness's own requests (left out of the operators' counts).
pub(super) const DRIVER: &str = "kopf-bench-driver";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum System {
    /// kopf-rs: the `minimal` example.
    KopfRs,
    /// kopf-rs: the `minimal` example with `--diff-base-storage status` (the diff-base in
    /// `status.kopf`: one /status PATCH per created object).
    KopfRsStatus,
    /// kopf-rs: the `minimal` example's job plus a delete handler (the finalizer's cost).
    KopfRsDelete,
    /// kopf-rs: the kube-rs system's job as a level-based reconcile (`Operator::reconcile`).
    KopfRsReconcile,
    /// kopf-rs: 2 processes of the `minimal` example with `--shards 2` (opt-in).
    #[value(name = "kopf-rs-sharded-2")]
    KopfRsSharded2,
    /// kopf-rs: 3 processes of the `minimal` example with `--shards 3` (opt-in).
    #[value(name = "kopf-rs-sharded-3")]
    KopfRsSharded3,
    /// kopf-rs before a change: the `minimal` example's binary built from another commit,
    /// named by `KOPF_BENCH_BASELINE` (opt-in), for measuring a change side by side with
    /// `kopf-rs` in one run.
    KopfRsBaseline,
    /// Python Kopf 1.45.
    Kopf,
    /// kube-rs `Controller`.
    KubeRs,
    /// A plain client: diff-base and status PATCHes, high concurrency.
    Limit,
    /// A plain client: the status PATCH only.
    LimitStatus,
}

impl System {
    pub(super) fn name(self) -> &'static str {
        match self {
            System::KopfRs => "kopf-rs",
            System::KopfRsStatus => "kopf-rs-status",
            System::KopfRsDelete => "kopf-rs-delete",
            System::KopfRsReconcile => "kopf-rs-reconcile",
            System::KopfRsSharded2 => "kopf-rs-sharded-2",
            System::KopfRsSharded3 => "kopf-rs-sharded-3",
            System::KopfRsBaseline => "kopf-rs-baseline",
            System::Kopf => "kopf",
            System::KubeRs => "kube-rs",
            System::Limit => "limit",
            System::LimitStatus => "limit-status",
        }
    }

    /// Whether the system is kopf-rs (its processes serve `--metrics`, with the
    /// convergence histogram).
    pub(super) fn is_kopf_rs(self) -> bool {
        !matches!(
            self,
            System::Kopf | System::KubeRs | System::Limit | System::LimitStatus
        )
    }

    /// How many processes of the system run side by side (each with `--shards` this many).
    pub(super) fn replicas(self) -> usize {
        match self {
            System::KopfRsSharded2 => 2,
            System::KopfRsSharded3 => 3,
            _ => 1,
        }
    }
}

/// One scale of a run: the objects and the churn at that size.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) n: usize,
    pub(super) churn_rate: f64,
    pub(super) churn_seconds: u64,
    /// Longest wait for a burst to complete.
    pub(super) burst_timeout: Duration,
}

/// What one system did.
#[derive(Debug, Default, serde::Serialize)]
pub(super) struct Measured {
    pub(super) system: &'static str,
    pub(super) n: usize,
    pub(super) burst_seconds: f64,
    pub(super) burst_requests_per_object: BTreeMap<String, f64>,
    /// Summed over the replicas, as are the RSS figures.
    pub(super) burst_cpu_seconds: f64,
    pub(super) peak_rss_mb: f64,
    /// Processes of the system.
    pub(super) replicas: usize,
    /// Per replica (empty for a single process).
    pub(super) burst_cpu_per_replica: Vec<f64>,
    pub(super) peak_rss_per_replica_mb: Vec<f64>,
    /// Sharded: from the start until every replica served exactly one range, and the
    /// objects done by then.
    pub(super) sharing_seconds: Option<f64>,
    pub(super) done_at_sharing: usize,
    pub(super) churn_updates: usize,
    pub(super) churn_latency_ms: BTreeMap<&'static str, f64>,
    pub(super) churn_requests_per_update: BTreeMap<String, f64>,
    pub(super) idle_rss_mb: f64,
    pub(super) idle_requests: usize,
    /// The fake API server's own CPU seconds from the operator's start to the burst's end
    /// (one second after), and its share of (operators + server) in that time.
    pub(super) server_burst_cpu_seconds: f64,
    pub(super) server_cpu_share: f64,
    /// The server's RSS growth while the harness created the N objects, per object.
    pub(super) server_bytes_per_object: f64,
    /// "churn during burst", on a fresh server: the burst under churn, and the updates sent
    /// to already handled objects while the burst ran.
    pub(super) during: Option<During>,
    /// kopf-rs' own convergence histogram after the churn, per cause: changes converged,
    /// and the bucket bounds of their p50 and p99 (ms).
    pub(super) convergence: BTreeMap<String, (f64, f64, f64)>,
}

/// The "churn during burst" scenario of one system.
#[derive(Debug, Default, serde::Serialize)]
pub(super) struct During {
    pub(super) burst_seconds: f64,
    pub(super) updates: usize,
    pub(super) latency_ms: BTreeMap<&'static str, f64>,
    /// Operator requests over the whole scenario (creations and updates) per object.
    pub(super) requests_per_object: BTreeMap<String, f64>,
}

/// A system left out at one scale, and why.
#[derive(Debug, serde::Serialize)]
pub(super) struct Skipped {
    pub(super) system: &'static str,
    pub(super) n: usize,
    pub(super) reason: String,
}

/// The fake API server alone at one scale: no operator.
#[derive(Debug, Default, serde::Serialize)]
pub(super) struct ServerAlone {
    pub(super) n: usize,
    /// Merge PATCHes of `/status`, `concurrency` in flight, from a release-built client.
    pub(super) status_writes_per_second: f64,
    pub(super) concurrency: usize,
    /// The server's CPU seconds during those writes.
    pub(super) server_cpu_seconds: f64,
    /// (RSS after creating the N objects − RSS at start) ÷ N.
    pub(super) bytes_per_object: f64,
    pub(super) creates_per_second: f64,
}

/// Everything at one scale.
#[derive(Debug, serde::Serialize)]
pub(super) struct Scale {
    pub(super) n: usize,
    pub(super) churn_rate: f64,
    pub(super) churn_seconds: u64,
    pub(super) results: Vec<Measured>,
    pub(super) skipped: Vec<Skipped>,
    pub(super) server: Option<ServerAlone>,
}
