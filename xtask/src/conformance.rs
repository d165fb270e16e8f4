//! `cargo xtask conformance [--test NAME]... [--timeout SECONDS] [--update-lock]`
//!
//! A client suite nobody here wrote, against the fake API server: the `#[ignore]`d cluster
//! tests of kube-rs 5.0 (the unit tests of the published crates `kube`, `kube-client` and
//! `kube-runtime` that need a cluster), each run with `KUBECONFIG` at a fresh
//! [`FakeApiServer`].
//!
//! 1. The crates' sources are those cargo downloaded for the workspace (found with
//!    `cargo metadata`): copied into `<target>/conformance/` as a workspace of three members,
//!    their published `Cargo.toml` given back the one dev-dependency publishing strips (the
//!    path dependency on `kube` that the tests of `kube-client` and `kube-runtime` use), and
//!    the lock file `xtask/conformance/Cargo.lock` (made from the workspace's, so the shared
//!    dependencies are the versions already built in the same target directory).
//! 2. `cargo test --locked --lib --no-run` with the features the tests need (`kube/derive`,
//!    `kube/runtime`, `kube-client/ws`, `kube-client/kubelet-debug`); then the ignored tests
//!    listed by each test binary (`--list --ignored`).
//! 3. Each test alone (`--ignored --exact`), against its own fake API server (a new cluster
//!    per test: what one test leaves does not decide the next), with a time limit.
//! 4. The outcome against the list of expected failures (`conformance/expected.rs`, each
//!    with its reason): a failure not on the list fails the step, so does a listed test that
//!    passes or no longer exists (the list stays true).
//!
//! `--update-lock` resolves the scratch workspace again (without `--locked`) and writes the
//! lock back to `xtask/conformance/Cargo.lock`: after a kube upgrade, with the list checked.

mod expected;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kopf_testing::FakeApiServer;
use serde_json::Value;

use crate::cargo::Workspace;
use expected::{EXPECTED, Why};

/// The kube-rs version whose tests run (the workspace must use it: the list is for it).
const KUBE_VERSION: &str = "5.0.0";

/// The crates whose ignored tests run, in the order they run.
const CRATES: [&str; 3] = ["kube", "kube-client", "kube-runtime"];

/// The features the tests need (a test behind a feature not on here does not exist).
/// `kube-client/openssl-tls` is left out: its one test lists pods through an OpenSSL
/// connector, and it would need OpenSSL's headers on every machine.
const FEATURES: &str = "kube/derive,kube/runtime,kube-client/ws,kube-client/kubelet-debug";

/// The lock file of the scratch workspace, relative to the workspace root.
const LOCK: &str = "xtask/conformance/Cargo.lock";

#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// Run only the tests whose path contains this text (repeatable); the check against
    /// the list then covers only those.
    #[arg(long = "test", value_name = "NAME")]
    tests: Vec<String>,
    /// Seconds a test may take before it is stopped and counted as failed.
    #[arg(long, default_value_t = 90)]
    timeout: u64,
    /// Resolve the scratch workspace again and write its lock to xtask/conformance/Cargo.lock.
    #[arg(long)]
    update_lock: bool,
}

/// What happened to one test.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Passed,
    /// Failed, with the end of its output.
    Failed(String),
}

pub async fn run(args: ConformanceArgs) -> Result<()> {
    let started = Instant::now();
    let workspace = Workspace::locate()?;
    let scratch = workspace.target.join("conformance");
    prepare(&workspace, &scratch)?;
    if args.update_lock {
        // Resolved from the workspace's lock, not afresh: the versions shared with the
        // workspace stay those it builds (a fresh resolution would take the newest ones).
        write_if_changed(
            &scratch.join("Cargo.lock"),
            &std::fs::read(workspace.root.join("Cargo.lock"))?,
        )?;
        let status = crate::cargo::command(&scratch, &["metadata", "--format-version", "1"])
            .stdout(Stdio::null())
            .status()
            .context("running `cargo metadata` in the scratch workspace")?;
        if !status.success() {
            bail!("resolving the scratch workspace failed ({status})");
        }
        std::fs::copy(scratch.join("Cargo.lock"), workspace.root.join(LOCK))
            .with_context(|| format!("writing {LOCK}"))?;
        println!("conformance: wrote {LOCK}");
    }
    let binaries = build(&workspace, &scratch)?;
    let built = started.elapsed();

    let mut results: Vec<(&str, String, Outcome, Duration)> = Vec::new();
    for krate in CRATES {
        let binary = binaries
            .get(krate)
            .with_context(|| format!("cargo built no test binary for {krate}"))?;
        for test in list_ignored(binary)? {
            if !args.tests.is_empty() && !args.tests.iter().any(|t| test.contains(t.as_str())) {
                continue;
            }
            let t0 = Instant::now();
            let outcome = run_one(binary, &scratch, &test, args.timeout).await?;
            let took = t0.elapsed();
            results.push((krate, test, outcome, took));
        }
    }
    if results.is_empty() {
        bail!("no test ran (the --test filters matched none)");
    }
    let problems = report(&results, args.tests.is_empty());
    println!(
        "conformance: {:.0} s in all ({:.0} s of build, {:.0} s of tests)",
        started.elapsed().as_secs_f64(),
        built.as_secs_f64(),
        (started.elapsed() - built).as_secs_f64()
    );
    if problems > 0 {
        bail!("{problems} test(s) did not do what xtask/src/conformance/expected.rs says");
    }
    Ok(())
}

