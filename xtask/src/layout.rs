//! `cargo xtask layout`: the house rules of the source tree, checked.
//!
//! * **No import circle between the modules of a crate.** The edges are what a module's code
//!   uses of another module of its crate: its `use crate::...`/`use super::...` statements
//!   and the `crate::...`/`super::...` paths in its code. Re-exports (`pub use`,
//!   `pub(crate) use`) are the crate's surface, not a dependency, and are not edges;
//!   neither is `mod x;`. The test modules at the end of files (`#[cfg(test)]` then `mod`)
//!   and `tests.rs` files are left out.
//! * **No source file over 800 lines of non-test code**, unless its first lines say why with
//!   a comment `// layout: <why this file is longer>` (listed in the report).
//!
//! * **ARCHITECTURE.md names only what exists**: every module path it names
//!   (`kopf_core::layers::finalizer`, `apiserver::http`; a last segment may be an item of the
//!   module) and every source file (`kopf-core/src/extract.rs`).
//! * **The facade's doc examples name only `kopf::` paths** (see `docpaths.rs`).
//! * **kopf's root stays small and its extractor list true** (see `api_surface.rs`).
//!
//! Every crate of the workspace is read (its `src/`); the report lists the circles, the long
//! files and the missing names, and the command fails if there is any.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The most lines of non-test code a source file may have.
const MAX_LINES: usize = 800;
/// The comment that lets a file be longer, with its reason.
const LONGER: &str = "// layout:";

/// One source file, read.
#[derive(Debug)]
struct Source {
    /// The module path in its crate (`""` for the crate root, `layers::retry`...).
    module: String,
    /// The file.
    path: PathBuf,
    /// The non-test code.
    code: String,
    /// Its lines.
    lines: usize,
    /// Why it may be longer, if it says.
    longer: Option<String>,
}

/// A crate's modules and the edges between them.
#[derive(Debug, Default)]
pub struct Graph {
    /// Module -> the modules it uses.
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

/// The module of a file under `src/`: `lib.rs`/`main.rs` the root, `a/mod.rs` and `a.rs`
/// `a`, `a/b.rs` `a::b`; `src/bin/*.rs` are crate roots of their own (None: not checked
/// as part of the library).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let mut names: Vec<String> = parts;
    let last = names.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if !(names.is_empty() && (stem == "lib" || stem == "main")) && stem != "mod" {
        names.push(stem.to_string());
    }
    Some(names.join("::"))
}

/// The code without its test modules: every `#[cfg(test)]` module, declared (`mod x;`) or
/// inline (`[pub(crate)] mod x { ... }`, to its closing brace), wherever it stands.
fn non_test(text: &str) -> String {
    let raw: Vec<&str> = text.split_inclusive('\n').collect();
    // Braces are counted on the text without comments and strings (same lines).
    let bare = strip(text);
    let bare: Vec<&str> = bare.split_inclusive('\n').collect();
    let is_mod = |line: &str| {
        let line = line.trim_start();
        let line = match line.strip_prefix("pub") {
            Some(rest) if rest.starts_with('(') => rest.find(')').map_or(rest, |i| &rest[i + 1..]),
            Some(rest) => rest,
            None => line,
        };
        line.trim_start().starts_with("mod ")
    };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < raw.len() {
        let gated = raw[i].trim_start().starts_with("#[cfg(test)]");
        // The item after the attribute (other attributes may stand between).
        let mut item = i + 1;
        while gated
            && raw
                .get(item)
                .is_some_and(|l| l.trim_start().starts_with("#["))
        {
            item += 1;
        }
        if !gated || !raw.get(item).is_some_and(|l| is_mod(l)) {
            out.push_str(raw[i]);
            i += 1;
            continue;
        }
        let mut depth: i64 = 0;
        let mut end = item;
        for (j, line) in bare.iter().enumerate().skip(item) {
            end = j;
            depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
            if depth <= 0 && (line.contains('}') || line.trim_end().ends_with(';')) {
                break;
            }
        }
        i = end + 1;
    }
    out
}

