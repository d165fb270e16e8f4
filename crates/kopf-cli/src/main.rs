//! The `kopf` command of kopf-rs.
//!
//! It shares its command line with the operator binaries (`kopf::cli`):
//!
//! * `kopf fake-apiserver ...` runs the in-memory Kubernetes API server of `kopf-testing`
//!   standalone, so kubectl, Python clients or any operator can talk to it;
//! * `kopf run OPERATOR [run options]` checks the options and runs the operator binary
//!   (`OPERATOR run [run options]`), as `kopf run handlers.py` does for Kopf;
//! * `kopf rbac OPERATOR [rbac options]` prints the RBAC manifests the operator needs;
//! * `kopf --version`.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kopf::cli::{FakeApiserverArgs, RbacArgs, RunArgs};

/// kopf-rs: Kubernetes operators in a few lines of Rust.
#[derive(Debug, Parser)]
#[command(name = "kopf", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[allow(clippy::large_enum_variant)] // parsed once per process
#[derive(Debug, Subcommand)]
enum Command {
    /// Run an operator binary built with kopf-rs until SIGINT/SIGTERM.
    Run {
        /// The operator binary (e.g. target/release/my-operator).
        operator: PathBuf,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Print the RBAC manifests an operator binary needs.
    Rbac {
        /// The operator binary.
        operator: PathBuf,
        #[command(flatten)]
        args: RbacArgs,
    },
    /// Run the in-memory Kubernetes API server until SIGINT/SIGTERM.
    FakeApiserver(FakeApiserverArgs),
}

/// Runs `operator <command> <the command's options>` in place of this process.
fn delegate(command: &str, operator: &PathBuf) -> anyhow::Result<()> {
    let raw: Vec<OsString> = std::env::args_os().skip(1).collect();
    let at = raw
        .iter()
        .position(|a| a == command)
        .context("the command is not among the arguments")?;
    let mut options = raw[at + 1..].to_vec();
    if let Some(i) = options
        .iter()
        .position(|a| std::path::Path::new(a) == operator.as_path())
    {
        options.remove(i);
    }
    let mut child = std::process::Command::new(operator);
    child.arg(command).args(&options);
    // The operator replaces this process: signals (SIGTERM from Kubernetes) reach it directly.
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let error = child.exec();
        Err(error).with_context(|| format!("cannot start the operator {}", operator.display()))
    }
    #[cfg(not(unix))]
    {
        let status = child
            .status()
            .with_context(|| format!("cannot start the operator {}", operator.display()))?;
        std::process::exit(status.code().unwrap_or(1));
    }
}

#[tokio::main]
async fn main() {
    // One line with its causes, never a backtrace.
    if let Err(e) = run(Cli::parse()).await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { operator, args: _ } => delegate("run", &operator),
        Command::Rbac { operator, args: _ } => delegate("rbac", &operator),
        Command::FakeApiserver(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kopf=info")),
                )
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init();
            kopf::fake_apiserver(args).await?;
            Ok(())
        }
    }
}
