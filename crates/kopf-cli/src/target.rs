//! What `kopf run OPERATOR` and `kopf rbac OPERATOR` run: the operator's binary, found from
//! what the user gave and checked to be a kopf-rs operator.
//!
//! `OPERATOR` is, in this order:
//!
//! 1. a directory with a `Cargo.toml`: its package is built with `cargo build`;
//! 2. a file: it must be an executable;
//! 3. the name of a package of the cargo workspace of the current directory: built with
//!    `cargo build -p NAME`;
//! 4. the name of a program on `PATH`.
//!
//! A package that depends on `kopf` is built in dev mode (`--features kopf/testing`): a
//! build from source here is development, where `run --fake` and the offline `rbac` (which
//! resolves resources on an embedded fake API server) are wanted.
//!
//! The binary of a package is its only one, its `default-run`, or the one named after the
//! package; cargo's JSON messages (`--message-format=json-render-diagnostics`) say where it
//! was written.
//!
//! Every candidate is then asked the hidden [`PROBE_COMMAND`] that every kopf-rs operator
//! answers (with a line starting with [`PROBE_ANSWER`], before it does anything else), with
//! a timeout. Asking the binary itself is exact where a marker string in the file would not
//! be: the `kopf` command links kopf-rs too, a marker may be dropped by the linker, and only
//! the operator's own command line tells whether `OPERATOR run ...` will be understood.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kopf::cli::{PROBE_ANSWER, PROBE_COMMAND};
use serde_json::Value;

/// How long a binary has to answer the probe (a cold start of a large debug build included).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `OPERATOR` may be, for the messages.
const EXPECTED: &str = "an operator built with kopf-rs: its binary, a cargo package of \
     the workspace here, a cargo project directory or a program on PATH (kopf run --help)";

/// An operator binary that answered the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// The binary.
    pub path: PathBuf,
    /// What it says of itself: `my-operator 1.2.0 (kopf-rs 0.1.0)`.
    pub identity: String,
    /// Whether it was built or found here rather than given as a path.
    pub found: bool,
}

/// Finds (and builds, for a cargo package or project) the operator named by `target`.
pub fn resolve(target: &OsStr) -> anyhow::Result<Operator> {
    let path = Path::new(target);
    let shown = path.display();
    if path.is_dir() {
        let manifest = path.join("Cargo.toml");
        if !manifest.is_file() {
            bail!("{shown} is a directory without a Cargo.toml; expected {EXPECTED}");
        }
        let binary = build(Some(&manifest), None)?;
        return probe(&binary).map(|identity| Operator {
            path: binary,
            identity,
            found: true,
        });
    }
    if path.exists() {
        let metadata = std::fs::metadata(path).with_context(|| format!("cannot read {shown}"))?;
        if !is_executable(&metadata) {
            let rust = if path.extension() == Some(OsStr::new("rs")) {
                " (a Rust source file: give its cargo package or project directory, e.g. \
                 `kopf run .`, and it is built)"
            } else {
                ""
            };
            bail!("{shown} is not an executable{rust}; expected {EXPECTED}");
        }
        return probe(path).map(|identity| Operator {
            path: path.to_path_buf(),
            identity,
            found: false,
        });
    }
    let name = target.to_string_lossy();
    if name.contains(std::path::is_separator) || name.starts_with('.') {
        bail!("{shown}: no such file or directory; expected {EXPECTED}");
    }
    let packages = match workspace_packages(None) {
        Ok(packages) => packages,
        Err(e) => {
            // Not in a cargo workspace: a program on PATH, or nothing.
            return match on_path(target) {
                Some(binary) => probe(&binary).map(|identity| Operator {
                    path: binary,
                    identity,
                    found: true,
                }),
                None => bail!(
                    "{name} is neither a file, a cargo package here ({e:#}) nor a program on PATH; expected {EXPECTED}"
                ),
            };
        }
    };
    if packages.iter().any(|p| p.name == name) {
        let binary = build(None, Some(&name))?;
        return probe(&binary).map(|identity| Operator {
            path: binary,
            identity,
            found: true,
        });
    }
    if let Some(binary) = on_path(target) {
        return probe(&binary).map(|identity| Operator {
            path: binary,
            identity,
            found: true,
        });
    }
    let mut names: Vec<&str> = packages
        .iter()
        .filter(|p| !p.bins.is_empty())
        .map(|p| p.name.as_str())
        .collect();
    names.sort_unstable();
    bail!(
        "{name} is neither a file, a package of the cargo workspace here (packages with binaries: {}) nor a program on PATH; expected {EXPECTED}",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )
}

