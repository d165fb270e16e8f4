//! Cargo, as the xtask commands use it: where the workspace and its build output are, and
//! builds that leave the next `cargo xtask` nothing to rebuild.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The cargo that runs this xtask (`$CARGO`), or the one on the PATH.
fn cargo_program() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// `cargo metadata --no-deps` of the workspace, parsed.
pub fn metadata() -> Result<Value> {
    let out = Command::new(cargo_program())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("running `cargo metadata`")?;
    if !out.status.success() {
        bail!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("parsing `cargo metadata`")
}

/// The workspace's root directory and its target directory.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The directory of the root `Cargo.toml`.
    pub root: PathBuf,
    /// Where cargo builds (`CARGO_TARGET_DIR` when set, as `cargo metadata` reports it).
    pub target: PathBuf,
}

impl Workspace {
    /// The workspace of the current directory, from `cargo metadata`.
    pub fn locate() -> Result<Self> {
        Self::from_metadata(&metadata()?)
    }

    /// The workspace described by an already read `cargo metadata`.
    pub fn from_metadata(meta: &Value) -> Result<Self> {
        let field = |key: &str| {
            meta[key]
                .as_str()
                .map(PathBuf::from)
                .with_context(|| format!("`cargo metadata` has no {key}"))
        };
        Ok(Self {
            root: field("workspace_root")?,
            target: field("target_directory")?,
        })
    }
}

/// Runs `cargo <args>` in `root`, printing the command after `who: `; an error when it fails.
///
/// `cargo xtask` gave this process the package variables of xtask (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_NAME`...). Build scripts that rerun when those change (ring's) would be
/// rebuilt by this cargo, and again by the next `cargo xtask`, at every run: they are
/// removed from the child's environment.
pub fn run(root: &Path, args: &[&str], who: &str) -> Result<()> {
    run_with_env(root, args, &[], who)
}

/// [`run`] with these variables set in cargo's environment (and so its tests').
pub fn run_with_env(root: &Path, args: &[&str], env: &[(&str, &str)], who: &str) -> Result<()> {
    println!("{who}: cargo {}", args.join(" "));
    let mut command = command(root, args);
    command.envs(env.iter().copied());
    let status = command
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// `cargo <args>` in `root`, not started, without xtask's package variables (see [`run`]).
pub fn command(root: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(cargo_program());
    command.args(args).current_dir(root);
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|prefix| key_text.starts_with(prefix))
            || key_text == "OUT_DIR"
        {
            command.env_remove(&key);
        }
    }
    command
}
