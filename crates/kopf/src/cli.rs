//! The command line of operator binaries and of the `kopf` command: one definition for both.
//!
//! ```text
//! <operator> run [-n NS]... [-A] [--fake [--apply FILE]... [--simulate-pods]] [--liveness URL] [--metrics ADDR] ...
//! <operator> rbac [--apply FILE]... [--cluster]     # the RBAC manifests it needs
//! <operator> rbac --verify [--as USER] [-n NS]...    # are they granted on the cluster?
//! <operator> crd [-o yaml|json]                      # the CRDs of its own resources
//! <operator> olm --image IMAGE [--dir bundle]         # an OLM bundle
//! <operator> fake-apiserver [--port N] [--tls] [--kubeconfig PATH] [--apply FILE]... [--simulate-pods]
//! <operator> --version                               # my-operator 1.2.0 (kopf-rs 0.1.0)
//! ```
//!
//! Every option can also come from an environment variable `KOPF_<COMMAND>_<OPTION>`
//! (`KOPF_RUN_NAMESPACE=a,b`, `KOPF_RUN_LIVENESS=...`, `KOPF_FAKE_APISERVER_PORT=...`); the
//! command line wins.
//!
//! Numeric values are checked when they are parsed: a value out of range (a negative or
//! infinite duration, `--burst 0`, a port above 65535...) is refused with a message that
//! names the option and what it accepts.
//!
//! # The operator's name, version and description
//!
//! `--version` and `--help` show the operator's own name, version and description, taken
//! from its Cargo package by [`kopf::about!()`](crate::about) (the macro reads
//! `CARGO_PKG_NAME`, `CARGO_PKG_VERSION` and `CARGO_PKG_DESCRIPTION` where it is written,
//! in the operator's crate), with the version of kopf-rs after them:
//!
//! ```no_run
//! # async fn demo() -> Result<(), kopf::Error> {
//! // With the attribute macros: `kopf::run!()` is `kopf::run()` with the crate's about.
//! kopf::run!().await
//! # }
//! ```
//!
//! ```no_run
//! # async fn demo() -> Result<(), kopf::Error> {
//! // With the builder:
//! kopf::Operator::new()
//!     .about(kopf::about!())            // or About::new("my-operator", "1.2.0")
//!     .main()
//!     .await
//! # }
//! ```
//!
//! Without it ([`kopf::run()`](crate::run()), [`Operator::main`](crate::Operator::main)
//! alone, [`Cli::parse_args`]), the program is named after its binary and only kopf-rs's
//! version is shown (`my-operator (kopf-rs 0.1.0)`): a function of kopf cannot see the
//! version of the crate that calls it, a macro can.
//!
//! # Why the command line is defined here, not in `kopf-cli`
//!
//! The `kopf` command's crate, `kopf-cli`, is small, but this module stays in the `kopf`
//! crate: every operator binary parses this same command line in
//! [`Operator::main`](crate::Operator::main), so the builder needs [`Cli`], [`RunArgs`] and
//! [`About`], while `kopf-cli` depends on `kopf` (for these same types and the probe
//! constants); moving the definition there would make the two crates depend on each other.
//! `kopf-cli` uses it as `kopf::cli`; the module uses nothing else of this crate, so it is a
//! leaf of the crate's module graph (what the commands say about their embedded API servers
//! is in `embedded.rs`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

mod parse;
mod replicas;
mod storage;
mod tools;

use parse::*;
pub use storage::Storage;
pub use tools::{CrdArgs, CrdOutput, OlmArgs, RbacArgs, UninstallArgs};

// What the commands do, for the `kopf` command and tools that run them in-process.
pub use crate::fake::fake_apiserver;
pub use crate::olm::validate_bundle;
pub use crate::rbac::{RbacCheck, RbacReport};

/// The version of kopf-rs the operator is built with.
pub const KOPF_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The hidden command that every kopf-rs operator answers with one line starting with
/// [`PROBE_ANSWER`]: `kopf run` and `kopf rbac` ask it before they run a binary, to refuse
/// one that is not a kopf-rs operator.
pub const PROBE_COMMAND: &str = "__kopf-probe";

/// The start of the answer to [`PROBE_COMMAND`]; the `--version` line follows
/// (`kopf-rs operator: my-operator 1.2.0 (kopf-rs 0.1.0)`).
pub const PROBE_ANSWER: &str = "kopf-rs operator: ";

/// What an operator's `--version` and `--help` say about it: its name, version and
/// description. [`kopf::about!()`](crate::about) takes them from the operator's Cargo
/// package; [`About::new`] sets them by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct About {
    /// The operator's name (`my-operator`).
    pub name: String,
    /// Its version (`1.2.0`), if known.
    pub version: Option<String>,
    /// One or more sentences for `--help` (default: "A Kubernetes operator built with
    /// kopf-rs.").
    pub description: Option<String>,
}

/// The description of operators that give none.
const DEFAULT_DESCRIPTION: &str = "A Kubernetes operator built with kopf-rs.";

impl About {
    /// An operator's name and version: `About::new("my-operator", "1.2.0")`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        let version = version.into();
        About {
            name: name.into(),
            version: (!version.trim().is_empty()).then_some(version),
            description: None,
        }
    }

    /// The text of `--help` (an empty text keeps the default).
    pub fn description(mut self, text: impl Into<String>) -> Self {
        let text = text.into();
        self.description = (!text.trim().is_empty()).then_some(text);
        self
    }

    /// What is known without help from the operator's crate: the binary's file name, no
    /// version, the default description.
    pub fn from_binary() -> Self {
        About {
            name: binary_name(),
            version: None,
            description: None,
        }
    }

    /// What [`kopf::about!()`](crate::about) expands to: the Cargo package's values, or
    /// what [`from_binary`](Self::from_binary) knows when the crate is not built by Cargo.
    #[doc(hidden)]
    pub fn from_cargo(
        name: Option<&str>,
        version: Option<&str>,
        description: Option<&str>,
    ) -> Self {
        let mut about = match name {
            Some(name) if !name.is_empty() => About::new(name, version.unwrap_or_default()),
            _ => About::from_binary(),
        };
        if let Some(text) = description {
            about = about.description(text);
        }
        about
    }

    /// The `--version` text after the name: `1.2.0 (kopf-rs 0.1.0)`, or `(kopf-rs 0.1.0)`
    /// when the version is not known.
    pub fn version_text(&self) -> String {
        match &self.version {
            Some(v) => format!("{v} (kopf-rs {KOPF_VERSION})"),
            None => format!("(kopf-rs {KOPF_VERSION})"),
        }
    }

    /// The line that answers [`PROBE_COMMAND`].
    pub fn probe_answer(&self) -> String {
        format!("{PROBE_ANSWER}{} {}", self.name, self.version_text())
    }
}

