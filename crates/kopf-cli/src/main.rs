//! The `kopf` command of kopf-rs.
//!
//! It shares its command line with the operator binaries (`kopf::cli`):
//!
//! * `kopf run OPERATOR [run options]` finds the operator (a binary, a cargo package or a
//!   cargo project directory, built with `cargo build` first), checks that it is a kopf-rs
//!   operator, and runs `OPERATOR run [run options]` in place of itself, as `kopf run
//!   handlers.py` does for Kopf;
//! * `kopf rbac OPERATOR [rbac options]` prints the RBAC manifests the operator needs
//!   (`OPERATOR rbac [rbac options]`; `--verify`: are they granted?); `kopf crd OPERATOR`
//!   and `kopf olm OPERATOR --image ...` likewise print its CRDs and write its OLM bundle;
//! * `kopf fake-apiserver ...` runs the in-memory Kubernetes API server of `kopf-testing`
//!   standalone, so kubectl, Python clients or any operator can talk to it;
//! * `kopf freeze`, `kopf resume`, `kopf peers`: Kopf's peering commands (pause the
//!   operators of a peering for a while, end that, list the peers);
//! * `kopf --version`.

mod peering;
mod target;

use std::ffi::{OsStr, OsString};

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use kopf::cli::{CrdArgs, FakeApiserverArgs, OlmArgs, RbacArgs, RunArgs};

/// The operator argument of `run` and `rbac`.
const OPERATOR_HELP: &str = "The operator: the path of its binary (target/release/my-operator), the name of a cargo package of the workspace here (my-operator) or the directory of a cargo project (./my-operator), both built with `cargo build` first, or a program on PATH. It must be built with kopf-rs.";

