//! The cells of a custom resource's printer columns, as kube-apiserver writes them: the
//! text Go's `fmt` and `encoding/json` make of a value for `string` columns, the value of
//! the column's type (or null) for the others.

use serde_json::{Number, Value};

use super::human_duration;
use crate::apiserver::gojson;
use crate::apiserver::jsonpath::Found;

/// What a `string` column shows: strings as they are, numbers and booleans as Go prints
/// them, lists and maps as JSON, null as `<no value>`.
pub(super) fn text(found: &Found<'_>) -> String {
    match found {
        Found::Json(Value::Null) => "<no value>".into(),
        Found::Json(v @ (Value::Array(_) | Value::Object(_))) => {
            let mut out = Vec::new();
            go_json(&mut out, v);
            String::from_utf8_lossy(&out).into_owned()
        }
        Found::Json(Value::String(s)) | Found::Text(s) => s.clone(),
        Found::Json(Value::Bool(b)) | Found::Bool(b) => b.to_string(),
        Found::Json(Value::Number(n)) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_print_float(n.as_f64().unwrap_or(0.0)),
        },
        Found::Int(i) => i.to_string(),
        Found::Float(f) => go_print_float(*f),
        Found::Byte(b) => b.to_string(),
    }
}

/// A cell of an `integer`, `number`, `boolean` or `date` column: the value when it has the
/// column's type (integers and floats convert to each other), null otherwise.
pub(super) fn typed(kind: &str, found: &Found<'_>) -> Value {
    let int = match found {
        Found::Json(Value::Number(n)) => n.as_i64(),
        _ => None,
    };
    let float = match found {
        Found::Json(Value::Number(n)) if int.is_none() => n.as_f64(),
        Found::Float(f) => Some(*f),
        _ => None,
    };
    match kind {
        // Go's int64(float64) truncates toward zero.
        "integer" => match (int, float) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) => Value::from(f as i64),
            _ => Value::Null,
        },
        "number" => match int.map(|i| i as f64).or(float) {
            Some(f) => go_float_value(f),
            None => Value::Null,
        },
        "boolean" => match found {
            Found::Json(Value::Bool(b)) | Found::Bool(b) => Value::Bool(*b),
            _ => Value::Null,
        },
        "date" => match found {
            Found::Json(Value::String(s)) | Found::Text(s) => Value::String(date(s)),
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// A `date` cell: the age of an RFC 3339 time, `<unknown>` for an empty one, `<invalid>`
/// for one that does not parse (or lies in the future).
pub(super) fn date(s: &str) -> String {
    if s.is_empty() || s == "null" {
        return "<unknown>".into();
    }
    match parse_rfc3339(s) {
        Some(ts) => human_duration(jiff::Timestamp::now().as_second() - ts.as_second()),
        None => "<invalid>".into(),
    }
}

/// Go's `time.Parse(time.RFC3339, s)`: `2006-01-02T15:04:05[.frac](Z|±07:00)`, nothing else.
fn parse_rfc3339(s: &str) -> Option<jiff::Timestamp> {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        rest = &frac[n..];
    }
    let zone_ok = rest == "Z" || {
        let z = rest.as_bytes();
        z.len() == 6
            && matches!(z[0], b'+' | b'-')
            && z[1..3].iter().all(u8::is_ascii_digit)
            && z[3] == b':'
            && z[4..6].iter().all(u8::is_ascii_digit)
    };
    if !zone_ok {
        return None;
    }
    s.parse().ok()
}

/// A float64 as Go's `fmt.Print` writes it (`%v`, which is `%g` with the shortest digits:
/// an exponent below 1e-4 and from 1e6 on, `1e+06`, `1.5e-05`).
fn go_print_float(f: f64) -> String {
    let (mantissa, exp) = scientific(f);
    if !(-4..6).contains(&exp) {
        format!(
            "{mantissa}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    } else {
        format!("{f}")
    }
}

/// The shortest digits of `f` as `d.ddd` and the decimal exponent.
fn scientific(f: f64) -> (String, i32) {
    let s = format!("{f:e}");
    match s.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse().unwrap_or(0)),
        None => (s, 0),
    }
}