impl Default for About {
    fn default() -> Self {
        About::from_binary()
    }
}

/// The operator's name, version and description from its Cargo package, as an
/// [`About`](crate::cli::About): `Operator::new().about(kopf::about!())`. It must be written
/// in the operator's crate (it reads the `CARGO_PKG_*` variables of the crate it is
/// expanded in). See [`kopf::run!()`](crate::run!) for the attribute macros.
#[macro_export]
macro_rules! about {
    () => {
        $crate::cli::About::from_cargo(
            ::core::option_env!("CARGO_PKG_NAME"),
            ::core::option_env!("CARGO_PKG_VERSION"),
            ::core::option_env!("CARGO_PKG_DESCRIPTION"),
        )
    };
}

/// [`kopf::run()`](crate::run()) with the operator's name, version and description from its
/// Cargo package ([`kopf::about!()`](crate::about)): `--version` prints
/// `my-operator 1.2.0 (kopf-rs 0.1.0)`. Runs the handlers registered with the attribute
/// macros until SIGINT/SIGTERM.
///
/// ```no_run
/// #[tokio::main]
/// async fn main() -> Result<(), kopf::Error> {
///     kopf::run!().await
/// }
/// ```
#[macro_export]
macro_rules! run {
    () => {
        $crate::Operator::from_registry()
            .about($crate::about!())
            .main()
    };
}

/// The file name of the running binary (`operator` if there is none).
fn binary_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            PathBuf::from(a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "operator".into())
}

/// Where `run --fake` writes its kubeconfig unless told otherwise: a directory of its own
/// per process in the system's temporary directory (`/tmp/kopf-fake-my-operator-4242/kubeconfig`),
/// so that several operators can run side by side; it is removed when the operator exits.
pub fn default_fake_kubeconfig() -> PathBuf {
    std::env::temp_dir()
        .join(format!(
            "kopf-fake-{}-{}",
            binary_name(),
            std::process::id()
        ))
        .join("kubeconfig")
}

/// The command line every kopf-rs operator binary accepts.
///
/// Parsed with clap's own `Cli::parse()`, the program is called `operator` and its version
/// is kopf-rs's: [`Cli::parse_args_for`] names it.
#[derive(Debug, Parser)]
#[command(
    name = "operator",
    version = concat!("(kopf-rs ", env!("CARGO_PKG_VERSION"), ")"),
    about = DEFAULT_DESCRIPTION,
    long_about = None
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process' arguments, naming the program after its binary in the help and
    /// errors (clap's usual help and exit code 2 on bad input). `--version` shows kopf-rs's
    /// version only: [`parse_args_for`](Self::parse_args_for) with
    /// [`kopf::about!()`](crate::about) shows the operator's.
    pub fn parse_args() -> Cli {
        Cli::parse_args_for(&About::from_binary())
    }

    /// Parses the process' arguments for this operator: its name, version and description
    /// in `--version` and `--help`.
    pub fn parse_args_for(about: &About) -> Cli {
        Cli::try_parse_for(about, std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// Parses these arguments (the first is the program) for this operator; the error
    /// prints clap's usual message, or the help or version that was asked for.
    pub fn try_parse_for<I, T>(about: &About, args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = Cli::command_for(about).try_get_matches_from(args)?;
        Cli::from_arg_matches(&matches)
    }

    /// The clap command of this operator: [`Cli`] with its name, version and description.
    /// The usage lines name the binary that runs.
    pub fn command_for(about: &About) -> clap::Command {
        let description = about
            .description
            .clone()
            .unwrap_or_else(|| DEFAULT_DESCRIPTION.into());
        // clap wants 'static names and versions: a few bytes, once per parse (once per
        // process).
        let name: &'static str = Box::leak(about.name.clone().into_boxed_str());
        let version: &'static str = Box::leak(about.version_text().into_boxed_str());
        Cli::command()
            .name(name)
            .bin_name(binary_name())
            .version(version)
            .about(description)
    }

    /// The options of `run`, if that is the command.
    pub fn run_args(&self) -> Option<&RunArgs> {
        match &self.command {
            Command::Run(args) => Some(args),
            _ => None,
        }
    }
}

/// Subcommands.
// Parsed once per process: the size of `RunArgs` does not matter, and boxing it would make
// every `Command::Run(args)` pattern of the users' code more awkward.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator until SIGINT/SIGTERM.
    Run(RunArgs),
    /// Print the RBAC manifests (ServiceAccount, ClusterRole, ClusterRoleBinding) that the
    /// operator's handlers need.
    Rbac(RbacArgs),
    /// Print the CustomResourceDefinitions of the operator's own resources (declared with
    /// `Operator::crd::<T>()`).
    Crd(CrdArgs),
    /// Write an Operator Lifecycle Manager bundle: the ClusterServiceVersion (the image's
    /// deployment, the RBAC of `rbac`, the owned CRDs), the CRDs, metadata/annotations.yaml.
    Olm(OlmArgs),
    /// Take the operator's state off every object it handles: its finalizer, its
    /// annotations (progress, diff-base) and its status storage, so that the operator can
    /// be removed and its objects, namespaces and CRDs deleted without getting stuck. Stop
    /// the operator first (it would put its finalizer back). Prints what it changed.
    Uninstall(UninstallArgs),
    /// Run the in-memory Kubernetes API server until SIGINT/SIGTERM.
    FakeApiserver(FakeApiserverArgs),
    /// Print [`About::probe_answer`] and exit: how `kopf run` and `kopf rbac` tell a kopf-rs
    /// operator from other binaries (hidden from the help).
    #[command(name = PROBE_COMMAND, hide = true)]
    Probe,
}