/// Prints the table and the summary line; returns how many tests contradict the list.
fn report(results: &[(&str, String, Outcome, Duration)], all: bool) -> usize {
    let mut problems = 0;
    let (mut passed, mut kubelet) = (0, 0);
    println!("\n| crate | test | outcome | reason |");
    println!("|---|---|---|---|");
    for (krate, test, outcome, took) in results {
        let listed = EXPECTED
            .iter()
            .find(|e| e.krate == *krate && e.test == test.as_str());
        let (verdict, reason) = match (outcome, listed) {
            (Outcome::Passed, None) => {
                passed += 1;
                ("passed".to_string(), String::new())
            }
            (Outcome::Failed(_), Some(e)) => {
                match e.why {
                    Why::Kubelet(_) => kubelet += 1,
                }
                ("expected failure".to_string(), e.why.text())
            }
            (Outcome::Passed, Some(e)) => {
                problems += 1;
                (
                    "UNEXPECTED PASS (remove it from the list)".to_string(),
                    e.why.text(),
                )
            }
            (Outcome::Failed(output), None) => {
                problems += 1;
                eprintln!("\n---- {krate} {test} failed; the end of its output:\n{output}");
                ("FAILED".to_string(), String::new())
            }
        };
        println!(
            "| {krate} | {test} | {verdict} ({:.1} s) | {reason} |",
            took.as_secs_f64()
        );
    }
    if all {
        for e in EXPECTED {
            if !results
                .iter()
                .any(|(k, t, _, _)| *k == e.krate && t == e.test)
            {
                problems += 1;
                println!(
                    "| {} | {} | LISTED BUT NOT FOUND (remove it from the list) | {} |",
                    e.krate,
                    e.test,
                    e.why.text()
                );
            }
        }
    }
    println!(
        "\nkube-rs 5.0 cluster tests: {passed} passed, {kubelet} expected failures (kubelet), of {}",
        results.len()
    );
    problems
}

/// The published sources of `krate` 5.0.0 that cargo downloaded for the workspace.
fn sources(workspace: &Workspace) -> Result<BTreeMap<&'static str, PathBuf>> {
    let out = crate::cargo::command(
        &workspace.root,
        &["metadata", "--format-version", "1", "--locked"],
    )
    .stderr(Stdio::inherit())
    .output()
    .context("running `cargo metadata`")?;
    if !out.status.success() {
        bail!("`cargo metadata` failed ({})", out.status);
    }
    let meta: Value = serde_json::from_slice(&out.stdout).context("parsing `cargo metadata`")?;
    let packages = meta["packages"]
        .as_array()
        .context("`cargo metadata` lists no packages")?;
    let mut found = BTreeMap::new();
    for krate in CRATES {
        let versions: Vec<&Value> = packages.iter().filter(|p| p["name"] == krate).collect();
        let package = versions
            .iter()
            .find(|p| p["version"] == KUBE_VERSION)
            .ok_or_else(|| {
                let have: Vec<&str> = versions
                    .iter()
                    .filter_map(|p| p["version"].as_str())
                    .collect();
                anyhow!(
                    "the workspace does not use {krate} {KUBE_VERSION} (it has {have:?}): the \
                     expected failures of xtask/src/conformance/expected.rs are for \
                     {KUBE_VERSION}; update KUBE_VERSION, the list and the lock (--update-lock)"
                )
            })?;
        let manifest = package["manifest_path"]
            .as_str()
            .with_context(|| format!("{krate} has no manifest_path"))?;
        let dir = Path::new(manifest)
            .parent()
            .with_context(|| format!("{manifest} has no directory"))?;
        found.insert(krate, dir.to_path_buf());
    }
    Ok(found)
}

