//! The parser of kube's JSONPath templates: text with `{...}` actions, each action a
//! sequence of steps (`.field`, `['key']`, `[0]`, `[1:3:2]`, `[*]`, `[0,2]`, `..`, `.*`,
//! `[?(@.x=="y")]`, literals). It follows the grammar of kube's own parser, including what
//! it accepts by accident (a field name runs up to the next `.`, `[`, `]`, `,`, `@`, `$`,
//! `{`, `}`, space or end, so `a-b/c` is one name).

/// One step of an action.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    /// A quoted string (or text outside actions).
    Text(String),
    /// A map member.
    Field(String),
    /// An index or slice: start, end, step.
    Array([Param; 3]),
    /// `[?(left op right)]`; `op` is `exists` for `[?(@.x)]`.
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        op: String,
    },
    /// An integer literal.
    Int(i64),
    /// A number literal with a fraction.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
    /// `.*`: every member or element.
    Wildcard,
    /// `..`: the value and everything below it that has members or elements.
    Recursive,
    /// `[a,b]`: the results of each alternative, one after the other.
    Union(Vec<Vec<Node>>),
    /// A bare word (`range`, `end`), which columns do not support.
    Identifier(String),
}

/// One bound of an index or slice.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct Param {
    pub value: i64,
    pub known: bool,
    /// The end of a single index (`[i]` is `[i:i+1]`).
    pub derived: bool,
}

/// A part of a template: text, or an action's steps.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Part {
    Text(String),
    Action(Vec<Node>),
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
}

const EOF: char = '\u{ffff}';

fn is_terminator(r: char) -> bool {
    matches!(
        r,
        ' ' | '\t' | '\r' | '\n' | EOF | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
    )
}

fn is_alphanumeric(r: char) -> bool {
    r == '_' || r.is_alphabetic() || r.is_numeric()
}

/// Parses a template (`{.spec.replicas}`); the error says what is wrong, as kube's does.
pub(super) fn parse(text: &str) -> Result<Vec<Part>, String> {
    let mut p = Parser {
        input: text,
        pos: 0,
        start: 0,
        width: 0,
    };
    let mut parts = Vec::new();
    loop {
        // Text up to the next action.
        match p.input[p.pos..].find('{') {
            Some(i) => {
                p.pos += i;
                if p.pos > p.start {
                    parts.push(Part::Text(p.consume().to_string()));
                }
                p.pos += 1;
                p.consume();
                let mut cur = Vec::new();
                p.inside_action(&mut cur)?;
                parts.push(Part::Action(cur));
            }
            None => {
                p.pos = p.input.len();
                if p.pos > p.start {
                    parts.push(Part::Text(p.consume().to_string()));
                }
                return Ok(parts);
            }
        }
    }
}

/// The steps of `{text}` (kube's `parseAction`): filters, unions and quoted keys are
/// parsed as templates of their own.
fn parse_action(text: &str) -> Result<Vec<Node>, String> {
    let parts = parse(&format!("{{{text}}}"))?;
    match parts.into_iter().next() {
        Some(Part::Action(nodes)) => Ok(nodes),
        _ => Ok(Vec::new()),
    }
}

