//! kube's JSONPath dialect, as kube-apiserver evaluates a custom resource's
//! `additionalPrinterColumns` for Tables: the template `{<jsonPath>}`, missing keys
//! allowed, the first result of the first action as the column's value.
//!
//! Supported as kube has them: `.field` and `['field']`, indices and slices with negative
//! bounds and steps (`[0]`, `[-1]`, `[0:2]`, `[::2]`; out-of-range bounds are an error, not
//! a shorter slice), `[*]`, `.*`, unions `[0,2]`, recursive descent `..`, filters
//! `[?(@.x op y)]` with `==`, `!=`, `<`, `>`, `<=`, `>=` and the existence filter
//! `[?(@.x)]`. Comparisons follow Go's template rules: integers compare with integers,
//! floats with floats, strings with strings, and a comparison of different types is an
//! error (the column is then empty). Members of a map are visited in key order (Go's order
//! is random). Not supported: `range`/`end` (an error here).

mod parse;
#[cfg(test)]
mod tests;

use serde_json::Value;

use parse::{Node, Param, Part};

/// A parsed column path.
#[derive(Debug, Clone)]
pub struct JsonPath {
    parts: Vec<Part>,
}

/// One result: a value of the object, a byte of a string (`.*` over a string), or a literal.
#[derive(Debug, Clone, PartialEq)]
pub enum Found<'a> {
    /// A value in the object (JSON null included).
    Json(&'a Value),
    /// A byte of a string (Go's `uint8`).
    Byte(u8),
    /// A quoted string or text outside actions.
    Text(String),
    /// An integer literal (Go's `int`).
    Int(i64),
    /// A fractional literal.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
}

/// The values an evaluation returns with its error (kube's functions return both; the
/// existence filter looks at them).
type Eval<'a> = Result<Vec<Found<'a>>, Vec<Found<'a>>>;

impl JsonPath {
    /// Parses a column's `jsonPath` as kube does (`{` + path + `}`); the error is kube's
    /// parser's.
    pub fn column(path: &str) -> Result<Self, String> {
        parse::parse(&format!("{{{path}}}")).map(|parts| JsonPath { parts })
    }

    /// The results of each part of the template, or None when the evaluation fails.
    pub fn find<'a>(&self, root: &'a Value) -> Option<Vec<Vec<Found<'a>>>> {
        let mut all = Vec::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => all.push(vec![Found::Text(t.clone())]),
                Part::Action(nodes) => all.push(eval_list(vec![Found::Json(root)], nodes).ok()?),
            }
        }
        Some(all)
    }

    /// A column's value: the first result of the first part, None when there is none.
    pub fn first<'a>(&self, root: &'a Value) -> Option<Found<'a>> {
        self.find(root)?.into_iter().next()?.into_iter().next()
    }
}

/// Go's reflect kinds, as far as comparisons and printing tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Nil,
    Bool,
    Int,
    Uint,
    Float,
    Str,
    Slice,
    Map,
}

impl Found<'_> {
    fn kind(&self) -> Kind {
        match self {
            Found::Json(Value::Null) => Kind::Nil,
            Found::Json(Value::Bool(_)) | Found::Bool(_) => Kind::Bool,
            Found::Json(Value::Number(n)) if n.is_i64() => Kind::Int,
            Found::Json(Value::Number(_)) | Found::Float(_) => Kind::Float,
            Found::Json(Value::String(_)) | Found::Text(_) => Kind::Str,
            Found::Json(Value::Array(_)) => Kind::Slice,
            Found::Json(Value::Object(_)) => Kind::Map,
            Found::Byte(_) => Kind::Uint,
            Found::Int(_) => Kind::Int,
        }
    }

    fn as_i64(&self) -> i64 {
        match self {
            Found::Json(v) => v.as_i64().unwrap_or(0),
            Found::Int(i) => *i,
            _ => 0,
        }
    }

    fn as_f64(&self) -> f64 {
        match self {
            Found::Json(v) => v.as_f64().unwrap_or(0.0),
            Found::Float(f) => *f,
            _ => 0.0,
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Found::Json(Value::String(s)) | Found::Text(s) => s,
            _ => "",
        }
    }

    fn as_bool(&self) -> bool {
        matches!(self, Found::Json(Value::Bool(true)) | Found::Bool(true))
    }

    fn as_u8(&self) -> u8 {
        match self {
            Found::Byte(b) => *b,
            _ => 0,
        }
    }
}

