//! The vocabulary of the benchmark: the systems, the plan of a run, and what one system did.

use std::collections::BTreeMap;
use std::time::Duration;

/// The User-Agent of the harness's own requests (left out of the operators' counts).
pub(super) const DRIVER: &str = "kopf-bench-driver";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum System {
    /// kopf-rs: the `minimal` example.
    KopfRs,
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
            System::KopfRsDelete => "kopf-rs-delete",
            System::KopfRsReconcile => "kopf-rs-reconcile",
            System::KopfRsSharded2 => "kopf-rs-sharded-2",
            System::KopfRsSharded3 => "kopf-rs-sharded-3",
            System::Kopf => "kopf",
            System::KubeRs => "kube-rs",
            System::Limit => "limit",
            System::LimitStatus => "limit-status",
        }
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
}
