//! `cargo xtask coverage [--html] [--no-install] [-- TEST ARGS...]`
//!
//! Line coverage per crate of the workspace (the crates under `crates/`: kopf-diff,
//! kopf-core, kopf-watch, kopf-admission, kopf, kopf-macros, kopf-testing, kopf-cli; not
//! xtask, bench/systems or examples/my-operator), from the README's test command,
//! `cargo test --workspace`, run with LLVM source-based coverage by cargo-llvm-cov:
//!
//! 1. tools: `cargo llvm-cov --version`, else `cargo install cargo-llvm-cov --locked`; the
//!    `llvm-tools` rustup component (llvm-cov and llvm-profdata in the toolchain's
//!    `lib/rustlib/<host>/bin`, or `LLVM_COV` and `LLVM_PROFDATA`), else
//!    `rustup component add llvm-tools`. With `--no-install` a missing tool is an error.
//! 2. `cargo llvm-cov clean --workspace`: stale profiles and the workspace's own
//!    instrumented artifacts go (dependencies stay built).
//! 3. `cargo test --workspace --no-fail-fast` itself (not `cargo llvm-cov test`, which would
//!    add `--tests` and so not build the example binaries that the runtime tests start),
//!    with the environment of `cargo llvm-cov show-env` and `CARGO_TARGET_DIR` set to
//!    `target/llvm-cov-target`: the instrumented build stays out of `target/debug`, and so
//!    do the nested builds (trybuild's under `target/llvm-cov-target/tests/trybuild`; the
//!    Python compatibility tests make their venv under `target/llvm-cov-target/python-venv`
//!    the first time). cargo-llvm-cov's rustc wrapper instruments the workspace's crates
//!    only; the dependencies are built as usual (once, in that directory).
//! 4. `cargo llvm-cov report --json --summary-only` into `target/coverage/coverage.json`
//!    (and with `--html` an HTML report under `target/coverage/html/`); the per-file line
//!    summaries of `crates/<name>/src/**` are added up per crate and printed as a table with
//!    the total, also written as Markdown to `target/coverage/summary.md`.
//!
//! What is counted: the lines of `crates/<name>/src` (cargo-llvm-cov leaves out files named
//! `tests.rs`/`*_tests.rs` and everything under `tests/`, `examples/`, `benches/`), as run
//! by the unit and integration tests, and by the example operator binaries that tests start
//! as separate processes: they are built instrumented by the same `cargo test` and inherit
//! `LLVM_PROFILE_FILE`, so a process that exits (also on SIGTERM, by a graceful shutdown)
//! writes its profile; one killed with SIGKILL writes none. The proc-macro library of
//! kopf-macros is instrumented too and writes a profile from each rustc that loads it, so
//! its expansions while this run compiles the workspace's crates, tests and examples, and
//! trybuild's compile-fail UI tests (the error paths), count besides its own unit tests.
//! Not counted: doctests (they run, but their coverage needs a nightly toolchain).
//!
//! If a test fails, the report is still made from what ran, and the command exits non-zero.
//!
//! Time on the 2-core development machine: about 5 minutes once cargo-llvm-cov and the
//! dependencies are in place (the workspace's crates are rebuilt instrumented every time,
//! then the whole suite runs); about 10 minutes the first time (installing cargo-llvm-cov,
//! about 1.5 minutes, and building the dependencies into `target/llvm-cov-target`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::Value;

#[derive(Debug, clap::Args)]
pub struct CoverageArgs {
    /// Also write an HTML report (target/coverage/html/index.html; the path is printed).
    #[arg(long)]
    html: bool,
    /// Fail if cargo-llvm-cov or the llvm-tools component is missing instead of installing
    /// it.
    #[arg(long)]
    no_install: bool,
    /// Arguments for the test binaries, as after `cargo test --workspace --`, e.g.
    /// `-- --skip python_` (filtered-out tests then count for nothing).
    #[arg(last = true, value_name = "TEST ARGS")]
    test_args: Vec<String>,
}