/// A float64 as Go's `encoding/json` writes it: plain digits from 1e-6 up to 1e21, an
/// exponent (`1e+21`, `1e-7`) outside.
fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let (mantissa, exp) = scientific(f);
        let sign = if exp < 0 { '-' } else { '+' };
        let digits = if exp < 0 && exp > -10 {
            format!("{}", exp.abs())
        } else {
            format!("{:02}", exp.abs())
        };
        format!("{mantissa}e{sign}{digits}")
    } else {
        format!("{f}")
    }
}

/// A float64 cell: written without a fraction when it has none, as Go writes it.
fn go_float_value(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Value::from(f as i64)
    } else {
        Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

/// A list or map as Go's `json.Marshal` writes an unstructured value: keys sorted, HTML
/// characters escaped, floats as Go writes them.
fn go_json(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => out.extend_from_slice(i.to_string().as_bytes()),
            None => out.extend_from_slice(go_json_float(n.as_f64().unwrap_or(0.0)).as_bytes()),
        },
        Value::String(s) => gojson::write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                go_json(out, item);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            let mut members: Vec<(&String, &Value)> = m.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                gojson::write_str(out, k);
                out.push(b':');
                go_json(out, item);
            }
            out.push(b'}');
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strings_print_as_go_prints_them() {
        let t = |v: Value| text(&Found::Json(&v));
        assert_eq!(t(json!("True")), "True");
        assert_eq!(t(json!(3)), "3");
        assert_eq!(t(json!(1.5)), "1.5");
        assert_eq!(t(json!(3.0)), "3");
        assert_eq!(t(json!(1e6)), "1e+06");
        assert_eq!(t(json!(123456.0)), "123456");
        assert_eq!(t(json!(0.00001)), "1e-05");
        assert_eq!(t(json!(0.0001)), "0.0001");
        assert_eq!(t(json!(true)), "true");
        assert_eq!(t(Value::Null), "<no value>");
        assert_eq!(t(json!([1, 2, 3])), "[1,2,3]");
        assert_eq!(
            t(json!({"b": "<x>", "a": [1e21, 2.5]})),
            r#"{"a":[1e+21,2.5],"b":"\u003cx\u003e"}"#
        );
        assert_eq!(text(&Found::Byte(b'f')), "102");
    }

    #[test]
    fn typed_cells_take_values_of_their_type() {
        let c = |kind: &str, v: Value| typed(kind, &Found::Json(&v));
        assert_eq!(c("integer", json!(42)), json!(42));
        assert_eq!(c("integer", json!(2.75)), json!(2));
        assert_eq!(c("integer", json!(true)), Value::Null);
        assert_eq!(c("integer", json!("foo")), Value::Null);
        assert_eq!(c("number", json!(42)), json!(42));
        assert_eq!(c("number", json!(2.75)), json!(2.75));
        assert_eq!(c("number", json!("foo")), Value::Null);
        assert_eq!(c("boolean", json!(true)), json!(true));
        assert_eq!(c("boolean", json!(42)), Value::Null);
        assert_eq!(c("date", json!(42)), Value::Null);
        assert_eq!(c("date", json!("")), json!("<unknown>"));
        assert_eq!(c("date", json!("yesterday")), json!("<invalid>"));
        assert_eq!(c("date", json!("2999-01-01T00:00:00Z")), json!("<invalid>"));
        let then = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(12 * 3600 + 1800);
        assert_eq!(c("date", json!(then.to_string())), json!("12h"));
        assert_eq!(c("unknown", json!("foo")), Value::Null);
        assert_eq!(go_json_float(1e-7), "1e-7");
        assert_eq!(go_json_float(1e-10), "1e-10");
    }
}