/// Log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Message only, with the object's namespace/name.
    Plain,
    /// Timestamps, levels and targets.
    Full,
    /// One JSON object per line.
    Json,
}

/// Options of `run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Serve only these namespaces (repeatable): names or globs (`team-*`), with `!`
    /// exclusions after a comma (`team-*,!team-legacy`); `a,b` is `-n a -n b`. Default: all
    /// namespaces.
    #[arg(short = 'n', long = "namespace", env = "KOPF_RUN_NAMESPACE")]
    pub namespaces: Vec<String>,
    /// Serve all namespaces (the default when no namespace is given).
    #[arg(
        short = 'A',
        long,
        env = "KOPF_RUN_ALL_NAMESPACES",
        conflicts_with = "namespaces"
    )]
    pub all_namespaces: bool,
    /// List and watch only the objects with these labels, for every resource (a label
    /// selector: `app=web,tier in (a,b),!legacy`); combined (AND) with the selectors
    /// derived from the handlers' label filters.
    #[arg(short = 'l', long, env = "KOPF_RUN_LABEL_SELECTOR", value_name = "SELECTOR", value_parser = parse_label_selector)]
    pub label_selector: Option<String>,
    /// List and watch only the objects with these fields, for every resource (a field
    /// selector: `metadata.name!=skip`).
    #[arg(long, env = "KOPF_RUN_FIELD_SELECTOR", value_name = "SELECTOR", value_parser = parse_field_selector)]
    pub field_selector: Option<String>,
    /// Run without peering, even when the cluster has the peering resources (by default an
    /// operator joins the peering `default` when the cluster has them, and runs alone when
    /// it has not).
    #[arg(long, env = "KOPF_RUN_STANDALONE", conflicts_with = "peering")]
    pub standalone: bool,
    /// Join this peering, and stay paused until it exists (`ClusterKopfPeering` NAME with
    /// `-A`, `KopfPeering` NAME in the served namespace with `-n`).
    #[arg(long, short = 'P', env = "KOPF_RUN_PEERING", value_name = "NAME")]
    pub peering: Option<String>,
    /// This operator's priority in the peering: it pauses while a peer with a higher one is
    /// alive (default 0; 666 with --dev).
    #[arg(
        long,
        env = "KOPF_RUN_PRIORITY",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub priority: Option<i64>,
    /// Development mode: priority 666 in the peering, so that the operators deployed in the
    /// cluster pause while this one runs.
    #[arg(long, env = "KOPF_RUN_DEV")]
    pub dev: bool,
    /// Several replicas, one acting: leader election with a Lease (default name:
    /// OPERATOR-leader, in $POD_NAMESPACE or the kubeconfig's namespace). The replicas that do
    /// not lead stand by with their watches open, and take over when the leader stops or
    /// dies. Same-priority peers do not pause each other then.
    #[arg(long, env = "KOPF_RUN_LEADER_ELECTION", value_name = "LEASE", num_args = 0..=1, default_missing_value = "")]
    pub leader_election: Option<String>,
    /// Several replicas, each serving a part of the objects: the objects' uids are hashed
    /// into N ranges, one Lease per range (OPERATOR-shards-N-I), each held by one replica at
    /// a time; the replicas share the ranges evenly and take over the ranges of a replica
    /// that stops or dies. Same-priority peers do not pause each other then.
    #[arg(long, env = "KOPF_RUN_SHARDS", value_name = "N", conflicts_with = "leader_election", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub shards: Option<u32>,
    /// The namespace of the leader-election or shard Leases.
    #[arg(
        long,
        env = "KOPF_RUN_LEADER_ELECTION_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    pub leader_election_namespace: Option<String>,
    /// How long a lease holds without renewal, in whole seconds [default: 15].
    #[arg(long, env = "KOPF_RUN_LEASE_DURATION", value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub lease_duration: Option<Duration>,
    /// How long the leader tries to renew before it stands by [default: 10].
    #[arg(long, env = "KOPF_RUN_RENEW_DEADLINE", value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub renew_deadline: Option<Duration>,
    /// The time between attempts to acquire or renew the lease [default: 2].
    #[arg(long, env = "KOPF_RUN_RETRY_PERIOD", value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub retry_period: Option<Duration>,
    /// Keep the lease at exit (by default it is released once the work in flight is done,
    /// so that a standby takes over within a retry period).
    #[arg(
        long,
        env = "KOPF_RUN_NO_RELEASE_ON_CANCEL",
        requires = "leader_election"
    )]
    pub no_release_on_cancel: bool,
    /// More logs (debug level for kopf-rs).
    #[arg(long, short = 'v', env = "KOPF_RUN_VERBOSE")]
    pub verbose: bool,
    /// Even more logs (debug level for everything).
    #[arg(long, short = 'd', env = "KOPF_RUN_DEBUG")]
    pub debug: bool,
    /// Fewer logs (warnings and errors only).
    #[arg(long, short = 'q', env = "KOPF_RUN_QUIET", conflicts_with_all = ["verbose", "debug"])]
    pub quiet: bool,
    /// Log format.
    #[arg(long, value_enum, default_value = "full", env = "KOPF_RUN_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Prefix text log lines about an object with `[namespace/name]` (default: on for
    /// plain/full, off for json).
    #[arg(long, env = "KOPF_RUN_LOG_PREFIX", overrides_with = "no_log_prefix")]
    pub log_prefix: bool,
    /// No `[namespace/name]` prefix.
    #[arg(long, env = "KOPF_RUN_NO_LOG_PREFIX", overrides_with = "log_prefix")]
    pub no_log_prefix: bool,
    /// The key of the object reference in JSON log lines.
    #[arg(
        long,
        env = "KOPF_RUN_LOG_REFKEY",
        default_value = "object",
        value_name = "KEY"
    )]
    pub log_refkey: String,
    /// Run against an embedded in-memory Kubernetes API server instead of a cluster.
    #[arg(long, env = "KOPF_RUN_FAKE")]
    pub fake: bool,
    /// With --fake: where to write a kubeconfig for kubectl (default: a directory of this
    /// process in the system's temporary directory, kopf-fake-BINARY-PID/kubeconfig,
    /// removed at exit; the path is logged at start).
    #[arg(
        long,
        env = "KOPF_RUN_FAKE_KUBECONFIG",
        value_name = "PATH",
        default_value_os_t = default_fake_kubeconfig(),
        hide_default_value = true,
        requires = "fake"
    )]
    pub fake_kubeconfig: PathBuf,
    /// With --fake: serve HTTPS with a CA generated at start, written into the kubeconfig
    /// (as a cluster's API server does; plain HTTP otherwise).
    #[arg(long, env = "KOPF_RUN_FAKE_TLS", requires = "fake")]
    pub fake_tls: bool,
    /// With --fake: simulate the scheduler and the kubelets for Pods, as `fake-apiserver
    /// --simulate-pods` does (Pods become Running; `echo` scripts print into their logs).
    #[arg(long, env = "KOPF_RUN_SIMULATE_PODS", requires = "fake")]
    pub simulate_pods: bool,
    /// With --fake: manifests to apply at start (CRDs first). Repeatable.
    #[arg(
        long = "apply",
        env = "KOPF_RUN_APPLY",
        value_delimiter = ',',
        value_name = "FILE",
        requires = "fake"
    )]
    pub apply: Vec<PathBuf>,
    /// Serve the probe handlers' results as JSON at this URL (e.g.
    /// http://0.0.0.0:8080/healthz); it answers 503 when a watch stream is dead.
    #[arg(long, env = "KOPF_RUN_LIVENESS", value_name = "URL", value_parser = parse_liveness)]
    pub liveness: Option<Liveness>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 0.0.0.0:9090).
    #[arg(long, env = "KOPF_RUN_METRICS", value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// At most this many objects of a resource are processed at the same time, changed
    /// objects first (0: the default bound: 64 at a time, a cycle slower than a second
    /// giving its place back, at most 448 such; at most 1000000).
    #[arg(long, env = "KOPF_RUN_WORKER_LIMIT", value_name = "N", default_value_t = 0, value_parser = parse_worker_limit, allow_negative_numbers = true)]
    pub worker_limit: usize,
    /// Requests per second to the API server, on average (0: no limit).
    #[arg(long, env = "KOPF_RUN_QPS", default_value_t = 100.0, value_parser = parse_qps, allow_negative_numbers = true)]
    pub qps: f64,
    /// Requests sent at once before `--qps` applies (at least 1).
    #[arg(long, env = "KOPF_RUN_BURST", value_name = "N", default_value_t = 1000, value_parser = parse_burst, allow_negative_numbers = true)]
    pub burst: u32,
    /// A request the API server has not answered in this long (seconds) is given up and
    /// sent again (0: no limit); a warning is logged after 10 s without an answer.
    #[arg(long, env = "KOPF_RUN_REQUEST_TIMEOUT", value_name = "SECONDS", default_value = "30", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub request_timeout: Duration,
    /// On SIGINT/SIGTERM, running handlers get this long to finish (seconds); then they
    /// are cancelled, and their progress is stored for the next start.
    #[arg(long, env = "KOPF_RUN_GRACE_PERIOD", value_name = "SECONDS", default_value = "20", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub grace_period: Duration,
    /// The process exits at the latest this long after SIGINT/SIGTERM (seconds), whatever
    /// is still running; a second signal exits at once.
    #[arg(long, env = "KOPF_RUN_SHUTDOWN_TIMEOUT", value_name = "SECONDS", default_value = "28", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub shutdown_timeout: Duration,
    /// The webhook server listens on this address (default: the operator's setting, all
    /// interfaces).
    #[arg(long, env = "KOPF_RUN_WEBHOOK_ADDR", value_name = "IP")]
    pub webhook_addr: Option<std::net::IpAddr>,
    /// The webhook server's port (default: the operator's setting, 9443; 0 picks a free one).
    #[arg(long, env = "KOPF_RUN_WEBHOOK_PORT", value_name = "PORT", value_parser = parse_port, allow_negative_numbers = true)]
    pub webhook_port: Option<u16>,
    /// The host name of the webhook URLs the API server calls (also in the generated
    /// certificate).
    #[arg(long, env = "KOPF_RUN_WEBHOOK_HOST", value_name = "HOST")]
    pub webhook_host: Option<String>,
    /// The webhook server's certificate (PEM; reloaded when it changes). Without it, a CA
    /// and a certificate are generated at start.
    #[arg(
        long,
        env = "KOPF_RUN_WEBHOOK_CERT",
        value_name = "FILE",
        requires = "webhook_key"
    )]
    pub webhook_cert: Option<PathBuf>,
    /// The key of `--webhook-cert` (PEM).
    #[arg(
        long,
        env = "KOPF_RUN_WEBHOOK_KEY",
        value_name = "FILE",
        requires = "webhook_cert"
    )]
    pub webhook_key: Option<PathBuf>,
    /// The CA bundle (PEM) the API server must trust (default: the certificate itself).
    #[arg(long, env = "KOPF_RUN_WEBHOOK_CA", value_name = "FILE")]
    pub webhook_ca: Option<PathBuf>,
    /// Create and keep the webhook configurations of this name (overrides the operator's
    /// setting).
    #[arg(long, env = "KOPF_RUN_WEBHOOK_MANAGED", value_name = "NAME")]
    pub webhook_managed: Option<String>,
    /// Where the diff-base is stored: `annotations` (Kopf's default) or `status`
    /// (`status.kopf.last-handled-configuration`: results and diff-base in one /status PATCH;
    /// progress goes to the status too unless --progress-storage says otherwise).
    #[arg(
        long,
        value_enum,
        env = "KOPF_RUN_DIFF_BASE_STORAGE",
        value_name = "WHERE"
    )]
    pub diff_base_storage: Option<Storage>,
    /// Where progress records are stored: `annotations` (Kopf's default) or `status`
    /// (`status.kopf.progress`, Kopf's StatusProgressStorage).
    #[arg(
        long,
        value_enum,
        env = "KOPF_RUN_PROGRESS_STORAGE",
        value_name = "WHERE"
    )]
    pub progress_storage: Option<Storage>,
}

