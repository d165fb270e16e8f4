//! Part of `cargo xtask layout`: **the facade's doc examples compile for a user who depends
//! on `kopf` only.** A code block in the doc comments (`///`, `//!`) of `crates/kopf/src`
//! may not name the inner crates (`kopf_core::`, `kopf_watch::`...): a user who copies it
//! has `kopf` in their dependencies, not those, and everything the examples need is
//! re-exported by `kopf`. Nor may it call `tracing::` directly: `kopf::tracing::info!` works
//! without a dependency on `tracing`.
//!
//! Only the facade's own doc comments are checked. The inner crates' doc examples are
//! compiled as their own crates' doctests, where `kopf` is not a dependency, so they use
//! their crate's path; rustdoc shows them unchanged on the re-exported items' pages.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// What a doc example of the facade may not name (a path must be preceded by a character
/// that cannot continue one: `kopf::tracing::` is fine, `tracing::` is not).
const FORBIDDEN: &[&str] = &[
    "kopf_core::",
    "kopf_watch::",
    "kopf_diff::",
    "kopf_peering::",
    "kopf_admission::",
    "kopf_testing::",
    "kopf_macros::",
    "tracing::",
];

/// A doc example's line that names a forbidden path.
#[derive(Debug, PartialEq, Eq)]
pub struct Finding {
    /// The file.
    pub path: PathBuf,
    /// The line number (1-based).
    pub line: usize,
    /// The path named.
    pub named: &'static str,
    /// The line, trimmed.
    pub text: String,
}

/// The text of a doc comment line (`///` or `//!`), None for other lines.
fn doc_text(line: &str) -> Option<&str> {
    let t = line.trim_start();
    t.strip_prefix("///")
        .or_else(|| t.strip_prefix("//!"))
        .filter(|_| !t.starts_with("////"))
}

/// The forbidden paths a line names (not preceded by an identifier character or `:`).
fn forbidden_in(text: &str) -> Vec<&'static str> {
    FORBIDDEN
        .iter()
        .copied()
        .filter(|name| {
            text.match_indices(name).any(|(at, _)| {
                !text[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            })
        })
        .collect()
}

/// The findings in one file's text: lines inside fenced code blocks of doc comments.
pub fn check_text(path: &Path, text: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut in_block = false;
    for (i, line) in text.lines().enumerate() {
        let Some(doc) = doc_text(line) else {
            in_block = false;
            continue;
        };
        if doc.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            for named in forbidden_in(doc) {
                out.push(Finding {
                    path: path.to_path_buf(),
                    line: i + 1,
                    named,
                    text: doc.trim().to_string(),
                });
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Checks `crates/kopf/src` under the workspace root; prints the findings and returns how
/// many there are.
pub fn check(root: &Path) -> Result<usize> {
    let src = root.join("crates/kopf/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files)?;
    files.sort();
    let mut findings = Vec::new();
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        findings.extend(check_text(file, &text));
    }
    println!(
        "kopf's doc examples: {} file(s), {} naming a path a user of `kopf` does not have",
        files.len(),
        findings.len()
    );
    for f in &findings {
        let rel = f.path.strip_prefix(root).unwrap_or(&f.path).display();
        let fix = if f.named == "tracing::" {
            "`kopf::tracing::`"
        } else {
            "the `kopf::` path that re-exports it"
        };
        println!(
            "  NOT KOPF: {rel}:{}: a doc example names `{}` (write {fix}): {}",
            f.line, f.named, f.text
        );
    }
    Ok(findings.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_crate_paths_in_doc_examples_are_found_and_prose_is_not() {
        let text = "\
/// Prose may link [`X`](kopf_core::X) and say `kopf_watch::Y`.
///
/// ```
/// use kopf_core::handler::Options;
/// kopf::tracing::info!(\"fine\");
/// tracing::warn!(\"not fine\");
/// let layer = tracing_subscriber::fmt::layer();
/// ```
fn f() {}
//! ```rust
//! let x = kopf_peering::PEERING_YAML;
//! ```
// ```
// kopf_diff::diff
";
        let found = check_text(Path::new("x.rs"), text);
        let got: Vec<(usize, &str)> = found.iter().map(|f| (f.line, f.named)).collect();
        assert_eq!(
            got,
            vec![(4, "kopf_core::"), (6, "tracing::"), (11, "kopf_peering::")]
        );
    }

    #[test]
    fn the_facade_of_this_repository_passes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert_eq!(check(&root).expect("readable"), 0);
    }
}