/// Whether a file may be executed.
fn is_executable(metadata: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        metadata.is_file()
    }
}

/// The executable file named `name` in a directory of `PATH`.
fn on_path(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| is_executable(&m)))
}

/// `cargo`, or the one that runs this program.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
}

/// A package of a cargo workspace, from `cargo metadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// Its name.
    pub name: String,
    /// Its id, as in cargo's messages.
    pub id: String,
    /// Its `Cargo.toml`.
    pub manifest_path: PathBuf,
    /// Its binary targets.
    pub bins: Vec<String>,
    /// Its `default-run` binary, if set.
    pub default_run: Option<String>,
    /// Whether it depends on `kopf` by that name (then it is built in dev mode).
    pub depends_on_kopf: bool,
}

/// The packages of `cargo metadata`'s output.
fn packages_of(metadata: &Value) -> Vec<Package> {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    metadata
        .get("packages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let bins = p
                .get("targets")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|t| {
                    t.get("kind")
                        .and_then(Value::as_array)
                        .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"))
                })
                .filter_map(|t| text(t, "name"))
                .collect();
            Some(Package {
                name: text(p, "name")?,
                id: text(p, "id")?,
                manifest_path: PathBuf::from(text(p, "manifest_path")?),
                bins,
                default_run: text(p, "default_run"),
                depends_on_kopf: depends_on_kopf(p),
            })
        })
        .collect()
}

/// Whether a package of `cargo metadata` has `kopf` among its normal dependencies, not
/// renamed.
fn depends_on_kopf(package: &Value) -> bool {
    package
        .get("dependencies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|d| {
            d.get("name").and_then(Value::as_str) == Some("kopf")
                && d.get("kind").is_none_or(Value::is_null)
                && d.get("rename").is_none_or(Value::is_null)
        })
}

/// The packages of the workspace of the current directory, or of `manifest`.
fn workspace_packages(manifest: Option<&Path>) -> anyhow::Result<Vec<Package>> {
    let mut command = cargo();
    command.args(["metadata", "--format-version", "1", "--no-deps"]);
    if let Some(manifest) = manifest {
        command.arg("--manifest-path").arg(manifest);
    }
    let output = command
        .stderr(Stdio::piped())
        .output()
        .context("cannot run `cargo metadata`")?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        bail!("`cargo metadata` failed: {}", first.trim());
    }
    let metadata: Value =
        serde_json::from_slice(&output.stdout).context("cannot read `cargo metadata`'s output")?;
    Ok(packages_of(&metadata))
}

/// The binary of a package to run: its only one, its `default-run`, or the one named after
/// it.
fn binary_of(package: &Package) -> anyhow::Result<&str> {
    match package.bins.as_slice() {
        [] => bail!(
            "the cargo package {} has no binary (an operator is a binary: src/main.rs or [[bin]])",
            package.name
        ),
        [one] => Ok(one),
        several => package
            .default_run
            .as_deref()
            .or_else(|| {
                several
                    .iter()
                    .find(|b| **b == package.name)
                    .map(String::as_str)
            })
            .with_context(|| {
                format!(
                    "the cargo package {} has several binaries ({}) and no default-run; build the one to run and give its path (kopf run target/debug/{})",
                    package.name,
                    several.join(", "),
                    several[0]
                )
            }),
    }
}

/// The executable that cargo's JSON messages report for this package's binary.
fn executable_in(messages: &str, package_id: &str, bin: &str) -> Option<PathBuf> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| {
            m.get("reason").and_then(Value::as_str) == Some("compiler-artifact")
                && m.get("package_id").and_then(Value::as_str) == Some(package_id)
                && m.pointer("/target/name").and_then(Value::as_str) == Some(bin)
        })
        .find_map(|m| {
            m.get("executable")
                .and_then(Value::as_str)
                .map(PathBuf::from)
        })
}

