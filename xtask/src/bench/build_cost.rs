//! `cargo xtask bench build`: what a production operator costs to build, beside a plain
//! kube-rs controller.
//!
//! Two first debug builds, each from an empty target directory of its own, one after the
//! other on the same machine:
//!
//! 1. `examples/my-operator` (kopf with its default features, as a user's release binary
//!    depends on it), built in this workspace with its lock;
//! 2. the `kube-rs` system of `cargo xtask bench` (`bench/systems/src/bin/kube_rs_operator.rs`
//!    and the systems' shared `lib.rs`, a `kube::runtime::Controller`), as a crate of its own
//!    in a scratch directory, with this workspace's `Cargo.lock` copied in so that every
//!    shared crate has the same version.
//!
//! For each: the wall time of `cargo build` (the whole command, as a user waits for it), the
//! crates of its normal dependency tree (`cargo tree -e normal --prefix none`, repeats
//! removed) and the target directory's size; then the ratios. The target directories are
//! removed afterwards (several GB) unless `--keep`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// One measured build.
struct Built {
    what: &'static str,
    seconds: f64,
    crates: usize,
    target_bytes: u64,
}

/// Runs both builds and prints the table and the ratios.
pub fn run(root: &Path, keep: bool) -> Result<()> {
    let scratch = root.join("target/build-cost");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)
            .with_context(|| format!("removing {}", scratch.display()))?;
    }
    let kube_rs = scratch.join("kube-rs-controller");
    write_kube_rs_crate(root, &kube_rs)?;
    println!("bench build: first debug builds from empty target directories, one after the other");
    let kopf = measure(
        "my-operator (kopf-rs)",
        root,
        &["-p", "my-operator"],
        &scratch.join("target-my-operator"),
    )?;
    let kube = measure(
        "kube-rs Controller",
        &kube_rs,
        &[],
        &scratch.join("target-kube-rs"),
    )?;
    print_table(&[&kopf, &kube]);
    if !keep {
        for dir in ["target-my-operator", "target-kube-rs"] {
            let _ = std::fs::remove_dir_all(scratch.join(dir));
        }
    }
    Ok(())
}

/// The kube-rs system as a crate of its own: its manifest names the same dependencies as
/// bench-systems needs for it, and the sources are the systems' own files (by path).
fn write_kube_rs_crate(root: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let systems = root.join("bench/systems/src");
    let manifest = format!(
        r#"[package]
name = "bench-systems"
version = "0.1.0"
edition = "2024"
publish = false

[workspace]

[lib]
path = "{lib}"

[[bin]]
name = "kube-rs-operator"
path = "{bin}"

[dependencies]
anyhow = "1"
futures = {{ version = "0.3", default-features = false, features = ["std", "async-await"] }}
k8s-openapi = {{ version = "0.29", default-features = false, features = ["v1_33"] }}
kube = {{ version = "5.0", default-features = false, features = ["client", "rustls-tls", "ring", "runtime", "jsonpatch"] }}
serde_json = "1"
tokio = {{ version = "1", features = ["rt-multi-thread", "macros", "net", "sync", "time", "signal", "io-util"] }}
tracing = "0.1"
tracing-subscriber = {{ version = "0.3", features = ["env-filter", "fmt", "json"] }}
"#,
        lib = systems.join("lib.rs").display(),
        bin = systems.join("bin/kube_rs_operator.rs").display(),
    );
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).context("copying Cargo.lock")?;
    Ok(())
}

/// `cargo build` in `dir` with `args`, into the empty `target`, timed; then its tree.
fn measure(what: &'static str, dir: &Path, args: &[&str], target: &Path) -> Result<Built> {
    println!("bench build: {what}: cargo build {}", args.join(" "));
    let start = Instant::now();
    let status = cargo(dir, target)
        .arg("build")
        .args(args)
        .status()
        .with_context(|| format!("building {what}"))?;
    let seconds = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!("building {what} failed ({status})");
    }
    Ok(Built {
        what,
        seconds,
        crates: tree_size(dir, args, target)?,
        target_bytes: dir_size(target),
    })
}

/// A cargo command in `dir` building into `target`, without xtask's package variables.
fn cargo(dir: &Path, target: &Path) -> Command {
    let mut command = crate::cargo::command(dir, &[]);
    command.env("CARGO_TARGET_DIR", target);
    command
}

/// The crates of the normal dependency tree, each once (the package itself included).
fn tree_size(dir: &Path, args: &[&str], target: &Path) -> Result<usize> {
    let out = cargo(dir, target)
        .args(["tree", "-e", "normal", "--prefix", "none"])
        .args(args)
        .output()
        .context("running cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(unique_crates(&text))
}

/// The distinct `name version` pairs of `cargo tree --prefix none` output.
fn unique_crates(text: &str) -> usize {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?, words.next()?))
        })
        .collect::<BTreeSet<_>>()
        .len()
}

/// The bytes of the files under `dir`.
fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

fn print_table(rows: &[&Built]) {
    println!();
    println!(
        "{:<24} {:>12} {:>8} {:>10}",
        "build", "first build", "crates", "target"
    );
    for b in rows {
        println!(
            "{:<24} {:>10.1} s {:>8} {:>7.2} GB",
            b.what,
            b.seconds,
            b.crates,
            b.target_bytes as f64 / 1e9
        );
    }
    if let [kopf, kube] = rows {
        println!(
            "ratio (kopf-rs / kube-rs): build time {:.2}x, crates {:.2}x, target {:.2}x",
            kopf.seconds / kube.seconds,
            kopf.crates as f64 / kube.crates as f64,
            kopf.target_bytes as f64 / kube.target_bytes as f64
        );
    }
}

#[cfg(test)]
mod tests {
    use super::unique_crates;

    #[test]
    fn a_crate_seen_twice_counts_once_and_versions_apart_count_twice() {
        let tree = "my-operator v0.1.0 (/x)\nkube v5.0.0\nserde v1.0.1\nserde v1.0.1 (*)\n\
                    syn v1.0.0\nsyn v2.0.0\n";
        assert_eq!(unique_crates(tree), 5);
    }
}
