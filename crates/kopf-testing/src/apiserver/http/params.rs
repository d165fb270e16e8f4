//! The query parameters kube-apiserver checks before it reads or writes anything:
//! `ListOptions` (`resourceVersion`, `resourceVersionMatch`, `sendInitialEvents`,
//! `continue`, `limit`, `timeoutSeconds`), the `dryRun` and `fieldManager` of the write
//! options and the resourceVersions a list or watch may ask for. Each refusal is kube's: the code, the
//! `*Options.meta.k8s.io` kind and the causes.

use serde_json::json;

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult, Cause, cause};

use super::query::Query;

fn forbidden(field: &str, msg: &str) -> Cause {
    cause("FieldValueForbidden", field, format!("Forbidden: {msg}"))
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    cause(
        "FieldValueNotSupported",
        field,
        format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
    )
}

/// 422 for the options object `kind` (`ListOptions`, `CreateOptions`, ...).
pub(super) fn options_invalid(kind: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid("meta.k8s.io", kind, "", causes)
}

/// `ValidateListOptions` (list) and its watch form, plus the integer parameters.
pub(super) fn validate_list_options(query: &Query, watch: bool) -> ApiResult<()> {
    query.int("limit")?;
    query.int("timeoutSeconds")?;
    let rv = query.get("resourceVersion").unwrap_or("");
    let rv_match = query.get("resourceVersionMatch").unwrap_or("");
    let has_continue = query.get("continue").is_some_and(|c| !c.is_empty());
    let send_initial = query.get("sendInitialEvents").is_some();
    let mut causes = Vec::new();
    if watch {
        if send_initial && rv_match != "NotOlderThan" {
            causes.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !rv_match.is_empty() {
            if !send_initial {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if rv_match != "NotOlderThan" {
                causes.push(not_supported(
                    "resourceVersionMatch",
                    rv_match,
                    &["NotOlderThan"],
                ));
            }
            if has_continue {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if !rv_match.is_empty() {
            if rv.is_empty() {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if has_continue {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if rv_match != "Exact" && rv_match != "NotOlderThan" {
                causes.push(not_supported(
                    "resourceVersionMatch",
                    rv_match,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if rv_match == "Exact" && rv == "0" {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if send_initial {
            causes.push(forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(options_invalid("ListOptions", causes))
    }
}

/// A list's or watch's `resourceVersion` (empty and `0` are 0): one that is not a number is
/// kube's 422 on the resource (the storage's "invalid" error).
pub(super) fn parse_rv(def: &ResourceDef, rv: &str) -> ApiResult<u64> {
    if rv.is_empty() || rv == "0" {
        return Ok(0);
    }
    let digits = rv.strip_prefix('+').unwrap_or(rv);
    let parsed = if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        Err(format!("strconv.ParseUint: parsing {rv:?}: invalid syntax"))
    } else {
        digits
            .parse::<u64>()
            .map_err(|_| format!("strconv.ParseUint: parsing {rv:?}: value out of range"))
    };
    parsed.map_err(|msg| {
        ApiError::invalid(
            &def.group,
            &def.plural,
            "",
            vec![cause(
                "FieldValueInvalid",
                "resourceVersion",
                format!("Invalid value: {rv:?}: {msg}"),
            )],
        )
    })
}

/// A resourceVersion the server has not reached: kube's watch cache gives up with a 504
/// Timeout, `ResourceVersionTooLarge`, retry after 1 s.
pub(super) fn too_large_rv(asked: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {asked}, current: {current}"),
    )
    .with_details(json!({"causes": [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    ]}));
    e.retry_after = Some(1);
    e
}

/// `dryRun` of a write: absent, empty or `All`; anything else is kube's 422 on the options
/// object (`CreateOptions`, `UpdateOptions`, `PatchOptions`, `DeleteOptions`).
pub(super) fn dry_run(values: &[&str], options_kind: &str) -> ApiResult<bool> {
    dry_run_values(values).map_err(|c| options_invalid(options_kind, vec![c]))
}

/// `ValidateDryRun`: only `All` (empty values ignored); the cause when another is given.
pub(super) fn dry_run_values(values: &[&str]) -> Result<bool, Cause> {
    let values: Vec<&str> = values.iter().copied().filter(|v| !v.is_empty()).collect();
    if values.iter().all(|v| *v == "All") {
        return Ok(!values.is_empty());
    }
    let list: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    Err(cause(
        "FieldValueNotSupported",
        "dryRun",
        format!(
            "Unsupported value: []string{{{}}}: supported values: \"All\"",
            list.join(", ")
        ),
    ))
}

/// `ValidateFieldValidation`: empty, `Ignore`, `Warn` or `Strict`.
pub(super) fn field_validation(value: Option<&str>) -> Result<Option<String>, Cause> {
    match value {
        None | Some("") => Ok(None),
        Some(v @ ("Ignore" | "Warn" | "Strict")) => Ok(Some(v.to_string())),
        Some(other) => Err(not_supported(
            "fieldValidation",
            other,
            &["", "Ignore", "Strict", "Warn"],
        )),
    }
}

/// kube's longest `fieldManager` (`FieldManagerMaxLength`), in bytes.
const FIELD_MANAGER_MAX: usize = 128;

/// `ValidateFieldManager` of the create, update and patch options: at most 128 bytes, and
/// only printable characters (one cause per character that is not).
pub(super) fn field_manager(value: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if value.len() > FIELD_MANAGER_MAX {
        causes.push(cause(
            "FieldValueTooLong",
            "fieldManager",
            format!("Too long: may not be more than {FIELD_MANAGER_MAX} bytes"),
        ));
    }
    for (i, c) in value.char_indices().filter(|(_, c)| !go_is_print(*c)) {
        causes.push(cause(
            "FieldValueInvalid",
            "fieldManager",
            format!(
                "Invalid value: {}: invalid character U+{:04X} (at position {i})",
                go_quote(value),
                c as u32
            ),
        ));
    }
    causes
}

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and the ASCII
/// space. Approximated without Unicode's category tables: control, space and format
/// characters and private use are not printable (unassigned code points count as printable
/// here).
fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let format_or_private = matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
        | 0xE000..=0xF8FF | 0xE0001 | 0xE0020..=0xE007F | 0xF0000..);
    !(c.is_control() || c.is_whitespace() || format_or_private)
}

/// Go's `%q` of a string (`strconv.Quote`).
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if go_is_print(c) => out.push(c),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// `propagationPolicy` of a delete.
pub(super) fn check_propagation(policy: Option<&str>, orphan: Option<bool>) -> ApiResult<()> {
    let mut causes = Vec::new();
    if let Some(p) = policy
        && !matches!(p, "Foreground" | "Background" | "Orphan")
    {
        causes.push(not_supported(
            "propagationPolicy",
            p,
            &["Foreground", "Background", "Orphan", "nil"],
        ));
    }
    if let (Some(p), Some(_)) = (policy, orphan) {
        causes.push(cause(
            "FieldValueInvalid",
            "propagationPolicy",
            format!(
                "Invalid value: {p:?}: orphanDependents and deletionPropagation cannot be both set"
            ),
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(options_invalid("DeleteOptions", causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_options_as_kube_validates_them() {
        let q = |s: &str| Query::parse(Some(s));
        assert!(
            validate_list_options(&q("resourceVersion=5&resourceVersionMatch=Exact"), false)
                .is_ok()
        );
        let e = validate_list_options(&q("resourceVersionMatch=Bogus&resourceVersion=1"), false)
            .unwrap_err();
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"Bogus\": supported values: \"Exact\", \"NotOlderThan\", \"\""
        );
        let e = validate_list_options(&q("sendInitialEvents=true"), false).unwrap_err();
        assert!(
            e.message
                .ends_with("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list")
        );
        assert!(
            validate_list_options(
                &q("sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
                true
            )
            .is_ok()
        );
        assert_eq!(
            validate_list_options(&q("limit=x"), false)
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn dry_run_and_propagation() {
        assert_eq!(dry_run(&[], "CreateOptions").ok(), Some(false));
        assert_eq!(dry_run(&["All"], "CreateOptions").ok(), Some(true));
        let e = dry_run(&["Bogus"], "DeleteOptions").unwrap_err();
        assert_eq!(
            e.message,
            "DeleteOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Bogus\"}: supported values: \"All\""
        );
        assert!(check_propagation(Some("Orphan"), None).is_ok());
        assert_eq!(check_propagation(Some("x"), None).unwrap_err().code, 422);
    }
}