/// Builds the package of the project `manifest` (a directory's `Cargo.toml`), or the
/// package `name` of the current directory's workspace; returns its binary. Cargo's own
/// messages go to stderr as usual.
fn build(manifest: Option<&Path>, name: Option<&str>) -> anyhow::Result<PathBuf> {
    let packages = workspace_packages(manifest)?;
    let package = match (manifest, name) {
        (_, Some(name)) => packages.iter().find(|p| p.name == name),
        (Some(manifest), None) => {
            let wanted = manifest.canonicalize().ok();
            packages
                .iter()
                .find(|p| p.manifest_path.canonicalize().ok() == wanted)
        }
        (None, None) => None,
    };
    let Some(package) = package else {
        let dir = manifest.and_then(Path::parent).unwrap_or(Path::new("."));
        let mut with_bins: Vec<&str> = packages
            .iter()
            .filter(|p| !p.bins.is_empty())
            .map(|p| p.name.as_str())
            .collect();
        with_bins.sort_unstable();
        bail!(
            "{} is a cargo workspace without a package of its own: name one of its packages, from {}: kopf run PACKAGE (packages with binaries: {})",
            dir.display(),
            dir.display(),
            with_bins.join(", ")
        );
    };
    let bin = binary_of(package)?;
    let mut command = cargo();
    command.arg("build");
    if let Some(manifest) = manifest {
        command.arg("--manifest-path").arg(manifest);
    }
    command.args(["-p", &package.name, "--bin", bin]);
    if package.depends_on_kopf {
        command.args(["--features", "kopf/testing"]);
    }
    command
        .arg("--message-format=json-render-diagnostics")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let output = command.output().context("cannot run `cargo build`")?;
    if !output.status.success() {
        bail!(
            "`cargo build -p {} --bin {bin}` failed ({}); cargo's messages are above",
            package.name,
            output.status
        );
    }
    let messages = String::from_utf8_lossy(&output.stdout);
    executable_in(&messages, &package.id, bin).with_context(|| {
        format!(
            "`cargo build -p {} --bin {bin}` reported no executable",
            package.name
        )
    })
}