impl<'a> Parser<'a> {
    fn consume(&mut self) -> &'a str {
        let v = &self.input[self.start..self.pos];
        self.start = self.pos;
        v
    }

    fn next(&mut self) -> char {
        match self.input[self.pos..].chars().next() {
            None => {
                self.width = 0;
                EOF
            }
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                c
            }
        }
    }

    fn backup(&mut self) {
        self.pos -= self.width;
    }

    fn peek(&mut self) -> char {
        let r = self.next();
        self.backup();
        r
    }

    /// The byte two before the position (the one before the rune just read).
    fn escaped(&self) -> bool {
        self.pos >= 2 && self.input.as_bytes()[self.pos - 2] == b'\\'
    }

    /// The steps of one action, up to and including its `}`.
    fn inside_action(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            let rest = &self.input[self.pos..];
            if rest.starts_with('}') {
                self.pos += 1;
                self.consume();
                return Ok(());
            }
            if rest.starts_with("[?(") {
                self.filter(cur)?;
                continue;
            }
            if rest.starts_with("..") {
                if matches!(cur.last(), Some(Node::Recursive)) {
                    return Err("invalid multiple recursive descent".into());
                }
                self.pos += 2;
                self.consume();
                cur.push(Node::Recursive);
                if is_alphanumeric(self.peek()) {
                    self.field(cur);
                }
                continue;
            }
            match self.next() {
                EOF | '\r' | '\n' => return Err("unclosed action".into()),
                ' ' | '@' | '$' => {
                    self.consume();
                }
                '[' => self.array(cur)?,
                q @ ('"' | '\'') => self.quote(cur, q)?,
                '.' => self.field(cur),
                r if r == '+' || r == '-' || r.is_numeric() => {
                    self.backup();
                    self.number(cur)?;
                }
                r if is_alphanumeric(r) => {
                    self.backup();
                    while !is_terminator(self.next()) {}
                    self.backup();
                    cur.push(match self.consume() {
                        "true" => Node::Bool(true),
                        "false" => Node::Bool(false),
                        word => Node::Identifier(word.to_string()),
                    });
                }
                r => {
                    return Err(format!(
                        "unrecognized character in action: U+{:04X} '{r}'",
                        r as u32
                    ));
                }
            }
        }
    }

    /// A member name after `.` (a backslash escapes the next character), or `*`.
    fn field(&mut self, cur: &mut Vec<Node>) {
        self.consume();
        loop {
            let r = self.next();
            if r == '\\' {
                self.next();
            } else if is_terminator(r) {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        cur.push(if value == "*" {
            Node::Wildcard
        } else {
            Node::Field(value.replace('\\', ""))
        });
    }

    fn number(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        if matches!(self.peek(), '+' | '-') {
            self.next();
        }
        loop {
            let r = self.next();
            if r != '.' && !r.is_numeric() {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        if let Ok(i) = value.parse::<i64>() {
            cur.push(Node::Int(i));
        } else if let Ok(f) = value.parse::<f64>() {
            cur.push(Node::Float(f));
        } else {
            return Err(format!("cannot parse number {value}"));
        }
        Ok(())
    }

    /// `[...]`: a union, a quoted key, or an index or slice.
    fn array(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            match self.next() {
                EOF | '\n' => return Err("unterminated array".into()),
                ']' => break,
                _ => {}
            }
        }
        let whole = self.consume();
        let mut text = &whole[1..whole.len() - 1];
        if text == "*" {
            text = ":";
        }
        let alternatives: Vec<&str> = text.split(',').collect();
        if alternatives.len() > 1 {
            let mut union = Vec::new();
            for alt in alternatives {
                union.push(parse_action(&format!("[{}]", alt.trim_matches(' ')))?);
            }
            cur.push(Node::Union(union));
            return Ok(());
        }
        if let Some(key) = text
            .strip_prefix('\'')
            .and_then(|t| t.strip_suffix('\''))
            .filter(|k| text.len() >= 2 && !k.contains('\''))
        {
            cur.extend(parse_action(&format!(".{key}"))?);
            return Ok(());
        }
        let groups = slice_groups(text).ok_or_else(|| format!("invalid array index {text}"))?;
        let mut params = [Param::default(); 3];
        for (i, group) in groups.iter().enumerate() {
            if !group.is_empty() {
                let digits = if i > 0 { &group[1..] } else { group };
                if i > 0 && digits.is_empty() {
                    params[i].known = false;
                } else {
                    params[i].known = true;
                    params[i].value = go_atoi(digits)
                        .ok_or_else(|| format!("array index {digits} is not a number"))?;
                }
            } else if i == 1 {
                params[1] = Param {
                    // Go's int wraps; a panic here would end the table request.
                    value: params[0].value.wrapping_add(1),
                    known: true,
                    derived: true,
                };
            }
        }
        cur.push(Node::Array(params));
        Ok(())
    }

    /// `[?(left op right)]`, or `[?(path)]` for existence.
    fn filter(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        self.pos += 3;
        self.consume();
        let (mut begin, mut end, mut pair) = (false, false, EOF);
        loop {
            let r = self.next();
            match r {
                EOF | '\n' => return Err("unterminated filter".into()),
                '"' | '\'' => {
                    if !begin {
                        begin = true;
                        pair = r;
                        continue;
                    }
                    if !self.escaped() && r == pair {
                        end = true;
                    }
                }
                ')' if begin == end => break,
                _ => {}
            }
        }
        if self.next() != ']' {
            return Err("unclosed array expect ]".into());
        }
        let whole = self.consume();
        let text = &whole[..whole.len() - 2];
        match split_comparison(text) {
            None => cur.push(Node::Filter {
                left: parse_action(text)?,
                right: Vec::new(),
                op: "exists".into(),
            }),
            Some((left, op, right)) => cur.push(Node::Filter {
                left: parse_action(left)?,
                right: parse_action(right)?,
                op: op.to_string(),
            }),
        }
        Ok(())
    }

    /// A quoted string, its escapes as Go's string literals have them.
    fn quote(&mut self, cur: &mut Vec<Node>, end: char) -> Result<(), String> {
        loop {
            match self.next() {
                EOF | '\n' => return Err("unterminated quoted string".into()),
                r if r == end && !self.escaped() => break,
                _ => {}
            }
        }
        let value = self.consume();
        let text =
            unquote(value).ok_or_else(|| format!("unquote string {value} error invalid syntax"))?;
        cur.push(Node::Text(text));
        Ok(())
    }
}

/// Go's `strconv.Atoi` (an optional sign and ASCII digits).
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The three groups of `^(-?\d*)(:-?\d*)?(:-?\d*)?$`, or None when the text does not match.
fn slice_groups(text: &str) -> Option<[&str; 3]> {
    fn number_len(s: &str) -> usize {
        let sign = usize::from(s.starts_with('-'));
        sign + s[sign..].bytes().take_while(u8::is_ascii_digit).count()
    }
    let mut groups = [""; 3];
    let mut rest = text;
    let n = number_len(rest);
    groups[0] = &rest[..n];
    rest = &rest[n..];
    for g in groups.iter_mut().skip(1) {
        if let Some(after) = rest.strip_prefix(':') {
            let n = 1 + number_len(after);
            *g = &rest[..n];
            rest = &rest[n..];
        }
    }
    rest.is_empty().then_some(groups)
}

/// `^([^!<>=]+)([!<>=]+)(.+?)$`: the left side, the operator and the right side.
fn split_comparison(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let left_end = text.find(is_op)?;
    if left_end == 0 {
        return None;
    }
    let after = &text[left_end..];
    let op_len = after.find(|c| !is_op(c)).unwrap_or(after.len());
    let (mut op, mut right) = after.split_at(op_len);
    if right.is_empty() {
        // The right side needs a character: the operator gives back its last one.
        if op.len() < 2 {
            return None;
        }
        (op, right) = after.split_at(op_len - 1);
    }
    Some((&text[..left_end], op, right))
}

/// Go's `strconv.Unquote`, for single quotes too: the escapes of Go string literals.
fn unquote(s: &str) -> Option<String> {
    let quote = s.chars().next()?;
    let inner = s.strip_prefix(quote)?.strip_suffix(quote)?;
    if s.len() < 2 || !matches!(quote, '"' | '\'') {
        return None;
    }
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        let hex = |chars: &mut std::str::Chars<'_>, n: usize| -> Option<u32> {
            let digits: String = chars.by_ref().take(n).collect();
            (digits.len() == n)
                .then(|| u32::from_str_radix(&digits, 16).ok())
                .flatten()
        };
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' if e == quote => out.push(e),
            'x' => out.push(char::from_u32(hex(&mut chars, 2)?)?),
            'u' => out.push(char::from_u32(hex(&mut chars, 4)?)?),
            'U' => out.push(char::from_u32(hex(&mut chars, 8)?)?),
            '0'..='7' => {
                let rest: String = chars.by_ref().take(2).collect();
                let v = u32::from_str_radix(&format!("{e}{rest}"), 8).ok()?;
                (rest.len() == 2 && v <= 255).then_some(())?;
                out.push(char::from_u32(v)?);
            }
            _ => return None,
        }
    }
    Some(out)
}
