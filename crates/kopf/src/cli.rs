//! The command line of operator binaries: `<operator> run [-n NS]... [-A] [--fake] ...`.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// The command line every kopf-rs operator binary accepts.
#[derive(Debug, Parser)]
#[command(version, about = "A Kubernetes operator built with kopf-rs.")]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator until SIGINT/SIGTERM.
    Run(RunArgs),
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
    /// Serve only these namespaces (repeatable). Default: all namespaces.
    #[arg(
        short = 'n',
        long = "namespace",
        env = "KOPF_RUN_NAMESPACE",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,
    /// Serve all namespaces (the default when no namespace is given).
    #[arg(short = 'A', long, conflicts_with = "namespaces")]
    pub all_namespaces: bool,
    /// Run without peering (peering is not implemented yet: always standalone).
    #[arg(long, env = "KOPF_RUN_STANDALONE")]
    pub standalone: bool,
    /// More logs (debug level for kopf-rs).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Even more logs (debug level for everything).
    #[arg(long, short = 'd')]
    pub debug: bool,
    /// Fewer logs (warnings and errors only).
    #[arg(long, short = 'q', conflicts_with_all = ["verbose", "debug"])]
    pub quiet: bool,
    /// Log format.
    #[arg(long, value_enum, default_value = "full", env = "KOPF_RUN_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Prefix text log lines about an object with `[namespace/name]` (default: on for
    /// plain/full, off for json).
    #[arg(long, overrides_with = "no_log_prefix")]
    pub log_prefix: bool,
    /// No `[namespace/name]` prefix.
    #[arg(long, overrides_with = "log_prefix")]
    pub no_log_prefix: bool,
    /// The key of the object reference in JSON log lines.
    #[arg(long, default_value = "object", value_name = "KEY")]
    pub log_refkey: String,
    /// Run against an embedded in-memory Kubernetes API server instead of a cluster.
    #[arg(long)]
    pub fake: bool,
    /// With --fake: where to write a kubeconfig for kubectl.
    #[arg(long, default_value = "/tmp/kopf-fake/kubeconfig", requires = "fake")]
    pub fake_kubeconfig: PathBuf,
    /// With --fake: manifests to apply at start (CRDs first). Repeatable.
    #[arg(long = "apply", value_name = "FILE", requires = "fake")]
    pub apply: Vec<PathBuf>,
}

impl RunArgs {
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
    use super::*;

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut all = vec!["operator"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map(|c| match c.command {
            Command::Run(a) => a,
        })
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
        assert!(a.verbose && !a.fake);
        assert_eq!(a.log_format, LogFormat::Json);
        let f = parse(&["run", "--fake", "--apply", "x.yaml"]).expect("parses");
        assert_eq!(f.apply, vec![PathBuf::from("x.yaml")]);
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
}