/// Where `--liveness` serves: the address to bind and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    /// The address to listen on.
    pub addr: std::net::SocketAddr,
    /// The path of the endpoint (e.g. `/healthz`).
    pub path: String,
}

/// Options of `fake-apiserver`.
#[derive(Debug, Clone, clap::Args)]
pub struct FakeApiserverArgs {
    /// TCP port on 127.0.0.1 (0 picks a free port).
    #[arg(long, env = "KOPF_FAKE_APISERVER_PORT", default_value_t = 0, value_parser = parse_port, allow_negative_numbers = true)]
    pub port: u16,
    /// Where to write a kubeconfig pointing at the server.
    #[arg(long, env = "KOPF_FAKE_APISERVER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// YAML manifests to store at start (multi-document; CRDs are applied first). Repeatable.
    #[arg(
        long = "apply",
        env = "KOPF_FAKE_APISERVER_APPLY",
        value_delimiter = ',',
        value_name = "FILE"
    )]
    pub apply: Vec<PathBuf>,
    /// The Kubernetes version reported by /version, as MAJOR.MINOR. The minor selects the
    /// kubectl the dispatcher runs; 1.31 talks JSON for every command.
    #[arg(long, env = "KOPF_FAKE_APISERVER_KUBE_VERSION", default_value = "1.31", value_parser = parse_version)]
    pub kube_version: (String, String),
    /// Changes retained for watches and consistent lists (older resourceVersions get 410).
    #[arg(
        long,
        env = "KOPF_FAKE_APISERVER_HISTORY_LIMIT",
        value_name = "N",
        default_value_t = 100_000,
        value_parser = parse_history_limit,
        allow_negative_numbers = true
    )]
    pub history_limit: usize,
    /// Seconds between watch bookmarks.
    #[arg(
        long,
        env = "KOPF_FAKE_APISERVER_BOOKMARK_INTERVAL",
        value_name = "SECONDS",
        default_value_t = 60,
        value_parser = parse_bookmark_interval,
        allow_negative_numbers = true
    )]
    pub bookmark_interval: u64,
    /// Milliseconds between CRD creation and its Established condition.
    #[arg(
        long,
        env = "KOPF_FAKE_APISERVER_CRD_ESTABLISH_DELAY_MS",
        value_name = "MILLISECONDS",
        default_value_t = 0,
        value_parser = parse_delay_ms,
        allow_negative_numbers = true
    )]
    pub crd_establish_delay_ms: u64,
    /// Serve HTTPS with a CA generated at start, written into the kubeconfig as
    /// certificate-authority-data (as a cluster's API server does), for clients that verify
    /// the server. Without it: plain HTTP, and a TLS handshake on the same port is answered
    /// with a certificate nobody trusts (enough for Python Kopf's cluster detection in
    /// `kopf.WebhookAutoServer`, which reads the certificate whatever the URL's scheme).
    #[arg(long, env = "KOPF_FAKE_APISERVER_TLS")]
    pub tls: bool,
    /// Simulate the scheduler and the kubelets for Pods, in kwok's manner of stages: a new
    /// Pod is bound to the Node `kopf-fake-node` (created at start) after 100 ms, and is
    /// Running and Ready 200 ms later (IPs, conditions, containerStatuses); a container whose
    /// command is `echo` or `sh -c` with `echo` and `sleep` prints those lines into its log;
    /// a Job's Pod (restartPolicy Never or OnFailure) then ends Succeeded after
    /// --pod-job-run-ms (a Pod of printing containers, when they end); a deleted
    /// Pod's containers stop at once, and it goes after its grace period (at most 1 s). Each
    /// stage is a write that watchers see. Off by default: Pods stay Pending.
    #[arg(long, env = "KOPF_FAKE_APISERVER_SIMULATE_PODS")]
    pub simulate_pods: bool,
    /// With --simulate-pods: milliseconds a Job's Pod runs before it succeeds.
    #[arg(
        long,
        env = "KOPF_FAKE_APISERVER_POD_JOB_RUN_MS",
        value_name = "MILLISECONDS",
        default_value_t = 1000,
        value_parser = parse_delay_ms,
        allow_negative_numbers = true
    )]
    pub pod_job_run_ms: u64,
}