/// Asks a binary the probe; its identity (`my-operator 1.2.0 (kopf-rs 0.1.0)`) if it is a
/// kopf-rs operator.
pub fn probe(binary: &Path) -> anyhow::Result<String> {
    let shown = binary.display();
    let mut child = Command::new(binary)
        .arg(PROBE_COMMAND)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {shown}"))?;
    // Read in threads: a chatty binary must not block on a full pipe.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(pipe) = pipe {
                // At most 64 KiB: the answer is one line.
                let _ = BufReader::new(pipe.take(64 * 1024)).read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the probe")? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{shown} is not a kopf-rs operator: it did not answer `{shown} {PROBE_COMMAND}` within {}s; expected {EXPECTED}",
                PROBE_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if let Some(identity) = stdout
        .as_bytes()
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix(PROBE_ANSWER).map(str::to_string))
        && status.success()
    {
        return Ok(identity);
    }
    let said = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| format!(": {l}"))
        .unwrap_or_default();
    bail!(
        "{shown} is not a kopf-rs operator: `{} {PROBE_COMMAND}` ended with {status} without a kopf-rs operator's answer{said}; expected {EXPECTED}",
        binary
            .file_name()
            .map_or(shown.to_string(), |n| n.to_string_lossy().into_owned())
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn package(name: &str, bins: &[&str], default_run: Option<&str>) -> Package {
        Package {
            name: name.into(),
            id: format!("path+file:///w/{name}#0.1.0"),
            manifest_path: PathBuf::from(format!("/w/{name}/Cargo.toml")),
            bins: bins.iter().map(|b| b.to_string()).collect(),
            default_run: default_run.map(str::to_string),
            depends_on_kopf: true,
        }
    }

    #[test]
    fn the_binary_of_a_package() {
        assert_eq!(
            binary_of(&package("op", &["op-bin"], None)).expect("one"),
            "op-bin"
        );
        assert_eq!(
            binary_of(&package("op", &["a", "b"], Some("b"))).expect("default-run"),
            "b"
        );
        assert_eq!(
            binary_of(&package("op", &["a", "op"], None)).expect("named after it"),
            "op"
        );
        let several = binary_of(&package("op", &["a", "b"], None))
            .expect_err("ambiguous")
            .to_string();
        assert!(
            several.contains("several binaries (a, b)") && several.contains("target/debug/a"),
            "{several}"
        );
        let none = binary_of(&package("lib", &[], None))
            .expect_err("a library")
            .to_string();
        assert!(none.contains("has no binary"), "{none}");
    }

    #[test]
    fn packages_and_artifacts_from_cargo() {
        let metadata = json!({"packages": [{
            "name": "my-operator",
            "id": "path+file:///w/op#my-operator@1.2.0",
            "manifest_path": "/w/op/Cargo.toml",
            "default_run": null,
            "targets": [
                {"name": "my-operator", "kind": ["bin"]},
                {"name": "my_operator", "kind": ["lib"]},
                {"name": "demo", "kind": ["example"]},
            ],
        }]});
        let packages = packages_of(&metadata);
        assert_eq!(packages.len(), 1);
        assert_eq!(packages[0].bins, vec!["my-operator"]);
        assert_eq!(packages[0].default_run, None);
        let messages = [
            json!({"reason": "compiler-artifact", "package_id": "path+file:///w/op#my-operator@1.2.0",
                   "target": {"name": "my_operator", "kind": ["lib"]}, "executable": null}),
            json!({"reason": "compiler-artifact", "package_id": "registry+x#serde@1.0.0",
                   "target": {"name": "my-operator", "kind": ["bin"]}, "executable": "/elsewhere"}),
            json!({"reason": "compiler-artifact", "package_id": "path+file:///w/op#my-operator@1.2.0",
                   "target": {"name": "my-operator", "kind": ["bin"]},
                   "executable": "/w/target/debug/my-operator"}),
            json!({"reason": "build-finished", "success": true}),
        ]
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
        assert_eq!(
            executable_in(
                &messages,
                "path+file:///w/op#my-operator@1.2.0",
                "my-operator"
            ),
            Some(PathBuf::from("/w/target/debug/my-operator"))
        );
        assert_eq!(executable_in(&messages, "other", "my-operator"), None);
    }

    /// A shell script as a binary, in a temporary directory.
    #[cfg(unix)]
    fn script(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[cfg(unix)]
    #[test]
    fn the_probe_tells_operators_from_other_binaries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let operator = script(
            &dir,
            "op",
            r#"[ "$1" = "__kopf-probe" ] && echo "kopf-rs operator: op 1.2.0 (kopf-rs 0.1.0)""#,
        );
        assert_eq!(
            probe(&operator).expect("an operator"),
            "op 1.2.0 (kopf-rs 0.1.0)"
        );
        let other = script(&dir, "other", "echo 'usage: other FILE' >&2; exit 2");
        let refused = probe(&other).expect_err("not an operator").to_string();
        assert!(
            refused.contains("is not a kopf-rs operator")
                && refused.contains(
                    "exit status: 2 without a kopf-rs operator's answer: usage: other FILE"
                )
                && refused.contains("expected an operator built with kopf-rs"),
            "{refused}"
        );
        let silent = probe(Path::new("/bin/true")).expect_err("true").to_string();
        assert!(
            silent.contains("/bin/true is not a kopf-rs operator"),
            "{silent}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn files_that_are_not_executables_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = dir.path().join("main.rs");
        std::fs::write(&source, "fn main() {}").expect("write");
        let refused = resolve(source.as_os_str())
            .expect_err("a source file")
            .to_string();
        assert!(
            refused.contains("main.rs is not an executable (a Rust source file")
                && refused.contains("expected an operator built with kopf-rs"),
            "{refused}"
        );
        let empty = resolve(dir.path().as_os_str())
            .expect_err("no Cargo.toml")
            .to_string();
        assert!(
            empty.contains("is a directory without a Cargo.toml"),
            "{empty}"
        );
        let missing = resolve(OsStr::new("./nowhere/op"))
            .expect_err("missing")
            .to_string();
        assert!(missing.contains("no such file or directory"), "{missing}");
    }

    #[test]
    fn only_a_normal_dependency_named_kopf_asks_for_dev_mode() {
        let with = |deps: serde_json::Value| depends_on_kopf(&json!({"dependencies": deps}));
        assert!(with(
            json!([{"name": "kopf", "kind": null, "rename": null}])
        ));
        assert!(with(json!([{"name": "serde"}, {"name": "kopf"}])));
        assert!(!with(
            json!([{"name": "kopf", "kind": "dev", "rename": null}])
        ));
        assert!(!with(
            json!([{"name": "kopf", "kind": null, "rename": "k"}])
        ));
        assert!(!with(json!([{"name": "kopf-testing", "kind": null}])));
        assert!(!with(json!([])));
    }
}
