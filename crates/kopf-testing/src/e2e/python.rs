//! Python for compatibility tests: an interpreter with the packages a test drives (the
//! `kubernetes` client, Python Kopf), from `KOPF_TEST_PYTHON` or a venv made on first use.
//!
//! Tests that run Python Kopf or the Python client against the fake server call
//! [`interpreter`] once; the venv (`<target>/python-venv`) is created with `python3 -m venv`
//! and filled from PyPI the first time, and reused afterwards. Without Python 3 (with `venv`
//! and `pip`) or PyPI the call fails and says what is missing; tests leave themselves out
//! only when told to (`cargo test -- --skip python_`), never silently.
//!
//! ```no_run
//! let python = kopf_testing::e2e::python::interpreter(&["kopf==1.45.*"]).expect("Python with Kopf");
//! let status = std::process::Command::new(python).args(["-m", "kopf", "--version"]).status();
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Why no interpreter could be had.
#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    /// `KOPF_TEST_PYTHON` names an interpreter that lacks the packages.
    #[error(
        "KOPF_TEST_PYTHON={python} cannot import {modules}: install {packages:?} into it, or unset it to let the tests make their own venv"
    )]
    Lacking {
        /// The interpreter.
        python: String,
        /// The modules it cannot import.
        modules: String,
        /// The packages to install.
        packages: Vec<String>,
    },
    /// A step of making the venv failed.
    #[error("{step} failed: {output}")]
    Step {
        /// What was run.
        step: String,
        /// Its status and output, or why it did not start.
        output: String,
    },
}

/// The module a pip requirement provides (`kopf==1.45.*` → `kopf`).
fn module_of(package: &str) -> String {
    package
        .split(['=', '<', '>', '!', '~', '[', ';', ' '])
        .next()
        .unwrap_or(package)
        .replace('-', "_")
}

fn imports(python: &Path, modules: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(step: &str, cmd: &mut Command) -> Result<(), PythonError> {
    let failed = |output: String| PythonError::Step {
        step: step.to_string(),
        output,
    };
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(failed(format!(
            "{}:\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ))),
        Err(e) => Err(failed(format!("it could not start: {e}"))),
    }
}

/// The target directory of the build: `CARGO_TARGET_DIR`, else `target` beside the nearest
/// `Cargo.lock` above the current directory (the workspace's; tests run in their package's
/// directory), else `./target`.
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    here.ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(&here)
        .join("target")
}

/// A Python interpreter that imports the modules of `packages` (pip requirements):
/// `KOPF_TEST_PYTHON` if set (it must already have them), else the venv
/// `<target>/python-venv`, created and given the packages on first use. Calls are
/// serialised within a process, so parallel tests make the venv once.
pub fn interpreter(packages: &[&str]) -> Result<PathBuf, PythonError> {
    static MAKING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let modules = packages
        .iter()
        .map(|p| module_of(p))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(python) = std::env::var_os("KOPF_TEST_PYTHON") {
        let python = PathBuf::from(python);
        if imports(&python, &modules) {
            return Ok(python);
        }
        return Err(PythonError::Lacking {
            python: python.display().to_string(),
            modules,
            packages: packages.iter().map(|p| p.to_string()).collect(),
        });
    }
    let venv = target_dir().join("python-venv");
    let python = venv.join("bin/python");
    if python.is_file() && imports(&python, &modules) {
        return Ok(python);
    }
    if !python.is_file() {
        run(
            "python3 -m venv (Python 3 with its venv module is a prerequisite of the tests)",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        )?;
    }
    run(
        "pip install of the Python packages the compatibility tests drive (PyPI must be reachable)",
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(packages),
    )?;
    Ok(python)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_name_their_modules() {
        assert_eq!(module_of("kopf==1.45.*"), "kopf");
        assert_eq!(module_of("kubernetes>=31,<40"), "kubernetes");
        assert_eq!(module_of("typing-extensions"), "typing_extensions");
    }
}
