//! Part of `cargo xtask layout`: **kopf's public API stays small and its extractor list
//! stays true.**
//!
//! * The root of `kopf` has at most [`MAX_ROOT_ITEMS`] items: the names of its top-level
//!   `pub use`s and `pub` items of `crates/kopf/src/lib.rs`, and the `#[macro_export]` macros
//!   of the crate. Modules (`pub mod`, and `pub use` of a whole crate: `pub use tracing;`)
//!   are counted apart; the rest of the API lives in them (`kopf::handler`, ...).
//! * The extractor list is written once, in `crates/kopf/src/extractors.md` (the docs of
//!   `kopf::handler`). It must name exactly the types that implement `FromCause` in the
//!   crates' code (under the names `kopf` exports them: `PatchHandle as Patch`), and the
//!   compiler's note for a type that is not an extractor (`#[diagnostic::on_unimplemented]`
//!   in `crates/kopf-core/src/extract.rs`) must name the same ones.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The most items the root of `kopf` may have (modules not counted).
pub const MAX_ROOT_ITEMS: usize = 40;

/// The root of `kopf`, counted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Root {
    /// Items (types, functions, macros... by name; a name in two namespaces once).
    pub items: BTreeSet<String>,
    /// Modules, and crates re-exported whole.
    pub modules: BTreeSet<String>,
}

/// The code of a file before its test module (`#[cfg(test)]` followed by `mod`), with
/// `//` comments (doc comments included) removed.
fn non_test_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            break;
        }
        let code = match t.find("//") {
            Some(0) => "",
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The top-level statements of a module's code (brace depth 0), each as one string; a
/// statement ends with `;` at depth 0 or with its closing brace.
fn top_level_statements(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut prev = ' ';
    for ch in code.chars() {
        if ch == '"' && prev != '\\' {
            in_string = !in_string;
        }
        cur.push(ch);
        if !in_string {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        out.push(std::mem::take(&mut cur));
                    }
                }
                ';' if depth == 0 => out.push(std::mem::take(&mut cur)),
                _ => {}
            }
        }
        prev = ch;
    }
    out.into_iter()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .collect()
}