/// The members or elements `..` and `.*` step into (the bytes of a string).
fn children<'a>(f: &Found<'a>) -> Vec<Found<'a>> {
    match f {
        Found::Json(Value::Object(m)) => {
            let mut members: Vec<(&String, &'a Value)> = m.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            members.into_iter().map(|(_, v)| Found::Json(v)).collect()
        }
        Found::Json(Value::Array(items)) => items.iter().map(Found::Json).collect(),
        Found::Json(Value::String(s)) | Found::Text(s) => s.bytes().map(Found::Byte).collect(),
        _ => Vec::new(),
    }
}

fn is_nil(f: &Found<'_>) -> bool {
    f.kind() == Kind::Nil
}

fn eval_list<'a>(input: Vec<Found<'a>>, nodes: &[Node]) -> Eval<'a> {
    let mut cur = input;
    for node in nodes {
        cur = walk(cur, node)?;
    }
    Ok(cur)
}

fn walk<'a>(input: Vec<Found<'a>>, node: &Node) -> Eval<'a> {
    match node {
        Node::Text(t) => Ok(vec![Found::Text(t.clone())]),
        Node::Field(name) => Ok(field(&input, name)),
        Node::Array(params) => array(input, *params),
        Node::Filter { left, right, op } => filter(input, left, right, op),
        Node::Int(i) => Ok(input.iter().map(|_| Found::Int(*i)).collect()),
        Node::Float(f) => Ok(input.iter().map(|_| Found::Float(*f)).collect()),
        Node::Bool(b) => Ok(input.iter().map(|_| Found::Bool(*b)).collect()),
        Node::Wildcard => Ok(input
            .iter()
            .filter(|v| !is_nil(v))
            .flat_map(children)
            .collect()),
        Node::Recursive => Ok(recursive(&input)),
        Node::Union(lists) => {
            let mut out = Vec::new();
            for list in lists {
                match eval_list(input.clone(), list) {
                    Ok(found) => out.extend(found),
                    Err(_) => return Err(input),
                }
            }
            Ok(out)
        }
        Node::Identifier(_) => Err(input),
    }
}

fn field<'a>(input: &[Found<'a>], name: &str) -> Vec<Found<'a>> {
    input
        .iter()
        .filter_map(|v| match v {
            Found::Json(Value::Object(m)) => m.get(name).map(Found::Json),
            _ => None,
        })
        .collect()
}

fn recursive<'a>(input: &[Found<'a>]) -> Vec<Found<'a>> {
    let mut out = Vec::new();
    for v in input.iter().filter(|v| !is_nil(v)) {
        let below = children(v);
        if !below.is_empty() {
            out.push(v.clone());
            out.extend(recursive(&below));
        }
    }
    out
}

fn array<'a>(input: Vec<Found<'a>>, params: [Param; 3]) -> Eval<'a> {
    let mut out = Vec::new();
    for v in &input {
        let items = match v {
            Found::Json(Value::Null) => continue,
            Found::Json(Value::Array(items)) => items,
            _ => return Err(input),
        };
        let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
        let mut p = params;
        if !p[0].known {
            p[0].value = 0;
        }
        if p[0].value < 0 {
            p[0].value += len;
        }
        if !p[1].known {
            p[1].value = len;
        }
        if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
            p[1].value += len;
        }
        if p[1].value == p[0].value {
            // Zero elements asked for: kube stops here, with what it has.
            return Ok(out);
        }
        if p[0].value >= len || p[0].value < 0 || p[1].value > len || p[1].value < 0 {
            return Err(input);
        }
        if p[0].value > p[1].value {
            return Err(input);
        }
        let step = if p[2].known {
            if p[2].value <= 0 {
                return Err(input);
            }
            p[2].value
        } else {
            1
        };
        let (start, end) = (p[0].value as usize, p[1].value as usize);
        out.extend(
            items[start..end]
                .iter()
                .step_by(step as usize)
                .map(Found::Json),
        );
    }
    Ok(out)
}

