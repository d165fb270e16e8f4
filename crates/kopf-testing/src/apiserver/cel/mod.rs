//! CEL of CustomResourceDefinitions: the `x-kubernetes-validations` rules of a CRD's schema,
//! evaluated on create and update of its objects, and checked when the CRD is written, with
//! kube-apiserver's error format (apiextensions-apiserver `pkg/apiserver/schema/cel`).
//!
//! The engine is the `cel` crate with the Kubernetes CEL libraries of `kube-cel` (quantity,
//! lists, sets, regex, urls, ip, format, semver, ...), behind the cargo feature `cel` of
//! kopf-testing (off by default: 45 crates). Without the feature, rules are not evaluated
//! (treated as passing) and CRDs are not checked for them; a CRD written with rules logs a
//! warning that says so.
//!
//! Covered, as kube-apiserver does it: `self` bound to the node's value at every schema node
//! that has rules (properties, `additionalProperties` values, list items, `allOf` rules at the
//! node), the resource root and embedded resources exposing `apiVersion`, `kind` and
//! `metadata.name`/`metadata.generateName`; transition rules (`oldSelf`) evaluated on update
//! only where the old value correlates (object properties unless `x-kubernetes-map-type:
//! atomic`, map values by key, items of `x-kubernetes-list-type: map` lists by their keys) and
//! skipped otherwise; `optionalOldSelf` (`oldSelf` an optional); `message`,
//! `messageExpression` (falls back to the message when it fails, is empty or multi-line),
//! `reason` (`FieldValueInvalid` default, `FieldValueForbidden`, `FieldValueRequired`,
//! `FieldValueDuplicate`) and `fieldPath`; ratcheting (a failing rule without `oldSelf` on a
//! value unchanged by the update is a warning, not an error); rules skipped with kube's
//! "some validation rules were not checked" error when the schema validation already found a
//! blocking error (type, required, enum, too long, too many). Property names are escaped as
//! kube does (`__dash__`, `__dot__`, `__slash__`, `__underscores__`, reserved words).
//!
//! Not covered: static type checking of rules (kube refuses a CRD whose rule references an
//! unknown field or does not return a bool; here such rules fail when evaluated), cost
//! estimation and the runtime cost budget, `format` string values as typed CEL values
//! (`date-time`, `duration`: use `timestamp()`/`duration()`), and the exact text of parser
//! and runtime errors (cel-go's and this engine's wording differ).

use serde_json::Value;

use crate::apiserver::error::Cause;
use crate::apiserver::schema::SchemaError;

#[cfg(feature = "cel")]
mod crd;
#[cfg(feature = "cel")]
mod rules;
#[cfg(feature = "cel")]
mod values;

/// What the rules of a schema said about an object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CelOutcome {
    /// The failures, as `details.causes` of the 422 answer.
    pub errors: Vec<SchemaError>,
    /// Failures ratcheted into warnings (the value did not change in the update).
    pub warnings: Vec<String>,
}

/// Evaluates the `x-kubernetes-validations` rules of `schema` (a CRD version's
/// `openAPIV3Schema`) on `obj` (pruned and defaulted), with `old` the stored object on update.
/// `prior` holds the errors the structural-schema validation found: when one of them blocks
/// CEL (as kube-apiserver decides), the rules are not run and one error says so.
pub fn validate_rules(
    schema: &Value,
    obj: &Value,
    old: Option<&Value>,
    prior: &[SchemaError],
) -> CelOutcome {
    #[cfg(feature = "cel")]
    {
        rules::validate(schema, obj, old, prior)
    }
    #[cfg(not(feature = "cel"))]
    {
        let _ = (schema, obj, old, prior);
        CelOutcome::default()
    }
}

/// Checks the rules of a CustomResourceDefinition body when it is created or updated: rules
/// and `messageExpression`s that do not compile, unsupported `reason`s, multi-line rules
/// without a message. Returns the causes of the 422 answer (empty when all is well).
pub fn check_crd(crd: &Value) -> Vec<Cause> {
    #[cfg(feature = "cel")]
    {
        crd::check(crd)
    }
    #[cfg(not(feature = "cel"))]
    {
        if has_rules(crd) {
            tracing::warn!(
                crd = crd["metadata"]["name"].as_str().unwrap_or_default(),
                "this CRD has x-kubernetes-validations rules, which this fake API server does not evaluate (kopf-testing's `cel` feature is off): its objects pass them all; add features = [\"cel\"] to kopf-testing to check them"
            );
        }
        Vec::new()
    }
}

/// Whether a CRD's body has CEL rules anywhere in its schemas.
#[cfg(any(test, not(feature = "cel")))]
fn has_rules(value: &Value) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(key, v)| key == "x-kubernetes-validations" || has_rules(v)),
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::has_rules;

    #[test]
    fn rules_are_found_at_any_depth_of_any_version() {
        let rule = json!([{"rule": "self.x > 0"}]);
        let crd = |schema| json!({"spec": {"versions": [{"name": "v1"}, {"name": "v2", "schema": schema}]}});
        let deep = json!({"openAPIV3Schema": {"properties": {"spec": {"properties": {"x": {"x-kubernetes-validations": rule}}}}}});
        assert!(has_rules(&crd(deep)));
        let none = json!({"openAPIV3Schema": {"properties": {"spec": {"type": "object"}}}});
        assert!(!has_rules(&crd(none)));
    }
}
