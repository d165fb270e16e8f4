//! The JSON schemas of [`Condition`] and [`ConditionStatus`] (schemars' [`JsonSchema`]), so
//! that a `#[derive(CustomResource)]` status can hold `Vec<Condition>` and its CRD declares
//! the list as the API server's `metav1.Condition` has it: every field typed (a structural
//! schema), the five required fields, the lengths and patterns that the framework checks
//! before writing ([`validate_type`](super::validate_type),
//! [`validate_reason`](super::validate_reason)). [`list_schema`] adds the list's map
//! semantics (`x-kubernetes-list-type: map`, keyed by `type`).

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use super::model::{Condition, ConditionStatus, MAX_MESSAGE_LEN, MAX_REASON_LEN, MAX_TYPE_LEN};

/// `metav1.Condition`'s pattern of a type: an optional DNS-subdomain prefix and `/`, then a
/// name of letters, digits, `-`, `_`, `.` that starts and ends with a letter or digit.
const TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";
/// `metav1.Condition`'s pattern of a reason: a letter, then letters, digits, `_`, `,`, `:`,
/// not ending with `,` or `:`.
const REASON_PATTERN: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";

impl JsonSchema for ConditionStatus {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "ConditionStatus".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "kopf::ConditionStatus".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "The status of the condition: True, False or Unknown.",
            "type": "string",
            "enum": ["True", "False", "Unknown"],
        })
    }
}

impl JsonSchema for Condition {
    fn schema_name() -> Cow<'static, str> {
        "Condition".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "kopf::Condition".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "One entry of status.conditions (metav1.Condition).",
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {
                    "description": "The condition's type, e.g. Ready (the list's key).",
                    "type": "string",
                    "maxLength": MAX_TYPE_LEN,
                    "pattern": TYPE_PATTERN,
                },
                "status": generator.subschema_for::<ConditionStatus>(),
                "reason": {
                    "description": "A CamelCase word saying why, e.g. Succeeded.",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_REASON_LEN,
                    "pattern": REASON_PATTERN,
                },
                "message": {
                    "description": "A human-readable message (may be empty).",
                    "type": "string",
                    "maxLength": MAX_MESSAGE_LEN,
                },
                "lastTransitionTime": {
                    "description": "When the status last changed (RFC 3339).",
                    "type": "string",
                    "format": "date-time",
                },
                "observedGeneration": {
                    "description": "The metadata.generation the condition was set for.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                },
            },
        })
    }
}

/// The schema of a list of conditions as the API conventions declare it: an array of
/// [`Condition`]s with map semantics keyed by `type` (`x-kubernetes-list-type: map`,
/// `x-kubernetes-list-map-keys: [type]`), so that server-side apply merges entries by type.
/// For a field of a status type:
/// `#[schemars(schema_with = "kopf::conditions::list_schema")]` on
/// `conditions: Vec<kopf::conditions::Condition>` (with `#[serde(default)]`, so that it is optional).
pub fn list_schema(generator: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": generator.subschema_for::<Condition>(),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::{validate_reason, validate_type};
    use serde_json::{Value, json};

    fn inlined() -> SchemaGenerator {
        schemars::generate::SchemaSettings::openapi3()
            .with(|s| s.inline_subschemas = true)
            .into_generator()
    }

    #[test]
    fn every_field_is_typed_and_the_wire_form_is_valid() {
        let schema = inlined().into_root_schema_for::<Condition>().to_value();
        let props = schema["properties"].as_object().expect("properties");
        for (name, prop) in props {
            assert!(prop["type"].is_string(), "{name} has no type: {prop}");
        }
        assert_eq!(props["status"]["enum"], json!(["True", "False", "Unknown"]));
        // What the framework writes has every required field.
        let written = serde_json::to_value(Condition {
            type_: "Ready".into(),
            status: ConditionStatus::True,
            reason: "Done".into(),
            message: String::new(),
            last_transition_time: "2024-05-06T07:08:09Z".into(),
            observed_generation: Some(3),
        })
        .expect("serializes");
        for field in schema["required"].as_array().expect("required") {
            let field = field.as_str().expect("a name");
            assert!(written.get(field).is_some(), "{field} is not written");
            assert!(
                props.contains_key(field),
                "{field} is required, not declared"
            );
        }
        for key in written.as_object().expect("object").keys() {
            assert!(props.contains_key(key), "{key} is written, not declared");
        }
    }

    /// The patterns (as the API server runs them) accept and refuse what the framework's own
    /// checks do.
    #[test]
    fn the_patterns_agree_with_the_checks() {
        let types = [
            "Ready",
            "example.com/Synced",
            "a",
            "A-b_c.d",
            "-x",
            "x-",
            "Ex.com/x",
            "",
            "a/b/c",
            "x.",
            "ex-.com/x",
        ];
        let reasons = [
            "Done", "a", "A_b,c:d", "A_", "1x", "x:", "x,", "", "a b", "_a",
        ];
        let type_re = regex::Regex::new(TYPE_PATTERN).expect("a regex");
        let reason_re = regex::Regex::new(REASON_PATTERN).expect("a regex");
        for t in types {
            assert_eq!(type_re.is_match(t), validate_type(t).is_ok(), "type {t:?}");
        }
        for r in reasons {
            assert_eq!(
                reason_re.is_match(r),
                validate_reason(r).is_ok(),
                "reason {r:?}"
            );
        }
        let list = list_schema(&mut inlined()).to_value();
        assert_eq!(list["x-kubernetes-list-type"], "map");
        assert_eq!(list["x-kubernetes-list-map-keys"], json!(["type"]));
        assert_eq!(list["items"]["required"][0], Value::from("type"));
    }
}