/// One crate's line counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Lines {
    covered: u64,
    count: u64,
}

impl Lines {
    fn add(&mut self, other: Lines) {
        self.covered += other.covered;
        self.count += other.count;
    }

    fn percent(self) -> String {
        if self.count == 0 {
            "n/a".to_string()
        } else {
            format!("{:.1}%", self.covered as f64 * 100.0 / self.count as f64)
        }
    }
}

const COUNTED: &str = "Counted: the lines of `crates/<name>/src` (not `tests.rs`/`*_tests.rs`) \
run by the unit and integration tests of `cargo test --workspace`, by the instrumented \
example operator binaries that tests start as processes (one killed with SIGKILL writes no \
profile), and, for kopf-macros, by its expansions inside rustc while this run compiles the \
workspace and trybuild's UI tests. Not counted: doctests (they run, but their coverage needs \
nightly), xtask, bench/systems, examples/my-operator.";

pub fn run(args: CoverageArgs) -> Result<()> {
    let started = Instant::now();
    let metadata = crate::cargo::metadata()?;
    let crate::cargo::Workspace { root, target } =
        crate::cargo::Workspace::from_metadata(&metadata)?;
    let crates = measured_crates(&metadata, &root)?;
    let cov_target = target.join("llvm-cov-target");
    let out_dir = target.join("coverage");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    ensure_cargo_llvm_cov(&cargo, &root, args.no_install)?;
    ensure_llvm_tools(&root, args.no_install)?;

    // Every `cargo llvm-cov` call below works on the same target directory, which is also
    // the one `cargo metadata` names to it: cargo-llvm-cov looks for trybuild's objects
    // under that one's tests/trybuild, where the tests' trybuild builds. It never asks on
    // the terminal (to install llvm-tools, checked above).
    let llvm_cov = |sub: &[&str]| {
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&root)
            .arg("llvm-cov")
            .args(sub)
            .env("CARGO_TARGET_DIR", &cov_target)
            .env("CARGO_LLVM_COV_TARGET_DIR", &cov_target)
            .env("CARGO_LLVM_COV_SETUP", "no");
        cmd
    };

    println!("coverage: removing old profiles and instrumented workspace artifacts");
    run_checked(
        llvm_cov(&["clean", "--workspace"]),
        "cargo llvm-cov clean --workspace",
    )?;

    let out = llvm_cov(&["show-env"])
        .stderr(Stdio::inherit())
        .output()
        .context("running `cargo llvm-cov show-env`")?;
    if !out.status.success() {
        bail!("`cargo llvm-cov show-env` failed ({})", out.status);
    }
    let env = parse_show_env(&String::from_utf8_lossy(&out.stdout))?;

    let mut test = Command::new(&cargo);
    test.current_dir(&root)
        .args(["test", "--workspace", "--no-fail-fast"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("CARGO_TARGET_DIR", &cov_target);
    if !args.test_args.is_empty() {
        test.arg("--").args(&args.test_args);
    }
    println!(
        "coverage: cargo test --workspace --no-fail-fast{} (instrumented, in {})",
        if args.test_args.is_empty() {
            String::new()
        } else {
            format!(" -- {}", args.test_args.join(" "))
        },
        cov_target.display()
    );
    let test_started = Instant::now();
    let test_status = test.status().context("running `cargo test`")?;
    let test_secs = test_started.elapsed().as_secs();

    let json_path = out_dir.join("coverage.json");
    println!(
        "coverage: merging the profiles into {}",
        json_path.display()
    );
    let mut report = llvm_cov(&["report", "--json", "--summary-only", "--output-path"]);
    report.arg(&json_path);
    run_checked(report, "cargo llvm-cov report --json")?;
    let html = if args.html {
        let mut html = llvm_cov(&["report", "--html", "--output-dir"]);
        html.arg(&out_dir);
        run_checked(html, "cargo llvm-cov report --html")?;
        Some(out_dir.join("html").join("index.html"))
    } else {
        None
    };

    let json: Value = serde_json::from_slice(
        &std::fs::read(&json_path).with_context(|| format!("reading {}", json_path.display()))?,
    )
    .with_context(|| format!("parsing {}", json_path.display()))?;
    let per_crate = group(&json, &root, &crates)?;
    let table = markdown(&per_crate);

    println!();
    print!("{table}");
    println!();
    println!("{COUNTED}");
    let md_path = out_dir.join("summary.md");
    let md = format!(
        "# Line coverage of `cargo test --workspace`\n\n{table}\n{COUNTED}\n\n\
         Made by `cargo xtask coverage` ({}).\n",
        if test_status.success() {
            "all tests passed".to_string()
        } else {
            format!("`cargo test` failed: {test_status}")
        }
    );
    std::fs::write(&md_path, md).with_context(|| format!("writing {}", md_path.display()))?;
    println!("Markdown: {}", md_path.display());
    println!("JSON (per file): {}", json_path.display());
    if let Some(html) = html {
        println!("HTML: {}", html.display());
    }
    let total = started.elapsed().as_secs();
    println!(
        "time: {}m{:02}s in all, of which cargo test {}m{:02}s",
        total / 60,
        total % 60,
        test_secs / 60,
        test_secs % 60
    );
    if !test_status.success() {
        bail!(
            "`cargo test --workspace` failed under coverage ({test_status}): the numbers above \
             are of a run with failures (see the test output above)"
        );
    }
    Ok(())
}

/// The packages under `<root>/crates/`, by name, with their directories.
fn measured_crates(metadata: &Value, root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let crates_dir = root.join("crates");
    let mut crates = Vec::new();
    for pkg in metadata["packages"]
        .as_array()
        .context("`cargo metadata` without packages")?
    {
        let (Some(name), Some(manifest)) = (pkg["name"].as_str(), pkg["manifest_path"].as_str())
        else {
            continue;
        };
        let dir = Path::new(manifest)
            .parent()
            .context("manifest path without a parent")?;
        if dir.starts_with(&crates_dir) {
            crates.push((name.to_string(), dir.to_path_buf()));
        }
    }
    if crates.is_empty() {
        bail!("no packages under {}", crates_dir.display());
    }
    Ok(crates)
}

/// `cargo llvm-cov` is there, or installed now (unless `no_install`).
fn ensure_cargo_llvm_cov(cargo: &OsString, root: &Path, no_install: bool) -> Result<()> {
    let version = || {
        Command::new(cargo)
            .current_dir(root)
            .args(["llvm-cov", "--version"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if let Some(v) = version() {
        println!("coverage: using {v}");
        return Ok(());
    }
    if no_install {
        bail!(
            "cargo-llvm-cov is not installed (`cargo llvm-cov --version` failed); install it \
             with `cargo install cargo-llvm-cov --locked`, or run without --no-install"
        );
    }
    println!(
        "coverage: cargo-llvm-cov is missing; installing it: cargo install cargo-llvm-cov --locked"
    );
    let mut install = Command::new(cargo);
    install
        .current_dir(root)
        .args(["install", "cargo-llvm-cov", "--locked"]);
    run_checked(install, "cargo install cargo-llvm-cov --locked").context(
        "could not install cargo-llvm-cov (crates.io must be reachable); install it by hand",
    )?;
    match version() {
        Some(v) => {
            println!("coverage: installed {v}");
            Ok(())
        }
        None => bail!(
            "`cargo install cargo-llvm-cov` succeeded but `cargo llvm-cov --version` still fails: \
             is cargo's bin directory (~/.cargo/bin) on the PATH?"
        ),
    }
}

/// llvm-cov and llvm-profdata of the toolchain (where cargo-llvm-cov looks for them), or
/// `LLVM_COV` and `LLVM_PROFDATA`; else `rustup component add llvm-tools` (unless
/// `no_install`).
fn ensure_llvm_tools(root: &Path, no_install: bool) -> Result<()> {
    if std::env::var_os("LLVM_COV").is_some() && std::env::var_os("LLVM_PROFDATA").is_some() {
        return Ok(());
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .current_dir(root)
        .args(["--print", "target-libdir"])
        .output()
        .context("running `rustc --print target-libdir`")?;
    if !out.status.success() {
        bail!(
            "`rustc --print target-libdir` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // <sysroot>/lib/rustlib/<host>/lib -> <sysroot>/lib/rustlib/<host>/bin
    let libdir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let bin = libdir.with_file_name("bin");
    let present = || bin.join("llvm-cov").is_file() && bin.join("llvm-profdata").is_file();
    if present() {
        return Ok(());
    }
    if no_install {
        bail!(
            "the llvm-tools component is missing (no llvm-cov/llvm-profdata in {}); install it \
             with `rustup component add llvm-tools`, or run without --no-install",
            bin.display()
        );
    }
    println!(
        "coverage: llvm-cov/llvm-profdata are missing; installing: rustup component add llvm-tools"
    );
    let mut add = Command::new("rustup");
    add.current_dir(root)
        .args(["component", "add", "llvm-tools"]);
    run_checked(add, "rustup component add llvm-tools").context(
        "could not install the llvm-tools component (a rustup toolchain is needed; otherwise \
         set LLVM_COV and LLVM_PROFDATA to an llvm-cov and llvm-profdata of the same LLVM \
         version as rustc)",
    )?;
    if !present() {
        bail!(
            "`rustup component add llvm-tools` succeeded but {} has no llvm-cov/llvm-profdata",
            bin.display()
        );
    }
    Ok(())
}

/// Runs a command with inherited output; an error names it and its status.
fn run_checked(mut cmd: Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("`{what}` could not start"))?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    Ok(())
}

/// The `KEY=VALUE` lines of `cargo llvm-cov show-env` (values quoted for a POSIX shell).
fn parse_show_env(text: &str) -> Result<Vec<(String, String)>> {
    let mut env = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (key, value) = line
            .split_once('=')
            .with_context(|| format!("unexpected line from `cargo llvm-cov show-env`: {line}"))?;
        env.push((key.to_string(), unquote(value)?));
    }
    if !env.iter().any(|(k, _)| k == "LLVM_PROFILE_FILE") {
        bail!("`cargo llvm-cov show-env` did not set LLVM_PROFILE_FILE:\n{text}");
    }
    Ok(env)
}

/// A word quoted for a POSIX shell: '…' literally, "…" with \-escapes, \x outside quotes.
fn unquote(word: &str) -> Result<String> {
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => loop {
                match chars.next() {
                    Some('\'') => break,
                    Some(c) => out.push(c),
                    None => bail!("unterminated ' in {word}"),
                }
            },
            '"' => loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c @ ('"' | '\\' | '$' | '`')) => out.push(c),
                        Some(c) => {
                            out.push('\\');
                            out.push(c);
                        }
                        None => bail!("unterminated \" in {word}"),
                    },
                    Some(c) => out.push(c),
                    None => bail!("unterminated \" in {word}"),
                }
            },
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The per-file line summaries of an `llvm-cov export` JSON added up per crate (the files
/// under `<crate dir>/src/`), in the order of `crates`.
fn group(json: &Value, root: &Path, crates: &[(String, PathBuf)]) -> Result<Vec<(String, Lines)>> {
    let mut sums: BTreeMap<&str, Lines> = crates
        .iter()
        .map(|(n, _)| (n.as_str(), Lines::default()))
        .collect();
    let data = json["data"]
        .as_array()
        .context("coverage JSON without `data`")?;
    for export in data {
        for file in export["files"].as_array().into_iter().flatten() {
            let Some(name) = file["filename"].as_str() else {
                continue;
            };
            let path = root.join(name); // absolute stays absolute
            let Some((krate, _)) = crates
                .iter()
                .find(|(_, dir)| path.starts_with(dir.join("src")))
            else {
                continue;
            };
            let lines = &file["summary"]["lines"];
            let (Some(count), Some(covered)) = (lines["count"].as_u64(), lines["covered"].as_u64())
            else {
                bail!("coverage JSON: no line summary for {name}");
            };
            sums.get_mut(krate.as_str())
                .expect("every crate has an entry")
                .add(Lines { covered, count });
        }
    }
    Ok(crates
        .iter()
        .map(|(n, _)| (n.clone(), sums[n.as_str()]))
        .collect())
}

/// The table, as Markdown (which also reads well on a terminal), with the total.
fn markdown(per_crate: &[(String, Lines)]) -> String {
    let mut total = Lines::default();
    let width = per_crate
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0)
        .max("**total**".len());
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| {:width$} | lines covered | lines | percent |",
        "crate"
    );
    let _ = writeln!(
        s,
        "|{}|--------------:|------:|--------:|",
        "-".repeat(width + 2)
    );
    for (name, lines) in per_crate {
        total.add(*lines);
        let _ = writeln!(
            s,
            "| {name:width$} | {:>13} | {:>5} | {:>7} |",
            lines.covered,
            lines.count,
            lines.percent()
        );
    }
    let _ = writeln!(
        s,
        "| {:width$} | {:>13} | {:>5} | {:>7} |",
        "**total**",
        total.covered,
        total.count,
        total.percent()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn show_env_values_are_unquoted() {
        let env = parse_show_env(
            "RUSTC_WRAPPER=/root/.cargo/bin/cargo-llvm-cov\n\
             X='-C instrument-coverage --cfg=coverage'\n\
             Y='it'\\''s'\n\
             LLVM_PROFILE_FILE=/t/llvm-cov-target/main-%p-%m.profraw\n",
        )
        .unwrap();
        assert_eq!(
            env,
            [
                ("RUSTC_WRAPPER", "/root/.cargo/bin/cargo-llvm-cov"),
                ("X", "-C instrument-coverage --cfg=coverage"),
                ("Y", "it's"),
                ("LLVM_PROFILE_FILE", "/t/llvm-cov-target/main-%p-%m.profraw"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert!(parse_show_env("X=1\n").is_err());
    }

    #[test]
    fn files_are_grouped_by_crate_src() {
        let root = Path::new("/ws");
        let crates = vec![
            ("kopf".to_string(), root.join("crates/kopf")),
            ("kopf-core".to_string(), root.join("crates/kopf-core")),
        ];
        let file = |name: &str, covered: u64, count: u64| json!({"filename": name, "summary": {"lines": {"covered": covered, "count": count}}});
        let json = json!({"data": [{"files": [
            file("/ws/crates/kopf/src/lib.rs", 3, 4),
            file("/ws/crates/kopf/src/a/b.rs", 1, 6),
            file("crates/kopf-core/src/lib.rs", 0, 5),
            file("/ws/crates/kopf/tests/x.rs", 9, 9),
            file("/ws/xtask/src/main.rs", 9, 9),
        ]}]});
        let per_crate = group(&json, root, &crates).unwrap();
        assert_eq!(
            per_crate,
            [
                (
                    "kopf".to_string(),
                    Lines {
                        covered: 4,
                        count: 10
                    }
                ),
                (
                    "kopf-core".to_string(),
                    Lines {
                        covered: 0,
                        count: 5
                    }
                ),
            ]
        );
        let table = markdown(&per_crate);
        assert!(
            table.contains("| kopf      |             4 |    10 |   40.0% |"),
            "{table}"
        );
        assert!(
            table.contains("| **total** |             4 |    15 |   26.7% |"),
            "{table}"
        );
    }
}