fn filter<'a>(input: Vec<Found<'a>>, left: &[Node], right: &[Node], op: &str) -> Eval<'a> {
    let mut out = Vec::new();
    for v in &input {
        let Found::Json(Value::Array(items)) = v else {
            return Err(input);
        };
        for item in items {
            let temp = vec![Found::Json(item)];
            let lefts = eval_list(temp.clone(), left);
            if op == "exists" {
                let (Ok(found) | Err(found)) = &lefts;
                if !found.is_empty() {
                    out.push(Found::Json(item));
                }
                continue;
            }
            let Ok(lefts) = lefts else {
                return Err(input);
            };
            match lefts.len() {
                0 => continue,
                1 => {}
                _ => return Err(input),
            }
            let Ok(rights) = eval_list(temp, right) else {
                return Err(input);
            };
            match rights.len() {
                0 => continue,
                1 => {}
                _ => return Err(input),
            }
            let (l, r) = (&lefts[0], &rights[0]);
            let pass = match op {
                "<" => less(l, r),
                ">" => less_equal(l, r).map(|le| !le),
                "==" => equal(l, r),
                "!=" => equal(l, r).map(|eq| !eq),
                "<=" => less_equal(l, r),
                ">=" => less(l, r).map(|lt| !lt),
                _ => None,
            };
            match pass {
                Some(true) => out.push(Found::Json(item)),
                Some(false) => {}
                None => return Err(out),
            }
        }
    }
    Ok(out)
}

/// Go template's `eq`: None for types that do not compare.
fn equal(a: &Found<'_>, b: &Found<'_>) -> Option<bool> {
    let (ka, kb) = (a.kind(), b.kind());
    if matches!(ka, Kind::Nil | Kind::Slice | Kind::Map)
        || matches!(kb, Kind::Nil | Kind::Slice | Kind::Map)
    {
        return None;
    }
    if ka != kb {
        return match (ka, kb) {
            (Kind::Int, Kind::Uint) => Some(a.as_i64() == i64::from(b.as_u8())),
            (Kind::Uint, Kind::Int) => Some(i64::from(a.as_u8()) == b.as_i64()),
            _ => None,
        };
    }
    Some(match ka {
        Kind::Bool => a.as_bool() == b.as_bool(),
        Kind::Int => a.as_i64() == b.as_i64(),
        Kind::Uint => a.as_u8() == b.as_u8(),
        Kind::Float => a.as_f64() == b.as_f64(),
        _ => a.as_str() == b.as_str(),
    })
}

/// Go template's `lt`.
fn less(a: &Found<'_>, b: &Found<'_>) -> Option<bool> {
    let (ka, kb) = (a.kind(), b.kind());
    if matches!(ka, Kind::Nil | Kind::Slice | Kind::Map | Kind::Bool)
        || matches!(kb, Kind::Nil | Kind::Slice | Kind::Map)
    {
        return None;
    }
    if ka != kb {
        return match (ka, kb) {
            (Kind::Int, Kind::Uint) => Some(a.as_i64() < i64::from(b.as_u8())),
            (Kind::Uint, Kind::Int) => Some(i64::from(a.as_u8()) < b.as_i64()),
            _ => None,
        };
    }
    Some(match ka {
        Kind::Int => a.as_i64() < b.as_i64(),
        Kind::Uint => a.as_u8() < b.as_u8(),
        Kind::Float => a.as_f64() < b.as_f64(),
        _ => a.as_str() < b.as_str(),
    })
}

fn less_equal(a: &Found<'_>, b: &Found<'_>) -> Option<bool> {
    match less(a, b)? {
        true => Some(true),
        false => equal(a, b),
    }
}