/// kopf-rs: Kubernetes operators in a few lines of Rust.
///
/// Runs operators built with kopf-rs, prints the RBAC manifests they need, and serves the
/// in-memory Kubernetes API server for development and tests. The options of `run` and
/// `rbac` are the operator's own (`my-operator run --help`); each also comes from its
/// environment variable (KOPF_RUN_NAMESPACE, KOPF_RBAC_APPLY...).
#[derive(Debug, Parser)]
#[command(name = "kopf", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[allow(clippy::large_enum_variant)] // parsed once per process
#[derive(Debug, Subcommand)]
enum Command {
    /// Build if need be, check and run a kopf-rs operator until SIGINT/SIGTERM (`OPERATOR
    /// run [options]`).
    Run {
        #[arg(value_name = "OPERATOR", help = OPERATOR_HELP)]
        operator: OsString,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Print the RBAC manifests (ServiceAccount, ClusterRole, ClusterRoleBinding) a kopf-rs
    /// operator needs (`OPERATOR rbac [options]`).
    Rbac {
        #[arg(value_name = "OPERATOR", help = OPERATOR_HELP)]
        operator: OsString,
        #[command(flatten)]
        args: RbacArgs,
    },
    /// Print the CRDs a kopf-rs operator declares (`OPERATOR crd [options]`).
    Crd {
        #[arg(value_name = "OPERATOR", help = OPERATOR_HELP)]
        operator: OsString,
        #[command(flatten)]
        args: CrdArgs,
    },
    /// Write the OLM bundle of a kopf-rs operator (`OPERATOR olm [options]`).
    Olm {
        #[arg(value_name = "OPERATOR", help = OPERATOR_HELP)]
        operator: OsString,
        #[command(flatten)]
        args: OlmArgs,
    },
    /// Run the in-memory Kubernetes API server until SIGINT/SIGTERM; prints `listening on
    /// URL` once it serves.
    FakeApiserver(FakeApiserverArgs),
    /// Pause the operators of a peering below a priority for a while (Kopf's `freeze`): an
    /// entry with that priority and lifetime in the peering object.
    Freeze(peering::FreezeArgs),
    /// End a freeze (Kopf's `resume`): the entry removed.
    Resume(peering::ResumeArgs),
    /// List the entries of a peering: identity, priority, lifetime, last keep-alive, alive.
    Peers(peering::PeersArgs),
}

/// Where the operator is in the arguments of `command` (`raw` without the program): the
/// first argument that is neither an option nor the value of one, as clap reads them.
fn operator_position(sub: &clap::Command, raw: &[OsString], command: &str) -> Option<usize> {
    let takes_value = |arg: &clap::Arg| arg.get_action().takes_values() && !arg.is_positional();
    let long_with_value = |name: &str| {
        sub.get_arguments()
            .any(|a| takes_value(a) && a.get_long() == Some(name))
    };
    let short_with_value = |c: char| {
        sub.get_arguments()
            .any(|a| takes_value(a) && a.get_short() == Some(c))
    };
    let at = raw.iter().position(|a| a == command)?;
    let mut i = at + 1;
    let mut options_end = false;
    while i < raw.len() {
        let arg = raw[i].to_string_lossy();
        if options_end || arg == "-" || !arg.starts_with('-') {
            return Some(i);
        }
        if arg == "--" {
            options_end = true;
        } else if let Some(long) = arg.strip_prefix("--") {
            if !long.contains('=') && long_with_value(long) {
                i += 1; // its value
            }
        } else {
            // -vn VALUE, -nVALUE: the first short option with a value takes the rest or the
            // next argument.
            let shorts: Vec<char> = arg[1..].chars().collect();
            if let Some(j) = shorts.iter().position(|c| short_with_value(*c))
                && j + 1 == shorts.len()
            {
                i += 1;
            }
        }
        i += 1;
    }
    None
}

/// The arguments of `command` for the operator: those after the command, without the
/// operator itself (at `operator_at` in `raw`).
fn operator_options(raw: &[OsString], command: &str, operator_at: usize) -> Vec<OsString> {
    let at = raw.iter().position(|a| a == command).unwrap_or(0);
    raw.iter()
        .enumerate()
        .skip(at + 1)
        .filter(|(i, _)| *i != operator_at)
        .map(|(_, a)| a.clone())
        .collect()
}

/// Runs `OPERATOR <command> <the command's options>` in place of this process.
fn delegate(command: &str, operator: &OsStr) -> anyhow::Result<()> {
    let raw: Vec<OsString> = std::env::args_os().skip(1).collect();
    let sub = Cli::command();
    let operator_at = sub
        .find_subcommand(command)
        .and_then(|sub| operator_position(sub, &raw, command))
        .context("the operator is not among the arguments")?;
    let options = operator_options(&raw, command, operator_at);
    let operator = target::resolve(operator)?;
    if operator.found {
        eprintln!(
            "kopf: running {} from {}",
            operator.identity,
            operator.path.display()
        );
    }
    let mut child = std::process::Command::new(&operator.path);
    child.arg(command).args(&options);
    let shown = operator.path.display();
    // The operator replaces this process: signals (SIGTERM from Kubernetes) reach it directly.
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let error = child.exec();
        Err(error).with_context(|| format!("cannot start the operator {shown}"))
    }
    #[cfg(not(unix))]
    {
        let status = child
            .status()
            .with_context(|| format!("cannot start the operator {shown}"))?;
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
        Command::Freeze(args) => peering::freeze(args).await,
        Command::Resume(args) => peering::resume(args).await,
        Command::Peers(args) => peering::peers(args).await,
        Command::Run { operator, args: _ } => delegate("run", &operator),
        Command::Rbac { operator, args: _ } => delegate("rbac", &operator),
        Command::Crd { operator, args: _ } => delegate("crd", &operator),
        Command::Olm { operator, args: _ } => delegate("olm", &operator),
        Command::FakeApiserver(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kopf=info")),
                )
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init();
            kopf::cli::fake_apiserver(args).await?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_is_taken_out_of_its_options_wherever_it_is() {
        let os = |args: &[&str]| args.iter().map(OsString::from).collect::<Vec<_>>();
        for (args, expected) in [
            (&["run", "op", "-A", "--fake"][..], &["-A", "--fake"][..]),
            (&["run", "-n", "op", "op"], &["-n", "op"]),
            (&["run", "-n", "a", "op", "-v"], &["-n", "a", "-v"]),
            (&["run", "-vn", "op", "op", "-d"], &["-vn", "op", "-d"]),
            (&["run", "-nop", "op"], &["-nop"]),
            (&["run", "--namespace=op", "op"], &["--namespace=op"]),
            (&["run", "--qps", "0.5", "op"], &["--qps", "0.5"]),
            (
                &["run", "--fake", "--apply", "op", "op", "--apply", "b"],
                &["--fake", "--apply", "op", "--apply", "b"],
            ),
            (&["rbac", "--name", "op", "op"], &["--name", "op"]),
            (&["rbac", "--cluster", "op"], &["--cluster"]),
        ] {
            let raw = os(args);
            let command = args[0];
            // The arguments parse as they are given here.
            let mut all = vec!["kopf"];
            all.extend_from_slice(args);
            Cli::try_parse_from(&all).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let sub = Cli::command();
            let sub = sub.find_subcommand(command).expect("a command");
            let at = operator_position(sub, &raw, command).expect("found");
            assert_eq!(raw[at], "op", "{args:?}");
            assert_eq!(
                operator_options(&raw, command, at),
                os(expected),
                "{args:?}"
            );
        }
    }

    #[test]
    fn the_help_describes_the_commands_as_they_are() {
        let help = Cli::command().render_long_help().to_string();
        for expected in [
            "Runs operators built with kopf-rs, prints the RBAC manifests they need",
            "Build if need be, check and run a kopf-rs operator",
            "Print the RBAC manifests (ServiceAccount, ClusterRole, ClusterRoleBinding)",
            "Run the in-memory Kubernetes API server",
        ] {
            assert!(help.contains(expected), "{expected}: {help}");
        }
        assert!(!help.contains("later"), "{help}");
        let mut cli = Cli::command();
        let run = cli
            .find_subcommand_mut("run")
            .expect("run")
            .render_long_help()
            .to_string();
        assert!(
            run.contains("the name of a cargo package of the workspace here (my-operator)"),
            "{run}"
        );
    }
}
