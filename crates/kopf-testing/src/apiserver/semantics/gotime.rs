//! The error Go's `time.Parse(time.RFC3339, s)` gives for a time that does not parse, as
//! kube-apiserver passes it on when a built-in object's `creationTimestamp` or
//! `deletionTimestamp` (a `metav1.Time`) is a string that is not such a time.

const LAYOUT: &str = "2006-01-02T15:04:05Z07:00";

/// One element of the layout: the literal before it and the element itself.
#[derive(Clone, Copy)]
enum Std {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    Zone,
}

const ELEMENTS: [(&str, Std, &str); 7] = [
    ("", Std::Year, "2006"),
    ("-", Std::Month, "01"),
    ("-", Std::Day, "02"),
    ("T", Std::Hour, "15"),
    (":", Std::Minute, "04"),
    (":", Std::Second, "05"),
    ("", Std::Zone, "Z07:00"),
];

/// Go's `time` package's quoting of values in its errors.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if (c as u32) >= 0x80 || c < ' ' {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

fn is_digit(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

/// Go's `getnum`: one or two digits (two when `fixed`).
fn getnum(s: &[u8], fixed: bool) -> Option<(i32, &[u8])> {
    if !is_digit(s, 0) {
        return None;
    }
    if !is_digit(s, 1) {
        return (!fixed).then(|| (i32::from(s[0] - b'0'), &s[1..]));
    }
    Some((
        i32::from(s[0] - b'0') * 10 + i32::from(s[1] - b'0'),
        &s[2..],
    ))
}

fn days_in(month: i32, year: i32) -> i32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn cannot_parse(avalue: &str, value: &[u8], elem: &str) -> String {
    format!(
        "parsing time {} as {}: cannot parse {} as {}",
        quote(avalue),
        quote(LAYOUT),
        quote(&String::from_utf8_lossy(value)),
        quote(elem)
    )
}

fn out_of_range(avalue: &str, what: &str) -> String {
    format!("parsing time {}: {what} out of range", quote(avalue))
}

/// Go's error text for `time.Parse(time.RFC3339, s)`, None when `s` parses.
pub(crate) fn rfc3339_error(avalue: &str) -> Option<String> {
    let mut value = avalue.as_bytes();
    let (mut year, mut month, mut day) = (0, 0, 0);
    for (prefix, std, elem) in ELEMENTS {
        if !prefix.is_empty() {
            if !value.starts_with(prefix.as_bytes()) {
                return Some(cannot_parse(avalue, value, prefix));
            }
            value = &value[prefix.len()..];
        }
        let hold = value;
        let bad = || Some(cannot_parse(avalue, hold, elem));
        match std {
            Std::Year => {
                if value.len() < 4
                    || !is_digit(value, 0)
                    || !value[..4].iter().all(u8::is_ascii_digit)
                {
                    return bad();
                }
                year = value[..4]
                    .iter()
                    .fold(0, |n, d| n * 10 + i32::from(d - b'0'));
                value = &value[4..];
            }
            Std::Month | Std::Day | Std::Minute | Std::Second | Std::Hour => {
                let Some((n, rest)) = getnum(value, !matches!(std, Std::Hour)) else {
                    return bad();
                };
                value = rest;
                let range = match std {
                    Std::Month => (!(1..=12).contains(&n)).then_some("month"),
                    Std::Hour => (n >= 24).then_some("hour"),
                    Std::Minute => (n >= 60).then_some("minute"),
                    Std::Second => (n >= 60).then_some("second"),
                    _ => None,
                };
                if let Some(what) = range {
                    return Some(out_of_range(avalue, what));
                }
                match std {
                    Std::Month => month = n,
                    Std::Day => day = n,
                    Std::Second
                        if value.len() >= 2
                            && matches!(value[0], b'.' | b',')
                            && is_digit(value, 1) =>
                    {
                        let n = 2 + value[2..].iter().take_while(|b| b.is_ascii_digit()).count();
                        value = &value[n..];
                    }
                    _ => {}
                }
            }
            Std::Zone => {
                if value.first() == Some(&b'Z') {
                    value = &value[1..];
                    continue;
                }
                if value.len() < 6 || value[3] != b':' {
                    return bad();
                }
                let (Some((hr, _)), Some((mm, _))) =
                    (getnum(&value[1..3], true), getnum(&value[4..6], true))
                else {
                    return bad();
                };
                if hr > 24 {
                    return Some(out_of_range(avalue, "time zone offset hour"));
                }
                if mm > 60 {
                    return Some(out_of_range(avalue, "time zone offset minute"));
                }
                if !matches!(value[0], b'+' | b'-') {
                    return bad();
                }
                value = &value[6..];
            }
        }
    }
    if !value.is_empty() {
        let rest = String::from_utf8_lossy(value);
        return Some(format!(
            "parsing time {}: extra text: {}",
            quote(avalue),
            quote(&rest)
        ));
    }
    if day < 1 || day > days_in(month, year) {
        return Some(out_of_range(avalue, "day"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_time_parse_errors() {
        assert_eq!(rfc3339_error("2024-02-29T10:00:00Z"), None);
        assert_eq!(rfc3339_error("2024-02-29T10:00:00.123+02:00"), None);
        assert_eq!(
            rfc3339_error("abc").as_deref(),
            Some(
                r#"parsing time "abc" as "2006-01-02T15:04:05Z07:00": cannot parse "abc" as "2006""#
            )
        );
        assert_eq!(
            rfc3339_error("2024-1-01T00:00:00Z").as_deref(),
            Some(
                r#"parsing time "2024-1-01T00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "1-01T00:00:00Z" as "01""#
            )
        );
        assert_eq!(
            rfc3339_error("2024-01-01 00:00:00Z").as_deref(),
            Some(
                r#"parsing time "2024-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 00:00:00Z" as "T""#
            )
        );
        assert_eq!(
            rfc3339_error("2024-13-01T00:00:00Z").as_deref(),
            Some(r#"parsing time "2024-13-01T00:00:00Z": month out of range"#)
        );
        assert_eq!(
            rfc3339_error("2023-02-29T00:00:00Z").as_deref(),
            Some(r#"parsing time "2023-02-29T00:00:00Z": day out of range"#)
        );
        assert_eq!(
            rfc3339_error("2024-01-01T00:00:00").as_deref(),
            Some(
                r#"parsing time "2024-01-01T00:00:00" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00""#
            )
        );
        assert_eq!(
            rfc3339_error("2024-01-01T00:00:00Zjunk").as_deref(),
            Some(r#"parsing time "2024-01-01T00:00:00Zjunk": extra text: "junk""#)
        );
    }
}
