//! The walk of a custom resource along its schema, evaluating `x-kubernetes-validations` at
//! every node that has them (apiextensions-apiserver `schema/cel/validation.go`).

use std::sync::Arc;

use kube_cel::KubeCelExt;
use kube_cel::cel::objects::OptionalValue;
use kube_cel::cel::{Context, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

use crate::apiserver::schema::SchemaError;

use super::CelOutcome;
use super::values::{is_embedded, to_cel};

/// kube-apiserver's limit on an evaluated `messageExpression` (bytes).
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

/// Reasons of schema errors after which kube-apiserver does not run the rules.
const BLOCKING: [&str; 5] = [
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
];

/// A field path as Go's `field.Path` prints it; empty is the nil path (`<nil>`).
#[derive(Clone, Default)]
struct Path(String);

impl Path {
    fn child(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    fn key(&self, key: &str) -> Path {
        Path(format!("{}[{key}]", self.0))
    }

    fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    fn render(&self) -> String {
        if self.0.is_empty() {
            "<nil>".to_string()
        } else {
            self.0.clone()
        }
    }
}

/// Whether any node of the schema has rules (kube builds no CEL validator otherwise).
pub(super) fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .is_some_and(|r| !r.is_empty())
                || map
                    .get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| p.values().any(has_rules))
                || map.get("items").is_some_and(has_rules)
                || map.get("additionalProperties").is_some_and(has_rules)
                || map
                    .get("allOf")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(has_rules))
        }
        _ => false,
    }
}

pub(super) fn validate(
    schema: &Value,
    obj: &Value,
    old: Option<&Value>,
    prior: &[SchemaError],
) -> CelOutcome {
    let mut out = CelOutcome::default();
    if !has_rules(schema) {
        return out;
    }
    let blocked = prior
        .iter()
        .any(|e| BLOCKING.contains(&e.reason.as_str()) || e.message.contains(" must be of type "));
    if blocked {
        out.errors.push(SchemaError {
            reason: "FieldValueInvalid".into(),
            field: "<nil>".into(),
            message: "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
        });
        return out;
    }
    let mut ctx = Context::default();
    ctx.register_all();
    let mut walk = Walk {
        ctx: &ctx,
        out: &mut out,
    };
    walk.node(schema, obj, old, old, &Path::default(), true, false);
    out
}

struct Walk<'a> {
    ctx: &'a Context<'a>,
    out: &'a mut CelOutcome,
}

/// The item of `old` a list item correlates with: same values of the list's map keys.
fn correlated_item<'v>(schema: &Value, item: &Value, old: Option<&'v Value>) -> Option<&'v Value> {
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old?.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
}

