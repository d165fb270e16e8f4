//! The checks kube-apiserver makes on the rules of a CRD when it is written
//! (apiextensions `validation.go`: the compilation results of every rule).

use kube_cel::cel::{ParseErrors, Program};
use serde_json::Value;

use crate::apiserver::error::{Cause, cause};

/// The reasons a rule may give.
const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// Parser errors as cel-go's `Issues.String()` writes them: `ERROR: <input>:L:C: msg`, then
/// the source line and a caret under the column.
pub(super) fn issues(errors: &ParseErrors) -> String {
    errors
        .errors
        .iter()
        .map(|e| {
            let mut s = format!("ERROR: <input>:{}:{}: {}", e.pos.0, e.pos.1, e.msg);
            if let Some(line) = e
                .source_info
                .as_ref()
                .and_then(|info| info.snippet(e.pos.0 - 1))
            {
                let col = usize::try_from(e.pos.1).unwrap_or(0);
                s.push_str(&format!(
                    "\n | {line}\n | {}^",
                    ".".repeat(col.saturating_sub(1))
                ));
            }
            s
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A string as Go's `%#v` writes it (a quoted Go string literal).
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The rule as Go's `%#v` writes kube's internal `apiextensions.ValidationRule` (the value of
/// its field errors). Pointers print as addresses in Go; a fixed one stands in for them.
fn go_rule(rule: &Value) -> String {
    let s = |k: &str| go_quote(rule.get(k).and_then(Value::as_str).unwrap_or(""));
    let reason = if rule.get("reason").is_some_and(|r| !r.is_null()) {
        "(*apiextensions.FieldValueErrorReason)(0xc000000000)"
    } else {
        "(*apiextensions.FieldValueErrorReason)(nil)"
    };
    let optional = if rule.get("optionalOldSelf").is_some_and(|r| !r.is_null()) {
        "(*bool)(0xc000000000)"
    } else {
        "(*bool)(nil)"
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
    )
}

pub(super) fn check(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    for (i, v) in versions.into_iter().flatten().enumerate() {
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
            walk(schema, &path, &mut causes);
        }
    }
    causes
}

fn walk(schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let rules = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array);
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        let at = |f: &str| format!("{path}.x-kubernetes-validations[{i}].{f}");
        let text = rule.get("rule").and_then(Value::as_str).unwrap_or("");
        if let Some(reason) = rule.get("reason").and_then(Value::as_str)
            && !REASONS.contains(&reason)
        {
            let supported: Vec<String> = REASONS.iter().map(|r| format!("\"{r}\"")).collect();
            causes.push(cause(
                "FieldValueNotSupported",
                &at("reason"),
                format!(
                    "Unsupported value: \"{reason}\": supported values: {}",
                    supported.join(", ")
                ),
            ));
        }
        let message = rule.get("message").and_then(Value::as_str).unwrap_or("");
        if message.trim().is_empty() && text.contains(['\n', '\r']) {
            causes.push(cause(
                "FieldValueRequired",
                &at("message"),
                "Required value: message must be specified if rule contains line breaks",
            ));
        }
        if !text.trim().is_empty()
            && let Err(e) = Program::compile(text)
        {
            causes.push(cause(
                "FieldValueInvalid",
                &at("rule"),
                format!(
                    "Invalid value: {}: compilation failed: {}",
                    go_rule(rule),
                    issues(&e)
                ),
            ));
        }
        if let Some(expr) = rule.get("messageExpression").and_then(Value::as_str)
            && let Err(e) = Program::compile(expr)
        {
            causes.push(cause(
                "FieldValueInvalid",
                &at("messageExpression"),
                format!(
                    "Invalid value: {}: messageExpression compilation failed: {}",
                    go_rule(rule),
                    issues(&e)
                ),
            ));
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            walk(sub, &format!("{path}.properties[{k}]"), causes);
        }
    }
    if let Some(items) = schema.get("items") {
        walk(items, &format!("{path}.items"), causes);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        walk(additional, &format!("{path}.additionalProperties"), causes);
    }
    for (j, branch) in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        walk(branch, &format!("{path}.allOf[{j}]"), causes);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn rules_and_message_expressions_that_do_not_parse_are_reported_as_cel_go_does() {
        let crd = json!({"spec": {"versions": [{"schema": {"openAPIV3Schema": {
            "x-kubernetes-validations": [{"rule": "self.a > 1", "messageExpression": "'x' +"}]}}}]}});
        let causes = super::check(&crd);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(
            causes[0].field,
            "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].messageExpression"
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: apiextensions.ValidationRule{Rule:\"self.a > 1\", Message:\"\", \
             MessageExpression:\"'x' +\", Reason:(*apiextensions.FieldValueErrorReason)(nil), \
             FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: messageExpression compilation failed: \
             ERROR: <input>:1:6: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', \
             '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, \
             IDENTIFIER}\n | 'x' +\n | .....^"
        );
    }

    #[test]
    fn a_multi_line_rule_needs_a_message() {
        let crd = json!({"spec": {"versions": [{"schema": {"openAPIV3Schema": {
            "x-kubernetes-validations": [{"rule": "self.a >\n 1"}]}}}]}});
        let causes = super::check(&crd);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].reason, "FieldValueRequired");
        assert_eq!(
            causes[0].message,
            "Required value: message must be specified if rule contains line breaks"
        );
    }
}
