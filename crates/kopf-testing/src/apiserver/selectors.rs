//! Label and field selectors with kube-apiserver semantics.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`,
//! `k<1`, comma-separated (AND); `!=` and `notin` also match objects without the key.
//! Field selectors: `f=v`, `f==v`, `f!=v`, comma-separated, with `\` escapes.

use serde_json::{Map, Value};

/// A selector that could not be parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectorError(pub String);

impl std::fmt::Display for SelectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct LabelReq {
    key: String,
    op: LabelOp,
}

/// Parsed `labelSelector` query value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<LabelReq>,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn valid_key(k: &str) -> bool {
    match k.split_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|p| {
                    !p.is_empty()
                        && p.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                })
                && valid_name(name)
        }
        None => valid_name(k),
    }
}

fn valid_value(v: &str) -> bool {
    v.is_empty() || valid_name(v)
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError(format!(
                        "unable to parse requirement: found ')', expected: '(' in {s:?}"
                    )));
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError(format!(
            "unable to parse requirement: found unclosed '(' in {s:?}"
        )));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn parse_set(rest: &str, term: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            SelectorError(format!(
                "unable to parse requirement: found '{rest}', expected: '(' in {term:?}"
            ))
        })?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    for v in &values {
        if !valid_value(v) {
            return Err(SelectorError(format!(
                "invalid label value: {v:?} in {term:?}"
            )));
        }
    }
    Ok(values)
}

fn parse_label_req(term: &str) -> Result<LabelReq, SelectorError> {
    let t = term.trim();
    if t.is_empty() {
        return Err(SelectorError(format!(
            "unable to parse requirement: found '', expected: identifier in {term:?}"
        )));
    }
    let err_key = |k: &str| SelectorError(format!("invalid label key {k:?}: in {term:?}"));
    if let Some(k) = t.strip_prefix('!') {
        let k = k.trim();
        if !valid_key(k) {
            return Err(err_key(k));
        }
        return Ok(LabelReq {
            key: k.into(),
            op: LabelOp::NotExists,
        });
    }
    // Operators, longest first.
    for (sym, make) in [("!=", 0u8), ("==", 1), ("=", 1), (">", 2), ("<", 3)] {
        if let Some(idx) = t.find(sym) {
            let key = t[..idx].trim();
            let value = t[idx + sym.len()..].trim();
            if !valid_key(key) {
                return Err(err_key(key));
            }
            let op = match make {
                0 | 1 => {
                    if !valid_value(value) {
                        return Err(SelectorError(format!(
                            "invalid label value: {value:?} in {term:?}"
                        )));
                    }
                    if make == 0 {
                        LabelOp::NotEq(value.into())
                    } else {
                        LabelOp::Eq(value.into())
                    }
                }
                _ => {
                    let n: i64 = value.parse().map_err(|_| {
                        SelectorError(format!("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer in {term:?}"))
                    })?;
                    if make == 2 {
                        LabelOp::Gt(n)
                    } else {
                        LabelOp::Lt(n)
                    }
                }
            };
            return Ok(LabelReq {
                key: key.into(),
                op,
            });
        }
    }
    // Set operators: `k in (...)`, `k notin (...)`.
    let mut words = t.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or("").trim();
    let rest = words.next().unwrap_or("").trim();
    if !valid_key(key) {
        return Err(err_key(key));
    }
    if rest.is_empty() {
        return Ok(LabelReq {
            key: key.into(),
            op: LabelOp::Exists,
        });
    }
    if let Some(r) = rest.strip_prefix("notin") {
        return Ok(LabelReq {
            key: key.into(),
            op: LabelOp::NotIn(parse_set(r, term)?),
        });
    }
    if let Some(r) = rest.strip_prefix("in") {
        return Ok(LabelReq {
            key: key.into(),
            op: LabelOp::In(parse_set(r, term)?),
        });
    }
    Err(SelectorError(format!(
        "unable to parse requirement: found '{rest}', expected: in, notin, =, ==, !=, gt, lt in {term:?}"
    )))
}

impl LabelSelector {
    /// Parses a selector; `""` matches everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let reqs = split_top(s)?
            .into_iter()
            .map(parse_label_req)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LabelSelector { reqs })
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Builds a selector from a structured `LabelSelector` (`matchLabels` and
    /// `matchExpressions` with `In`, `NotIn`, `Exists`, `DoesNotExist`), as webhook
    /// configurations carry them. `null` and `{}` match everything.
    pub fn from_spec(spec: &Value) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if spec.is_null() {
            return Ok(Self::default());
        }
        if let Some(labels) = spec.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                let v = v.as_str().ok_or_else(|| {
                    SelectorError(format!("matchLabels[{k}]: the value must be a string"))
                })?;
                reqs.push(LabelReq {
                    key: k.clone(),
                    op: LabelOp::Eq(v.to_string()),
                });
            }
        }
        for e in spec
            .get("matchExpressions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .ok_or_else(|| SelectorError("matchExpressions: key is required".into()))?
                .to_string();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let op = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                "In" if !values.is_empty() => LabelOp::In(values),
                "NotIn" if !values.is_empty() => LabelOp::NotIn(values),
                "Exists" if values.is_empty() => LabelOp::Exists,
                "DoesNotExist" if values.is_empty() => LabelOp::NotExists,
                op @ ("In" | "NotIn") => {
                    return Err(SelectorError(format!(
                        "for '{op}' operator, the values set can't be empty"
                    )));
                }
                op @ ("Exists" | "DoesNotExist") => {
                    return Err(SelectorError(format!("values set must be empty for {op}")));
                }
                other => {
                    return Err(SelectorError(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            };
            reqs.push(LabelReq { key, op });
        }
        Ok(LabelSelector { reqs })
    }

    /// Matches an object's `metadata.labels` (None when absent).
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.reqs.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match &r.op {
                LabelOp::Eq(x) => v == Some(x.as_str()),
                LabelOp::NotEq(x) => v != Some(x.as_str()),
                LabelOp::In(xs) => v.is_some_and(|v| xs.iter().any(|x| x == v)),
                LabelOp::NotIn(xs) => v.is_none_or(|v| !xs.iter().any(|x| x == v)),
                LabelOp::Exists => v.is_some(),
                LabelOp::NotExists => v.is_none(),
                LabelOp::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                LabelOp::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }

    /// Matches a whole object by its `metadata.labels`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

/// One `field=value` / `field!=value` requirement.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    /// The field label, e.g. `metadata.name`.
    pub field: String,
    /// `!=` rather than `=`.
    pub negated: bool,
    /// The value (unescaped).
    pub value: String,
}