impl Walk<'_> {
    /// One node: its rules, then its children. `old` is the correlated old value (for
    /// `oldSelf`), `ratchet_old` the old value of the same place for ratcheting, and
    /// `parent_equal` whether the nearest correlated ancestor is unchanged.
    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        schema: &Value,
        value: &Value,
        old: Option<&Value>,
        ratchet_old: Option<&Value>,
        path: &Path,
        resource: bool,
        parent_equal: bool,
    ) {
        if value.is_null() {
            return;
        }
        let equal = match ratchet_old {
            Some(o) => o == value,
            None => parent_equal,
        };
        self.rules(schema, schema, value, old, path, resource, equal);
        for branch in schema
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.rules(branch, schema, value, old, path, resource, false);
        }
        match value {
            Value::Object(map) => {
                let correlatable =
                    schema.get("x-kubernetes-map-type").and_then(Value::as_str) != Some("atomic");
                let props = schema.get("properties").and_then(Value::as_object);
                let additional = schema.get("additionalProperties").filter(|a| a.is_object());
                for (k, v) in map {
                    if resource && (k == "apiVersion" || k == "kind" || k == "metadata") {
                        continue;
                    }
                    let (sub, child) = match (props.and_then(|p| p.get(k)), additional) {
                        (Some(sub), _) => (sub, path.child(k)),
                        (None, Some(sub)) => (sub, path.key(k)),
                        (None, None) => continue,
                    };
                    let old_v = if correlatable {
                        old.and_then(|o| o.get(k))
                    } else {
                        None
                    };
                    let ratchet_v = ratchet_old.and_then(|o| o.get(k));
                    self.node(sub, v, old_v, ratchet_v, &child, is_embedded(sub), equal);
                }
            }
            Value::Array(items) => {
                let Some(item_schema) = schema.get("items") else {
                    return;
                };
                let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
                for (i, item) in items.iter().enumerate() {
                    let (old_i, ratchet_i) = match list_type {
                        Some("map") => {
                            let o = correlated_item(schema, item, old);
                            (o, correlated_item(schema, item, ratchet_old))
                        }
                        Some("set") => (
                            None,
                            ratchet_old
                                .and_then(Value::as_array)
                                .and_then(|a| a.iter().find(|o| *o == item)),
                        ),
                        _ => (None, None),
                    };
                    self.node(
                        item_schema,
                        item,
                        old_i,
                        ratchet_i,
                        &path.index(i),
                        is_embedded(item_schema),
                        equal,
                    );
                }
            }
            _ => {}
        }
    }

    /// Evaluates the rules of `rules_schema` on the node typed by `schema`.
    #[allow(clippy::too_many_arguments)]
    fn rules(
        &mut self,
        rules_schema: &Value,
        schema: &Value,
        value: &Value,
        old: Option<&Value>,
        path: &Path,
        resource: bool,
        equal: bool,
    ) {
        let Some(rules) = rules_schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .filter(|r| !r.is_empty())
        else {
            return;
        };
        let node = Node {
            schema,
            path,
            ty: schema.get("type").and_then(Value::as_str).unwrap_or(""),
            this: to_cel(value, schema, resource),
            before: old.map(|o| to_cel(o, schema, resource)),
            equal,
        };
        for rule in rules {
            self.rule(rule, &node);
        }
    }

    /// One rule on a node: compiled, evaluated, and its failure reported (a warning only
    /// when the node is unchanged and the rule does not read `oldSelf`: ratcheting).
    fn rule(&mut self, rule: &Value, node: &Node<'_>) {
        let text = rule
            .get("rule")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim();
        if text.is_empty() {
            return;
        }
        let program = match Program::compile(text) {
            Ok(p) => p,
            Err(e) => {
                self.out.errors.push(invalid(
                    node.path,
                    node.ty,
                    format!(
                        "rule compile error: compilation failed: {}",
                        super::crd::issues(&e)
                    ),
                ));
                return;
            }
        };
        let uses_old = program.references().has_variable("oldSelf");
        let optional = rule.get("optionalOldSelf") == Some(&Value::Bool(true));
        if uses_old && node.before.is_none() && !optional {
            return;
        }
        if !self.fails(&program, rule, text, node, optional) {
            return;
        }
        let field = match rule.get("fieldPath").and_then(Value::as_str) {
            Some(fp) if !fp.is_empty() => node.path.child(&normalize_field_path(fp, node.schema)),
            _ => node.path.clone(),
        };
        let mut plain = self.ctx.new_inner_scope();
        plain.add_variable_from_value("self", node.this.clone());
        if let Some(b) = &node.before {
            plain.add_variable_from_value("oldSelf", b.clone());
        }
        let detail =
            message_expression(rule, &plain).unwrap_or_else(|| message_or_default(rule, text));
        let error = field_error(
            rule.get("reason").and_then(Value::as_str),
            &field,
            node.ty,
            &detail,
        );
        if !uses_old && node.equal {
            self.out
                .warnings
                .push(format!("{}: {}", error.field, error.message));
        } else {
            self.out.errors.push(error);
        }
    }

    /// Whether a compiled rule evaluates to false on the node (a non-bool result or an
    /// evaluation error is reported here, and is not a failure to report again).
    fn fails(
        &mut self,
        program: &Program,
        rule: &Value,
        text: &str,
        node: &Node<'_>,
        optional: bool,
    ) -> bool {
        let mut scope = self.ctx.new_inner_scope();
        scope.add_variable_from_value("self", node.this.clone());
        if optional {
            let opt = match &node.before {
                Some(b) => OptionalValue::of(b.clone()),
                None => OptionalValue::none(),
            };
            scope.add_variable_from_value("oldSelf", CelValue::Opaque(Arc::new(opt)));
        } else if let Some(b) = &node.before {
            scope.add_variable_from_value("oldSelf", b.clone());
        }
        match program.execute(&scope) {
            Ok(CelValue::Bool(true)) => false,
            Ok(CelValue::Bool(false)) => true,
            Ok(_) => {
                self.out.errors.push(invalid(
                    node.path,
                    node.ty,
                    format!("rule compile error: compilation failed: cel expression must evaluate to a bool: {text}"),
                ));
                false
            }
            Err(e) => {
                self.out.errors.push(invalid(
                    node.path,
                    node.ty,
                    evaluation_error(&e, rule, text),
                ));
                false
            }
        }
    }
}

/// The node a rule is evaluated on.
struct Node<'a> {
    /// Its schema.
    schema: &'a Value,
    /// Where it is.
    path: &'a Path,
    /// Its schema's type.
    ty: &'a str,
    /// Its value (`self`).
    this: CelValue,
    /// Its value before an update (`oldSelf`).
    before: Option<CelValue>,
    /// Whether it is unchanged by the update.
    equal: bool,
}

fn invalid(path: &Path, ty: &str, detail: String) -> SchemaError {
    SchemaError {
        reason: "FieldValueInvalid".into(),
        field: path.render(),
        message: format!("Invalid value: \"{ty}\": {detail}"),
    }
}