/// Makes the scratch workspace (files rewritten only when they differ, so cargo rebuilds
/// nothing on the next run).
fn prepare(workspace: &Workspace, scratch: &Path) -> Result<()> {
    let sources = sources(workspace)?;
    let mut members = Vec::new();
    for (krate, dir) in &sources {
        let name = format!("{krate}-{KUBE_VERSION}");
        let dest = scratch.join(&name);
        copy_tree(dir, &dest)?;
        let manifest_path = dest.join("Cargo.toml");
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))
            .with_context(|| format!("reading {}", dir.join("Cargo.toml").display()))?;
        write_if_changed(&manifest_path, manifest_for(krate, &manifest).as_bytes())?;
        // The crate's own lock (of kube's whole workspace) would be ignored: a member has none.
        let _ = std::fs::remove_file(dest.join("Cargo.lock"));
        members.push(format!("\"{name}\""));
    }
    let root_manifest = format!(
        "# Made by `cargo xtask conformance`: kube-rs {KUBE_VERSION}'s published crates, to run \
         their cluster tests.\n[workspace]\nmembers = [{}]\nresolver = \"2\"\n\n\
         [patch.crates-io]\nkube-client = {{ path = \"kube-client-{KUBE_VERSION}\" }}\n\
         kube-runtime = {{ path = \"kube-runtime-{KUBE_VERSION}\" }}\n",
        members.join(", ")
    );
    write_if_changed(&scratch.join("Cargo.toml"), root_manifest.as_bytes())?;
    let lock = workspace.root.join(LOCK);
    match std::fs::read(&lock) {
        Ok(text) => write_if_changed(&scratch.join("Cargo.lock"), &text),
        // Made by --update-lock; without it the `--locked` build says what is missing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("reading {}", lock.display())),
    }
}

/// The published manifest of `krate`, as a member of the scratch workspace: without its own
/// `resolver` (the workspace's counts), with the dev-dependency on `kube` that publishing
/// removed (it is a path dependency in kube-rs' repository).
fn manifest_for(krate: &str, published: &str) -> String {
    let mut text: String = published
        .lines()
        .filter(|l| !l.starts_with("resolver = "))
        .map(|l| format!("{l}\n"))
        .collect();
    let features = match krate {
        "kube-client" => Some(r#"["derive", "client", "ws"]"#),
        "kube-runtime" => Some(r#"["derive", "client", "runtime"]"#),
        _ => None,
    };
    if let Some(features) = features {
        text.push_str(&format!(
            "\n[dev-dependencies.kube]\npath = \"../kube-{KUBE_VERSION}\"\nfeatures = {features}\n"
        ));
    }
    text
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&path, &dest)?;
        } else {
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            write_if_changed(&dest, &bytes)?;
        }
    }
    Ok(())
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Builds the crates' unit tests; their executables by crate.
fn build(workspace: &Workspace, scratch: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut args = vec!["test", "--locked", "--lib", "--no-run"];
    for krate in CRATES {
        args.extend(["-p", krate]);
    }
    args.extend(["--features", FEATURES, "--message-format", "json"]);
    println!(
        "conformance: cargo {} (in {})",
        args.join(" "),
        scratch.display()
    );
    let target = workspace.target.to_string_lossy().into_owned();
    let out = crate::cargo::command(scratch, &args)
        // The workspace's target directory: the dependencies it shares are built already.
        .env("CARGO_TARGET_DIR", &target)
        // The workspace's .cargo/config.toml picks 1.33 for crates that pick no k8s-openapi
        // version (`cargo xtask` passes it on, and cargo reads the same file again for the
        // scratch crates below the workspace's target directory); kube-rs' dev-dependencies
        // pick `latest`, and both at once are refused. An empty value is set rather than
        // none: cargo's `[env]` fills in only variables the environment does not have, and
        // k8s-openapi ignores a value that names no version.
        .env("K8S_OPENAPI_ENABLED_VERSION", "")
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!(
            "building kube-rs' tests failed ({}); if the lock is out of date: \
             cargo xtask conformance --update-lock",
            out.status
        );
    }
    let mut binaries = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
            continue;
        }
        if let (Some(name), Some(exe)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) {
            binaries.insert(name.replace('_', "-"), PathBuf::from(exe));
        }
    }
    Ok(binaries)
}

