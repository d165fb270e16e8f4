//! The verdict's table: one [`Row`] per invariant, and its rendering.

use std::fmt::Write as _;

/// How many detail lines a row prints at most.
const MAX_DETAILS: usize = 25;

/// One invariant's outcome: a row of the table, with what is wrong (or notable) below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The invariant.
    pub name: &'static str,
    /// What a correct operator shows.
    pub expected: String,
    /// What the run showed.
    pub seen: String,
    /// Whether it holds.
    pub ok: bool,
    /// The violations (for a FAIL), or notes (e.g. explained duplicates).
    pub details: Vec<String>,
}

impl Row {
    pub(super) fn new(
        name: &'static str,
        expected: impl Into<String>,
        seen: impl Into<String>,
        ok: bool,
    ) -> Row {
        Row {
            name,
            expected: expected.into(),
            seen: seen.into(),
            ok,
            details: Vec::new(),
        }
    }

    pub(super) fn with(mut self, details: Vec<String>) -> Row {
        self.details = details;
        self
    }
}

/// The table: one row per invariant, then the details of each row.
pub fn render(rows: &[Row]) -> String {
    let width = |f: &dyn Fn(&Row) -> usize, title: &str| {
        rows.iter().map(f).max().unwrap_or(0).max(title.len())
    };
    let wn = width(&|r| r.name.len(), "invariant");
    let we = width(&|r| r.expected.len(), "expected");
    let ws = width(&|r| r.seen.len(), "seen");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<wn$}  {:<we$}  {:<ws$}  verdict",
        "invariant", "expected", "seen"
    );
    let _ = writeln!(out, "{}", "-".repeat(wn + we + ws + 13));
    for r in rows {
        let verdict = if r.ok { "OK" } else { "FAIL" };
        let _ = writeln!(
            out,
            "{:<wn$}  {:<we$}  {:<ws$}  {verdict}",
            r.name, r.expected, r.seen
        );
    }
    for r in rows.iter().filter(|r| !r.details.is_empty()) {
        let _ = writeln!(
            out,
            "\n{} ({}):",
            r.name,
            if r.ok { "notes" } else { "FAIL" }
        );
        for d in r.details.iter().take(MAX_DETAILS) {
            let _ = writeln!(out, "  - {d}");
        }
        if r.details.len() > MAX_DETAILS {
            let _ = writeln!(out, "  ... and {} more", r.details.len() - MAX_DETAILS);
        }
    }
    out
}