/// kube's `fieldErrorForReason`.
fn field_error(reason: Option<&str>, path: &Path, ty: &str, detail: &str) -> SchemaError {
    let (reason, message) = match reason {
        Some("FieldValueForbidden") => ("FieldValueForbidden", format!("Forbidden: {detail}")),
        Some("FieldValueRequired") => ("FieldValueRequired", format!("Required value: {detail}")),
        Some("FieldValueDuplicate") => {
            ("FieldValueDuplicate", format!("Duplicate value: \"{ty}\""))
        }
        _ => (
            "FieldValueInvalid",
            format!("Invalid value: \"{ty}\": {detail}"),
        ),
    };
    SchemaError {
        reason: reason.into(),
        field: path.render(),
        message,
    }
}

/// kube's `ruleErrorString`: the trimmed message, else the trimmed rule.
fn rule_error_string(rule: &Value, text: &str) -> String {
    match rule.get("message").and_then(Value::as_str).map(str::trim) {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => text.to_string(),
    }
}

/// kube's `ruleMessageOrDefault`.
fn message_or_default(rule: &Value, text: &str) -> String {
    match rule.get("message").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m.trim().to_string(),
        _ => format!("failed rule: {}", rule_error_string(rule, text)),
    }
}

/// The evaluated `messageExpression`, or `None` when kube falls back to the message.
fn message_expression(rule: &Value, scope: &Context<'_>) -> Option<String> {
    let expr = rule.get("messageExpression").and_then(Value::as_str)?;
    let program = Program::compile(expr).ok()?;
    match program.execute(scope) {
        Ok(CelValue::String(s)) => {
            let s = s.trim();
            let ok = !s.is_empty() && s.len() <= MAX_MESSAGE_EXPRESSION_BYTES && !s.contains('\n');
            if !ok {
                tracing::debug!(expr, "messageExpression gave no usable message");
            }
            ok.then(|| s.to_string())
        }
        other => {
            tracing::debug!(expr, ?other, "messageExpression evaluation failed");
            None
        }
    }
}

/// An evaluation error worded as kube-apiserver words cel-go's.
fn evaluation_error(e: &ExecutionError, rule: &Value, text: &str) -> String {
    let rule_text = rule_error_string(rule, text);
    match e {
        ExecutionError::NoSuchOverload => format!(
            "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule_text}"
        ),
        ExecutionError::NoSuchKey(k) => format!("no such key: {k} evaluating rule: {rule_text}"),
        ExecutionError::UndeclaredReference(r) => {
            format!("undeclared reference to '{r}' evaluating rule: {rule_text}")
        }
        other => {
            let s = other.to_string();
            let mut chars = s.chars();
            let lowered = match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => s,
            };
            format!("{lowered} evaluating rule: {rule_text}")
        }
    }
}

/// A rule's `fieldPath` (JSONPath: `.a.b`, `.m['key']`) as kube's normalized field path:
/// named properties as `.name`, map keys as `[key]`.
pub(super) fn normalize_field_path(fp: &str, schema: &Value) -> String {
    let mut out = String::new();
    let mut node = schema;
    let mut rest = fp;
    while !rest.is_empty() {
        let (name, quoted, after) = if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").unwrap_or(r.len());
            (&r[..end], true, r.get(end + 2..).unwrap_or(""))
        } else if let Some(r) = rest.strip_prefix('[') {
            // `[0]`, `[key]`: every step consumes at least its bracket.
            let end = r.find(']').unwrap_or(r.len());
            (&r[..end], false, r.get(end + 1..).unwrap_or(""))
        } else {
            let r = rest.strip_prefix('.').unwrap_or(rest);
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (&r[..end], false, &r[end..])
        };
        let _ = quoted;
        let named = node.get("properties").and_then(|p| p.get(name));
        match named {
            Some(sub) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
                node = sub;
            }
            None => {
                out.push_str(&format!("[{name}]"));
                node = node.get("additionalProperties").unwrap_or(&Value::Null);
            }
        }
        rest = after;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_paths_with_brackets_end() {
        let schema = json!({"properties": {"items": {"type": "array"}}});
        assert_eq!(normalize_field_path(".items[0]", &schema), "items[0]");
        assert_eq!(normalize_field_path(".items[", &schema), "items[]");
        assert_eq!(normalize_field_path("['a']", &schema), "[a]");
    }

    #[test]
    fn field_paths_are_normalized() {
        let schema = json!({"properties": {"a": {"properties": {"b": {}}}, "m": {"additionalProperties": {}}}});
        assert_eq!(normalize_field_path(".a.b", &schema), "a.b");
        assert_eq!(normalize_field_path(".m['x.y']", &schema), "m[x.y]");
    }
}
