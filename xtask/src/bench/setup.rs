//! What a run needs besides the builds: Kopf in a venv, and the machine described for the report.

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use anyhow::{Context, Result, bail};

/// A venv with Kopf 1.45 from PyPI (created once in target/bench/venv).
pub(super) fn kopf_venv(out_dir: &Path) -> Result<PathBuf> {
    let venv = out_dir.join("venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        println!("== python3 -m venv {}", venv.display());
        let status = StdCommand::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .context("python3 is needed for the Kopf system")?;
        if !status.success() {
            bail!("python3 -m venv failed");
        }
    }
    let ok = StdCommand::new(&python)
        .args(["-c", "import kopf"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("== pip install kopf==1.45.*");
        let status = StdCommand::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "kopf==1.45.*",
            ])
            .status()
            .context("running pip")?;
        if !status.success() {
            bail!("pip install kopf==1.45.* failed (is PyPI reachable?)");
        }
    }
    Ok(python)
}

pub(super) fn run_text(program: &str, args: &[&str]) -> String {
    StdCommand::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// CPU, cores, memory, kernel and tool versions.
pub(super) fn machine(python: Option<&Path>) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut text = format!(
        "{model}, {cores} cores, {mem_gib:.0} GiB; Linux {}; {}",
        run_text("uname", &["-r"]),
        run_text("rustc", &["--version"])
    );
    if let Some(python) = python {
        let py = python.display().to_string();
        text.push_str(&format!(
            "; {}; kopf {}",
            run_text(&py, &["--version"]),
            run_text(
                &py,
                &[
                    "-c",
                    "import importlib.metadata as m; print(m.version('kopf'))"
                ]
            )
        ));
    }
    text
}