fn parse_version(s: &str) -> Result<(String, String), String> {
    let (major, minor) = s
        .split_once('.')
        .ok_or_else(|| format!("expected MAJOR.MINOR such as 1.31, got {s:?}"))?;
    if major.parse::<u32>().is_err() || minor.parse::<u32>().is_err() {
        return Err(format!(
            "expected numbers in MAJOR.MINOR such as 1.31, got {s:?}"
        ));
    }
    Ok((major.to_string(), minor.to_string()))
}

impl RunArgs {
    /// The namespace patterns of `-n`, as the operator serves them: a value with a `!`
    /// exclusion is one pattern (`team-*,!team-legacy`: the team namespaces but one);
    /// otherwise each of its comma-separated names is a pattern of its own (`a,b`: one watch
    /// per exact namespace, as with `-n a -n b`).
    pub fn namespace_patterns(&self) -> Vec<String> {
        self.namespaces
            .iter()
            .flat_map(|value| {
                if value.contains('!') {
                    vec![value.clone()]
                } else {
                    value
                        .split(',')
                        .map(str::trim)
                        .filter(|name| !name.is_empty())
                        .map(str::to_string)
                        .collect()
                }
            })
            .collect()
    }

    /// Whether text log lines get the `[namespace/name]` prefix.
    pub fn log_prefix(&self) -> bool {
        if self.no_log_prefix {
            false
        } else {
            self.log_prefix || self.log_format != LogFormat::Json
        }
    }

    /// With `--fake` and no `--apply`: apply these manifests (examples use their CRD and
    /// sample object).
    pub fn with_default_manifests(mut self, files: &[PathBuf]) -> Self {
        if self.fake && self.apply.is_empty() {
            self.apply = files.to_vec();
        }
        self
    }
}

