//! `cargo xtask kubectl-matrix [--kubectl PATH]...`: kopf-testing's kubectl tests
//! (`crates/kopf-testing/tests/kubectl.rs`) once per kubectl binary.
//!
//! `cargo test --workspace` runs those tests with the one `kubectl` on the PATH. This step
//! runs them with several minors: the binaries given with `--kubectl` (repeatable), or else
//! every `kubectl.1.NN` found in the directories of the PATH and beside the (resolved)
//! `kubectl` on it, as some vendors install them (the Google Cloud SDK: `kubectl.1.27` to
//! `kubectl.1.33` beside a version dispatcher). Each run gets `KOPF_TEST_KUBECTL=<binary>`,
//! which the tests use instead of the PATH's kubectl.
//!
//! kubectl 1.28 and older need the OpenAPI v2 document for `kubectl apply`, which the fake
//! API server does not serve: those binaries are listed as unsupported and not run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cargo::{self, Workspace};

/// The oldest kubectl minor the fake API server supports.
const OLDEST_SUPPORTED: u32 = 29;

/// Options of `cargo xtask kubectl-matrix`.
#[derive(clap::Args, Debug)]
pub struct MatrixArgs {
    /// A kubectl binary to test with (repeatable). Without it: every `kubectl.1.NN` in the
    /// directories of the PATH and beside the kubectl on the PATH.
    #[arg(long = "kubectl", value_name = "PATH")]
    kubectl: Vec<PathBuf>,
}

/// One binary of the matrix.
struct Binary {
    path: PathBuf,
    /// `gitVersion` of `kubectl version --client`.
    version: String,
    minor: u32,
}

/// The directories searched for `kubectl.1.NN`: those of the PATH, and the directory of
/// each `kubectl` on it once symbolic links are resolved.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        if let Some(real) = std::fs::canonicalize(dir.join("kubectl"))
            .ok()
            .and_then(|k| k.parent().map(Path::to_path_buf))
        {
            dirs.push(real);
        }
        dirs.push(dir);
    }
    let mut seen = BTreeSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// The `kubectl.1.NN` files in `dirs`, one per resolved file.
fn discover(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let versioned = name.strip_prefix("kubectl.1.").is_some_and(|minor| {
                !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit())
            });
            let path = entry.path();
            if versioned
                && path.is_file()
                && seen.insert(std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone()))
            {
                found.push(path);
            }
        }
    }
    found
}

/// The client version a binary reports.
fn client_version(path: &Path) -> Result<(String, u32)> {
    let home = tempfile::tempdir().context("a temporary HOME for kubectl")?;
    let out = Command::new(path)
        .args(["version", "--client", "-o", "json"])
        .env("HOME", home.path())
        .env("KUBECONFIG", home.path().join("none"))
        .output()
        .with_context(|| format!("running {} version --client", path.display()))?;
    if !out.status.success() {
        bail!(
            "{} version --client failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{} version --client printed no JSON", path.display()))?;
    let client = &v["clientVersion"];
    let minor: String = client["minor"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let minor = minor
        .parse()
        .with_context(|| format!("{} reports no minor version: {client}", path.display()))?;
    let version = client["gitVersion"].as_str().unwrap_or("?").to_string();
    Ok((version, minor))
}

/// Runs the matrix; an error when a binary is missing or a run fails.
pub fn run(args: MatrixArgs) -> Result<()> {
    let given = !args.kubectl.is_empty();
    let paths = if given {
        args.kubectl
    } else {
        let dirs = search_dirs();
        let found = discover(&dirs);
        if found.is_empty() {
            bail!(
                "kubectl-matrix runs crates/kopf-testing/tests/kubectl.rs once per kubectl binary, \
                 and found none named kubectl.1.NN in {}.\n\
                 Give the binaries with --kubectl PATH (repeatable), for example kubectl 1.29 and \
                 1.33 from https://dl.k8s.io/release/v1.33.0/bin/linux/amd64/kubectl (the \
                 version in the URL). `cargo test --workspace` needs only the kubectl on the PATH.",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        found
    };
    let mut binaries = Vec::new();
    for path in paths {
        if !path.is_file() {
            bail!("--kubectl {}: no such file", path.display());
        }
        let (version, minor) = client_version(&path)?;
        binaries.push(Binary {
            path,
            version,
            minor,
        });
    }
    binaries.sort_by_key(|b| b.minor);
    let ws = Workspace::locate()?;
    let test = ["test", "-p", "kopf-testing", "--test", "kubectl"];
    cargo::run(
        &ws.root,
        &[&test[..], &["--no-run"]].concat(),
        "kubectl-matrix",
    )?;

    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for b in &binaries {
        if b.minor < OLDEST_SUPPORTED {
            rows.push((
                b,
                format!(
                    "unsupported, not run: kubectl 1.{} needs /openapi/v2 for `apply`, which \
                     the fake API server does not serve (1.{OLDEST_SUPPORTED} and later use v3)",
                    b.minor
                ),
            ));
            continue;
        }
        println!(
            "kubectl-matrix: KOPF_TEST_KUBECTL={} ({})",
            b.path.display(),
            b.version
        );
        let started = Instant::now();
        let out = cargo::command(&ws.root, &test)
            .env("KOPF_TEST_KUBECTL", &b.path)
            .output()
            .context("running cargo test")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary = stdout
            .lines()
            .find(|l| l.starts_with("test result:"))
            .unwrap_or("no test result")
            .trim_start_matches("test result: ")
            .to_string();
        let outcome = format!("{summary} ({:.0} s)", started.elapsed().as_secs_f64());
        if !out.status.success() {
            println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
            failed.push(b.version.clone());
        }
        rows.push((b, outcome));
    }

    println!("\nkubectl tests (crates/kopf-testing/tests/kubectl.rs) per kubectl:");
    for (b, outcome) in &rows {
        println!("  {:<14} {:<58} {outcome}", b.version, b.path.display());
    }
    if !failed.is_empty() {
        bail!("the kubectl tests failed with {}", failed.join(", "));
    }
    if rows.iter().all(|(b, _)| b.minor < OLDEST_SUPPORTED) {
        bail!("no supported kubectl (1.{OLDEST_SUPPORTED} or later) was run");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_only_kubectl_one_minor_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "kubectl",
            "kubectl.1.31",
            "kubectl.1.33",
            "kubectl.1.x",
            "kubectl.1.",
        ] {
            std::fs::write(dir.path().join(name), "").expect("file");
        }
        let mut names: Vec<String> = discover(&[dir.path().to_path_buf()])
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        names.sort();
        assert_eq!(names, ["kubectl.1.31", "kubectl.1.33"]);
    }
}
