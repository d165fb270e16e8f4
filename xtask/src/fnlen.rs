//! Function lengths, measured for `cargo xtask layout`.
//!
//! A function's length is the number of lines from the line of its `fn` to the line of its
//! closing brace, both counted, in the file's non-test code (test modules left out, as for
//! the file rule), comments and blank lines included. A function inside another is measured
//! on its own and also counts in the outer one. Trait methods without a body are not
//! functions here.
//!
//! The rules (checked by `layout`):
//! * no function in kopf-core and kopf-watch longer than [`MAX_ENGINE`] lines;
//! * at most [`MAX_OVER_100`] functions over 100 lines in all of `crates/`.

/// The most lines a function of kopf-core or kopf-watch may have.
pub const MAX_ENGINE: usize = 80;
/// The crates held to [`MAX_ENGINE`].
pub const ENGINE_CRATES: [&str; 2] = ["kopf-core", "kopf-watch"];
/// The most functions over 100 lines allowed in all of `crates/`.
pub const MAX_OVER_100: usize = 15;

/// One function, measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// The line of its `fn` (1-based, in the non-test code).
    pub line: usize,
    /// Its length in lines.
    pub lines: usize,
}

/// The functions of a text that has its comments and strings blanked (see `layout::strip`),
/// same lines as the source.
pub fn functions(bare: &str) -> Vec<Function> {
    let lines: Vec<&str> = bare.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let mut rest = *line;
        while let Some(at) = find_fn(rest) {
            let after = &rest[at + 3..];
            let name: String = after
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty()
                && let Some(end) = body_end(&lines, i, line.len() - rest.len() + at + 3)
            {
                out.push(Function {
                    name,
                    line: i + 1,
                    lines: end - i + 1,
                });
            }
            rest = after;
        }
    }
    out
}

/// Where the keyword `fn` stands in a line, as a word (not `fn_name`, not `Fn(`).
fn find_fn(line: &str) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(at) = line[from..].find("fn ") {
        let at = from + at;
        let before = at.checked_sub(1).map(|b| bytes[b]);
        if before.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_')) {
            return Some(at);
        }
        from = at + 3;
    }
    None
}

/// The line of the brace that closes the body of the function whose signature starts at
/// `lines[start][col..]`; None for a declaration without a body (`;` before any `{`) or a
/// function pointer type.
fn body_end(lines: &[&str], start: usize, col: usize) -> Option<usize> {
    let mut depth: i64 = 0;
    let mut parens: i64 = 0;
    let mut opened = false;
    for (i, line) in lines.iter().enumerate().skip(start) {
        let text = if i == start { &line[col..] } else { line };
        for c in text.chars() {
            match c {
                '(' | '[' => parens += 1,
                ')' | ']' => parens -= 1,
                ';' if !opened && parens == 0 => return None,
                '{' => {
                    opened = true;
                    depth += 1;
                }
                '}' => {
                    depth -= 1;
                    if opened && depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            }
            if parens < 0 {
                // `fn` inside a type such as `Box<dyn Fn(..)>` closed by the caller's paren.
                return None;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_measured_from_fn_to_closing_brace() {
        let code = "fn a() {\n    x();\n}\ntrait T {\n    fn b(&self);\n    fn c(&self) -> u8 { 1 }\n}\nfn d<F: Fn(u8)>(f: F)\nwhere F: Copy,\n{\n    let g = |x| { x };\n    fn inner() {}\n}\n";
        let found: Vec<(String, usize, usize)> = functions(code)
            .into_iter()
            .map(|f| (f.name, f.line, f.lines))
            .collect();
        assert_eq!(
            found,
            vec![
                ("a".into(), 1, 3),
                ("c".into(), 6, 1),
                ("d".into(), 8, 6),
                ("inner".into(), 12, 1),
            ]
        );
    }

    #[test]
    fn a_fn_pointer_type_is_not_a_function() {
        let code = "struct S { f: fn(u8) -> u8 }\ntype G = Box<dyn Fn() -> u8>;\nfn h() {}\n";
        let names: Vec<String> = functions(code).into_iter().map(|f| f.name).collect();
        assert_eq!(names, vec!["h".to_string()]);
    }
}