/// The names a use tree brings in: `a::{b, c::{d, e as f}}` → `b`, `d`, `f`.
fn use_names(tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut depth = 0usize;
        let mut start = 0;
        for (i, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    use_names(&inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        use_names(&inner[start..], out);
        return;
    }
    if tree.is_empty() {
        return;
    }
    let name = match tree.split_once(" as ") {
        Some((_, alias)) => alias.trim(),
        None => tree.rsplit("::").next().unwrap_or(tree).trim(),
    };
    if name != "self" && name != "*" {
        out.push(name.to_string());
    }
}

/// Drops the attributes (`#[...]`) before a statement.
fn strip_attributes(mut s: &str) -> &str {
    loop {
        s = s.trim_start();
        if !s.starts_with("#[") {
            return s;
        }
        let mut depth = 0usize;
        let mut end = s.len();
        for (i, ch) in s.char_indices() {
            match ch {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        s = &s[end..];
    }
}

/// The root of a crate from its `lib.rs` (non-test code) and the crate's `#[macro_export]`
/// macros.
pub fn count_root(lib: &str, macros: &[String]) -> Root {
    let mut root = Root::default();
    for stmt in top_level_statements(&non_test_code(lib)) {
        let stmt = strip_attributes(&stmt);
        if let Some(tree) = stmt.strip_prefix("pub use ") {
            let tree = tree.trim_end_matches(';').trim();
            // `pub use tracing;`, `pub use kopf_peering as peering;`: a crate, re-exported
            // whole (under its name or another).
            let path = tree.split(" as ").next().unwrap_or(tree);
            if !path.contains("::") && !path.contains('{') {
                let mut names = Vec::new();
                use_names(tree, &mut names);
                root.modules.extend(names);
                continue;
            }
            let mut names = Vec::new();
            use_names(tree, &mut names);
            root.items.extend(names);
        } else if let Some(rest) = stmt.strip_prefix("pub mod ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            root.modules.insert(name);
        } else if let Some(rest) = stmt.strip_prefix("pub ") {
            let rest = rest
                .trim_start_matches("async ")
                .trim_start_matches("unsafe ");
            for kind in [
                "fn ", "struct ", "enum ", "const ", "static ", "type ", "trait ",
            ] {
                if let Some(after) = rest.strip_prefix(kind) {
                    let name: String = after
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    root.items.insert(name);
                }
            }
        }
    }
    root.items.extend(macros.iter().cloned());
    root
}

/// The names of the `#[macro_export]` macros in a file.
fn exported_macros(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut exported = false;
    for line in text.lines() {
        let t = line.trim();
        if t == "#[macro_export]" {
            exported = true;
        } else if let Some(rest) = t.strip_prefix("macro_rules!").filter(|_| exported) {
            let name: String = rest
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
            exported = false;
        } else if !t.starts_with("#[") && !t.starts_with("//") {
            exported = false;
        }
    }
    out
}

/// The extractor names of the table in `extractors.md`: its first column, without generics.
pub fn table_names(md: &str) -> BTreeSet<String> {
    md.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(|n| n.split('<').next().unwrap_or(n).trim().to_string())
        .collect()
}

/// The names in the compiler's note: `note = "handler arguments are extractors: A, B<T>,
/// ..., or the whole Cause"`.
pub fn note_names(extract_rs: &str) -> Option<BTreeSet<String>> {
    let start = extract_rs.find("handler arguments are extractors:")?;
    let rest = &extract_rs[start + "handler arguments are extractors:".len()..];
    let list = &rest[..rest.find('"')?];
    let mut names = BTreeSet::new();
    let mut depth = 0usize;
    let mut cur = String::new();
    for ch in list.chars().chain(std::iter::once(',')) {
        match ch {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                let item = cur.trim().trim_start_matches("or the whole ").trim();
                let item = item.trim_start_matches("or ").trim();
                let item = item.split(" (").next().unwrap_or(item);
                let name = item.split('<').next().unwrap_or(item).trim();
                if !name.is_empty() {
                    names.insert(name.to_string());
                }
                cur.clear();
                continue;
            }
            _ => {}
        }
        if depth == 0 && ch != '>' {
            cur.push(ch);
        }
    }
    Some(names)
}

/// The types that implement `FromCause` in a file's non-test code.
pub fn from_cause_impls(text: &str) -> Vec<String> {
    let code = non_test_code(text);
    let mut out = Vec::new();
    for (at, _) in code.match_indices("FromCause for ") {
        let line_start = code[..at].rfind('\n').map_or(0, |i| i + 1);
        if !code[line_start..at].trim_start().starts_with("impl") {
            continue;
        }
        let name: String = code[at + "FromCause for ".len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        out.push(name);
    }
    out
}

/// `X as Y` renames in a file's `pub use`s.
fn renames(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices(" as ") {
        let before: String = text[..at]
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let after: String = text[at + 4..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !before.is_empty() && !after.is_empty() {
            out.push((before, after));
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
    Ok(())
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Prints a difference between two lists of extractors; returns 1 if there is one.
fn compare(what: &str, expected: &BTreeSet<String>, got: &BTreeSet<String>) -> usize {
    let missing: Vec<_> = expected.difference(got).collect();
    let extra: Vec<_> = got.difference(expected).collect();
    if missing.is_empty() && extra.is_empty() {
        return 0;
    }
    println!("  EXTRACTORS: {what}: lacks {missing:?}, has more {extra:?}");
    1
}

/// Checks the workspace under `root`; prints the report and returns the count of problems.
pub fn check(root: &Path) -> Result<usize> {
    let src = root.join("crates/kopf/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files)?;
    let mut macros = Vec::new();
    for f in &files {
        macros.extend(exported_macros(&read(f)?));
    }
    let counted = count_root(&read(&src.join("lib.rs"))?, &macros);
    let mut failures = 0;
    println!(
        "kopf's root: {} item(s) (at most {MAX_ROOT_ITEMS}), {} module(s)",
        counted.items.len(),
        counted.modules.len()
    );
    if counted.items.len() > MAX_ROOT_ITEMS {
        failures += 1;
        println!(
            "  ROOT: kopf has {} root items, more than {MAX_ROOT_ITEMS}: put the new ones in a module ({:?})",
            counted.items.len(),
            counted.items
        );
    }

    let table = table_names(&read(&src.join("extractors.md"))?);
    let handler = read(&src.join("handler.rs"))?;
    let renamed = renames(&handler);
    let mut code = BTreeSet::new();
    let mut crates = Vec::new();
    rust_files(&root.join("crates"), &mut crates)?;
    for f in crates
        .iter()
        .filter(|f| f.components().any(|c| c.as_os_str() == "src"))
    {
        for name in from_cause_impls(&read(f)?) {
            let shown = renamed
                .iter()
                .find(|(from, _)| *from == name)
                .map_or(name.clone(), |(_, to)| to.clone());
            code.insert(shown);
        }
    }
    failures += compare(
        "crates/kopf/src/extractors.md against the types that implement FromCause",
        &code,
        &table,
    );
    let extract = root.join("crates/kopf-core/src/extract.rs");
    match note_names(&read(&extract)?) {
        Some(note) => {
            failures += compare(
                "the note of FromCause in crates/kopf-core/src/extract.rs against extractors.md",
                &table,
                &note,
            )
        }
        None => {
            failures += 1;
            println!("  EXTRACTORS: no \"handler arguments are extractors:\" note in extract.rs");
        }
    }
    println!(
        "kopf's extractors: {} in extractors.md, {} types implement FromCause",
        table.len(),
        code.len()
    );
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_counts_items_and_macros_and_sets_modules_apart() {
        let lib = "\
//! Docs that say pub use nothing::{A, B};
pub mod cli;
mod private;
pub use tracing;
pub use kopf_peering as peering;
#[cfg(feature = \"x\")]
pub use a::b::{C, D as E, f::{G, self}};
pub use error::Error;
pub fn run() {}
pub mod inline {
    pub use inner::{H, I};
}
#[cfg(test)]
mod tests {
    pub use z::Z;
}
";
        let root = count_root(lib, &["run".into(), "about".into()]);
        let items: Vec<_> = root.items.iter().map(String::as_str).collect();
        assert_eq!(items, ["C", "E", "Error", "G", "about", "run"]);
        let modules: Vec<_> = root.modules.iter().map(String::as_str).collect();
        assert_eq!(modules, ["cli", "inline", "peering", "tracing"]);
    }

    #[test]
    fn a_note_and_a_table_list_the_same_names() {
        let note = r#"note = "handler arguments are extractors: Spec<T>, Index<K, V>, Name, or the whole Cause (see x)""#;
        let table = "| extractor | what |\n|---|---|\n| `Spec<T>` | x |\n| `Index<K, V>` | y |\n| `Name` | z |\n| `Cause` | all |\n";
        assert_eq!(note_names(note), Some(table_names(table)));
        assert_eq!(table_names(table).len(), 4);
    }

    #[test]
    fn impls_in_test_modules_and_comments_are_not_extractors() {
        let text = "\
impl FromCause for Body {}
impl<T: Send> FromCause for Spec<T> {}
// impl FromCause for Commented {}
#[cfg(test)]
mod tests {
    impl FromCause for Fake {}
}
";
        assert_eq!(from_cause_impls(text), ["Body", "Spec"]);
    }

    #[test]
    fn the_api_of_this_repository_passes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert_eq!(check(&root).expect("readable"), 0);
    }
}