/// The text without comments and string literals (so that a path in a doc or a message is
/// not an edge).
fn strip(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut chars = code.chars().peekable();
    let mut prev = ' ';
    while let Some(c) = chars.next() {
        let word = prev.is_alphanumeric() || prev == '_';
        prev = c;
        match c {
            // A raw string (`r"..."`, `r#"..."#`, `br"..."`): to its closing quote and hashes.
            'r' if (!word || out.ends_with('b') && !out.ends_with("_b"))
                && matches!(chars.peek(), Some('"') | Some('#'))
                && raw_string_opens(&chars) =>
            {
                let mut hashes = 0;
                while chars.peek() == Some(&'#') {
                    chars.next();
                    hashes += 1;
                }
                chars.next(); // the opening quote
                let mut run: Option<usize> = None;
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    match (c, run) {
                        ('"', _) => run = Some(0),
                        ('#', Some(n)) => run = Some(n + 1),
                        _ => run = None,
                    }
                    if run == Some(hashes) {
                        break;
                    }
                }
                out.push_str("\"\"");
                prev = '"';
            }
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    if c == '\n' {
                        out.push('\n');
                    }
                    last = c;
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            '\'' => {
                // A char literal ('a', '\n', '{') or a lifetime ('a): skip a literal only.
                let rest: String = chars.clone().take(3).collect();
                let literal = rest.starts_with('\\') || rest.chars().nth(1) == Some('\'');
                if literal {
                    while let Some(c) = chars.next() {
                        if c == '\'' {
                            break;
                        }
                        if c == '\\' {
                            chars.next();
                        }
                    }
                    out.push_str("' '");
                } else {
                    out.push('\'');
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether the characters after an `r` open a raw string: hashes, then a quote.
fn raw_string_opens(chars: &std::iter::Peekable<std::str::Chars<'_>>) -> bool {
    chars.clone().find(|c| *c != '#') == Some('"')
}

/// The paths a `use` tree stands for: `crate::{a, b::{c, d}}` → `crate::a`, `crate::b::c`...;
/// an alias stays after a `~` (`a::X as Y` → `a::X~Y`).
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree: String = tree
        .replace(" as ", "~")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    fn go(prefix: &str, tree: &str, out: &mut Vec<String>) {
        match tree.find('{') {
            None => out.push(format!("{prefix}{tree}")),
            Some(open) => {
                let head = &tree[..open];
                let inner = tree[open + 1..]
                    .strip_suffix('}')
                    .unwrap_or(&tree[open + 1..]);
                let mut depth = 0;
                let mut start = 0;
                for (i, c) in inner.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            go(&format!("{prefix}{head}"), &inner[start..i], out);
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
                if start < inner.len() {
                    go(&format!("{prefix}{head}"), &inner[start..], out);
                }
            }
        }
    }
    let mut out = Vec::new();
    go("", &tree, &mut out);
    out
}

/// The `crate::`/`super::` paths a module's code uses (re-exports left out).
fn used_paths(code: &str) -> Vec<String> {
    let code = strip(code);
    let mut paths = Vec::new();
    // `use` statements, possibly over several lines; re-exports are not edges.
    let mut rest = code.as_str();
    let mut in_code = String::new();
    while let Some(at) = find_use(rest) {
        in_code.push_str(&rest[..at.start]);
        let stmt = &rest[at.start..];
        let end = stmt.find(';').unwrap_or(stmt.len());
        if !at.reexport {
            let tree = stmt[at.keyword_len..end].trim();
            paths.extend(
                expand(tree)
                    .into_iter()
                    .filter(|p| p.starts_with("crate::") || p.starts_with("super::")),
            );
        }
        rest = &stmt[(end + 1).min(stmt.len())..];
    }
    in_code.push_str(rest);
    // Paths in the code itself.
    for anchor in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = in_code[from..].find(anchor) {
            let start = from + i;
            let before = in_code[..start].chars().next_back();
            from = start + anchor.len();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let tail: String = in_code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push(tail);
        }
    }
    paths
}

/// The names a module re-exports (`pub use`, `pub(crate) use`) and the paths they stand for,
/// as written there.
fn reexports(code: &str) -> BTreeMap<String, String> {
    let code = strip(code);
    let mut out = BTreeMap::new();
    let mut rest = code.as_str();
    while let Some(at) = find_use(rest) {
        let stmt = &rest[at.start..];
        let end = stmt.find(';').unwrap_or(stmt.len());
        if at.reexport {
            for path in expand(stmt[at.keyword_len..end].trim()) {
                let (path, name) = match path.split_once('~') {
                    Some((path, alias)) => (path.to_string(), alias.to_string()),
                    None => {
                        let name = path.rsplit("::").next().unwrap_or_default().to_string();
                        (path, name)
                    }
                };
                if name != "*" && name != "self" && !name.is_empty() {
                    out.insert(name, path);
                }
            }
        }
        rest = &stmt[(end + 1).min(stmt.len())..];
    }
    out
}

/// Where a `use` statement starts in `text`.
struct UseAt {
    start: usize,
    keyword_len: usize,
    reexport: bool,
}

fn find_use(text: &str) -> Option<UseAt> {
    let mut from = 0;
    while let Some(i) = text[from..].find("use ") {
        let start = from + i;
        from = start + 4;
        let line_start = text[..start].rfind('\n').map_or(0, |n| n + 1);
        let prefix = text[line_start..start].trim();
        let reexport = prefix.starts_with("pub");
        let plain = prefix.is_empty() || prefix.starts_with("pub") || prefix.ends_with('}');
        if !plain {
            continue;
        }
        let line_start_of_stmt = if prefix.is_empty() || prefix.ends_with('}') {
            start
        } else {
            line_start + text[line_start..start].find("pub").unwrap_or(0)
        };
        return Some(UseAt {
            start: line_start_of_stmt,
            keyword_len: start - line_start_of_stmt + 4,
            reexport,
        });
    }
    None
}

/// The module a path names, resolved against the modules that exist (the longest prefix),
/// and the segments after it; `super::` relative to `from`, other paths (`self::`, or a
/// child's name) relative to `from`.
fn locate(path: &str, from: &str, modules: &BTreeSet<String>) -> Option<(String, Vec<String>)> {
    let path = path.split('~').next().unwrap_or(path);
    let mut segments: Vec<&str> = Vec::new();
    let mut rest = path;
    if let Some(r) = rest.strip_prefix("crate::") {
        rest = r;
    } else {
        let mut base: Vec<&str> = if from.is_empty() {
            Vec::new()
        } else {
            from.split("::").collect()
        };
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        segments.extend(base);
    }
    segments.extend(rest.split("::").filter(|s| !s.is_empty() && *s != "self"));
    for n in (0..=segments.len()).rev() {
        let candidate = segments[..n].join("::");
        if modules.contains(&candidate) {
            let after = segments[n..].iter().map(|s| s.to_string()).collect();
            return Some((candidate, after));
        }
    }
    None
}

/// The module a path names (see [`locate`]).
#[cfg(test)]
fn target(path: &str, from: &str, modules: &BTreeSet<String>) -> Option<String> {
    locate(path, from, modules).map(|(module, _)| module)
}

/// The module that really holds what a path names: a name that its module only re-exports
/// is followed to where the re-export points (so that a facade module of re-exports does not
/// hide a dependency on one of its children).
fn resolve(
    path: &str,
    from: &str,
    modules: &BTreeSet<String>,
    exports: &BTreeMap<String, BTreeMap<String, String>>,
) -> Option<String> {
    let (mut module, mut after) = locate(path, from, modules)?;
    // A re-export may point at another re-export; a few steps are enough (and end loops).
    for _ in 0..8 {
        let Some(first) = after.first() else { break };
        let Some(to) = exports.get(&module).and_then(|e| e.get(first)) else {
            break;
        };
        let to = if to.starts_with("crate::") || to.starts_with("super::") {
            to.clone()
        } else {
            format!("self::{to}")
        };
        let Some((next, next_after)) = locate(&to, &module, modules) else {
            break;
        };
        if next == module {
            break;
        }
        module = next;
        after = next_after
            .into_iter()
            .chain(after.into_iter().skip(1))
            .collect();
    }
    Some(module)
}

fn read_crate(src: &Path) -> Result<Vec<Source>> {
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let Some(module) = module_of(src, &path) else {
            continue;
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let code = non_test(&text);
        let longer = text.lines().take(20).find_map(|l| {
            l.trim()
                .strip_prefix(LONGER)
                .map(|why| why.trim().to_string())
        });
        out.push(Source {
            module,
            lines: code.lines().count(),
            code,
            path,
            longer,
        });
    }
    Ok(out)
}

/// The import graph of one crate's modules.
fn graph(sources: &[Source]) -> Graph {
    let modules: BTreeSet<String> = sources.iter().map(|s| s.module.clone()).collect();
    let exports: BTreeMap<String, BTreeMap<String, String>> = sources
        .iter()
        .map(|s| (s.module.clone(), reexports(&s.code)))
        .collect();
    let mut g = Graph::default();
    for s in sources {
        let entry = g.edges.entry(s.module.clone()).or_default();
        for path in used_paths(&s.code) {
            if let Some(t) = resolve(&path, &s.module, &modules, &exports)
                && t != s.module
            {
                entry.insert(t);
            }
        }
    }
    g
}

/// The circles of a graph (its strongly connected components of two or more modules).
pub fn circles(g: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative enough for crates of a few dozen modules.
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        if let Some(ws) = s.g.edges.get(v) {
            for w in ws {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    if lw < s.low[v] {
                        s.low.insert(v, lw);
                    }
                } else if s.on.contains(w) {
                    let iw = s.index[w];
                    if iw < s.low[v] {
                        s.low.insert(v, iw);
                    }
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The crates of the workspace: (name, src directory).
fn crates(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let meta = crate::cargo::metadata()?;
    let mut out = Vec::new();
    for p in meta["packages"].as_array().into_iter().flatten() {
        let (Some(name), Some(manifest)) = (p["name"].as_str(), p["manifest_path"].as_str()) else {
            continue;
        };
        let dir = Path::new(manifest)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        if dir.starts_with(root) {
            out.push((name.to_string(), dir.join("src")));
        }
    }
    out.sort();
    Ok(out)
}

/// The module paths (`kopf_core::layers::finalizer`, `apiserver::http::routing`, with an
/// item at the end or not) and source files (`kopf-core/src/extract.rs`) a text names.
fn named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let word = |c: char| {
        c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '/' || c == '.' || c == '-'
    };
    for token in text.split(|c: char| !word(c)) {
        let token = token.trim_end_matches([':', '.', '/']);
        let path =
            token.starts_with("kopf") && token.contains("::") || token.starts_with("apiserver::");
        let file = token.ends_with(".rs") && token.contains('/');
        if path || file {
            out.insert(token.to_string());
        }
    }
    out
}

/// What a text names that the code does not have: a module path whose modules do not exist
/// (the last segment may be an item of the last module: it must be defined or re-exported
/// there), or a source file that no crate has.
fn missing_names(text: &str, crates: &BTreeMap<String, Vec<Source>>, root: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    for name in named(text) {
        let found = if name.ends_with(".rs") {
            let candidates = [root.join(&name), root.join("crates").join(&name)];
            candidates.iter().any(|p| p.is_file())
                || crates
                    .values()
                    .flatten()
                    .any(|s| s.path.to_string_lossy().ends_with(&format!("/{name}")))
        } else {
            let (krate, path) = match name.split_once("::") {
                Some(("apiserver", _)) => ("kopf_testing", name.as_str()),
                Some((krate, path)) => (krate, path),
                None => continue,
            };
            crates
                .get(krate)
                .is_some_and(|sources| path_exists(path, sources))
        };
        if !found {
            missing.push(name);
        }
    }
    missing
}

/// Whether `a::b::c` is a module of the crate, or the segments after its longest module
/// prefix are defined there (items, inline modules and their items, re-exports).
fn path_exists(path: &str, sources: &[Source]) -> bool {
    let segments: Vec<&str> = path.split("::").collect();
    for n in (0..=segments.len()).rev() {
        let prefix = segments[..n].join("::");
        if let Some(source) = sources.iter().find(|s| s.module == prefix) {
            return segments[n..].iter().all(|seg| defines(&source.code, seg));
        }
    }
    false
}

/// Whether code defines or re-exports a name.
fn defines(code: &str, name: &str) -> bool {
    let kinds = [
        "fn",
        "struct",
        "enum",
        "trait",
        "type",
        "const",
        "static",
        "mod",
        "macro_rules!",
    ];
    kinds.iter().any(|k| {
        code.contains(&format!("{k} {name}("))
            || code.contains(&format!("{k} {name} "))
            || code.contains(&format!("{k} {name}<"))
            || code.contains(&format!("{k} {name};"))
            || code.contains(&format!("{k} {name}:"))
    }) || reexports(code).contains_key(name)
        || code.contains(&format!("fn {name}<"))
}

/// The function-length rules (`fnlen.rs`), reported; the number of problems.
fn function_lengths(all: &BTreeMap<String, Vec<Source>>, root: &Path) -> usize {
    let mut failures = 0;
    let mut over_100 = Vec::new();
    for (name, sources) in all {
        let engine = crate::fnlen::ENGINE_CRATES.contains(&name.replace('_', "-").as_str());
        for s in sources {
            let rel = s.path.strip_prefix(root).unwrap_or(&s.path);
            if !rel.starts_with("crates") {
                continue;
            }
            for f in crate::fnlen::functions(&strip(&s.code)) {
                let at = format!(
                    "{}:{} {} ({} lines)",
                    rel.display(),
                    f.line,
                    f.name,
                    f.lines
                );
                if engine && f.lines > crate::fnlen::MAX_ENGINE {
                    failures += 1;
                    println!(
                        "  TOO LONG: {at}: kopf-core and kopf-watch functions have at most {} lines",
                        crate::fnlen::MAX_ENGINE
                    );
                }
                if f.lines > 100 {
                    over_100.push((f.lines, at));
                }
            }
        }
    }
    over_100.sort();
    over_100.reverse();
    println!(
        "functions over 100 lines in crates/: {} (at most {})",
        over_100.len(),
        crate::fnlen::MAX_OVER_100
    );
    for (_, at) in &over_100 {
        println!("  {at}");
    }
    if over_100.len() > crate::fnlen::MAX_OVER_100 {
        failures += 1;
    }
    failures
}

pub fn run() -> Result<()> {
    let meta = crate::cargo::metadata()?;
    let root = PathBuf::from(
        meta["workspace_root"]
            .as_str()
            .context("no workspace_root")?,
    );
    let mut failures = 0;
    let mut all: BTreeMap<String, Vec<Source>> = BTreeMap::new();
    for (name, src) in crates(&root)? {
        let sources = read_crate(&src)?;
        let g = graph(&sources);
        let found = circles(&g);
        let long: Vec<&Source> = sources.iter().filter(|s| s.lines > MAX_LINES).collect();
        let edges: usize = g.edges.values().map(BTreeSet::len).sum();
        println!(
            "{name}: {} modules, {edges} edges, {} circle(s), {} file(s) over {MAX_LINES} lines",
            sources.len(),
            found.len(),
            long.len()
        );
        for c in &found {
            failures += 1;
            println!("  CIRCLE: {}", c.join(" <-> "));
            for m in c {
                let within: Vec<&String> = g.edges[m].iter().filter(|t| c.contains(t)).collect();
                println!("    {m} uses {within:?}");
            }
        }
        for s in long {
            let rel = s.path.strip_prefix(&root).unwrap_or(&s.path).display();
            match &s.longer {
                Some(why) => println!("  longer, allowed: {rel} ({} lines): {why}", s.lines),
                None => {
                    failures += 1;
                    println!(
                        "  TOO LONG: {rel}: {} lines of non-test code (split it by concern, or say why with `{LONGER} ...` in its first lines)",
                        s.lines
                    );
                }
            }
        }
        all.insert(name.replace('-', "_"), sources);
    }
    failures += function_lengths(&all, &root);
    let doc = root.join("ARCHITECTURE.md");
    let text =
        std::fs::read_to_string(&doc).with_context(|| format!("reading {}", doc.display()))?;
    let missing = missing_names(&text, &all, &root);
    println!(
        "ARCHITECTURE.md: {} module path(s) and file(s) named, {} missing",
        named(&text).len(),
        missing.len()
    );
    for m in &missing {
        failures += 1;
        println!("  MISSING: ARCHITECTURE.md names `{m}`, which is not in the code (keep it true)");
    }
    failures += crate::docpaths::check(&root)?;
    failures += crate::api_surface::check(&root)?;
    if failures > 0 {
        bail!("{failures} layout problem(s)");
    }
    println!(
        "layout: no circles, no file over {MAX_LINES} lines without a reason, every module \
         ARCHITECTURE.md names exists, kopf's doc examples use kopf:: paths"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_from_files() {
        let src = Path::new("/x/src");
        assert_eq!(
            module_of(src, Path::new("/x/src/lib.rs")).as_deref(),
            Some("")
        );
        assert_eq!(
            module_of(src, Path::new("/x/src/a.rs")).as_deref(),
            Some("a")
        );
        assert_eq!(
            module_of(src, Path::new("/x/src/a/mod.rs")).as_deref(),
            Some("a")
        );
        assert_eq!(
            module_of(src, Path::new("/x/src/a/b.rs")).as_deref(),
            Some("a::b")
        );
        assert_eq!(module_of(src, Path::new("/x/src/bin/tool.rs")), None);
    }

    #[test]
    fn uses_code_paths_and_supers_are_edges_reexports_and_comments_are_not() {
        let code = r#"
//! See crate::docs_only.
use crate::{a, b::{c, d::D}};
pub use crate::e::E;
pub(crate) use crate::f::F;
use super::G;
fn x() { crate::h::call("crate::in_a_string"); let _ = '{'; }
"#;
        let mut paths = used_paths(code);
        paths.sort();
        assert_eq!(
            paths,
            vec![
                "crate::a",
                "crate::b::c",
                "crate::b::d::D",
                "crate::h::call",
                "super::G"
            ]
        );
        let modules: BTreeSet<String> = ["", "a", "b", "b::c", "b::d", "h", "m", "m::n"]
            .map(String::from)
            .into();
        assert_eq!(
            target("crate::b::d::D", "m", &modules).as_deref(),
            Some("b::d")
        );
        assert_eq!(target("crate::Error", "m", &modules).as_deref(), Some(""));
        assert_eq!(target("super::G", "m::n", &modules).as_deref(), Some("m"));
    }

    #[test]
    fn circles_are_found_and_chains_are_not() {
        let mut g = Graph::default();
        for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")] {
            g.edges.entry(a.into()).or_default().insert(b.into());
            g.edges.entry(b.into()).or_default();
        }
        assert_eq!(
            circles(&g),
            vec![vec!["a".to_string(), "b".into(), "c".into()]]
        );
        g.edges.get_mut("c").expect("c").remove("a");
        assert!(circles(&g).is_empty());
    }

    #[test]
    fn test_modules_are_not_code_wherever_they_stand() {
        let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    use crate::x;\n}\n";
        assert_eq!(non_test(text), "fn a() {}\n");
        let text = "#[cfg(test)]\nmod tests;\nfn a() {}\n#[cfg(test)]\n#[allow(dead_code)]\npub(crate) mod testing {\n    fn f() { let _ = \"}\"; }\n}\nfn b() {}\n";
        assert_eq!(non_test(text), "fn a() {}\nfn b() {}\n");
        // A test-only function is code of the file (only modules are left out).
        let text = "#[cfg(test)]\nfn helper() {}\n";
        assert_eq!(non_test(text), text);
    }

    #[test]
    fn a_name_only_reexported_leads_to_the_module_that_holds_it() {
        let modules: BTreeSet<String> = ["", "h", "h::spec", "h::error", "x"]
            .map(String::from)
            .into();
        let mut exports = BTreeMap::new();
        exports.insert(
            "h".to_string(),
            reexports("pub use spec::{Spec, Cause as Why};\npub use self::error::*;\n"),
        );
        exports.insert("".to_string(), reexports("pub use h::Spec;\n"));
        let to = |path: &str| resolve(path, "x", &modules, &exports);
        assert_eq!(to("crate::h::Spec::new").as_deref(), Some("h::spec"));
        assert_eq!(to("crate::h::Why").as_deref(), Some("h::spec"));
        assert_eq!(to("crate::Spec").as_deref(), Some("h::spec"));
        // A glob re-export names nothing: the path stays with the module.
        assert_eq!(to("crate::h::Error").as_deref(), Some("h"));
        assert_eq!(to("super::h::spec::Spec").as_deref(), Some("h::spec"));
    }

    #[test]
    fn the_architecture_names_only_what_exists() {
        let source = |module: &str, code: &str| Source {
            module: module.into(),
            path: PathBuf::from(format!("/r/crates/k/src/{module}.rs")),
            code: code.into(),
            lines: 0,
            longer: None,
        };
        let mut crates = BTreeMap::new();
        crates.insert(
            "kopf_core".to_string(),
            vec![
                source(
                    "",
                    "pub mod causes;\npub mod on {\n    pub use m::create;\n}\n",
                ),
                source("causes", "pub fn detect(x: u8) {}\npub struct Reason;\n"),
            ],
        );
        let text = "The `kopf_core::causes::detect` of kopf_core::causes, kopf_core::on::create; \
                    kopf_core::gone, kopf_core::causes::Missing, kopf_watch::engine and \
                    crates/k/src/causes.rs, k/src/nowhere.rs.";
        assert_eq!(
            missing_names(text, &crates, Path::new("/nonexistent")),
            vec![
                "k/src/nowhere.rs",
                "kopf_core::causes::Missing",
                "kopf_core::gone",
                "kopf_watch::engine"
            ]
        );
    }
}