/// The ignored tests of a test binary.
fn list_ignored(binary: &Path) -> Result<Vec<String>> {
    let out = Command::new(binary)
        .args(["--list", "--ignored"])
        .output()
        .with_context(|| format!("listing the tests of {}", binary.display()))?;
    if !out.status.success() {
        bail!("{} --list failed ({})", binary.display(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect())
}

/// Runs one ignored test against a fresh fake API server, with its pod simulator on (Pods
/// are scheduled and become Running as on a cluster; their containers run nothing).
async fn run_one(binary: &Path, scratch: &Path, test: &str, timeout: u64) -> Result<Outcome> {
    let server = FakeApiServer::builder()
        .simulate_pods(kopf_testing::PodSimulation::default())
        .start()
        .await?;
    let dir = tempfile::Builder::new()
        .prefix("kopf-conformance-")
        .tempdir()
        .context("creating a temporary directory")?;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    let output_path = dir.path().join("output");
    let output = std::fs::File::create(&output_path)?;
    let mut command = Command::new(binary);
    command
        .args(["--ignored", "--exact", test, "--test-threads=1"])
        // The crate's directory, as cargo runs its tests.
        .current_dir(scratch)
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output);
    let test_name = test.to_string();
    // The server runs on this runtime: the child is waited for on a blocking thread.
    let status =
        tokio::task::spawn_blocking(move || -> Result<Option<std::process::ExitStatus>> {
            let mut child = command
                .spawn()
                .with_context(|| format!("starting {test_name}"))?;
            let deadline = Instant::now() + Duration::from_secs(timeout);
            loop {
                if let Some(status) = child.try_wait()? {
                    return Ok(Some(status));
                }
                if Instant::now() > deadline {
                    child.kill()?;
                    child.wait()?;
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .await??;
    server.shutdown().await;
    let text = std::fs::read_to_string(&output_path).unwrap_or_default();
    let tail = |text: &str| {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    Ok(match status {
        None => Outcome::Failed(format!("stopped after {timeout} s\n{}", tail(&text))),
        Some(s) if s.success() && text.contains("test result: ok. 1 passed") => Outcome::Passed,
        Some(s) if s.success() => bail!("{test} did not run (its binary says:\n{})", tail(&text)),
        Some(_) => Outcome::Failed(tail(&text)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_as_listed() -> Vec<(&'static str, String, Outcome, Duration)> {
        EXPECTED
            .iter()
            .map(|e| {
                (
                    e.krate,
                    e.test.to_string(),
                    Outcome::Failed("x".into()),
                    Duration::ZERO,
                )
            })
            .collect()
    }

    #[test]
    fn the_list_is_checked_both_ways() {
        let mut results = all_as_listed();
        assert_eq!(report(&results, true), 0, "every listed test failed");

        results.push((
            "kube",
            "test::other".into(),
            Outcome::Passed,
            Duration::ZERO,
        ));
        assert_eq!(report(&results, true), 0, "an unlisted pass is fine");

        results.push((
            "kube",
            "test::broken".into(),
            Outcome::Failed("boom".into()),
            Duration::ZERO,
        ));
        assert_eq!(report(&results, true), 1, "an unlisted failure counts");

        results[0].2 = Outcome::Passed;
        assert_eq!(report(&results, true), 2, "a listed pass counts");

        let without_one = all_as_listed()[1..].to_vec();
        assert_eq!(
            report(&without_one, true),
            1,
            "a listed test not found counts"
        );
        assert_eq!(report(&without_one, false), 0, "unless --test chose some");
    }

    #[test]
    fn manifests_get_the_dev_dependency_publishing_removed() {
        let published = "[package]\nname = \"kube-client\"\nresolver = \"2\"\n";
        let m = manifest_for("kube-client", published);
        assert!(!m.contains("resolver"));
        assert!(m.contains("[dev-dependencies.kube]\npath = \"../kube-5.0.0\""));
        assert!(m.contains(r#"features = ["derive", "client", "ws"]"#));
        assert!(!manifest_for("kube", published).contains("dev-dependencies.kube"));
    }

    #[test]
    fn every_listed_test_names_a_crate_that_runs() {
        for e in EXPECTED {
            assert!(CRATES.contains(&e.krate), "{} is not run", e.krate);
        }
    }
}