/// The manifests of the repository's examples: `examples/crd.yaml` and `examples/obj.yaml`.
pub fn example_manifests() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    vec![dir.join("crd.yaml"), dir.join("obj.yaml")]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut all = vec!["operator"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map(|c| match c.command {
            Command::Run(a) => a,
            other => panic!("not run: {other:?}"),
        })
    }

    #[test]
    fn the_pod_simulator_is_off_unless_asked_for() {
        let fake = |args: &[&str]| {
            let mut all = vec!["operator", "fake-apiserver"];
            all.extend_from_slice(args);
            match Cli::try_parse_from(all).expect("parses").command {
                Command::FakeApiserver(a) => a,
                other => panic!("not fake-apiserver: {other:?}"),
            }
        };
        let off = fake(&[]);
        assert!(!off.simulate_pods);
        assert_eq!(off.pod_job_run_ms, 1000);
        let on = fake(&["--simulate-pods", "--pod-job-run-ms", "250"]);
        assert!(on.simulate_pods);
        assert_eq!(on.pod_job_run_ms, 250);
    }

    #[test]
    fn leader_election_options() {
        let of = |args: &[&str]| {
            let mut all = vec!["run"];
            all.extend_from_slice(args);
            parse(&all).expect("parses").leader_election("my-op", None)
        };
        assert_eq!(of(&[]), None, "off by default");
        let plain = of(&["--leader-election"]).expect("on");
        assert_eq!(plain.name, "my-op-leader");
        assert_eq!(
            (
                plain.lease_duration,
                plain.renew_deadline,
                plain.retry_period
            ),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert!(plain.release_on_cancel);
        let named = of(&[
            "--leader-election=lead",
            "--leader-election-namespace",
            "ops",
            "--lease-duration",
            "30",
            "--renew-deadline",
            "20",
            "--retry-period",
            "4",
            "--no-release-on-cancel",
        ])
        .expect("on");
        assert_eq!(named.name, "lead");
        assert_eq!(named.namespace.as_deref(), Some("ops"));
        assert_eq!(named.lease_duration, Duration::from_secs(30));
        assert_eq!(named.retry_period, Duration::from_secs(4));
        assert!(!named.release_on_cancel);
        assert!(
            parse(&["run", "--leader-election", "--shards", "3"]).is_err(),
            "one or the other"
        );
        let given = kopf_peering::LeaderElection::new("coded").timings(
            Duration::from_secs(60),
            Duration::from_secs(40),
            Duration::from_secs(5),
        );
        let args = parse(&["run"]).expect("parses");
        let kept = args.leader_election("my-op", Some(given.clone()));
        assert_eq!(kept, Some(given.clone()), "the code's election, untouched");
        let args = parse(&["run", "--leader-election", "--retry-period", "3"]).expect("parses");
        let merged = args.leader_election("my-op", Some(given)).expect("on");
        assert_eq!(
            (
                merged.name.as_str(),
                merged.lease_duration,
                merged.retry_period
            ),
            ("coded", Duration::from_secs(60), Duration::from_secs(3))
        );
    }

    #[test]
    fn sharding_options() {
        let of = |args: &[&str]| {
            let mut all = vec!["run"];
            all.extend_from_slice(args);
            parse(&all).expect("parses").sharding("my-op", None)
        };
        assert_eq!(of(&[]), None, "off by default");
        let three = of(&["--shards", "3", "--retry-period", "0.5"]).expect("on");
        assert_eq!((three.group.as_str(), three.count), ("my-op-shards", 3));
        assert_eq!(three.retry_period, Duration::from_millis(500));
        assert!(parse(&["run", "--shards", "0"]).is_err());
        assert!(parse(&["run", "--shards", "5000"]).is_err());
    }

    #[test]
    fn peering_options_set_the_peering() {
        use kopf_peering::{PeeringMode, PeeringSettings};
        let of = |args: &[&str]| {
            parse(&[&["run"], args].concat())
                .expect("parses")
                .peering(PeeringSettings::default())
        };
        let plain = of(&[]);
        assert_eq!(
            (plain.mode, plain.priority, plain.namespace.clone()),
            (PeeringMode::Auto, 0, None)
        );
        assert_eq!(of(&["--standalone"]).mode, PeeringMode::Standalone);
        let named = of(&["--peering", "team", "--priority", "-5"]);
        assert_eq!(
            (named.mode, named.name.as_str(), named.priority),
            (PeeringMode::Mandatory, "team", -5)
        );
        assert_eq!(of(&["--dev"]).priority, 666);
        assert_eq!(
            of(&["--dev", "--priority", "7"]).priority,
            7,
            "an explicit priority wins"
        );
        assert_eq!(of(&["-n", "ops"]).namespace.as_deref(), Some("ops"));
        assert_eq!(
            of(&["-n", "team-*"]).namespace,
            None,
            "a pattern: the cluster-wide peering"
        );
        assert_eq!(
            of(&["-n", "a,b"]).namespace,
            None,
            "several: the cluster-wide peering"
        );
        assert!(
            parse(&["run", "--standalone", "--peering", "x"]).is_err(),
            "contradictory"
        );
    }

    #[test]
    fn every_option_has_its_environment_variable() {
        let cli = Cli::command();
        let mut checked = 0;
        for sub in cli.get_subcommands() {
            let prefix = format!("KOPF_{}_", sub.get_name().replace('-', "_").to_uppercase());
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                let env = arg
                    .get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_else(|| {
                        panic!("{} --{id} has no environment variable", sub.get_name())
                    });
                assert!(env.starts_with(&prefix), "{env} starts with {prefix}");
                checked += 1;
            }
        }
        assert!(checked > 25, "{checked} options checked");
    }

    #[test]
    fn liveness_and_durations() {
        let a = parse(&[
            "run",
            "--liveness",
            "http://0.0.0.0:8080/healthz",
            "--grace-period",
            "2.5",
        ])
        .expect("parses");
        let live = a.liveness.expect("set");
        assert_eq!(live.addr, "0.0.0.0:8080".parse().expect("addr"));
        assert_eq!(live.path, "/healthz");
        assert_eq!(a.grace_period, Duration::from_millis(2500));
        assert_eq!(a.shutdown_timeout, Duration::from_secs(28));
        let local = parse_liveness("http://localhost:1234").expect("parses");
        assert_eq!(local.path, "/");
        let err = parse(&["run", "--liveness", "0.0.0.0:8080"]).expect_err("no scheme");
        assert!(err.to_string().contains("http://HOST:PORT/PATH"), "{err}");
        assert!(parse(&["run", "--grace-period", "soon"]).is_err());
        assert!(parse(&["run", "--metrics", "nowhere"]).is_err());
    }

    #[test]
    fn run_flags() {
        let a = parse(&[
            "run",
            "-n",
            "a",
            "--namespace",
            "b",
            "--verbose",
            "--log-format",
            "json",
        ])
        .expect("parses");
        assert_eq!(a.namespaces, vec!["a", "b"]);
        assert_eq!(a.namespace_patterns(), vec!["a", "b"]);
        let p =
            parse(&["run", "-n", "a,b", "-n", "team-*,!team-legacy", "-n", "c"]).expect("parses");
        assert_eq!(
            p.namespace_patterns(),
            vec!["a", "b", "team-*,!team-legacy", "c"],
            "an exclusion stays with its pattern"
        );
        assert!(a.verbose && !a.fake);
        assert_eq!(a.log_format, LogFormat::Json);
        let f = parse(&["run", "--fake", "--apply", "x.yaml"]).expect("parses");
        assert_eq!(f.apply, vec![PathBuf::from("x.yaml")]);
        assert!(!f.fake_tls);
        assert!(
            parse(&["run", "--fake", "--fake-tls"])
                .expect("parses")
                .fake_tls
        );
        assert!(
            parse(&["run", "--fake-tls"]).is_err(),
            "--fake-tls needs --fake"
        );
        assert!(!f.simulate_pods);
        assert!(
            parse(&["run", "--fake", "--simulate-pods"])
                .expect("parses")
                .simulate_pods
        );
        assert!(
            parse(&["run", "--simulate-pods"]).is_err(),
            "--simulate-pods needs --fake"
        );
        let served = |args: &[&str]| {
            let mut all = vec!["operator", "fake-apiserver"];
            all.extend_from_slice(args);
            match Cli::try_parse_from(all).expect("parses").command {
                Command::FakeApiserver(a) => a.tls,
                other => panic!("not fake-apiserver: {other:?}"),
            }
        };
        assert!(served(&["--tls"]) && !served(&[]));
        assert!(
            parse(&["run", "--apply", "x.yaml"]).is_err(),
            "--apply needs --fake"
        );
        assert!(
            parse(&["run", "-A", "-n", "a"]).is_err(),
            "-A conflicts with -n"
        );
        assert!(parse(&["run", "--quiet", "--verbose"]).is_err());
        assert!(parse(&["run"]).expect("parses").log_prefix());
        assert!(
            !parse(&["run", "--no-log-prefix"])
                .expect("parses")
                .log_prefix()
        );
        let j =
            parse(&["run", "--log-format", "json", "--log-refkey", "k8s", "-d"]).expect("parses");
        assert!(!j.log_prefix() && j.debug);
        assert_eq!(j.log_refkey, "k8s");
        assert!(parse(&["run", "--log-format", "xml"]).is_err());
    }

    /// The options with numbers in their values, per command.
    const NUMERIC: &[(&str, &[&str])] = &[
        (
            "run",
            &[
                "qps",
                "burst",
                "worker-limit",
                "grace-period",
                "shutdown-timeout",
                "request-timeout",
                "webhook-port",
                "priority",
                "shards",
                "lease-duration",
                "renew-deadline",
                "retry-period",
            ],
        ),
        (
            "fake-apiserver",
            &[
                "port",
                "kube-version",
                "history-limit",
                "bookmark-interval",
                "crd-establish-delay-ms",
                "pod-job-run-ms",
            ],
        ),
    ];

    #[test]
    fn the_numeric_options_are_all_known() {
        // Options whose values are names, paths, addresses or choices.
        let other = [
            "namespace",
            "log-format",
            "log-refkey",
            "fake-kubeconfig",
            "apply",
            "liveness",
            "metrics",
            "webhook-addr",
            "webhook-host",
            "webhook-cert",
            "webhook-key",
            "webhook-ca",
            "webhook-managed",
            "kubeconfig",
            "name",
            "account-namespace",
            "peering",
            "leader-election",
            "leader-election-namespace",
            "diff-base-storage",
            "label-selector",
            "field-selector",
            "progress-storage",
            "as",
            "as-group",
            "output",
            "image",
            "dir",
            "bundle-version",
            "package",
            "channel",
        ];
        for sub in Cli::command().get_subcommands() {
            let known = NUMERIC
                .iter()
                .find(|(c, _)| *c == sub.get_name())
                .map_or(&[][..], |(_, o)| *o);
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if !arg.get_action().takes_values() || other.contains(&long) {
                    continue;
                }
                assert!(
                    known.contains(&long),
                    "{} --{long} takes a value: add it to NUMERIC (or to the others)",
                    sub.get_name()
                );
            }
        }
    }

    /// What running with the parsed options does with their values: none of it may panic.
    fn use_values(cli: &Cli) {
        let later = |d: Duration| {
            let _ = std::time::Instant::now() + d;
            let _ = tokio::time::Instant::now() + d;
        };
        match &cli.command {
            Command::Run(a) => {
                if let Some(limit) = crate::client::RateLimit::new(a.qps, a.burst) {
                    for _ in 0..3 {
                        later(limit.reserve());
                    }
                }
                for d in [a.grace_period, a.shutdown_timeout, a.request_timeout] {
                    later(d);
                    later(d / 3);
                }
                let _ = tokio::sync::Semaphore::new(a.worker_limit.max(1));
                // Leases: the settings are checked, then their timings waited (with jitter).
                let mut timings = Vec::new();
                if let Some(e) =
                    a.leader_election("op", Some(kopf_peering::LeaderElection::new("x")))
                    && e.validate().is_ok()
                {
                    timings.extend([e.lease_duration, e.renew_deadline, e.retry_period]);
                }
                if let Some(s) = a.sharding("op", Some(kopf_peering::Sharding::new("x", 3)))
                    && s.validate().is_ok()
                {
                    timings.extend([s.lease_duration, s.renew_deadline, s.retry_period]);
                }
                for d in timings {
                    later(d);
                    later(d.mul_f64(1.2));
                }
            }
            Command::FakeApiserver(a) => {
                later(Duration::from_secs(a.bookmark_interval));
                later(Duration::from_millis(a.crd_establish_delay_ms));
                later(Duration::from_millis(a.pod_job_run_ms));
            }
            Command::Rbac(_)
            | Command::Crd(_)
            | Command::Olm(_)
            | Command::Uninstall(_)
            | Command::Probe => {}
        }
    }

    /// Values for numeric options: anything, numbers of every kind, and the usual suspects.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[-+0-9.eE_x ]{0,24}",
            any::<f64>().prop_map(|f| f.to_string()),
            any::<f64>().prop_map(|f| format!("{f:e}")),
            any::<i64>().prop_map(|i| i.to_string()),
            any::<u64>().prop_map(|u| u.to_string()),
            any::<u128>().prop_map(|u| u.to_string()),
            prop::sample::select(vec![
                "NaN",
                "nan",
                "inf",
                "-inf",
                "infinity",
                "+Infinity",
                "-0",
                "0",
                "-0.0",
                "1e-20",
                "1e300",
                "-1e300",
                "-1",
                "",
                " ",
                "1 ",
                "5e-324",
                "1.7976931348623157e308",
                "31536000",
                "31536000.000001",
                "4294967296",
                "65536",
                "18446744073709551616",
                "99999999999999999999999999999999",
                "0x10",
                "1_000",
                "1.31",
                "1.",
                ".5",
                "garbage",
            ])
            .prop_map(String::from),
        ]
    }

    proptest! {
        #[test]
        fn no_value_of_a_numeric_option_panics(
            (command, option) in prop::sample::select(
                NUMERIC
                    .iter()
                    .flat_map(|(c, opts)| opts.iter().map(move |o| (*c, *o)))
                    .collect::<Vec<_>>()
            ),
            value in value(),
        ) {
            let args = ["operator", command, &format!("--{option}={value}")];
            match Cli::try_parse_from(args) {
                Ok(cli) => use_values(&cli),
                Err(e) => {
                    let text = e.to_string();
                    prop_assert!(text.contains(&format!("--{option}")), "{text}");
                }
            }
            // As a separate argument, a value may also be taken for an option of its own.
            let flag = format!("--{option}");
            if let Ok(cli) = Cli::try_parse_from(["operator", command, &flag, &value]) {
                use_values(&cli);
            }
        }

        #[test]
        fn no_rate_limit_or_durations_panic_together(
            qps in value(),
            burst in value(),
            grace in value(),
            timeout in value(),
        ) {
            let args = [
                "operator".to_string(),
                "run".into(),
                format!("--qps={qps}"),
                format!("--burst={burst}"),
                format!("--grace-period={grace}"),
                format!("--request-timeout={timeout}"),
            ];
            if let Ok(cli) = Cli::try_parse_from(args) {
                use_values(&cli);
            }
        }
    }

    #[test]
    fn nonsense_numbers_are_refused_with_what_is_allowed() {
        for (args, expected) in [
            (
                &["run", "--qps", "NaN"][..],
                "--qps <QPS>': expected a number of requests per second ≥ 0",
            ),
            (&["run", "--qps=-1"], "(0 turns the limit off)"),
            (&["run", "--qps", "-1"], "(0 turns the limit off)"),
            (
                &["run", "--grace-period", "-0.5"],
                "--grace-period <SECONDS>'",
            ),
            (&["run", "--qps", "inf"], "--qps"),
            (
                &["run", "--burst", "0"],
                "--burst <N>': expected a whole number from 1 to 4294967295",
            ),
            (
                &["run", "--grace-period=-1"],
                "expected a number of seconds from 0 to 31536000 (a year)",
            ),
            (
                &["run", "--shutdown-timeout", "inf"],
                "--shutdown-timeout <SECONDS>'",
            ),
            (
                &["run", "--request-timeout", "1e300"],
                "--request-timeout <SECONDS>'",
            ),
            (
                &["run", "--worker-limit", "1e3"],
                "from 0 to 1000000 (0: no limit)",
            ),
            (
                &["run", "--webhook-port", "65536"],
                "from 0 to 65535 (0 picks a free port)",
            ),
            (
                &["fake-apiserver", "--bookmark-interval", "0"],
                "from 1 to 31536000 (seconds, up to a year)",
            ),
            (
                &["fake-apiserver", "--history-limit", "0"],
                "--history-limit <N>'",
            ),
            (
                &["fake-apiserver", "--crd-establish-delay-ms=-5"],
                "(milliseconds, up to a year)",
            ),
            (
                &["fake-apiserver", "--pod-job-run-ms=-5"],
                "(milliseconds, up to a year)",
            ),
        ] {
            let mut all = vec!["operator"];
            all.extend_from_slice(args);
            let err = Cli::try_parse_from(all).expect_err("refused").to_string();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
        let a = parse(&["run", "--qps=-0"]).expect("parses");
        assert_eq!(a.qps.to_bits(), 0.0f64.to_bits(), "-0 is 0");
        let a = parse(&[
            "run",
            "--qps",
            "1e-20",
            "--burst",
            "1",
            "--request-timeout",
            "0.5",
        ])
        .expect("parses");
        assert_eq!(a.request_timeout, Duration::from_millis(500));
        let limit = crate::client::RateLimit::new(a.qps, a.burst).expect("on");
        limit.reserve();
        assert!(
            limit.reserve() > Duration::from_secs(3600),
            "a very slow limit, no panic"
        );
        assert_eq!(
            parse(&["run"]).expect("parses").request_timeout,
            Duration::from_secs(30)
        );
    }
}