/// Parsed `fieldSelector` query value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<FieldRequirement>,
}

/// Splits on unescaped commas, keeping escapes for the next step.
fn split_escaped(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            ',' => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    parts
}

fn unescape(s: &str) -> Result<String, SelectorError> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ ('\\' | ',' | '=' | '!')) => out.push(n),
                Some(n) => {
                    return Err(SelectorError(format!(
                        "invalid escape sequence \\{n} in {s:?}"
                    )));
                }
                None => return Err(SelectorError(format!("invalid trailing escape in {s:?}"))),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Finds the first unescaped occurrence of an operator.
fn find_op(term: &str) -> Option<(usize, &'static str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => return Some((i, "!=")),
            b'=' if bytes.get(i + 1) == Some(&b'=') => return Some((i, "==")),
            b'=' => return Some((i, "=")),
            _ => i += 1,
        }
    }
    None
}

impl FieldSelector {
    /// Parses a selector; `""` matches everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut reqs = Vec::new();
        for term in split_escaped(s) {
            let Some((idx, op)) = find_op(&term) else {
                return Err(SelectorError(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let field = unescape(term[..idx].trim())?;
            let value = unescape(&term[idx + op.len()..])?;
            if field.is_empty() {
                return Err(SelectorError(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            }
            reqs.push(FieldRequirement {
                field,
                negated: op == "!=",
                value,
            });
        }
        Ok(FieldSelector { reqs })
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The requirements.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.reqs
    }

    /// Matches with `get(field)` giving the object's value (None compares as "").
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.reqs.iter().all(|r| {
            let v = get(&r.field).unwrap_or_default();
            (v == r.value) != r.negated
        })
    }

    /// The name pinned by `metadata.name=<n>`, if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|r| r.field == "metadata.name" && !r.negated)
            .map(|r| r.value.as_str())
    }
}

/// Reads a dotted field path from an object, rendering scalars as strings.
pub fn field_value(obj: &Value, path: &str) -> Option<String> {
    let mut cur = obj;
    for part in path.split('.') {
        cur = cur.get(part)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "n", "labels": labels}})
    }

    fn m(sel: &str, labels: Value) -> bool {
        LabelSelector::parse(sel)
            .expect("parses")
            .matches_object(&obj(labels))
    }

    #[test]
    fn label_operators() {
        assert!(m("a=b", json!({"a": "b"})));
        assert!(m("a==b", json!({"a": "b"})));
        assert!(!m("a=b", json!({"a": "c"})));
        assert!(m("a!=b", json!({"a": "c"})));
        assert!(m("a!=b", json!({})), "!= matches a missing key");
        assert!(m("a in (b, c)", json!({"a": "c"})));
        assert!(!m("a in (b,c)", json!({})));
        assert!(m("a notin (b,c)", json!({})), "notin matches a missing key");
        assert!(!m("a notin (b,c)", json!({"a": "b"})));
        assert!(m("a", json!({"a": ""})));
        assert!(m("!a", json!({"b": "x"})));
        assert!(m("n>1", json!({"n": "2"})));
        assert!(!m("n<1", json!({"n": "2"})));
        assert!(!m("n>1", json!({"n": "x"})));
        assert!(m("a=b,c in (d,e),!f", json!({"a": "b", "c": "e"})));
        assert!(m(
            "app.kubernetes.io/name=x",
            json!({"app.kubernetes.io/name": "x"})
        ));
        assert!(m("a=", json!({"a": ""})));
        assert!(LabelSelector::parse("").expect("empty").is_empty());
    }

    #[test]
    fn label_errors() {
        for bad in [
            "a in (", "a in b", "=b", "a=b,", "a b c", "a>x", "-a=b", "a)",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} must fail");
        }
    }

    #[test]
    fn field_selectors() {
        let s = FieldSelector::parse("metadata.name=a\\,b,metadata.namespace!=kube-system")
            .expect("parses");
        assert_eq!(s.requirements().len(), 2);
        assert_eq!(s.pinned_name(), Some("a,b"));
        let o = json!({"metadata": {"name": "a,b", "namespace": "default"}});
        assert!(s.matches(|f| field_value(&o, f)));
        let s = FieldSelector::parse("spec.nodeName==").expect("parses");
        assert!(s.matches(|_| None), "absent compares as empty");
        assert!(FieldSelector::parse("nonsense").is_err());
        assert!(FieldSelector::parse("a=b\\").is_err());
        assert_eq!(
            FieldSelector::parse("metadata.name!=x")
                .expect("p")
                .pinned_name(),
            None
        );
        assert_eq!(
            field_value(&json!({"a": {"b": 3}}), "a.b").as_deref(),
            Some("3")
        );
    }
}
